"""Per-analysis custom module handlers (report schema "Custom
handler rows"): crawl_module(custom_modules={type or predicate: handler}).

Expected values are derived by hand in the comments, with the module view's
conventions (reference 000, torchscan_flops_v1): a K-term dot is K
multiplies + K - 1 adds plus one bias add per output, K MACs per output, and
a Linear's logical DMAs are its input reads + weight and bias reads + output
writes (tests/python/modules/test_module_view.py::test_linear).
"""

import json

import pytest
import torch
from torch import nn

import torchscan


# ---------------------------------------------------------------- models


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(self.fc1(x))


class Net(nn.Module):
    """On a (1, 4) input, natively:
    block.fc1: 8 outputs of 4-term dots: 8*(4+3) + 8 bias = 64 FLOPs; 32 MACs; DMAs 4 + (32+8) + 8 = 52.
    block.fc2: 4 outputs of 8-term dots: 4*(8+7) + 4 = 64 FLOPs; 32 MACs; DMAs 8 + (32+4) + 4 = 48.
    head: 2 outputs of 4-term dots: 2*7 + 2 = 16 FLOPs; 8 MACs; DMAs 4 + (8+2) + 2 = 16.
    The root and block run no operator of their own: 0.
    Totals 144 FLOPs, 72 MACs, 116 DMAs; parameters 40 + 36 + 10 = 86."""

    def __init__(self):
        super().__init__()
        self.block, self.head = Block(), nn.Linear(4, 2)

    def forward(self, x):
        return self.head(self.block(x))


NATIVE = {"": (0, 0, 0), "block": (0, 0, 0), "block.fc1": (64, 32, 52), "block.fc2": (64, 32, 48),
          "head": (16, 8, 16)}
METRICS = ("module_flops", "macs", "dmas")


def crawl(custom_modules=None, model=None, **options):
    torch.manual_seed(0)
    return torchscan.crawl_module(model or Net(), (4,), custom_modules=custom_modules, **options)


def row(report, path, call_index=0):
    return next(l for l in report["layers"] if l["path"] == path and l["call_index"] == call_index)


def value(report, path, metric, call_index=0):
    m = row(report, path, call_index)["metrics"][metric]
    return m["value"] if m["status"] == "complete" else (m["status"], m["known_value"])


def method_of(fn):
    return f"custom_module_handler:{fn.__module__}.{fn.__qualname__}"


def codes(report, code):
    return [d for d in report["diagnostics"] if d["code"] == code]


def check_readers(report):
    """The C++ readers (schema validation included) accept the report."""
    text = torchscan.render_report(json.loads(json.dumps(report)))
    torchscan.compare_reports(report, report)
    return text


# ---------------------------------------------------------------- ownership


def fused_no_bias(module, args, kwargs, output):
    """Block as one fused kernel without bias adds, inclusive of its children:
    fc1 8 outputs * (4 multiplies + 3 adds) = 56, fc2 4 * (8 + 7) = 60: 116
    FLOPs per input row; MACs 8*4 + 4*8 = 64 per row."""
    rows = args[0].numel() // args[0].shape[-1]
    return {"module_flops": {"value": rows * 116, "scope": "subtree"},
            "macs": {"value": rows * 64, "scope": "subtree"}}


