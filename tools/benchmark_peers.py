"""Parts g, h and i of tools/benchmark.py (which runs them): the per-call
cost by operator kind against an empty TorchDispatchMode and
FlopCounterMode, module analysis against its floor and its peers, and the
streaming per-call cost. Every figure is a ratio or difference measured in
one interleaved run; nothing is asserted."""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Dict, List

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmark_common import FCM, TORCHSCAN, UNSCANNED, _arm_orders, _fmt_ratio, _gc_paused, _median, ns

# --------------------------------------------------------------------------- #
# g. per-call cost by operator kind
# --------------------------------------------------------------------------- #


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def _op_kinds():
    """(name, callable) per operator kind, on small CPU tensors: the per-call
    cost, not the kernel, is what is measured."""
    import torch.nn.functional as F

    a, b = torch.ones(4), torch.ones(4)
    x, w, bias = torch.randn(4, 16), torch.randn(8, 16), torch.randn(8)
    img, kernel = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
    ln_w, ln_b = torch.ones(16), torch.zeros(16)
    ids, table = torch.tensor([1, 2, 3]), torch.randn(10, 16)
    q = torch.randn(1, 2, 4, 8)
    return [
        ("torch.add", lambda: torch.add(a, b)),
        ("F.linear", lambda: F.linear(x, w, bias)),
        ("F.conv2d", lambda: F.conv2d(img, kernel, padding=1)),
        ("F.layer_norm", lambda: F.layer_norm(x, (16,), ln_w, ln_b)),
        ("F.embedding", lambda: F.embedding(ids, table)),
        ("F.scaled_dot_product_attention", lambda: F.scaled_dot_product_attention(q, q, q)),
    ]


def _empty_mode():
    from torch.utils._python_dispatch import TorchDispatchMode

    class Empty(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    return Empty


def bench_op_kinds(ts, n_calls: int, repeats: int) -> Dict[str, Any]:
    """ns per call of each operator kind: unscanned, and what scan(), an
    empty TorchDispatchMode (Python's floor for any dispatch-mode counter)
    and FlopCounterMode add; medians of interleaved repeats, under no_grad."""
    Empty = _empty_mode()
    ctxs = {UNSCANNED: contextlib.nullcontext, "empty_dispatch_mode": Empty,
            FCM: lambda: FlopCounterMode(display=False)}
    if ts is not None:
        ctxs[TORCHSCAN] = ts.scan
    out: Dict[str, Any] = {"load_before": os.getloadavg(), "n_calls": n_calls, "repeats": repeats, "ops": {}}
    loop = range(n_calls)
    for name, fn in _op_kinds():
        samples: Dict[str, List[float]] = {arm: [] for arm in ctxs}
        with torch.no_grad():
            for arm, ctx in ctxs.items():  # warm-up
                with ctx():
                    for _ in range(min(n_calls, 200)):
                        fn()
            orders = _arm_orders(list(ctxs))
            for r in range(repeats):
                for arm in orders[r % len(orders)]:
                    with _gc_paused():
                        with ctxs[arm]():
                            t0 = ns()
                            for _ in loop:
                                fn()
                            t1 = ns()
                    samples[arm].append((t1 - t0) / n_calls)
        med = {arm: _median(v) for arm, v in samples.items()}
        added = {arm: med[arm] - med[UNSCANNED] for arm in ctxs if arm != UNSCANNED}
        ratio = (added[TORCHSCAN] / added["empty_dispatch_mode"]
                 if TORCHSCAN in added and added["empty_dispatch_mode"] > 0 else None)
        out["ops"][name] = {"ns_per_call": med, "added_ns_per_call": added,
                            "ratio_torchscan_over_empty_mode": ratio}
    out["load_after"] = os.getloadavg()
    return out


# --------------------------------------------------------------------------- #
# h. module analysis against its floor and the peers
# --------------------------------------------------------------------------- #


def _tiny_bert(padded: bool = False):
    """A 2-layer BERT (width 64) on 32 tokens; padded: the last 8 are
    padding, so every layer's attention gets the expanded mask (a batch of
    unequal sequences); else the mask lets every token through, which
    Hugging Face drops before attention."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                                 vocab_size=1000, max_position_embeddings=64, attn_implementation="sdpa")).eval()
    ids = torch.randint(0, 1000, (1, 32))
    mask = torch.ones_like(ids)
    if padded:
        mask[:, 24:] = 0
    return model, lambda: ((), {"input_ids": ids, "attention_mask": mask})


def _tiny_t5():
    """An encoder-decoder (T5: 2 + 2 layers, width 64) on 16 tokens: relative
    position biases added to every attention's scores."""
    from transformers import T5Config, T5Model

    torch.manual_seed(0)
    model = T5Model(T5Config(num_layers=2, d_model=64, num_heads=4, d_ff=128, d_kv=16, vocab_size=1000)).eval()
    ids = torch.randint(0, 1000, (1, 16))
    return model, lambda: ((), {"input_ids": ids, "decoder_input_ids": ids})


def _llama_decode():
    """One decode step of a small Llama (2 layers, width 64, grouped KV heads)
    after a 16-token prefill: each call gets its own copy of the KV cache
    (made outside the timed region), so every sample decodes the same step."""
    import copy

    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                                         attn_implementation="sdpa")).eval()
    ids = torch.randint(0, 1000, (1, 16))
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
    return model, lambda: ((), {"input_ids": token, "past_key_values": copy.deepcopy(past), "use_cache": True})


