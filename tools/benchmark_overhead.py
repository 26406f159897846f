"""Parts a and b of tools/benchmark.py (which runs them): the per-operator
interception overhead of torch.add, and end-to-end scanned/unscanned time
ratios of whole workloads, for TorchScan and FlopCounterMode. Every figure is
a ratio or difference measured in one interleaved run; nothing is asserted."""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Dict, List, Optional

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmark_common import FCM, TORCHSCAN, TRACE, UNSCANNED, _arm_orders, _fmt_ratio, _gc_paused, _median, ns


class Arms:
    """Context factories for the three arms."""

    def __init__(self, torchscan_mod) -> None:
        self.ts = torchscan_mod
        self.names = [UNSCANNED] + ([TORCHSCAN] if torchscan_mod else []) + [FCM]

    def ctx(self, arm: str):
        if arm == UNSCANNED:
            return contextlib.nullcontext()
        if arm == TORCHSCAN:
            return self.ts.scan()
        if arm == TRACE:
            return self.ts.scan(trace=True)
        if arm == FCM:
            return FlopCounterMode(display=False)
        raise KeyError(arm)


def _summarize_flops(arm: str, handle) -> Dict[str, Any]:
    """Build the arm's report once (outside timing) and extract a FLOP total."""
    t0 = ns()
    if arm in (TORCHSCAN, TRACE):
        rep = handle.report()
        build_ms = (ns() - t0) / 1e6
        total = rep.get("total", {}) if isinstance(rep, dict) else {}
        if not isinstance(total, dict):
            total = {"value": total}
        return {
            "report_build_ms": build_ms,
            "status": total.get("status"),
            "value": total.get("value"),
            "known_value": total.get("known_value", total.get("value")),
            "report_keys": sorted(rep.keys()) if isinstance(rep, dict) else None,
        }
    if arm == FCM:
        total = handle.get_total_flops()
        # FlopCounterMode has no completeness notion: it sums known formulas.
        return {"report_build_ms": (ns() - t0) / 1e6, "status": "no-status",
                "value": int(total), "known_value": int(total)}
    return {}


def _count_dispatch_ops(fn: Callable[[], Any]) -> Optional[int]:
    """ATen calls seen by an empty TorchDispatchMode (below autograd; for scale)."""
    try:
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None

    class _Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            _Count.n += 1
            return func(*args, **(kwargs or {}))

    with _Count():
        fn()
    return _Count.n



def _fmt_flops(rep: Dict[str, Any]) -> str:
    if not rep:
        return ""
    kv = rep.get("known_value")
    kv_s = f"{kv:,}" if isinstance(kv, (int, float)) else str(kv)
    return f"{rep.get('status')} {kv_s} FLOPs (report built in {rep['report_build_ms']:.1f} ms)"


# --------------------------------------------------------------------------- #
# a. per-operator overhead
# --------------------------------------------------------------------------- #


def bench_per_op(arms: Arms, n_calls: int, repeats: int) -> Dict[str, Any]:
    a = torch.ones(4)
    b = torch.ones(4)
    add = torch.add
    loop = range(n_calls)
    names = arms.names + ([TRACE] if arms.ts else [])

    def one(arm: str):
        with _gc_paused():
            with arms.ctx(arm) as handle:
                t0 = ns()
                for _ in loop:
                    add(a, b)
                t1 = ns()
        return (t1 - t0) / n_calls, handle

    # warm-up (small) and one report per scanned arm, outside timing
    reports: Dict[str, Any] = {}
    for arm in names:
        with arms.ctx(arm) as h:
            for _ in range(min(n_calls, 2000)):
                add(a, b)
        if arm != UNSCANNED:
            reports[arm] = _summarize_flops(arm, h)

    samples: Dict[str, List[float]] = {arm: [] for arm in names}
    orders = _arm_orders(names)
    full_report_done = False
    for r in range(repeats):
        for arm in orders[r % len(orders)]:
            per_call, h = one(arm)
            samples[arm].append(per_call)
            if arm == TORCHSCAN and not full_report_done:
                # a report over a full N-call scan, outside timing
                reports[arm + "_full_scan"] = _summarize_flops(arm, h)
                full_report_done = True
            del h

    med = {arm: _median(v) for arm, v in samples.items()}
    added: Dict[str, Optional[float]] = {}
    added_paired: Dict[str, Optional[float]] = {}
    for arm in names:
        if arm == UNSCANNED:
            continue
        added[arm] = med[arm] - med[UNSCANNED]
        added_paired[arm] = _median([x - y for x, y in zip(samples[arm], samples[UNSCANNED])])
    ratio = None
    if TORCHSCAN in added and added[TORCHSCAN] and added[TORCHSCAN] > 0:
        ratio = added[FCM] / added[TORCHSCAN]
    return {
        "op": "torch.add(a, b), a and b float32[4] on CPU",
        "n_calls": n_calls,
        "repeats": repeats,
        "ns_per_call": med,
        "added_ns_per_call": added,
        "added_ns_per_call_paired_median": added_paired,
        "ratio_fcm_added_over_torchscan_added": ratio,
        "samples_ns_per_call": samples,
        "reports": reports,
    }


# --------------------------------------------------------------------------- #
# b. end-to-end
# --------------------------------------------------------------------------- #


