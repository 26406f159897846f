"""crawl_module's fast paths change no result: the
mobile fixtures are the published architectures, every layer call of them
gets its row with the output the forward produced, and the cyclic GC that
crawl_module pauses comes back exactly as it was. Timings are in
tools/benchmark.py (part d), never asserted here."""

import collections
import enum
import gc

import pytest
import torch
import torch.nn as nn

import torchscan
from tests.fixtures.models import efficientnet_b0, mobilenet_v3_small


@pytest.mark.parametrize("build, expected", [
    # torchvision's documented parameter counts (torchvision.models docs,
    # "num_params" of MobileNet_V3_Small_Weights.IMAGENET1K_V1 and
    # EfficientNet_B0_Weights.IMAGENET1K_V1): same channel tables, SE
    # squeeze widths and classifier heads.
    (mobilenet_v3_small, 2_542_856),
    (efficientnet_b0, 5_288_548),
])
def test_mobile_fixtures_match_published_parameter_counts(build, expected):
    assert sum(p.numel() for p in build().parameters()) == expected


@pytest.mark.parametrize("build", [mobilenet_v3_small, efficientnet_b0])
def test_every_layer_call_has_its_row_and_output(build):
    torch.manual_seed(0)
    model = build().eval()
    x = torch.rand(1, 3, 224, 224)
    names = {m: n for n, m in model.named_modules()}
    seen = []  # (path, output shape) per module call, in call order

    def record(mod, args, output):
        seen.append((names[mod], list(output.shape)))

    handle = nn.modules.module.register_module_forward_hook(record)
    try:
        with torch.no_grad():
            model(x)
    finally:
        handle.remove()

    report = torchscan.crawl_module(model, args=(x,))
    rows = [(layer["path"], layer["output"]["shape"]) for layer in report["layers"]]
    # The hook sees calls as they finish (children first), the report lists
    # them as they start: the same calls in another order.
    assert sorted(rows) == sorted(seen)
    assert len(rows) == sum(1 for _ in model.modules())  # every module runs once
    assert report["totals"]["module_flops"]["status"] == "complete"
    # The stem convolution (3x3, stride 2, padding 1) sees 3 input positions per
    # output position on each spatial axis, from its output's identity.
    stem = next(layer for layer in report["layers"] if layer["path"] == "features.0.0")
    assert stem["metrics"]["receptive_field"]["status"] == "complete"
    assert stem["metrics"]["receptive_field"]["value"] == 3


class _GcProbe(nn.Module):
    def __init__(self, fail=False):
        super().__init__()
        self.fail = fail
        self.enabled_during_forward = None

    def forward(self, x):
        self.enabled_during_forward = gc.isenabled()
        if self.fail:
            raise ValueError("probe failure")
        return x + 1


@pytest.mark.parametrize("enabled_before", [True, False])
@pytest.mark.parametrize("fail", [False, True])
def test_gc_paused_during_the_crawl_and_restored(enabled_before, fail):
    probe = _GcProbe(fail)
    was = gc.isenabled()
    try:
        gc.enable() if enabled_before else gc.disable()
        if fail:
            with pytest.raises(ValueError, match="probe failure"):
                torchscan.crawl_module(probe, (4,))
        else:
            torchscan.crawl_module(probe, (4,))
        assert probe.enabled_during_forward is False
        assert gc.isenabled() is enabled_before
    finally:
        gc.enable() if was else gc.disable()


# ---- crawl_module's layer rows are the layers' JSON (Session::LayersJson,
# the one layer-row writer) less the operator view's figure, key order and
# number types included; the figures below are derived by hand.


