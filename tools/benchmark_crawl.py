"""Parts d and e of tools/benchmark.py (which runs them): module analysis
(crawl_module, the whole call) over a plain forward of many-module models, and
a 70B-class transformers model scanned on meta. Every figure is a ratio or
difference measured in one interleaved run; nothing is asserted."""

from __future__ import annotations

import gc
from typing import Any, Dict, List

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmark_common import FCM, UNSCANNED, _arm_orders, _fmt_ratio, _median, ns


# --------------------------------------------------------------------------- #
# d. module analysis (crawl_module)
# --------------------------------------------------------------------------- #


def bench_crawl(ts, models, repeats: int, warmup: int) -> Dict[str, Any]:
    """crawl_module time / plain forward time, per model: medians of `repeats`
    interleaved samples (arm order rotating). Python's GC stays enabled, as in
    real use (crawl_module's per-layer metadata is part of its cost); a
    gc.collect() before each sample starts every arm from the same heap."""
    out: Dict[str, Any] = {}
    for name, build in (("mobilenet_v3_small", models.mobilenet_v3_small),
                        ("efficientnet_b0", models.efficientnet_b0)):
        torch.manual_seed(0)
        model = build().eval()
        x = torch.rand(1, 3, 224, 224)

        def plain():
            with torch.no_grad():
                model(x)

        def fcm():
            with torch.no_grad(), FlopCounterMode(display=False):
                model(x)

        def measure():
            with torch.no_grad():
                ts.measure_flops(lambda: model(x))

        def scan_memory():
            with torch.no_grad(), ts.scan(memory=True) as s:
                model(x)
            s.report(), s.memory_report()

        # Memory attribution's cost: the same two analyses with it on.
        fns = {UNSCANNED: plain, "crawl_module": lambda: ts.crawl_module(model, args=(x,)),
               "crawl_module_memory": lambda: ts.crawl_module(model, args=(x,), memory=True),
               "measure_flops": measure, "scan_memory": scan_memory, FCM: fcm}
        samples: Dict[str, List[int]] = {arm: [] for arm in fns}
        for arm, fn in fns.items():
            for _ in range(warmup):
                fn()
        orders = _arm_orders(list(fns))
        for r in range(repeats):
            for arm in orders[r % len(orders)]:
                gc.collect()
                t0 = ns()
                fns[arm]()
                samples[arm].append(ns() - t0)
        med = {arm: _median(v) for arm, v in samples.items()}
        out[name] = {
            "modules": sum(1 for _ in model.modules()),
            "median_ms": {arm: v / 1e6 for arm, v in med.items()},
            "ratio_vs_unscanned": {arm: med[arm] / med[UNSCANNED] for arm in fns if arm != UNSCANNED},
            "samples_ms": {arm: [t / 1e6 for t in v] for arm, v in samples.items()},
        }
    return out


# --------------------------------------------------------------------------- #
# e. a 70B-class model on meta
# --------------------------------------------------------------------------- #


def bench_meta_70b(ts) -> Dict[str, Any]:
    """measure_flops and crawl_module of a Llama-2-70B-shaped transformers
    config (80 layers, width 8192, 64 heads / 8 KV heads) on meta, 16 tokens:
    wall time, and the process's peak RSS growth over the model's own."""
    import resource

    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=32000, hidden_size=8192, intermediate_size=28672, num_hidden_layers=80,
                         num_attention_heads=64, num_key_value_heads=8)
    with torch.device("meta"):
        model = LlamaForCausalLM(config)
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    out: Dict[str, Any] = {"parameters": sum(p.numel() for p in model.parameters())}
    for name, fn in (("measure_flops", lambda: ts.measure_flops(lambda: model(input_ids=ids))),
                     ("crawl_module", lambda: ts.crawl_module(model, kwargs={"input_ids": ids}))):
        rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        t0 = ns()
        report = fn()
        seconds = (ns() - t0) / 1e9
        total = report["total"] if name == "measure_flops" else report["totals"]["operator_flops"]
        out[name] = {"seconds": seconds, "status": total["status"],
                     "peak_rss_growth_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024}
    return out



def _print_crawl(cr: Dict[str, Any], reps: int) -> None:
    print(f"[d] module analysis: whole call / plain eval+no_grad forward, batch 1, 1x3x224x224; "
          f"median of {reps} interleaved samples, GC enabled")
    for name, res in cr.items():
        print(f"    {name} ({res['modules']} modules): plain forward {res['median_ms'][UNSCANNED]:.2f} ms")
        for arm, ratio in res["ratio_vs_unscanned"].items():
            print(f"      {arm:<20} {res['median_ms'][arm]:10.3f} ms   ratio {_fmt_ratio(ratio)}")


def _print_meta_70b(meta: Dict[str, Any]) -> None:
    print(f"[e] Llama-70B-shaped config on meta ({meta['parameters']:,} parameters), 16 tokens")
    for name in ("measure_flops", "crawl_module"):
        m = meta[name]
        print(f"    {name:<14} {m['seconds']:6.2f} s   peak RSS +{m['peak_rss_growth_mib']:.0f} MiB   {m['status']}")
