"""Misuse and interruption: Ctrl-C anywhere in a scan
leaves no hooks, TLS bits or training flags behind and propagates unchanged;
deep module nesting costs work and memory linear in the depth; wrong
arguments get a message that says what to pass."""

import collections
import contextlib
import gc
import json
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as nn_module

from conftest import SHIM_DIR


def _global_hooks():
    """Every global module hook registry torch keeps (forward, backward,
    always-called, with-kwargs, registration hooks...), by name."""
    return {name: dict(value) for name, value in vars(nn_module).items()
            if name.startswith("_global_") and isinstance(value, dict)}


def _module_hooks(model):
    return [(len(m._forward_pre_hooks), len(m._forward_hooks), len(m._forward_hooks_always_called))
            for m in model.modules()]


def _mixed_training_model():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5), nn.Linear(4, 2))
    model.train()
    model[1].eval()  # flags differ per module: restored one by one
    return model


def _flags(model):
    return [m.training for m in model.modules()]


class _Interrupting(nn.Module):
    """Raises the given KeyboardInterrupt from inside its forward (Ctrl-C
    arriving while the model runs)."""

    def __init__(self, interrupt):
        super().__init__()
        self.fc = nn.Linear(2, 2)
        self.interrupt = interrupt

    def forward(self, x):
        self.fc(x)
        raise self.interrupt


# ------------------------------------------------------------ Ctrl-C


def test_ctrl_c_in_the_workload_propagates_and_leaves_nothing(torchscan):
    model, x = nn.Sequential(nn.Linear(4, 4)), torch.randn(2, 4)
    before = _global_hooks()
    interrupt = KeyboardInterrupt()

    def workload():
        model(x)
        raise interrupt

    with pytest.raises(KeyboardInterrupt) as info:
        torchscan.measure_flops(workload, modules=True)
    assert info.value is interrupt
    assert not torchscan.tls_mode_included()
    assert _global_hooks() == before


@pytest.mark.parametrize("api", ["measure_flops", "crawl_module"])
def test_ctrl_c_in_a_module_forward_propagates_and_leaves_nothing(torchscan, api):
    interrupt = KeyboardInterrupt()
    model = nn.Sequential(_mixed_training_model(), _Interrupting(interrupt))
    x = torch.randn(2, 4)
    flags, hooks, before = _flags(model), _module_hooks(model), _global_hooks()
    with pytest.raises(KeyboardInterrupt) as info:
        if api == "measure_flops":
            torchscan.measure_flops(lambda: model(x), modules=True)
        else:
            torchscan.crawl_module(model, (4,))
    assert info.value is interrupt
    assert not torchscan.tls_mode_included()
    assert _global_hooks() == before
    assert _module_hooks(model) == hooks
    assert _flags(model) == flags


@pytest.mark.parametrize("api", ["measure_flops", "crawl_module"])
def test_ctrl_c_in_a_forward_hook_propagates_and_leaves_nothing(torchscan, api):
    model, x = _mixed_training_model(), torch.randn(2, 4)
    interrupt = KeyboardInterrupt()

    def hook(*_):
        raise interrupt

    user = model[0].register_forward_hook(hook)
    flags, hooks, before = _flags(model), _module_hooks(model), _global_hooks()
    try:
        with pytest.raises(KeyboardInterrupt) as info:
            if api == "measure_flops":
                torchscan.measure_flops(lambda: model(x), modules=True)
            else:
                torchscan.crawl_module(model, (4,))
        assert _module_hooks(model) == hooks  # the user's hook stays, ours are gone
    finally:
        user.remove()
    assert info.value is interrupt
    assert not torchscan.tls_mode_included()
    assert _global_hooks() == before
    assert _flags(model) == flags


def test_ctrl_c_while_installing_the_module_hooks_removes_those_installed(torchscan, monkeypatch):
    import torchscan._modules as labels

    interrupt = KeyboardInterrupt()

    def interrupted(*_, **__):
        raise interrupt

    # The pre-hook is installed first; Ctrl-C arrives while installing the
    # second: the first must not stay behind.
    monkeypatch.setattr(labels, "register_module_forward_hook", interrupted)
    before = _global_hooks()
    with pytest.raises(KeyboardInterrupt) as info:
        with torchscan.scan(modules=True):
            pass
    assert info.value is interrupt
    assert not torchscan.tls_mode_included()
    assert _global_hooks() == before