class _CatchesChild(nn.Module):
    """A child whose forward raises, caught by its parent: a failed row."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.bad = _GcProbe(fail=True)
        self.head = nn.Conv2d(4, 4, (1, 5))  # axes differ: rf (1, 5) after a 3x3 conv -> (3, 7)

    def forward(self, x):
        y = self.conv(x)
        try:
            self.bad(y)
        except ValueError:
            pass
        return self.head(y)


_OPAQUE = []


def _opaque(t):
    """An operator defined here (no formula by construction), registered on
    first use: defined at import, the coverage audit's test would find it in
    the registry."""
    if not _OPAQUE:
        @torch.library.custom_op("torchscan_speed_test::opaque", mutates_args=())
        def opaque(t: torch.Tensor) -> torch.Tensor:
            return t.sum()

        _OPAQUE.append(opaque)
    return _OPAQUE[0](t)


class _Tokens(nn.Module):
    """Tokens (not applicable), a partial row (an operator defined here, so
    no formula by construction) and a call whose output the data flow never
    sees (an int)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(8, 8)
        self.count = _Count()

    def forward(self, x):
        t = self.proj(x.flatten(2).transpose(1, 2))
        return _opaque(t) + self.count(t)


class _Count(nn.Module):
    def forward(self, t):
        return t.shape[1]


def _crawl_with_json_rows(monkeypatch, model, *args, **kwargs):
    """crawl_module's report, with (rows it built, the layers' JSON rows)."""
    import json

    from torchscan import crawler

    seen = []
    build = crawler._module_rows

    def both(session, handle=0):
        rows = build(session, handle)
        seen.append((rows, json.loads(session.layers())))
        return rows

    monkeypatch.setattr(crawler, "_module_rows", both)
    report = torchscan.crawl_module(model, *args, **kwargs)
    (rows, expected), = seen
    return report, rows, expected


_ROW_METRICS = ("module_flops", "macs", "dmas", "receptive_field", "effective_stride", "effective_padding")


def _rows_case(case: str) -> tuple:
    """(model, args, crawl options) of a layer-row test case."""
    if case == "mobilenet":
        return mobilenet_v3_small().eval(), (torch.rand(1, 3, 64, 64),), {}
    if case == "failed_and_axes_differ":
        return _CatchesChild(), (torch.rand(1, 3, 12, 12),), {}
    if case == "tokens":
        return _Tokens(), (torch.rand(1, 8, 4, 4),), {}
    if case == "wide_counts":
        # On meta, a (16 x 2^30) input to a 2^30 -> 2^30 linear layer: 16 * 2^30
        # dot products of 2^30 terms. Module view (formulas/matmul.cc): a dot is
        # 2^30 multiplies and 2^30 - 1 adds, so 2^34 * (2^31 - 1) = 2^65 - 2^34
        # FLOPs and 2^34 * 2^30 = 2^64 MACs, past 2^63 - 1 (the rows carry
        # them as digits).
        return nn.Linear(2**30, 2**30, bias=False, device="meta"), (torch.empty(16, 2**30, device="meta"),), {}
    if case == "structure":
        return _CatchesChild(), (torch.rand(1, 3, 12, 12),), {"mode": "structure"}
    if case == "upsampled":
        return _Upsampled(), (torch.rand(1, 3, 9, 9),), {}
    if case == "handlers":  # metric_owners and metric_ownership from a custom module handler
        return _CatchesChild(), (torch.rand(1, 3, 12, 12),), {
            "custom_modules": {nn.Conv2d: lambda m, a, k, out: {"module_flops": 7, "macs": 3, "dmas": 11}}}
    raise ValueError(case)