def test_subtree_owner_covers_children_counts_once_and_keeps_parameters():
    native = crawl()
    report = crawl({Block: fused_no_bias})
    block = row(report, "block")
    assert block["metric_ownership"] == {"module_flops": "subtree", "macs": "subtree"}
    assert block["metrics"]["module_flops"] == {
        "status": "complete", "value": 116, "known_value": 116, "unit": "FLOPs", "scope": "subtree",
        "method": method_of(fused_no_bias)}
    assert block["metrics"]["macs"]["value"] == 64
    assert block["metrics"]["dmas"]["method"] == "module_formulas"  # not supplied: the built-in value (0)
    for path, params in (("block.fc1", 4 * 8 + 8), ("block.fc2", 8 * 4 + 4)):
        child = row(report, path)
        assert "module_flops" not in child["metrics"] and "macs" not in child["metrics"]
        assert child["metric_owners"] == {"module_flops": {"path": "block", "call_index": 0},
                                          "macs": {"path": "block", "call_index": 0}}
        assert child["parameters"] == params  # structure and parameters stay
        assert child["output"] == row(native, path)["output"]
        assert value(report, path, "dmas") == NATIVE[path][2]  # dmas not owned: native
    # Totals count the estimate once: 116 (block subtree) + 16 (head) = 132
    # FLOPs; 64 + 8 = 72 MACs (double counting would give 136); DMAs are not
    # supplied: 116 as natively.
    assert report["totals"]["module_flops"]["value"] == 132
    assert report["totals"]["macs"]["value"] == 72
    assert report["totals"]["dmas"] == native["totals"]["dmas"]
    assert report["totals"]["dmas"]["value"] == 116
    assert report["totals"]["parameters"] == native["totals"]["parameters"] == 86
    assert report["operator_flops"] == native["operator_flops"]  # the operator view does not change
    assert value(report, "head", "module_flops") == 16
    assert not [d for d in report["diagnostics"] if d["code"].startswith("custom_")]
    # The readers accept absent metrics with metric_owners; a covered cell renders as "-".
    text = check_readers(report)
    fc1_line = next(line for line in text.splitlines() if line.strip().startswith("block.fc1"))
    assert fc1_line.split()[-3:] == ["-", "-", "52"]
    diff = torchscan.compare_reports(native, report)
    changed = {(c["path"], c["call_index"]): c["metrics"] for c in diff["layers"]["changed"]}
    # fc1's module_flops went from a complete 64 to covered (absent): no numeric delta.
    assert changed[("block.fc1", 0)]["module_flops"]["delta"] is None
    assert changed[("block.fc1", 0)]["module_flops"]["before"]["value"] == 64
    assert diff["totals"]["module_flops"]["delta"] == 132 - 144


def test_module_call_replaces_only_the_calls_own_value():
    def own(module, args, kwargs, output):
        return {"module_flops": 5}  # the block's own work outside its children

    report = crawl({Block: own})
    assert row(report, "block")["metric_ownership"] == {"module_flops": "module_call"}
    assert row(report, "block")["metrics"]["module_flops"]["scope"] == "module_call"
    assert value(report, "block", "module_flops") == 5
    assert value(report, "block.fc1", "module_flops") == 64  # children keep theirs
    assert "metric_owners" not in row(report, "block.fc1")
    # 0 (root) + 5 (block) + 64 + 64 + 16 = 149.
    assert report["totals"]["module_flops"]["value"] == 149
    check_readers(report)


