"""Custom module handlers that fail or cannot apply: invalid results and their
diagnostics, the atomic boundary of built-in estimates, calls that raised,
interrupts, and handlers that try to scan.

Expected values are derived by hand in the comments, with the module view's
conventions (tests/fixtures/custom_handlers.py).
"""

import json

import pytest
import torch
from torch import nn

import torchscan
from tests.fixtures.custom_handlers import Block, METRICS, Net, check_readers, codes, crawl, method_of, row, value


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


def test_a_one_metric_failure_covered_by_an_owner_is_not_reported():
    # block owns macs for its whole subtree (100); the macs handler of every
    # Linear raises. block.fc1's and block.fc2's values would be covered by
    # block's estimate, so only head's failure is reported, and the macs total
    # is block's 100 plus head's unavailable estimate: partial, known 100.
    def block_macs(module, args, kwargs, output):
        return {"macs": {"value": 100, "scope": "subtree"}}

    def broken(module, args, kwargs, output):
        raise ValueError("no macs")

    report = crawl({Block: block_macs, nn.Linear: torchscan.ModuleHandler(broken, metrics=("macs",))})
    assert [d["path"] for d in codes(report, "custom_handler_error")] == ["head"]
    assert (report["totals"]["macs"]["status"], report["totals"]["macs"]["known_value"]) == ("partial", 100)
    assert row(report, "block.fc1")["metric_owners"] == {"macs": {"path": "block", "call_index": 0}}
    check_readers(report)


def test_module_results_the_session_cannot_read_are_refused():
    from torchscan.flops import FlopScan

    scan = FlopScan(scope="forward")
    with pytest.raises(RuntimeError, match="stop the scan first"):
        scan._session.set_module_results("[]")
    with scan:
        scope = scan._session.push_module_scope("a")
        torch.rand(2, 2) @ torch.rand(2, 2)
        scan._session.pop_module_scope(scope, False, [])
    for bad in ("{}", '[{"row": 1}]', '[{"row": 0, "metrics": {"macs": {"status": "complete", "known_value": 4}}}]'):
        with pytest.raises(ValueError, match="torchscan: module results: "):
            scan._session.set_module_results(bad)
    scan._session.set_module_results(
        '[{"row": 0, "metrics": {"macs": {"status": "complete", "known_value": "4", "scope": "module_call", '
        '"method": "custom_module_handler:t"}}}]')
    # (2, 2) @ (2, 2): 4 outputs of 2-term dots, 8 MACs natively; 4 supplied.
    assert json.loads(scan._session.layers())[0]["metrics"]["macs"]["value"] == 4


def test_an_interrupt_while_handler_hooks_are_removed_leaves_none_behind(monkeypatch):
    # crawl_module removes the handlers' hooks again when an interrupt lands
    # in the first removal: both hook sets (the handled modules' and the
    # native layers' above them) must be gone after the second call.
    from torchscan import _modules, handlers
    from torchscan._modules import AnalysisPause

    model = nn.Sequential(nn.MultiheadAttention(8, 2), nn.ReLU())
    modules = list(model.modules())
    found = handlers.prepare({nn.Linear: _fixed, nn.ReLU: _fixed}, modules)  # out_proj is under the attention
    found.add_hooks([], AnalysisPause())
    hooked = [m for m in modules if m._forward_hooks]
    assert model[0] in hooked and model[1] in hooked  # a native layer above a handled module, a handled module
    remove = _modules.ForwardHooks.remove
    calls = []

    def interrupted_once(self):
        calls.append(self)
        if len(calls) == 1:
            raise KeyboardInterrupt
        remove(self)

    monkeypatch.setattr(_modules.ForwardHooks, "remove", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        found.remove_hooks()
    found.remove_hooks()
    assert not [m for m in modules if m._forward_hooks or m._forward_pre_hooks]


def _fixed(module, args, kwargs, output):
    return {"module_flops": 1}
