"""Per-analysis custom module handlers (report schema "Custom
handler rows"): crawl_module(custom_modules={type or predicate: handler}):
who owns a subtree's metrics, the handler forms and how keys match.

Expected values are derived by hand in the comments, with the module view's
conventions (tests/fixtures/custom_handlers.py).
"""

import pytest
import torch
from torch import nn

import torchscan
from tests.fixtures.custom_handlers import Block, NATIVE, Net, check_readers, codes, crawl, method_of, row, value


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