def _transformer_encoder():
    """PyTorch's own nn.TransformerEncoder (4 layers, width 64, causal mask)
    on 32 tokens: the native-layer token analysis (tokens.py) on every layer
    and its attention."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 4, enable_nested_tensor=False).eval()
    x = torch.randn(1, 32, 64)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(32)
    return model, lambda: ((), {"src": x, "mask": mask})  # keywords only: every peer gets both


def _module_models(models) -> list:
    def image(build):
        torch.manual_seed(0)
        model = build().eval()
        x = torch.rand(1, 3, 224, 224)
        return model, lambda: ((x,), {})

    out = [("mobilenet_v3_small", lambda: image(models.mobilenet_v3_small)),
           ("efficientnet_b0", lambda: image(models.efficientnet_b0)),
           ("nn_transformer_encoder", _transformer_encoder)]
    try:
        import transformers  # noqa: F401
    except ImportError:
        return out
    return out + [("tiny_bert", _tiny_bert), ("tiny_bert_padded", lambda: _tiny_bert(padded=True)),
                  ("tiny_t5", _tiny_t5), ("llama_decode_step", _llama_decode)]


def _peer_arms(model, inputs) -> Dict[str, Any]:
    """Peer tools that are importable here: arm name -> fn(args, kwargs), or
    the reason it is skipped (str)."""
    import copy

    arms: Dict[str, Any] = {}
    args0, kwargs0 = inputs()
    try:
        from ptflops import get_model_complexity_info

        def ptflops_aten(args, kwargs):
            get_model_complexity_info(model, (1,), input_constructor=lambda _: dict(kwargs) if kwargs else args[0],
                                      as_strings=False, print_per_layer_stat=False, backend="aten", verbose=False)
        arms["ptflops_aten"] = ptflops_aten
    except ImportError:
        arms["ptflops_aten"] = "not installed"
    try:
        from fvcore.nn import FlopCountAnalysis

        if kwargs0:
            arms["fvcore"] = "skipped: keyword inputs (fvcore traces positional inputs only)"
        else:
            def fvcore_arm(args, kwargs):
                a = FlopCountAnalysis(model, args)
                a.unsupported_ops_warnings(False)
                a.uncalled_modules_warnings(False)
                a.total()
            arms["fvcore"] = fvcore_arm
    except ImportError:
        arms["fvcore"] = "not installed"
    try:
        import thop

        if kwargs0:
            arms["thop"] = "skipped: keyword inputs (thop.profile takes positional inputs only)"
        else:
            copied = copy.deepcopy(model)  # thop adds (and removes) buffers on the modules it profiles
            arms["thop"] = lambda args, kwargs: thop.profile(copied, inputs=args, verbose=False)
    except ImportError:
        arms["thop"] = "not installed"
    try:
        import torchinfo

        arms["torchinfo"] = lambda args, kwargs: torchinfo.summary(
            model, input_data=dict(kwargs) if kwargs else list(args), verbose=0)
    except ImportError:
        arms["torchinfo"] = "not installed"
    return arms


def bench_module_analysis(ts, models, repeats: int, warmup: int, warm: bool = False) -> Dict[str, Any]:
    """Per model, in one interleaved run: a plain eval/no_grad forward; the
    floor (measure_flops with an empty pre- and post-hook on every module:
    the counting and the hooks any per-module analysis needs); crawl_module;
    summary (verbose=False: the table rendered, not printed); FlopCounterMode
    (which tracks modules); the peers importable here; and report_objects,
    which only creates the Python objects of one crawl_module report (from
    a pickle of it, with the cyclic GC paused as crawl_module pauses it): a
    lower bound on what any implementation returning that report adds to
    the floor. Ratios to the plain forward, and crawl_module's and
    report_objects' to the floor. Each sample starts after gc.collect()
    (cold: the collection's walk over the heap leaves the caches cold, as
    a model's first call after other work finds them); warm: without it,
    as a loop timing the same call again and again measures."""
    out: Dict[str, Any] = {"load_before": os.getloadavg(), "warm": warm}
    for name, build in _module_models(models):
        model, inputs = build()
        modules = list(model.modules())

        def plain(args, kwargs):
            with torch.no_grad():
                model(*args, **kwargs)

        def floor(args, kwargs):
            handles = []
            for m in modules:
                handles.append(m.register_forward_pre_hook(lambda *_: None, with_kwargs=True))
                handles.append(m.register_forward_hook(lambda *_: None, with_kwargs=True, always_call=True))
            try:
                with torch.no_grad():
                    ts.measure_flops(lambda: model(*args, **kwargs))
            finally:
                for h in handles:
                    h.remove()

        def fcm(args, kwargs):
            with torch.no_grad(), FlopCounterMode(display=False):
                model(*args, **kwargs)

        stream = pickle.dumps(ts.crawl_module(model, args=inputs()[0], kwargs=inputs()[1]), protocol=5)

        def report_objects(args, kwargs):
            was = gc.isenabled()
            gc.disable()
            try:
                pickle.loads(stream)
            finally:
                if was:
                    gc.enable()

        fns: Dict[str, Callable] = {UNSCANNED: plain, "floor": floor,
                                    "crawl_module": lambda a, k: ts.crawl_module(model, args=a, kwargs=k),
                                    "report_objects": report_objects,
                                    "summary": lambda a, k: ts.summary(model, args=a, kwargs=k, verbose=False),
                                    "flop_counter_mode_modules": fcm}
        skipped: Dict[str, str] = {}
        for arm, fn in _peer_arms(model, inputs).items():
            if isinstance(fn, str):
                skipped[arm] = fn
                continue
            try:
                with contextlib.redirect_stdout(open(os.devnull, "w")):
                    fn(*inputs())
            except Exception as e:  # noqa: BLE001 - a peer that cannot analyse this model is said, not fatal
                skipped[arm] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"
                continue
            fns[arm] = fn
        samples: Dict[str, List[int]] = {arm: [] for arm in fns}
        with contextlib.redirect_stdout(open(os.devnull, "w")):
            for arm, fn in fns.items():
                for _ in range(warmup):
                    fn(*inputs())
            orders = _arm_orders(list(fns)) if len(fns) <= 6 else [list(fns), list(reversed(list(fns)))]
            for r in range(repeats):
                order = orders[r % len(orders)]
                if len(fns) > 6:  # rotate as well: every arm runs first, middle and last
                    k = (r // 2) % len(order)
                    order = order[k:] + order[:k]
                for arm in order:
                    a, k = inputs()
                    if not warm:
                        gc.collect()
                    t0 = ns()
                    fns[arm](a, k)
                    samples[arm].append(ns() - t0)
        med = {arm: _median(v) for arm, v in samples.items()}
        out[name] = {
            "modules": len(modules), "median_ms": {arm: v / 1e6 for arm, v in med.items()},
            "ratio_vs_plain": {arm: med[arm] / med[UNSCANNED] for arm in fns if arm != UNSCANNED},
            "crawl_over_floor": med["crawl_module"] / med["floor"],
            "report_objects_over_floor": med["report_objects"] / med["floor"],
            "summary_over_crawl": med["summary"] / med["crawl_module"],
            "skipped": skipped,
        }
    out["load_after"] = os.getloadavg()
    return out


# --------------------------------------------------------------------------- #
# i. streaming per-call cost
# --------------------------------------------------------------------------- #


def bench_streaming_calls(ts, n_calls: int, repeats: int) -> Dict[str, Any]:
    """ns per torch.add call unscanned, in a full scan and in a streaming
    scan (calls folded into sums as it goes), interleaved; also each scan's
    cost per call with its report (FlopReport) built after the loop: a full
    scan does at report time the work a streaming scan does as it goes."""
    a, b = torch.ones(4), torch.ones(4)
    loop = range(n_calls)
    ctxs = {UNSCANNED: contextlib.nullcontext, "full": ts.scan, "streaming": lambda: ts.scan(streaming=True)}
    samples: Dict[str, List[float]] = {arm: [] for arm in ctxs}
    reported: Dict[str, List[float]] = {arm: [] for arm in ctxs if arm != UNSCANNED}
    orders = _arm_orders(list(ctxs))
    for r in range(repeats + 1):
        for arm in orders[r % len(orders)]:
            with _gc_paused():
                with ctxs[arm]() as scan:
                    t0 = ns()
                    for _ in loop:
                        torch.add(a, b)
                    t1 = ns()
                if scan is not None:
                    scan.report()
                t2 = ns()
            if r:  # the first round warms up
                samples[arm].append((t1 - t0) / n_calls)
                if arm in reported:
                    reported[arm].append((t2 - t0) / n_calls)
    med = {arm: _median(v) for arm, v in samples.items()}
    with_report = {arm: _median(v) - med[UNSCANNED] for arm, v in reported.items()}
    # Streaming less full, round by round (the two ran minutes apart at
    # most): drift that moves both cancels, and the spread shows the noise.
    paired = sorted(s - f for s, f in zip(samples["streaming"], samples["full"]))
    quartiles = (paired[len(paired) // 4], paired[(3 * len(paired)) // 4]) if paired else (float("nan"),) * 2
    return {"n_calls": n_calls, "repeats": repeats, "ns_per_call": med,
            "added_ns_per_call": {arm: med[arm] - med[UNSCANNED] for arm in ctxs if arm != UNSCANNED},
            "added_ns_per_call_with_report": with_report,
            "streaming_less_full_ns": {"median": _median(paired) if paired else float("nan"),
                                       "quartiles": quartiles},
            "load": os.getloadavg()}


def _print_op_kinds(res: Dict[str, Any]) -> None:
    print(f"[g] per-call cost by operator kind ({res['n_calls']:,} calls a sample, median of {res['repeats']} "
          f"interleaved repeats, no_grad; ns per call)")
    print(f"    {'operator':<32} {'plain':>8} {'TorchScan +':>12} {'empty mode +':>13} {'FlopCounterMode +':>18} "
          f"{'TorchScan/empty':>16}")
    for name, r in res["ops"].items():
        add = r["added_ns_per_call"]
        print(f"    {name:<32} {r['ns_per_call'][UNSCANNED]:8.0f} {add.get(TORCHSCAN, float('nan')):12.0f} "
              f"{add['empty_dispatch_mode']:13.0f} {add[FCM]:18.0f} "
              f"{_fmt_ratio(r['ratio_torchscan_over_empty_mode']):>16}")
    print(f"    {_load_text(res['load_before'])} before, {_load_text(res['load_after'])} after")


def _load_text(load) -> str:
    return f"load {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f}"


def _print_module_analysis(res: Dict[str, Any]) -> None:
    print("[h] module analysis: each arm's time / a plain eval+no_grad forward, batch 1, one interleaved run "
          "(floor: measure_flops + empty pre/post hooks on every module; "
          + ("warm: no gc.collect() between samples)" if res.get("warm") else "cold: gc.collect() before each sample)"))
    for name, r in res.items():
        if not isinstance(r, dict) or "median_ms" not in r:
            continue
        print(f"    {name} ({r['modules']} modules): plain {r['median_ms'][UNSCANNED]:.2f} ms; "
              f"crawl_module / floor {r['crawl_over_floor']:.2f}x, summary / crawl_module {r['summary_over_crawl']:.2f}x, "
              f"report_objects / floor {r['report_objects_over_floor']:.2f}x")
        for arm, ratio in r["ratio_vs_plain"].items():
            print(f"      {arm:<26} {r['median_ms'][arm]:9.2f} ms   {_fmt_ratio(ratio)}")
        for arm, why in r["skipped"].items():
            print(f"      {arm:<26} {why}")
    print(f"    {_load_text(res['load_before'])} before, {_load_text(res['load_after'])} after "
          f"({os.cpu_count()} CPUs)")


def _print_streaming(res: Dict[str, Any]) -> None:
    ns_, added = res["ns_per_call"], res["added_ns_per_call"]
    ratio = added["streaming"] / added["full"] if added["full"] > 0 else None
    print(f"[i] streaming: torch.add on float32[4], {res['n_calls']:,} calls a sample, median of {res['repeats']}")
    print(f"      plain {ns_[UNSCANNED]:.0f} ns/call; full scan +{added['full']:.0f} ns, "
          f"streaming +{added['streaming']:.0f} ns ({_fmt_ratio(ratio)} of full); {_load_text(res['load'])}")
    rep = res["added_ns_per_call_with_report"]
    ratio = rep["streaming"] / rep["full"] if rep["full"] > 0 else None
    print(f"      with the report built after the loop: full +{rep['full']:.0f} ns, "
          f"streaming +{rep['streaming']:.0f} ns ({_fmt_ratio(ratio)} of full)")
    gap = res["streaming_less_full_ns"]
    print(f"      streaming less full, paired by round: median {gap['median']:+.0f} ns "
          f"(quartiles {gap['quartiles'][0]:+.0f} to {gap['quartiles'][1]:+.0f} ns)")


def _peers_python(where: str) -> str:
    """A throwaway venv (seeing this interpreter's packages) with the peer
    tools installed: its python."""

    venv = Path(where)
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    # --system-site-packages shows the base interpreter's packages, not those
    # of the environment running this (torch, torchscan): a .pth adds them,
    # and a constraint keeps pip from resolving a torch of its own for the
    # peers (a multi-GB download that would shadow this one).
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    (Path(site) / "_benchmark_parent_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    constraints = venv / "constraints.txt"
    constraints.write_text(f"torch=={torch.__version__}\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", "-c", str(constraints), "ptflops", "fvcore", "thop",
                    "torchinfo"], check=True)
    return str(py)