def test_ctrl_c_while_removing_the_module_hooks_still_stops_the_scan(torchscan):
    interrupt = KeyboardInterrupt()

    class InterruptedHandle:
        def remove(self):
            raise interrupt

    before = _global_hooks()
    model, x = nn.Linear(4, 4), torch.randn(2, 4)
    with pytest.raises(KeyboardInterrupt) as info:
        with torchscan.scan(modules=True) as s:
            model(x)
            # Removed first (the list is emptied from the end).
            s._modules._handles.append(InterruptedHandle())
    assert info.value is interrupt
    assert not torchscan.tls_mode_included()
    assert _global_hooks() == before


# ------------------------------------------------------------ depth


class _Nested(nn.Module):
    """One level of a chain: its own Linear, then the next level (a child)."""

    def __init__(self, child=None):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.child = child

    def forward(self, x):
        x = self.lin(x)
        return x if self.child is None else self.child(x)


def _nested(depth):
    m = None
    for _ in range(depth):
        m = _Nested(m)
    return m


@contextlib.contextmanager
def _recursion_limit(n):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, n))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _python_calls(fn):
    """Python and builtin function calls made by fn(): a deterministic
    measure of work (no clock)."""
    calls = collections.Counter()

    def profile(frame, event, arg):
        if event in ("call", "c_call"):
            calls[event] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return sum(calls.values())


def test_crawl_module_work_is_linear_in_depth(torchscan):
    # Restoring training flags with train(flag) per module (each call sets
    # its whole subtree) and walking named_modules (one nested generator per
    # level) made crawl_module quadratic: 107 s at depth 2,000. Linear work
    # makes the 4x deeper chain cost about 4x the calls; quadratic, 16x.
    with _recursion_limit(20_000):
        small, large = _nested(100), _nested(400)
        calls_small = _python_calls(lambda: torchscan.crawl_module(small, (2,)))
        calls_large = _python_calls(lambda: torchscan.crawl_module(large, (2,)))
    assert calls_large < 8 * calls_small, (calls_small, calls_large)


_MEMORY_PROBE = textwrap.dedent("""
    import resource, sys
    sys.path.append(sys.argv[1])
    sys.setrecursionlimit(50_000)
    import torch, torch.nn as nn, torchscan

    class Level(nn.Module):
        def __init__(self, inner):
            super().__init__()
            # Not a child: ModuleTracker labels it by its own (short) class
            # name, so label text stays linear in depth and what grows is the
            # number of labels active at once.
            object.__setattr__(self, "inner", inner)

        def forward(self, x):
            x = x * 2
            return x if self.inner is None else self.inner(x)

    def chain(depth):
        m = None
        for k in range(depth):
            m = type(f"L{k}", (Level,), {})(m)
        return m

    depth, x = int(sys.argv[2]), torch.rand(2)
    warm = chain(10)
    torchscan.measure_flops(lambda: warm(x), modules=True)
    m = chain(depth)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    by_module = torchscan.measure_flops(lambda: m(x), modules=True)["by_module"]
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    # Each level multiplies 2 elements: 2 FLOPs (one per output element);
    # the outermost level and Global see all of them, the innermost its own.
    assert by_module["Global"] == by_module[f"L{depth - 1}"] == 2 * depth, by_module
    assert by_module["L0"] == 2 and len(by_module) == depth + 1
    print(grown)
""")