@pytest.mark.parametrize("case", ["mobilenet", "failed_and_axes_differ", "tokens", "wide_counts", "structure"])
def test_layer_rows_equal_the_layers_json(monkeypatch, case):
    import json

    model, args, options = _rows_case(case)
    mode = options.get("mode", "full")
    report, rows, expected = _crawl_with_json_rows(monkeypatch, model, args=args, **options)
    assert len(rows) == len(expected) == len(report["layers"]) > 0
    for got, row, layer in zip(rows, expected, report["layers"]):
        assert [got[k] for k in ("path", "call_index", "depth", "failed")] == [
            row[k] for k in ("path", "call_index", "depth", "failed")]
        assert [layer[k] for k in ("path", "call_index", "depth")] == [row[k] for k in ("path", "call_index", "depth")]
        owners = {k: row[k] for k in ("metric_owners", "metric_ownership") if k in row}
        assert {k: layer[k] for k in ("metric_owners", "metric_ownership") if k in layer} == owners
        metrics = layer["metrics"]
        if mode == "structure":
            assert {m["status"] for m in metrics.values()} == {"unavailable"}
            continue
        want = {name: value for name, value in row["metrics"].items() if name != "operator_flops"}
        assert set(want) == set(_ROW_METRICS)
        # Text equality: same keys in the same order, ints stay ints.
        assert json.dumps(metrics) == json.dumps(want)
    layers = report["layers"]
    if case == "failed_and_axes_differ":
        bad = next(l for l in layers if l["path"] == "bad")
        assert bad["metrics"]["module_flops"]["status"] == "unavailable"
        assert next(l for l in layers if l["path"] == "head")["metrics"]["receptive_field"]["axes"] == [
            {"dim": 2, "value": 3}, {"dim": 3, "value": 7}]
    if case == "tokens":
        assert {l["path"]: l["metrics"]["receptive_field"]["method"] for l in layers}["proj"] == "not_applicable"
        assert layers[0]["metrics"]["module_flops"]["status"] == "partial"  # torchscan_speed_test::opaque
        count = next(l for l in layers if l["path"] == "count")
        assert "not seen" in count["metrics"]["receptive_field"]["reason"]
    if case == "wide_counts":
        assert layers[0]["metrics"]["module_flops"]["value"] == 2**65 - 2**34
        assert layers[0]["metrics"]["macs"]["value"] == 2**64


def _same_objects(a, b, where="rows"):
    """a and b hold the same values with the same types (1 == 1.0 == True in Python)."""
    assert type(a) is type(b), (where, a, b)
    if isinstance(a, dict):
        assert list(a) == list(b), where
        for k in a:
            _same_objects(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, list):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same_objects(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


class _Upsampled(nn.Module):
    """A fractional effective stride (0.5 after a 2x upsample: a float in the
    rows) and a path outside ASCII."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.up = nn.Upsample(scale_factor=2)
        self.add_module("tête", nn.Conv2d(4, 4, 3))

    def forward(self, x):
        return getattr(self, "tête")(self.up(self.conv(x)))


@pytest.mark.parametrize("case", ["mobilenet", "failed_and_axes_differ", "tokens", "wide_counts", "upsampled",
                                  "handlers"])
def test_pickled_rows_are_the_json_rows_type_for_type(monkeypatch, case):
    """crawl_module loads the rows from the engine's pickle stream (Note [Row
    encodings]); the JSON text of the same rows gives the same objects."""
    import json

    from torchscan import crawler

    model, args, kwargs = _rows_case(case)
    loaded = []
    native = crawler._module_rows

    def both(session, handle=0):
        assert handle, "the crawl has a native handle"
        rows = native(session, handle)
        loaded.append((rows, json.loads(session.module_layers())))
        return rows

    monkeypatch.setattr(crawler, "_module_rows", both)
    torchscan.crawl_module(model, args=args, **kwargs)
    (pickled, text), = loaded
    assert pickled and pickled is not text
    _same_objects(pickled, text)
    if case == "upsampled":
        assert any(type(r["metrics"]["effective_stride"]["value"]) is float for r in pickled)
        assert "tête" in [r["path"] for r in pickled]
    if case == "handlers":
        assert any("metric_ownership" in r for r in pickled)


# ---- the hooks are written into the modules' hook dicts directly
# (_modules.ForwardHooks): the same entries, the same order, nothing left.

_HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called")


def _hook_state(model):
    return [{name: dict(getattr(m, name)) for name in _HOOK_DICTS} for m in model.modules()]


class _UserHooked(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)
        self.fail = False

    def forward(self, x):
        if self.fail:
            raise ValueError("user failure")
        return self.conv(x)


@pytest.mark.parametrize("direct", [True, False])
@pytest.mark.parametrize("fail", [False, True])
def test_crawl_hooks_run_after_the_users_and_leave_the_dicts_as_they_were(monkeypatch, direct, fail):
    from torchscan import _modules

    monkeypatch.setattr(_modules, "_DIRECT", [direct])  # False: the public registrations
    model = _UserHooked()
    model.fail = fail
    # A user pre-hook that crops the input and a forward hook that flattens
    # the output: crawl_module's hooks come after them, as registered later.
    pre = model.register_forward_pre_hook(lambda m, args: (args[0][..., :6, :6],))
    post = model.conv.register_forward_hook(lambda m, args, out: out.flatten(1))
    before = _hook_state(model)
    x = torch.rand(1, 3, 8, 8)
    if fail:
        with pytest.raises(ValueError, match="user failure"):
            torchscan.crawl_module(model, args=(x,))
    else:
        report = torchscan.crawl_module(model, args=(x,))
        root, conv = report["layers"]
        assert root["inputs"]["items"][0]["shape"] == [1, 3, 6, 6]  # cropped by the user's pre-hook
        assert conv["output"]["shape"] == [1, 4 * 4 * 4]  # 6 - 3 + 1 = 4: flattened by the user's hook
        assert root["output"]["shape"] == [1, 64]
    assert _hook_state(model) == before
    pre.remove()
    post.remove()
    assert _hook_state(model) == [{name: {} for name in _HOOK_DICTS}] * 2


def test_direct_hook_entries_are_what_the_public_calls_write():
    from torchscan import _modules

    # The probe found this torch's registrations write exactly ForwardHooks'
    # entries (else crawl_module uses the public calls).
    assert _modules._direct_hook_entries()
    seen = []
    hooks = _modules.ForwardHooks(lambda m, a, k: seen.append(("pre", k)),
                                  lambda m, a, k, o: seen.append(("post", type(o).__name__)))
    model = nn.Linear(2, 2)
    hooks.add(model)
    try:
        model(input=torch.rand(1, 2))
    finally:
        hooks.remove()
    assert [s[0] for s in seen] == ["pre", "post"] and "input" in seen[0][1] and seen[1][1] == "Tensor"
    assert _hook_state(model) == [{name: {} for name in _HOOK_DICTS}]


class _CustomTrain(nn.Module):
    """Overrides train(): crawl_module must call it (module.eval())."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.modes = []

    def train(self, mode=True):
        self.modes.append(mode)
        return super().train(mode)

    def forward(self, x):
        return self.lin(x)


