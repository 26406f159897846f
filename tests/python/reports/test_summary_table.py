"""summary() and render_report tables: the report object summary() returns,
rows at max_depth holding the layers below them, exact parameter counts,
byte units. Expected values are derived by hand in the comments, or from the
report's own per-layer values by path (independently of the renderer's
call-order folding)."""

import copy
import json
import pickle
import re
import subprocess
import sys

import pytest
import torch
import torch.nn as nn

import torchscan

pytestmark = pytest.mark.usefixtures("torchscan")


def _rows(text: str) -> dict:
    """{label: [type, shape, params, flops, macs, dmas]} of a rendered table."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Layer "))
    rows = {}
    for line in lines[start + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) < 7:  # the notes under the table, or its end
            break
        rows[cells[0]] = cells[1:]
    return rows


def _count(cell: str) -> int:
    return int(cell.replace(",", ""))


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(4, 8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.block(x))


def test_summary_returns_the_report_printed_as_its_table(capsys):
    report = torchscan.summary(TwoBlocks(), (4,), max_depth=1)
    printed = capsys.readouterr().out
    # Still the AnalysisReport dict: every key, JSON as before, plain dict equality.
    assert isinstance(report, dict)
    assert set(report) >= {"schema_version", "context", "inputs", "layers", "totals", "operator_flops",
                           "diagnostics"}
    assert json.loads(json.dumps(report)) == dict(report)
    # Printed form: the table summary() printed, not the dict.
    assert repr(report) == str(report) == printed.rstrip("\n")
    assert "'schema_version'" not in repr(report) and "Layer" in repr(report)
    # Copies keep the class and the depth.
    for twin in (pickle.loads(pickle.dumps(report)), copy.deepcopy(report)):
        assert type(twin) is type(report) and twin == report and repr(twin) == repr(report)
    # Another depth on request.
    assert "block.0" in report.render(max_depth=None) and "block.0" not in repr(report)


def test_rows_at_max_depth_hold_their_subtree():
    report = torchscan.summary(TwoBlocks(), (4,), max_depth=1, verbose=False)
    rows = _rows(repr(report))
    assert list(rows) == ["(root)", "block", "head"]
    # By hand, one sample (module view: K multiplies + K-1 adds per K-term dot,
    # one add per bias; DMAs: each operand read once, each result written once).
    # block.0 = Linear(4, 8): 4*8 + 8 = 40 parameters, 32 MACs, 8*(2*4 - 1) + 8
    # = 64 FLOPs, 4 + 32 + 8 read + 8 written = 52 DMAs; block.1 = ReLU on 8
    # values: 8 FLOPs, 16 DMAs. The Sequential itself does no work: its row
    # at depth 1 shows its children's: 40 parameters, 72 FLOPs, 32 MACs, 68 DMAs.
    assert rows["block"][2:6] == ["40", "72", "32", "68"]
    # head = Linear(8, 2): 16 + 2 = 18 parameters, 16 MACs, 2*(2*8 - 1) + 2 =
    # 32 FLOPs, 8 + 16 + 2 + 2 = 28 DMAs.
    assert rows["head"][2:6] == ["18", "32", "16", "28"]
    assert rows["(root)"][2:6] == ["0", "0", "0", "0"]
    # And they add up to the totals: 58 parameters, 104 FLOPs, 48 MACs, 96 DMAs.
    totals = report["totals"]
    assert (totals["parameters"], totals["module_flops"]["value"], totals["macs"]["value"],
            totals["dmas"]["value"]) == (58, 104, 48, 96)
    assert "Rows at depth 1 include the layers below them" in repr(report)
    # Every layer shown: each row its own work (the Sequential's is zero).
    full = _rows(report.render(max_depth=None))
    assert full["block"][2:6] == ["0", "0", "0", "0"] and full["block.0"][2:6] == ["40", "64", "32", "52"]
    assert "Each row counts its own work" in report.render(max_depth=10)


def test_gpt2_rows_at_depth_one_add_up_to_the_totals():
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=16,
                                      bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    report = torchscan.summary(model, args=(torch.randint(0, 100, (1, 8)),), max_depth=1, verbose=False)
    rows = _rows(repr(report))
    assert list(rows) == ["(root)", "transformer", "lm_head"]
    layers = report["layers"]
    totals = report["totals"]

    def subtree(path, key):
        """Sum of the rows at `path` and under it, found by path (rows are exclusive)."""
        inside = [l for l in layers if l["path"] == path or l["path"].startswith(path + ".")]
        return sum(l["metrics"][key]["value"] for l in inside)

    # The subtrees and the root's own row partition the model's work exactly.
    for key in ("module_flops", "macs", "dmas"):
        root_own = layers[0]["metrics"][key]["value"]
        assert root_own + subtree("transformer", key) + subtree("lm_head", key) == totals[key]["value"]
    # The rendered cells are those sums (SI units, two decimals: 448,784 -> "448.78k").
    def si(n):
        return str(n) if n < 1000 else f"{n / 1000:.2f}k" if n < 10**6 else f"{n / 10**6:.2f}M"
    for name in ("transformer", "lm_head"):
        assert rows[name][3:6] == [si(subtree(name, k)) for k in ("module_flops", "macs", "dmas")], name
    # Parameters exact; lm_head's weight is transformer.wte's (tied): counted
    # once, at wte's row, so the visible rows add up to the unique total:
    # wte 100*32 + wpe 16*32 + 2 blocks * (2*64 ln + 32*96+96 + 32*32+32 + 32*128+128 + 128*32+32)
    # + ln_f 64 = 3,200 + 512 + 2*12,704 + 64 = 29,184; lm_head adds none.
    assert sum(_count(r[2]) for r in rows.values()) == totals["parameters"] == 29_184
    assert rows["transformer"][2] == "29,184" and rows["lm_head"][2] == "0"
    assert "lm_head shares 3,200 with transformer.wte" in repr(report)
    lm_head = next(l for l in layers if l["path"] == "lm_head")
    assert (lm_head["parameters"], lm_head["shared_parameters"], lm_head["shared_with"]) == (3200, 3200,
                                                                                         "transformer.wte")
    # One unit family for bytes: 29,184 float32 parameters = 116,736 B = 114.00 KiB.
    assert "Parameters: 29,184 (trainable 29,184, frozen 0), 114.00KiB; buffers 0 (0B)" in repr(report)
    assert "kB" not in repr(report)


def test_a_module_called_twice_counts_its_parameters_once():
    class Twice(nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = nn.Sequential(nn.Linear(3, 3))

        def forward(self, x):
            return self.inner(self.inner(x))

    report = torchscan.summary(Twice(), (3,), max_depth=1, verbose=False)
    rows = _rows(repr(report))
    # Linear(3, 3): 9 + 3 = 12 parameters; 9 MACs, 3*(2*3 - 1) + 3 = 18 FLOPs per call.
    assert rows["inner"][2:5] == ["12", "18", "9"]
    assert rows["inner #1"][2:5] == ["(recursive)", "18", "9"]
    assert report["totals"]["parameters"] == 12 and report["totals"]["module_flops"]["value"] == 36


def _saved():
    report = torchscan.crawl_module(TwoBlocks(), (4,))
    return json.loads(json.dumps(report))


def test_folded_rows_keep_partial_and_unavailable_honest():
    report = _saved()
    relu = next(l for l in report["layers"] if l["path"] == "block.1")
    # A partial child: its known 8 FLOPs are a lower bound, so is the block's 64 + 8.
    relu["metrics"]["module_flops"].update(status="partial", value=None, known_value=8)
    assert _rows(torchscan.render_report(report, max_depth=1))["block"][3] == ">= 72"
    # An unavailable child adds no known value and makes the sum a lower bound.
    relu["metrics"]["module_flops"].update(status="unavailable", value=None, known_value=None)
    assert _rows(torchscan.render_report(report, max_depth=1))["block"][3] == ">= 64"
    # Nothing known anywhere in the subtree: n/a, never 0.
    for layer in report["layers"]:
        if layer["path"].startswith("block"):
            layer["metrics"]["macs"].update(status="unavailable", value=None, known_value=None)
    assert _rows(torchscan.render_report(report, max_depth=1))["block"][4] == "n/a"


def test_covered_children_are_not_added_twice():
    # A subtree estimate held by the parent (metric_owners): the children's
    # metric is absent, so the folded row is the owner's value alone.
    report = _saved()
    block = next(l for l in report["layers"] if l["path"] == "block")
    block["metrics"]["module_flops"].update(value=100, known_value=100)
    for layer in report["layers"]:
        if layer["path"].startswith("block."):
            del layer["metrics"]["module_flops"]
            layer["metric_owners"] = {"module_flops": {"path": "block", "call_index": 0}}
    report["totals"]["module_flops"].update(value=132, known_value=132)  # 100 + head's 32
    assert _rows(torchscan.render_report(report, max_depth=1))["block"][3] == "100"


def test_large_parameter_counts_are_exact():
    report = _saved()
    report["layers"][-1]["parameters"] = 1_234_567_890_123
    report["totals"]["parameters"] = report["totals"]["trainable_parameters"] = 1_234_567_890_123 + 40
    text = torchscan.render_report(report)
    assert _rows(text)["head"][2] == "1,234,567,890,123"
    assert "Parameters: 1,234,567,890,163 (trainable 1,234,567,890,163, frozen 0)" in text


def test_the_interactive_prompt_shows_the_table_once():
    code = ("import torch.nn as nn, torchscan\n"
            "torchscan.summary(nn.Sequential(nn.Linear(4, 4)), (4,))\n")
    out = subprocess.run([sys.executable, "-i", "-q"], input=code, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("Layer ") == 1 and "'schema_version'" not in out.stdout, out.stdout


def test_summary_options_are_checked_and_a_broken_report_still_prints():
    with pytest.raises(TypeError, match="verbose must be True or False"):
        torchscan.summary(TwoBlocks(), (4,), verbose="yes")
    report = torchscan.summary(TwoBlocks(), (4,), verbose=False)
    report["layers"] = 3  # edited into something the renderer refuses
    text = repr(report)
    assert text.startswith("SummaryReport (no table: ") and "'layers': 3" in text
    with pytest.raises(ValueError):
        str(report)  # str() is the table, and says why there is none


def test_parameters_of_modules_that_did_not_run_are_named():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used = nn.Linear(4, 2)  # 4*2 + 2 = 10 parameters
            self.spare = nn.Linear(3, 3)  # 3*3 + 3 = 12, never called

        def forward(self, x):
            return self.used(x)

    report = torchscan.summary(Unused(), (4,), verbose=False)
    rows = _rows(repr(report))
    assert sum(_count(r[2]) for r in rows.values()) == 10 and report["totals"]["parameters"] == 22
    assert "12 parameters belong to modules that did not run in this forward" in repr(report)
    assert "did not run" not in repr(torchscan.summary(TwoBlocks(), (4,), verbose=False))
