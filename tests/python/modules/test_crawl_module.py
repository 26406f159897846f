"""crawl_module: per-layer rows from module scopes, totals, structure and
strict modes, and state restored whatever happens."""

import copy
import json

import pytest
import torch
import torch.nn as nn
from torch.nn.modules import module as nn_module


class Shared(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.relu(self.fc(x)))


def test_layer_rows_and_totals(torchscan):
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()).train()
    report = torchscan.crawl_module(model, (3, 32, 32))
    assert report["schema_version"] == 1
    assert report["context"]["training_before"] is True and model.training
    rows = {(l["path"], l["call_index"]): l for l in report["layers"]}
    conv = rows[("0", 0)]
    # Conv2d(3,8,3) on (1,3,32,32): 7200 outputs x (2*27 - 1) + 7200 biases.
    assert conv["metrics"]["module_flops"]["value"] == 388800
    assert conv["metrics"]["macs"]["value"] == 194400
    assert conv["type"] == "Conv2d" and conv["output"]["shape"] == [1, 8, 30, 30]
    assert conv["parameters"] == 8 * 27 + 8
    assert rows[("1", 0)]["metrics"]["module_flops"]["value"] == 7200
    assert report["totals"]["module_flops"]["value"] == 396000
    assert report["totals"]["operator_flops"]["value"] == 2 * 7200 * 27 + 7200
    assert report["totals"]["parameters"] == 224
    assert report["inputs"]["source"] == "generated"
    json.dumps(report)


def test_shared_module_has_two_calls_and_counts_parameters_once(torchscan):
    model = Shared()
    report = torchscan.crawl_module(model, args=(torch.randn(2, 4),))
    fc_calls = [l for l in report["layers"] if l["path"] == "fc"]
    assert [l["call_index"] for l in fc_calls] == [0, 1]
    # Each call: (2x4)(4x4): 8 dots of 4 terms = 8*7 + 8 biases = 64 module FLOPs.
    assert [l["metrics"]["module_flops"]["value"] for l in fc_calls] == [64, 64]
    assert report["totals"]["parameters"] == 20
    # The relu is the root's own work: 8 values.
    root = [l for l in report["layers"] if l["path"] == ""][0]
    assert root["metrics"]["module_flops"]["value"] == 8


def test_exceptions_propagate_and_state_is_restored(torchscan):
    class Boom(nn.Module):
        def forward(self, x):
            raise KeyError("boom")

    model = nn.Sequential(nn.Linear(4, 4), Boom()).train()
    hooks = (len(nn_module._global_forward_pre_hooks), len(model[0]._forward_pre_hooks),
             len(model[0]._forward_hooks))
    with pytest.raises(KeyError, match="boom"):
        torchscan.crawl_module(model, (4,))
    assert all(m.training for m in model.modules())
    assert (len(nn_module._global_forward_pre_hooks), len(model[0]._forward_pre_hooks),
            len(model[0]._forward_hooks)) == hooks
    assert not torchscan.tls_mode_included()


def test_a_caught_module_error_is_a_failed_call(torchscan):
    class Fragile(nn.Module):
        def forward(self, x):
            raise ValueError("fragile")

    class Tolerant(nn.Module):
        def __init__(self):
            super().__init__()
            self.fragile = Fragile()

        def forward(self, x):
            try:
                return self.fragile(x)
            except ValueError:
                return x * 2

    report = torchscan.crawl_module(Tolerant(), args=(torch.ones(3),))
    fragile = [l for l in report["layers"] if l["path"] == "fragile"][0]
    assert fragile["output"] == {"kind": "failed"}
    assert fragile["metrics"]["module_flops"]["status"] == "unavailable"
    assert any(d["code"] == "module_forward_error" and d["path"] == "fragile" for d in report["diagnostics"])