def test_measure_flops_modules_memory_is_linear_in_depth(torchscan):
    # Every distinct set of active labels used to be stored as a sorted
    # vector of all its strings (twice): depth d kept d sets of up to d
    # labels, 2,046 MB at depth 800 with ModuleTracker's path labels. Peak
    # memory (ru_maxrss, KB) is measured in a fresh process per depth; a floor
    # of 4 MB keeps allocator noise at the small depth from deciding.
    def grown_kb(depth):
        out = subprocess.run([sys.executable, "-c", _MEMORY_PROBE, str(SHIM_DIR), str(depth)],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        return int(out.stdout.split()[-1])

    small, large = grown_kb(500), grown_kb(2000)
    assert large < 8 * max(small, 4096), (small, large)


# ------------------------------------------------------------ arguments


@pytest.mark.parametrize("shape, error, message", [
    ((), ValueError, r"input_shape is empty; .*such as \(3, 32, 32\)"),
    (3, TypeError, r"not the int 3; for a 1-d input write \(3,\)"),
    ("3,32,32", TypeError, r"not the string '3,32,32'; did you mean \(3, 32, 32\)\?"),
    ((None,), TypeError, r"input_shape\[0\] is None \(generated inputs need a fixed size"),
    ((3, 0), ValueError, r"input_shape\[1\] is 0; dimensions must be positive"),
    (((3, 4), ()), ValueError, r"input_shape\[1\] is empty"),
])
def test_input_shape_mistakes_say_what_to_pass(torchscan, shape, error, message):
    with pytest.raises(error, match=message):
        torchscan.crawl_module(nn.Linear(3, 2), shape)


def test_args_may_be_one_tensor(torchscan):
    model, x = nn.Sequential(nn.Linear(3, 4), nn.ReLU()), torch.randn(2, 3)
    one = torchscan.crawl_module(model, args=x)
    assert one["inputs"]["args"] == torchscan.crawl_module(model, args=(x,))["inputs"]["args"]
    # Linear(3, 4) on (2, 3): 2 * 4 * 3 multiply-adds, 2 FLOPs each (operator view).
    assert one["totals"]["operator_flops"]["value"] >= 2 * 4 * 3 * 2
    assert one["layers"][1]["inputs"]["items"][0]["shape"] == [2, 3]


def test_args_that_are_not_a_sequence_are_refused(torchscan):
    with pytest.raises(TypeError, match=r"args must be a tuple or list .* e\.g\. args=\(x,\) .*; got int"):
        torchscan.crawl_module(nn.Linear(3, 2), args=5)


def test_kwargs_that_are_not_a_mapping_are_refused(torchscan):
    x = torch.randn(1, 3)
    with pytest.raises(TypeError, match=r"kwargs must be a mapping .*; got list"):
        torchscan.crawl_module(nn.Linear(3, 2), kwargs=[("input", x)])


def test_summary_max_depth_beyond_32_bits_shows_every_layer(torchscan, capsys):
    model = nn.Sequential(nn.Sequential(nn.Linear(3, 4), nn.ReLU()), nn.Linear(4, 2))
    torchscan.summary(model, (3,))
    every = capsys.readouterr().out
    torchscan.summary(model, (3,), max_depth=0)
    root_only = capsys.readouterr().out
    # 2**32 used to reach C++ as int 0 (truncated): the root only.
    torchscan.summary(model, (3,), max_depth=2**32)
    assert capsys.readouterr().out == every != root_only
    with pytest.raises(ValueError, match=r"max_depth must be 0 or more \(or None for every layer\); got -1"):
        torchscan.summary(model, (3,), max_depth=-1)
    with pytest.raises(TypeError, match=r"max_depth must be an int .*; got str"):
        torchscan.summary(model, (3,), max_depth="2")
    assert capsys.readouterr().out == ""  # refused before the model ran


def test_module_names_with_lone_surrogates_are_escaped(torchscan):
    model = nn.Sequential()
    model.add_module("bad\udc80", nn.Linear(3, 2))  # str allows it; UTF-8 and JSON do not
    report = torchscan.crawl_module(model, (3,), kwargs=None)
    json.dumps(report, ensure_ascii=False).encode("utf-8")  # valid UTF-8 throughout
    assert report["layers"][1]["path"] == "bad\\udc80"
    assert "bad\\udc80" in torchscan.render_report(report)
    # A report compared with one without the layer: the diff names it.
    plain = torchscan.crawl_module(nn.Sequential(), (3,))
    assert [d["path"] for d in torchscan.compare_reports(plain, report)["layers"]["added"]] == ["bad\\udc80"]
    flops = torchscan.measure_flops(lambda: model(torch.randn(1, 3)), modules=True)
    # Linear(3, 2) on (1, 3): 1 * 2 * 3 multiply-adds, 2 FLOPs each.
    assert flops["by_module"]["Sequential.bad\\udc80"] == 12


def test_a_generator_function_as_workload_is_refused(torchscan):
    model, x, ran = nn.Linear(3, 2), torch.randn(1, 3), []

    def workload():
        ran.append(True)
        yield model(x)

    with pytest.raises(TypeError, match=r"returned a generator .* none of its body ran.*lambda: list\(workload\(\)\)"):
        torchscan.measure_flops(workload)
    assert ran == []  # it would have reported a complete 0


def test_an_async_function_as_workload_is_refused_without_a_never_awaited_warning(torchscan):
    model, x = nn.Linear(3, 2), torch.randn(1, 3)

    async def workload():
        model(x)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(TypeError, match=r"returned a coroutine .*asyncio\.run"):
            torchscan.measure_flops(workload)
        gc.collect()
    assert not [w for w in caught if "never awaited" in str(w.message)]


def test_scan_modules_flag_must_be_a_bool(torchscan):
    with pytest.raises(TypeError, match="modules must be True or False, got str"):
        torchscan.scan(modules="yes")
    assert not torchscan.tls_mode_included()