def bench_workload(arms: Arms, name: str, desc: str, fn: Callable[[], Any],
                   repeats: int, warmup: int) -> Dict[str, Any]:
    def one(arm: str):
        with _gc_paused():
            t0 = ns()
            with arms.ctx(arm) as handle:
                t1 = ns()
                fn()
                t2 = ns()
            t3 = ns()
        return t3 - t0, t2 - t1, handle

    reports: Dict[str, Any] = {}
    for arm in arms.names:
        for i in range(warmup):
            _, _, h = one(arm)
            if i == 0 and arm != UNSCANNED:
                reports[arm] = _summarize_flops(arm, h)
            del h

    whole: Dict[str, List[int]] = {arm: [] for arm in arms.names}
    inner: Dict[str, List[int]] = {arm: [] for arm in arms.names}
    orders = _arm_orders(arms.names)
    for r in range(repeats):
        for arm in orders[r % len(orders)]:
            w, i, h = one(arm)
            del h
            whole[arm].append(w)
            inner[arm].append(i)

    med_whole = {arm: _median(v) for arm, v in whole.items()}
    med_inner = {arm: _median(v) for arm, v in inner.items()}
    ratio = {}
    ratio_paired = {}
    ratio_inner = {}
    for arm in arms.names:
        if arm == UNSCANNED:
            continue
        ratio[arm] = med_whole[arm] / med_whole[UNSCANNED]
        ratio_paired[arm] = _median([x / y for x, y in zip(whole[arm], whole[UNSCANNED])])
        ratio_inner[arm] = med_inner[arm] / med_inner[UNSCANNED]
    ops = _count_dispatch_ops(fn)
    added_per_op = None
    if ops:
        added_per_op = {arm: (med_whole[arm] - med_whole[UNSCANNED]) / ops
                        for arm in arms.names if arm != UNSCANNED}
    return {
        "workload": name,
        "description": desc,
        "repeats": repeats,
        "warmup": warmup,
        "median_ms": {arm: v / 1e6 for arm, v in med_whole.items()},
        "median_ms_inside_context": {arm: v / 1e6 for arm, v in med_inner.items()},
        "ratio_vs_unscanned": ratio,
        "ratio_vs_unscanned_paired_median": ratio_paired,
        "ratio_vs_unscanned_inside_context": ratio_inner,
        "aten_ops_seen_by_torch_dispatch_mode": ops,
        "added_ns_per_dispatch_mode_op": added_per_op,
        "samples_ms": {arm: [x / 1e6 for x in v] for arm, v in whole.items()},
        "reports": reports,
    }



def end_to_end_workloads(models, prefill: int, resnet_repeats: int, decoder_repeats: int) -> list:
    """(name, description, workload, repeats) of part b: ResNet-50 at batch 1, one
    TinyDecoder decoding step after a prefill, and two training steps."""
    resnet = models.resnet50().eval()
    x = torch.randn(1, 3, 224, 224)

    def resnet_fn():
        with torch.no_grad():
            return resnet(x)

    dec = models.TinyDecoder().eval()
    prompt = torch.randint(0, dec.vocab_size, (1, prefill))
    with torch.no_grad():
        logits, cache = dec.prefill(prompt)
    tok = logits[:, -1:].argmax(-1)

    def decoder_fn():
        with torch.no_grad():
            return dec.decode_one(tok, cache)

    workloads = [
        ("resnet50_b1", "ResNet-50 forward, 1x3x224x224, eval, no_grad",
         resnet_fn, resnet_repeats),
        ("tiny_decoder_step",
         f"TinyDecoder one-token decode after a {prefill}-token prefill "
         "(KV cache), eval, no_grad", decoder_fn, decoder_repeats),
    ]
    from tests.fixtures.training import training_step  # noqa: WPS433 (after _import_models' path)
    workloads += [
        (f"{name}_train_step", f"{label} training step (tests/fixtures/training.py): forward, "
         "cross-entropy, backward, clip_grad_norm_, AdamW (foreach)",
         training_step(name, "adamw", "foreach"), resnet_repeats)
        for name, label in (("resnet50", "ResNet-50, 2x3x32x32, 10 classes,"),
                            ("gpt2", "GPT-2 (2 layers, width 32), 2x8 tokens,"))
    ]
    return workloads


def _print_per_op(per_op: Dict[str, Any]) -> None:
    for arm in per_op["ns_per_call"]:
        line = f"    {arm:<18} {per_op['ns_per_call'][arm]:9.1f} ns/call"
        if arm != UNSCANNED:
            line += (f"   added {per_op['added_ns_per_call'][arm]:9.1f} ns/call"
                     f" (paired {per_op['added_ns_per_call_paired_median'][arm]:.1f})")
        print(line)
    r = per_op["ratio_fcm_added_over_torchscan_added"]
    if r is not None:
        print(f"    FlopCounterMode adds {r:.1f}x the per-call overhead TorchScan adds")
    for k, rep in per_op["reports"].items():
        print(f"    report[{k}]: {_fmt_flops(rep)}")


def _print_workload(arms: Arms, name: str, desc: str, reps: int, warmup: int, res: Dict[str, Any]) -> None:
    print(f"    {name}: {desc}; {reps} repeats, warm-up {warmup}; "
          f"{res['aten_ops_seen_by_torch_dispatch_mode']} ATen ops "
          "(as seen by a TorchDispatchMode)")
    for arm in arms.names:
        line = f"      {arm:<20} {res['median_ms'][arm]:10.3f} ms"
        if arm != UNSCANNED:
            line += (f"   ratio {_fmt_ratio(res['ratio_vs_unscanned'][arm])}"
                     f" (paired {_fmt_ratio(res['ratio_vs_unscanned_paired_median'][arm])},"
                     f" inside-context {_fmt_ratio(res['ratio_vs_unscanned_inside_context'][arm])})")
        print(line)
    for k, rep in res["reports"].items():
        print(f"      report[{k}]: {_fmt_flops(rep)}")