def test_eval_calls_an_overridden_train_and_sets_every_flag():
    model = nn.Sequential(_CustomTrain(), nn.Dropout(0.5))
    model.train()
    seen = []
    handle = nn.modules.module.register_module_forward_hook(lambda m, a, o: seen.append(m.training))
    try:
        torchscan.crawl_module(model, (2,))
    finally:
        handle.remove()
    assert model[0].modes == [True, False]  # model.train() above, then crawl_module's eval()
    assert seen == [False, False, False, False]  # lin, the custom module, dropout, the Sequential
    assert all(m.training for m in model.modules())  # restored


class _ScriptedInner(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        return self.b(self.a(x))


def test_a_scripted_submodule_is_one_layer_call():
    # The Python session takes no TorchScript scopes: the scripted child's
    # inner modules (a, b) are not layer calls of their own, and its work
    # stays on its row (they once became extra scopes, and the rows after
    # them were cut off or paired with the wrong modules).
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), torch.jit.script(_ScriptedInner()))
    report = torchscan.crawl_module(model, (4,))
    # By hand, input (1, 4): Linear(4, 4) is 4 outputs x (4 multiplies + 3
    # adds + 1 bias add) = 32 FLOPs; the scripted child runs two of them.
    assert [(l["path"], l["metrics"]["module_flops"]["value"]) for l in report["layers"]] == [
        ("", 0), ("0", 32), ("1", 64)]
    assert report["totals"]["module_flops"]["value"] == 96


# ---- plain dense tensors are snapshotted in the hooks and described when
# the report is built: the metadata equals describe() at call time.