def test_structure_mode_and_strict(torchscan):
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    structure = torchscan.crawl_module(model, (4,), mode="structure")
    for name in ("module_flops", "macs", "dmas", "operator_flops"):
        assert structure["totals"][name]["status"] == "unavailable"
        assert structure["totals"][name]["method"] == "not_requested"
    assert structure["totals"]["parameters"] == 20

    @torch.library.custom_op("torchscan_crawl_test::opaque", mutates_args=())
    def opaque(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    class Special(nn.Module):
        def forward(self, x):
            return opaque(x)  # a caller's operator: no formula in either view

    with pytest.raises(RuntimeError, match="strict=True"):
        torchscan.crawl_module(Special(), (4,), strict=True)
    with pytest.raises(ValueError, match="either input_shape"):
        torchscan.crawl_module(model)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        torchscan.crawl_module(lambda x: x, (4,))


def test_reports_are_deterministic_and_value_free(torchscan):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    x = torch.full((2, 4), 12345.678)
    first = torchscan.crawl_module(model, args=(x,))
    second = torchscan.crawl_module(model, args=(x,))
    assert first == second
    assert "12345" not in json.dumps(first)


def test_compare_reports(torchscan):
    torch.manual_seed(0)
    before = torchscan.crawl_module(nn.Sequential(nn.Linear(4, 4)), (4,))
    after = torchscan.crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,))
    diff = torchscan.compare_reports(before, after)
    assert diff["schema_version"] == 1
    # The ReLU adds 4 module FLOPs (one per value of the (1, 4) output).
    assert diff["totals"]["module_flops"]["delta"] == 4
    assert [(l["path"], l["call_index"]) for l in diff["layers"]["added"]] == [("1", 0)]
    assert diff["layers"]["removed"] == [] and diff["layers"]["changed"] == []
    # Incomplete on either side: no numeric delta, the status propagates.
    partial = copy.deepcopy(after)
    partial["totals"]["module_flops"].update(status="partial", value=None)
    d = torchscan.compare_reports(before, partial)["totals"]["module_flops"]
    assert d["delta"] is None and d["status"] == "partial"
    with pytest.raises(ValueError, match="schema_version 1"):
        torchscan.compare_reports({**before, "schema_version": 2}, after)


def test_render_report_and_summary(torchscan, capsys):
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 4)), nn.ReLU())
    report = torchscan.summary(model, (4,))
    text = capsys.readouterr().out
    assert "Linear" in text and "Module view (TorchScan conventions)" in text and "Operator view" in text
    shallow = torchscan.render_report(report, max_depth=1)
    assert "Linear" not in shallow and "Sequential" in shallow  # depth-2 rows hidden
    flops = torchscan.render_report(report["operator_flops"])
    assert flops.startswith("Operator FLOPs:") and "aten.addmm" in flops


def test_command_line_scan_render_diff(tmp_path):
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-m", "torchscan", *args], capture_output=True, text=True,
                              timeout=120, cwd=str(tmp_path))

    out = tmp_path / "r.json"
    scanned = run("scan", "torchscan.examples:small_cnn", "--input-shape", "3,32,32", "--output", str(out))
    assert scanned.returncode == 0, scanned.stderr
    assert "Conv2d" in scanned.stdout and json.loads(out.read_text())["schema_version"] == 1
    rendered = run("render", str(out), "--max-depth", "0")
    assert rendered.returncode == 0 and "Conv2d" not in rendered.stdout and "SmallCNN" in rendered.stdout
    diffed = run("diff", str(out), str(out), "--json")
    assert diffed.returncode == 0 and json.loads(diffed.stdout)["layers"]["changed"] == []
    table = run("diff", str(out), str(out))  # the same report twice: every change is zero
    assert table.returncode == 0 and "0 changed, 0 added, 0 removed" in table.stdout
    bad = run("scan", "nope", "--input-shape", "3")
    assert bad.returncode != 0 and "MODULE:FACTORY" in bad.stderr


@pytest.mark.parametrize("family", ["bert", "gpt2"])
def test_transformers_models_from_small_configs(torchscan, family):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    ids = torch.randint(0, 100, (1, 8))
    if family == "bert":
        model = transformers.BertModel(transformers.BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100,
            max_position_embeddings=64))
        kwargs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    else:
        model = transformers.GPT2Model(transformers.GPT2Config(
            n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64, bos_token_id=0, eos_token_id=0))
        kwargs = {"input_ids": ids}
    report = torchscan.crawl_module(model, kwargs=kwargs)
    for name in ("module_flops", "macs", "dmas"):
        assert report["totals"][name]["status"] == "complete", report["diagnostics"]
    # The operator view counts the CPU SDPA kernel completely too: nothing is missing.
    assert report["diagnostics"] == []
    assert report["inputs"]["kwargs"]["items"]["input_ids"]["shape"] == [1, 8]
    # Per-layer rows add up to the totals.
    assert sum(l["metrics"]["module_flops"]["value"] for l in report["layers"]) == \
        report["totals"]["module_flops"]["value"]
    # Every layer's parameters, counted once, give the model's.
    assert report["totals"]["parameters"] == sum(p.numel() for p in model.parameters())
    assert torchscan.crawl_module(model, kwargs=kwargs) == report