class Wrapper(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class SharedNet(nn.Module):
    """One Linear(4, 4) called inside block and again outside it."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.block = Wrapper(self.lin)

    def forward(self, x):
        return self.lin(self.block(x))


def test_ownership_follows_dynamic_calls_of_a_shared_child():
    def hundred(module, args, kwargs, output):
        return {"module_flops": {"value": 100, "scope": "subtree"}}

    report = crawl({Wrapper: hundred}, model=SharedNet())
    calls = [l for l in report["layers"] if l["type"] == "Linear"]
    assert [c["call_index"] for c in calls] == [0, 1]
    path = calls[0]["path"]
    # The call inside block is covered; the call outside it counts on its own:
    # 4 outputs of 4-term dots, 4*7 + 4 = 32 FLOPs.
    assert calls[0]["metric_owners"] == {"module_flops": {"path": "block", "call_index": 0}}
    assert "module_flops" not in calls[0]["metrics"]
    assert "metric_owners" not in calls[1]
    assert value(report, path, "module_flops", 1) == 32
    assert report["totals"]["module_flops"]["value"] == 100 + 32
    # Shared parameters once: 16 + 4.
    assert report["totals"]["parameters"] == 20
    check_readers(report)


def test_nested_owners_the_outermost_wins():
    def thousand(module, args, kwargs, output):
        return {"module_flops": {"value": 1000, "scope": "subtree"}}

    report = crawl({Net: thousand, Block: fused_no_bias})
    assert row(report, "")["metric_ownership"] == {"module_flops": "subtree"}
    root = {"path": "", "call_index": 0}
    for path in ("block", "block.fc1", "block.fc2", "head"):
        assert row(report, path)["metric_owners"]["module_flops"] == root
        assert "module_flops" not in row(report, path)["metrics"]
    # block's own subtree macs (64) stay: the root owns only module_flops.
    assert row(report, "block")["metric_ownership"] == {"macs": "subtree"}
    assert row(report, "block.fc1")["metric_owners"]["macs"] == {"path": "block", "call_index": 0}
    assert report["totals"]["module_flops"]["value"] == 1000
    assert report["totals"]["macs"]["value"] == 64 + 8
    check_readers(report)


def test_supplied_method_and_value_forms():
    def forms(module, args, kwargs, output):
        return {"module_flops": {"status": "complete", "value": 9, "known_value": 9, "method": "analytic"},
                "macs": 3.0,  # a whole float is a count
                "dmas": torch.tensor(4)}  # an integer tensor too (read with recording paused)

    report = crawl({Block: forms})
    metrics = row(report, "block")["metrics"]
    assert metrics["module_flops"]["method"] == method_of(forms) + ":analytic"
    assert (metrics["module_flops"]["value"], metrics["macs"]["value"], metrics["dmas"]["value"]) == (9, 3, 4)
    assert metrics["macs"]["method"] == method_of(forms)
    assert not codes(report, "custom_metric_invalid")


# ---------------------------------------------------------------- matching


def test_first_matching_key_in_mapping_order_wins():
    def by_predicate(module, args, kwargs, output):
        return {"module_flops": 1}

    def by_type(module, args, kwargs, output):
        return {"module_flops": 2}

    def is_linear(module):
        return isinstance(module, nn.Linear)

    first = crawl({is_linear: by_predicate, nn.Linear: by_type})
    second = crawl({nn.Linear: by_type, is_linear: by_predicate})
    for path in ("block.fc1", "block.fc2", "head"):
        assert row(first, path)["metrics"]["module_flops"]["method"] == method_of(by_predicate)
        assert row(second, path)["metrics"]["module_flops"]["method"] == method_of(by_type)
    assert first["totals"]["module_flops"]["value"] == 3 * 1
    assert second["totals"]["module_flops"]["value"] == 3 * 2


class Scaled(nn.Module):
    def forward(self, x, *, scale):
        return x * scale


class CallsScaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.scaled = Scaled()

    def forward(self, x):
        return self.scaled(x, scale=3.0)


def test_handler_receives_the_actual_call():
    model = CallsScaled()
    x = torch.rand(2, 3)
    seen = []

    def handler(module, args, kwargs, output):
        seen.append((module, args, kwargs, output))
        return {}

    report = torchscan.crawl_module(model, args=(x,), custom_modules={Scaled: handler})
    (module, args, kwargs, output), = seen
    assert module is model.scaled
    assert isinstance(args, tuple) and len(args) == 1 and args[0] is x  # the object the forward got
    assert kwargs == {"scale": 3.0}
    assert torch.equal(output, x * 3.0)
    # An empty result supplies nothing: the built-in value (6 multiplies) stays.
    assert value(report, "scaled", "module_flops") == 6
    assert "metric_ownership" not in row(report, "scaled")


def test_bad_keys_and_handlers_are_refused_before_the_model_runs():
    ran = []

    class Probe(nn.Module):
        def forward(self, x):
            ran.append(1)
            return x

    def ok(module, args, kwargs, output):
        return {}

    for bad, words in [
        ([(nn.Linear, ok)], "must be a mapping"),
        ({3: ok}, "neither an nn.Module subclass nor a callable"),
        ({dict: ok}, "not an nn.Module subclass"),
        ({nn.Linear: 3}, "must be a handler callable"),
    ]:
        with pytest.raises(TypeError, match=words):
            torchscan.crawl_module(Probe(), (2,), custom_modules=bad)
    with pytest.raises(TypeError, match="must be a handler callable"):
        torchscan.summary(Probe(), (2,), custom_modules={Probe: None})
    with pytest.raises(ValueError, match="metrics must name"):
        torchscan.ModuleHandler(ok, metrics=("flops",))
    with pytest.raises(ValueError, match="scope must be"):
        torchscan.ModuleHandler(ok, scope="everything")
    with pytest.raises(TypeError, match="fn must be callable"):
        torchscan.ModuleHandler(None)
    assert ran == []


def test_empty_mapping_and_structure_mode_change_nothing():
    called = []

    def handler(module, args, kwargs, output):
        called.append(module)
        return {"module_flops": 1}

    native, empty = crawl(), crawl({})
    assert empty["layers"] == native["layers"] and empty["totals"] == native["totals"]
    structure = crawl({Block: handler}, mode="structure")
    assert called == []  # structure mode runs no handler
    assert structure["layers"] == crawl(mode="structure")["layers"]


def test_summary_takes_custom_modules(capsys):
    torch.manual_seed(0)
    report = torchscan.summary(Net(), (4,), custom_modules={Block: fused_no_bias})
    assert row(report, "block.fc1")["metric_owners"]["module_flops"] == {"path": "block", "call_index": 0}
    printed = capsys.readouterr().out
    assert "block.fc1" in printed and "132" in printed  # 116 + 16 in the module-view line


# ---------------------------------------------------------------- suspension and the operator view


def test_handler_tensor_work_is_never_counted():
    def busy(module, args, kwargs, output):
        # Natively 2 * 64^3 = 524,288 FLOPs if it were counted.
        a = torch.ones(64, 64)
        (a @ a).sum()
        torch.nn.functional.linear(args[0], torch.ones(8, args[0].shape[-1]))
        return {}

    native, report = crawl(), crawl({Block: busy, nn.Linear: busy})
    assert not [d for d in report["diagnostics"] if d["code"].startswith("custom_")]
    # Operator view by hand: addmm 2*1*4*8 + 2*1*8*4 + 2*1*4*2 = 64 + 64 + 16 = 144.
    assert report["operator_flops"]["total"]["value"] == 144
    assert report["operator_flops"] == native["operator_flops"]
    assert report["totals"] == native["totals"]
    for a, b in zip(report["layers"], native["layers"]):
        assert a["metrics"] == b["metrics"]


# ---------------------------------------------------------------- an einops-style block


_OPS = {}


@pytest.fixture(scope="module", autouse=True)
def token_mix_op():
    """A custom kernel, defined for this module's tests and removed after
    them: the coverage audit (tests/python/tools/test_coverage_audit.py) classifies
    every operator registered in the process, and must not see it."""

    @torch.library.custom_op("torchscan_handlers_test::token_mix", mutates_args=())
    def token_mix(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """out[b, m, c] = sum_n x[b, n, c] * w[n, m]: a custom kernel the module view has no formula for."""
        return torch.einsum("bnc,nm->bmc", x, w)

    @token_mix.register_fake
    def _(x, w):
        return x.new_empty(x.shape[0], w.shape[1], x.shape[2])

    _OPS["token_mix"] = token_mix
    yield token_mix
    _OPS.clear()
    token_mix._lib._destroy()


class TokenMix(nn.Module):
    """'b (h w) c -> b (w h) c' (einops.rearrange by reshape/transpose), then
    a token-mixing custom kernel."""

    def __init__(self, tokens=4):
        super().__init__()
        self.w = nn.Parameter(torch.ones(tokens, tokens))

    def forward(self, x):
        b, n, c = x.shape
        y = x.reshape(b, 2, n // 2, c).transpose(1, 2).reshape(b, n, c)
        return _OPS["token_mix"](y, self.w)


class MixerNet(nn.Module):
    """On (1, 4, 4): embed is a Linear(4, 4) on 4 rows: 16 outputs * (4 + 3 + 1)
    = 128 FLOPs, 64 MACs, DMAs 16 + (16 + 4) + 16 = 52."""

    def __init__(self):
        super().__init__()
        self.embed, self.mix = nn.Linear(4, 4), TokenMix()

    def forward(self, x):
        return self.mix(self.embed(x))


def token_mix_cost(module, args, kwargs, output):
    """16 outputs of 4-term dots over tokens: 16 * (4 + 3) = 112 FLOPs, 16 * 4
    = 64 MACs; DMAs: 16 input reads + 16 weight reads + 16 output writes = 48.
    The rearrange is a copy: no arithmetic."""
    b, n, c = output.shape
    k = module.w.shape[0]
    return {"module_flops": b * n * c * (2 * k - 1), "macs": b * n * c * k,
            "dmas": args[0].numel() + module.w.numel() + output.numel()}


# The operator view's own caller formula for the same kernel (FlopCounterMode
# convention, 2 per multiply-add): 2 * 16 * 4 = 128.
def operator_mapping():
    return {torch.ops.torchscan_handlers_test.token_mix: lambda x, w, out_shape: 2 * 16 * 4}


def test_einops_style_block_is_partial_and_named_without_a_handler():
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping())
    for m in METRICS:
        assert report["totals"][m]["status"] == "partial"
        assert row(report, "mix")["metrics"][m]["status"] == "partial"
        assert row(report, "embed")["metrics"][m]["status"] == "complete"
    assert report["totals"]["module_flops"]["known_value"] >= 128  # embed's part at least
    named = [d for d in report["diagnostics"] if d["code"] == "uncounted_operator" and d["metric"] == "module_flops"]
    assert [d["operator"] for d in named] == ["torchscan_handlers_test.token_mix"]
    # custom_mapping completes the operator view only: 128 (embed) + 128 (token_mix).
    assert report["totals"]["operator_flops"]["value"] == 256
    with pytest.raises(RuntimeError, match="module_flops, macs, dmas incomplete"):
        torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping(), strict=True)


def test_einops_style_block_is_complete_with_a_handler():
    torch.manual_seed(0)
    without = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping())
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_mapping=operator_mapping(),
                                    custom_modules={TokenMix: token_mix_cost}, strict=True)
    assert [value(report, "mix", m) for m in METRICS] == [112, 64, 48]
    # Totals: 128 + 112 = 240 FLOPs, 64 + 64 = 128 MACs, 52 + 48 = 100 DMAs.
    assert [report["totals"][m]["value"] for m in METRICS] == [240, 128, 100]
    # The module view's gap diagnostics for token_mix no longer hold; the
    # operator view (its own custom_mapping) is unchanged.
    assert not [d for d in report["diagnostics"] if d.get("metric") in METRICS]
    assert report["operator_flops"] == without["operator_flops"]
    assert report["totals"]["operator_flops"] == without["totals"]["operator_flops"]
    check_readers(report)


def test_operator_view_keeps_its_gap_without_custom_mapping():
    torch.manual_seed(0)
    report = torchscan.crawl_module(MixerNet(), (4, 4), custom_modules={TokenMix: token_mix_cost})
    # Module handlers supply no operator estimates.
    assert report["totals"]["module_flops"]["value"] == 240
    assert report["totals"]["operator_flops"]["status"] == "partial"
    assert [d["operator"] for d in report["diagnostics"] if d["code"] == "uncounted_operator"] == [
        "torchscan_handlers_test.token_mix"]


# ---------------------------------------------------------------- diagnostics


def test_custom_handler_error_leaves_the_scan_and_other_rows_alone():
    def broken(module, args, kwargs, output):
        raise ValueError("no estimate today")

    report = crawl({Block: broken})
    for m in METRICS:
        metric = row(report, "block")["metrics"][m]
        assert (metric["status"], metric["method"], metric["scope"]) == (
            "unavailable", method_of(broken), "module_call")
        assert report["totals"][m]["status"] == "partial"
    # The children and head keep their values: known 64 + 64 + 16 = 144 FLOPs.
    assert report["totals"]["module_flops"]["known_value"] == 144
    assert value(report, "head", "module_flops") == 16
    (d,) = codes(report, "custom_handler_error")
    assert (d["path"], d["severity"]) == ("block", "error") and "no estimate today" in d["message"]
    check_readers(report)


def test_declared_metrics_are_what_an_error_makes_unavailable():
    def broken(module, args, kwargs, output):
        raise RuntimeError("boom")

    report = crawl({Block: torchscan.ModuleHandler(broken, metrics=("macs",), scope="subtree")})
    # Only macs was requested; its subtree ownership stays in force.
    assert row(report, "block")["metrics"]["macs"]["status"] == "unavailable"
    assert row(report, "block.fc1")["metric_owners"] == {"macs": {"path": "block", "call_index": 0}}
    assert report["totals"]["macs"]["known_value"] == 8  # head alone
    assert report["totals"]["module_flops"]["value"] == 144
    (d,) = codes(report, "custom_handler_error")
    assert d["metric"] == "macs"


@pytest.mark.parametrize("result", [[1, 2], 7, None, {"receptive_field": 3}, {"flops": 3}])
def test_custom_handler_invalid(result):
    report = crawl({Block: lambda module, args, kwargs, output: result})
    (d,) = codes(report, "custom_handler_invalid")
    assert d["path"] == "block"
    assert all(row(report, "block")["metrics"][m]["status"] == "unavailable" for m in METRICS)
    assert report["totals"]["module_flops"]["known_value"] == 144  # 64 + 64 + 16
    check_readers(report)


@pytest.mark.parametrize("bad", [
    -1, float("nan"), float("inf"), True, 2.5, "12", None, 2**128, torch.ones(2), object(),
    {"status": "complete"},                       # no value
    {"status": "partial", "value": 3},            # a partial value is null
    {"status": "partial"},                        # no lower bound
    {"status": "unavailable", "known_value": 1},  # unavailable has no numbers
    {"status": "done", "value": 3},
    {"value": 3, "known_value": 4},               # complete: the two agree
    {"value": 3, "scope": "everything"},
    {"value": 3, "extra": 1},
    {"value": 3, "method": ""},
])
def test_custom_metric_invalid(bad):
    def handler(module, args, kwargs, output):
        return {"module_flops": bad, "macs": 1}

    report = crawl({Block: handler})
    (d,) = codes(report, "custom_metric_invalid")
    assert (d["path"], d["metric"]) == ("block", "module_flops")
    assert row(report, "block")["metrics"]["module_flops"]["status"] == "unavailable"
    assert value(report, "block", "macs") == 1  # the valid metric of the same result stands
    total = report["totals"]["module_flops"]
    assert (total["status"], total["value"], total["known_value"]) == ("partial", None, 144)  # 64 + 64 + 16
    check_readers(report)


def test_custom_metric_partial():
    report = crawl({Block: lambda module, args, kwargs, output: {
        "module_flops": {"status": "partial", "known_value": 10}}})
    assert row(report, "block")["metrics"]["module_flops"]["status"] == "partial"
    assert row(report, "block")["metrics"]["module_flops"]["known_value"] == 10
    # Lower bound 144 + 10.
    assert report["totals"]["module_flops"]["status"] == "partial"
    assert report["totals"]["module_flops"]["known_value"] == 154
    (d,) = codes(report, "custom_metric_partial")
    assert (d["path"], d["metric"], d["severity"]) == ("block", "module_flops", "warning")
    check_readers(report)


def test_custom_metric_unavailable_explicit_and_omitted_owned():
    explicit = crawl({Block: lambda module, args, kwargs, output: {"dmas": {"status": "unavailable"}}})
    assert row(explicit, "block")["metrics"]["dmas"]["status"] == "unavailable"
    assert explicit["totals"]["dmas"]["known_value"] == 116  # 52 + 48 + 16
    assert [d["metric"] for d in codes(explicit, "custom_metric_unavailable")] == ["dmas"]

    def flops_only(module, args, kwargs, output):
        return {"module_flops": 116}

    owned = crawl({Block: torchscan.ModuleHandler(flops_only, metrics=("module_flops", "macs"), scope="subtree")})
    # macs is owned but omitted: unavailable, and the ownership stays (the
    # children do not become a substitute estimate).
    assert row(owned, "block")["metrics"]["macs"]["status"] == "unavailable"
    assert row(owned, "block")["metric_ownership"] == {"module_flops": "subtree", "macs": "subtree"}
    assert "macs" not in row(owned, "block.fc1")["metrics"]
    assert owned["totals"]["macs"]["status"] == "partial" and owned["totals"]["macs"]["known_value"] == 8
    assert owned["totals"]["module_flops"]["value"] == 116 + 16
    (d,) = codes(owned, "custom_metric_unavailable")
    assert (d["path"], d["metric"]) == ("block", "macs")
    check_readers(owned)


class AttnNet(nn.Module):
    """MultiheadAttention never calls its out_proj (a Linear subclass): its
    forward reads the weights, so the built-in estimate of the attention call
    includes out_proj's work. proj on (1, 3, 4): 12 outputs * (4+3+1) = 96
    FLOPs, 48 MACs, DMAs 12 + (16 + 4) + 12 = 44."""

    def __init__(self):
        super().__init__()
        self.attn, self.proj = nn.MultiheadAttention(4, 2, batch_first=True), nn.Linear(4, 4)

    def forward(self, x):
        y, _ = self.attn(x, x, x, need_weights=False)
        return self.proj(y)


def seven(module, args, kwargs, output):
    return {"module_flops": 7}


def attn_crawl(custom_modules):
    torch.manual_seed(0)
    return torchscan.crawl_module(AttnNet(), (3, 4), custom_modules=custom_modules)


def test_expanded_atomic_boundary():
    report = attn_crawl({nn.Linear: seven})  # matches proj and attn.out_proj
    assert value(report, "proj", "module_flops") == 7
    for m in METRICS:
        assert row(report, "attn")["metrics"][m]["status"] == "unavailable"
        assert report["totals"][m]["status"] == "partial"
    assert [(d["path"], d["metric"]) for d in codes(report, "expanded_atomic_boundary")] == [
        ("attn", m) for m in METRICS]
    # Known: proj alone (7 FLOPs from the handler; 48 MACs, 44 DMAs natively).
    assert [report["totals"][m]["known_value"] for m in METRICS] == [7, 48, 44]
    check_readers(report)


def test_atomic_root_stays_closed_when_nothing_inside_it_is_matched_or_it_has_its_own_handler():
    native = attn_crawl(None)
    exact = attn_crawl({(lambda m: type(m) is nn.Linear): seven})  # not out_proj
    assert not codes(exact, "expanded_atomic_boundary")
    assert row(exact, "attn")["metrics"] == row(native, "attn")["metrics"]
    # The native total less proj's 96 plus the handler's 7.
    assert exact["totals"]["module_flops"]["value"] == native["totals"]["module_flops"]["value"] - 96 + 7

    def attn_cost(module, args, kwargs, output):
        return {"module_flops": 1, "macs": 2, "dmas": 3}

    both = attn_crawl({nn.MultiheadAttention: attn_cost, nn.Linear: seven})
    assert not codes(both, "expanded_atomic_boundary")
    assert [both["totals"][m]["value"] for m in METRICS] == [1 + 7, 2 + 48, 3 + 44]


def test_transformer_layer_runs_its_children_so_only_the_attention_opens():
    # crawl_module's hooks keep TransformerEncoderLayer off its fused fast
    # path ("forward pre-/hooks are attached"), so linear1 and linear2 are
    # called and take the handler; only self_attn covers a matched child
    # (out_proj) without calling it.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(4, 2, 8, dropout=0.0, batch_first=True)
    report = torchscan.crawl_module(layer, (3, 4), custom_modules={nn.Linear: seven})
    assert value(report, "linear1", "module_flops") == value(report, "linear2", "module_flops") == 7
    assert [(d["path"], d["metric"]) for d in codes(report, "expanded_atomic_boundary")] == [
        ("self_attn", m) for m in METRICS]
    assert row(report, "")["metrics"]["module_flops"]["status"] == "complete"  # the residual adds: its own work
    check_readers(report)


# ---------------------------------------------------------------- failures and interrupts


class Raises(nn.Module):
    def forward(self, x):
        raise ValueError("inner failure")


class Catches(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner, self.lin = Raises(), nn.Linear(4, 4)

    def forward(self, x):
        try:
            self.inner(x)
        except ValueError:
            pass
        return self.lin(x)


def test_a_call_that_raised_runs_no_handler():
    called = []

    def handler(module, args, kwargs, output):
        called.append(module)
        return {"module_flops": 1}

    report = torchscan.crawl_module(Catches(), (4,), custom_modules={Raises: handler})
    assert called == []
    assert row(report, "inner")["metrics"]["module_flops"]["status"] == "unavailable"
    assert codes(report, "module_forward_error")


@pytest.mark.parametrize("exc", [KeyboardInterrupt, SystemExit])
def test_base_exceptions_propagate_and_leave_nothing_behind(exc):
    model = Net()

    def interrupted(module, args, kwargs, output):
        raise exc("stop")

    with pytest.raises(exc, match="stop"):
        torchscan.crawl_module(model, (4,), custom_modules={Block: interrupted})
    assert not torchscan.tls_mode_included()
    for m in model.modules():
        assert not m._forward_hooks and not m._forward_pre_hooks
    # Recording is not left paused: a new scan counts 2*2*4*4 = 64 FLOPs.
    a, b = torch.ones(2, 4), torch.ones(4, 4)
    assert torchscan.measure_flops(lambda: a @ b)["total"]["value"] == 64
    assert crawl()["totals"]["module_flops"]["value"] == 144


def test_a_handler_that_starts_a_scan_is_told_why_it_cannot(torchscan):
    # Handlers run with the thread's recording paused (their work is not the
    # model's): a scan started there would count nothing and say complete 0.
    # It is refused, and the handler's estimate is unavailable, not 0.
    inner = nn.Linear(4, 4)

    def scanning_handler(module, args, kwargs, output):
        flops = torchscan.measure_flops(lambda: inner(args[0]))
        return {"module_flops": flops["total"]["value"]}

    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    report = torchscan.crawl_module(model, (4,), custom_modules={nn.ReLU: scanning_handler})
    errors = [d for d in report["diagnostics"] if d["code"] == "custom_handler_error"]
    assert len(errors) == 1 and "recording is paused" in errors[0]["message"], report["diagnostics"]
    assert report["totals"]["module_flops"]["status"] == "partial"
    # Nothing is left paused: Linear(4, 4) on one row is 2*4*4 = 32 FLOPs.
    assert torchscan.measure_flops(lambda: inner(torch.ones(1, 4)))["total"]["value"] == 32