class _Mixed(nn.Module):
    """Calls with plain tensors of several dtypes, a tensor that requires
    grad, kwargs, non-tensor arguments and non-tensor outputs."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4).double()
        self.emb = nn.Embedding(10, 4)
        self.pair = _Pair()
        self.kw = _Kw()
        self.grow = _Grow()
        self.opts = _Options()
        self.mutable = _Options()

    def forward(self, x, ids):
        y = self.lin(x)  # noqa: F841  (the module call is the point, not its output)
        e = self.emb(ids)
        a, b, _ = self.pair(e, 3)
        c = self.kw(a, scale=b)
        # Snapshotted (Note [Input snapshots]): scalars, text, tuples of them
        # and of tensors, objects named by their type, as positional and
        # keyword arguments.
        self.opts(c["out"], None, 2, flag=True, scale=0.5, name="t\u00eate", pair=(a, 3, (None, 1.5)),
                  dtype=torch.float32, size=None)
        # Described at call time: a list, a Parameter, a torch.Size, an int subclass.
        self.mutable(a, [1, a], flag=self.lin.weight, scale=a.shape, name=_Small.ONE)
        return self.grow(c["out"])


class _Small(enum.IntEnum):
    ONE = 1


class _Options(nn.Module):
    def forward(self, t, *rest, **options):
        return t + 1


class _Pair(nn.Module):
    def forward(self, e, k):
        return e[:, :k], e.sum(), None  # a tuple of tensors and None: snapshotted


class _Kw(nn.Module):
    def forward(self, a, scale=None):
        return {"out": a * scale, "n": a.shape[0]}


class _Grow(nn.Module):
    def forward(self, t):
        return t.unsqueeze_(0)  # in place: its input's shape changes after the snapshot


def test_snapshotted_metadata_equals_describe_at_call_time():
    from torchscan import crawler
    from torchscan.metadata import describe

    model = _Mixed()
    taken = []  # the keyword calls' snapshots
    real = crawler._call_snapshot
    crawler._call_snapshot = lambda args, kwargs: taken.append(real(args, kwargs)) or taken[-1]
    seen = []  # (path, inputs, output) described by user hooks at call time
    names = {m: n for n, m in model.named_modules()}
    handles = []
    for m in model.modules():
        handles.append(m.register_forward_pre_hook(
            lambda m, args, kwargs: seen.append([names[m], crawler._described_inputs(args, kwargs), None]),
            with_kwargs=True))
        handles.append(m.register_forward_hook(
            lambda m, args, out: next(s for s in reversed(seen) if s[0] == names[m] and s[2] is None).__setitem__(
                2, describe(out))))
    x = torch.rand(2, 4, dtype=torch.float64, requires_grad=True)
    try:
        report = torchscan.crawl_module(model, args=(x, torch.tensor([[1, 2, 3]])))
    finally:
        crawler._call_snapshot = real
        for h in handles:
            h.remove()
    assert [[l["path"], l["inputs"], l["output"]] for l in report["layers"]] == seen
    # kw and opts were snapshotted, mutable was described at once.
    assert [t is not None for t in taken] == [True, True, False]
    by_path = {l["path"]: l for l in report["layers"]}
    assert by_path["lin"]["inputs"]["items"][0] == {"kind": "tensor", "shape": [2, 4], "dtype": "float64",
                                                    "device": "cpu", "requires_grad": True}
    assert by_path["grow"]["inputs"]["items"][0]["shape"] == [1, 3, 4]  # before the in-place unsqueeze_
    assert by_path["grow"]["output"]["shape"] == [1, 1, 3, 4]
    opts = by_path["opts"]["inputs"]
    assert opts["args"]["items"][1:] == [None, 2]
    assert opts["kwargs"]["items"]["pair"]["items"][1:] == [3, {"kind": "tuple", "items": [None, 1.5]}]
    assert opts["kwargs"]["items"]["dtype"] == {"kind": "object", "type": "dtype"}
    assert opts["kwargs"]["items"]["name"] == "t\u00eate"


def test_tensor_metadata_of_a_snapshot_is_describe():
    from torchscan import crawler
    from torchscan.metadata import describe

    for t in (torch.rand(2, 3), torch.zeros(5, dtype=torch.int64), torch.rand(1, requires_grad=True),
              torch.empty(2, 0, 4, device="meta", dtype=torch.bfloat16), torch.tensor(3.0)):
        (snapshot,) = crawler._snapshots((t,))
        assert crawler._tensor_metadata(*snapshot) == describe(t)
    # Other snapshotted values (Note [Input snapshots]) give describe's objects too.
    class Opaque:
        pass

    values = (None, True, 0, -3, 2.5, float("nan"), "", "caf\u00e9", "\udcff", (), (torch.rand(2), 3, (None, "x")),
              Opaque(), torch.float16, torch.device("cpu"))
    snapshots = crawler._snapshots(values)
    assert snapshots is not None
    for value, snapshot in zip(values, snapshots):
        got, want = crawler._described_snapshot(snapshot), describe(value)
        assert got == want or (got != got and want != want), (value, got, want)  # nan is nan
    # What may change after the call, or what describe reads otherwise, is
    # described at call time.
    for value in (nn.Parameter(torch.rand(2)), torch.nested.nested_tensor([torch.rand(2), torch.rand(3)]), [1],
                  {"a": 1}, torch.Size([2]), (1, [2]), _Small.ONE, collections.namedtuple("P", "a")(1)):
        assert crawler._snapshots((torch.rand(2), value)) is None, value
    assert crawler._call_snapshot((), {"k": [1]}) is None
    snapshot = crawler._call_snapshot((torch.rand(2),), {"k": 3, "t": torch.rand(1)})
    assert crawler._described_call(snapshot) == crawler._described_inputs((torch.rand(2),), {"k": 3, "t": torch.rand(1)})


# ---- module scopes through the library's C entry points (ctypes)


def test_c_scope_entry_points_refuse_what_the_methods_refuse():
    from torchscan import crawler
    from torchscan.flops import FlopScan

    native = crawler._native_scopes()
    assert native is not None  # the installed library exports them
    push, pop, pop_1 = native
    scan = FlopScan(scope="forward")
    handle = scan._session.native_handle()
    assert handle > 0 and scan._session.native_handle() == handle
    assert push(handle, b"a", 1) == -1  # not started: refused (the method raises)
    with pytest.raises(RuntimeError, match="not active"):
        scan._session.push_module_scope("a")
    x = torch.rand(2, 3)
    with scan:
        outer = push(handle, b"outer\x00x", 7)  # the length counts, not a NUL
        inner = push(handle, b"inner", 5)
        assert (outer, inner) == (0, 1)
        y = x + 1
        identity = y._cdata
        assert pop_1(handle, inner, 0, identity & 0xFFFFFFFF, identity >> 32) == 0
        assert pop_1(handle, inner, 0, 0, 0) == -1  # closed already
        assert pop(handle + 1000, outer, 0, None, 0) == -1  # no such session
        assert pop(handle, outer, 1, None, 0) == 0
    import json

    layers = json.loads(scan._session.layers())
    assert [(l["path"], l["failed"]) for l in layers] == [("outer\x00x", True), ("inner", False)]
    # inner's output identity, rebuilt from its two halves, reached the data
    # flow: y was found (a (2, 3) tensor has no spatial axes: not applicable;
    # a wrong identity is "not seen by the data flow").
    assert layers[1]["metrics"]["receptive_field"]["method"] == "not_applicable"
    del scan  # its handle names no session any more
    assert push(handle, b"a", 1) == -1


def test_crawl_without_the_c_entry_points_gives_the_same_report(monkeypatch):
    import json

    from torchscan import crawler

    torch.manual_seed(0)
    model = mobilenet_v3_small().eval()
    x = torch.rand(1, 3, 64, 64)
    fast = torchscan.crawl_module(model, args=(x,))
    monkeypatch.setattr(crawler, "_NATIVE_SCOPES", [None])  # the session's methods instead
    assert json.dumps(torchscan.crawl_module(model, args=(x,))) == json.dumps(fast)


def test_tensor_ids_of_an_output_are_tree_flattens():
    """The post-hook's identities of a module's output tensors (flat tuples
    and lists without tree_flatten) are tree_flatten's, in its order."""
    from torch.utils._pytree import tree_flatten

    from torchscan import crawler

    a, b = torch.rand(2), torch.rand(3)
    p = nn.Parameter(torch.rand(1))
    outputs = [(a, b), [a, None, 3, "x", b], (a, (b, a)), (a, {"k": b}), (p, a), (), [None], {"x": a, "y": [b]},
               (a, 2.5, True)]
    for output in outputs:
        flat, _ = tree_flatten(output)
        assert crawler._tensor_ids(output) == [t._cdata for t in flat if isinstance(t, torch.Tensor)], output