class Branchy(nn.Module):
    """Two branches and a sum: the pooled branch is declared first, so a
    layer-order walk would wrongly pool before `a`; data flow does not."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 4, 3)
        self.b = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(4, 4, 3, padding=1), nn.Upsample(scale_factor=2))
        self.a = nn.Conv2d(4, 4, 3, padding=1)

    def forward(self, x):
        s = self.stem(x)
        return self.a(s) + self.b(s)


def test_receptive_fields_follow_the_data_flow(torchscan):
    report = torchscan.crawl_module(Branchy(), (1, 10, 10))

    def field(path):
        m = [l for l in report["layers"] if l["path"] == path][0]["metrics"]
        return tuple(m[k]["value"] for k in ("receptive_field", "effective_stride", "effective_padding"))

    # rf' = rf + (k - 1) jump, jump' = jump * stride, padding' = padding + p * jump.
    assert field("stem") == (3, 1, 0)        # 3x3 conv on the input
    assert field("b.0") == (4, 2, 0)         # 2x2 pool, stride 2: 3 + 1*1
    assert field("b.1") == (8, 2, 2)         # 3x3 conv, padding 1: 4 + 2*2; padding 0 + 1*2
    assert field("b.2") == (8, 1, 2)         # nearest 2x upsampling halves the jump
    assert field("a") == (5, 1, 1)           # straight after the stem: 3 + 2*1; padding 1*1
    assert field("") == (8, 1, 2)            # the sum: the wider of the two branches
    linear = torchscan.crawl_module(nn.Sequential(nn.Flatten(), nn.Linear(4, 2)), (4,))
    assert all(l["metrics"]["receptive_field"]["method"] == "not_applicable" for l in linear["layers"])


def test_summary_receptive_field_columns(torchscan, capsys):
    torchscan.summary(Branchy(), (1, 10, 10), receptive_field=True)
    text = capsys.readouterr().out
    header = next(line for line in text.splitlines() if line.startswith("Layer "))  # below the note on rows
    assert "RF" in header and "Stride" in header and "Padding" in header
    stem = [line for line in text.splitlines() if line.strip().startswith("stem")][0]
    assert stem.split()[-3:] == ["3", "1", "0"]


@pytest.mark.parametrize("bad", ["yes", 1, None, 0.0])
@pytest.mark.parametrize("call", [
    lambda ts, m, bad: ts.crawl_module(m, (4,), strict=bad),
    lambda ts, m, bad: ts.crawl_module(m, (4,), memory=bad),
    lambda ts, m, bad: ts.crawl_module(m, (4,), trace=bad),
    lambda ts, m, bad: ts.summary(m, (4,), receptive_field=bad),
    lambda ts, m, bad: ts.summary(m, (4,), strict=bad),
    lambda ts, m, bad: ts.measure_flops(lambda: m(torch.ones(1, 4)), modules=bad),
], ids=["crawl-strict", "crawl-memory", "crawl-trace", "summary-receptive_field", "summary-strict",
        "measure_flops-modules"])
def test_flags_take_booleans_only(torchscan, call, bad):
    # strict="yes" would otherwise read as True, strict=None as False: a
    # TypeError names the flag and what it takes, before the model runs.
    calls = []
    m = nn.Linear(4, 4)
    m.register_forward_hook(lambda *_: calls.append(1))
    with pytest.raises(TypeError, match=r"(strict|memory|trace|receptive_field|modules) must be True or False"):
        call(torchscan, m, bad)
    assert calls == []


def test_render_report_and_crawl_device_are_type_checked(torchscan):
    m = nn.Linear(4, 4)
    report = torchscan.crawl_module(m, (4,))
    with pytest.raises(TypeError, match="receptive_field must be True or False"):
        torchscan.render_report(report, receptive_field="no")
    with pytest.raises(TypeError, match="device must be a torch.device"):
        torchscan.crawl_module(m, (4,), device=3.5)
    assert torchscan.crawl_module(m, (4,), device="cpu") == report  # a device string is a device
