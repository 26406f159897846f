"""The coverage audit and the torch-upgrade drift oracle."""

import collections
import copy
import glob
import json
import os
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import coverage_audit  # noqa: E402
from conftest import DEFAULT_THREADS, TEST_THREADS  # noqa: E402

# The installed release's baseline (one per supported release; the local
# build tag, +cpu or +cu132, does not change the operators).
RELEASE = torch.__version__.split("+")[0]
BASELINE = os.path.join(ROOT, "tools", "audit", f"torch-{RELEASE}.json")


@pytest.fixture(scope="module")
def executed(torchscan):
    # Which operators the zoo runs depends on the intra-op thread count: with
    # one thread, CPU training convolutions run thnn_conv2d / _slow_conv2d_*,
    # with more they go through oneDNN. Run it with torch's default, as
    # `coverage_audit.py --zoo` made the baseline (the suite runs with one).
    torch.set_num_threads(DEFAULT_THREADS)
    try:
        return coverage_audit.executed_by_zoo()
    finally:
        torch.set_num_threads(TEST_THREADS)


@pytest.fixture(scope="module")
def audit(torchscan, executed):
    # After the zoo, as the baseline was made: its packages register operators.
    return coverage_audit.run_audit()


@pytest.fixture
def measured(monkeypatch, audit, executed):
    """`main` reads this process's audit and zoo operators from the module
    fixtures, which ran the same functions in the same order main runs them
    (zoo, then audit): --check then costs a diff, not a zoo run and an audit."""
    monkeypatch.setattr(coverage_audit, "executed_by_zoo", lambda: copy.deepcopy(executed))
    monkeypatch.setattr(coverage_audit, "run_audit", lambda: copy.deepcopy(audit))


def test_the_installed_release_has_a_baseline():
    assert os.path.exists(BASELINE), (
        f"no coverage baseline for torch {RELEASE}: write it with "
        f"`python3 tools/coverage_audit.py --zoo --output tools/audit/torch-{RELEASE}.json` and review the drift")


def test_a_tag_one_release_does_not_define_is_no_change():
    # 2.13's baseline: a release that defines the out tag.
    baseline = coverage_audit.load(os.path.join(ROOT, "tools", "audit", "torch-2.13.0.json"))
    older = copy.deepcopy(baseline)
    # As in a release without the `out` tag: no operator carries it.
    marked = [n for n, v in older["operators"].items() if "out" in (v.get("tags") or ())]
    assert marked, "the baseline's release defines the out tag"
    for name in marked:
        older["operators"][name]["tags"].remove("out")
    assert coverage_audit.diff(older, baseline)["changed"] == {}
    # Where both define it, losing it on one operator is a change.
    one = copy.deepcopy(baseline)
    one["operators"][marked[0]]["tags"].remove("out")
    assert list(coverage_audit.diff(one, baseline)["changed"]) == [marked[0]]


def test_footing_in_this_release(audit):
    footing = audit["footing"]
    assert footing["mode_key"] == "TESTING_ONLY_GenericMode"
    assert footing["fallback_registered"] and footing["fallback_on_mode_key"]


def test_installed_torch_matches_the_committed_baseline(audit, executed):
    baseline = coverage_audit.load(BASELINE)
    assert "executed_by_zoo" in baseline, "regenerate the baseline with --zoo"
    drift = coverage_audit.diff(baseline, dict(audit, executed_by_zoo=executed))
    assert coverage_audit.is_empty(drift), coverage_audit.render_diff(drift)


def test_drift_oracle_fails_on_a_removed_or_reclassified_operator(audit, measured, tmp_path, capsys):
    baseline = coverage_audit.load(BASELINE)
    edited = copy.deepcopy(baseline)
    del edited["operators"]["aten::mm"]
    edited["operators"]["aten::relu"]["class"] = "unsupported"
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    assert coverage_audit.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "added    aten::mm" in out  # present now, missing from the edited baseline
    assert "changed  aten::relu" in out and "class: unsupported -> operator_formula" in out
    # And it passes against the real baseline.
    assert coverage_audit.main(["--check", BASELINE]) == 0


def test_drift_oracle_fails_on_a_tag_change_and_on_the_zoo_running_other_operators(audit, measured, tmp_path, capsys):
    # An operator gaining `core` in a release, or the zoo executing another
    # operator set, must not pass --check unnoticed.
    baseline = coverage_audit.load(BASELINE)
    edited = copy.deepcopy(baseline)
    edited["operators"]["aten::mm"]["tags"].remove("core")  # mm is core now: it "gained" the tag
    workload = sorted(edited["executed_by_zoo"])[0]
    ran = sorted(edited["executed_by_zoo"][workload])[0]
    assert "aten::histc" not in edited["executed_by_zoo"][workload]
    edited["executed_by_zoo"][workload].remove(ran)
    edited["executed_by_zoo"][workload].append("aten::histc")
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(edited))
    assert coverage_audit.main(["--check", str(path)]) == 1
    out = capsys.readouterr().out
    assert "changed  aten::mm" in out and "tags: ['pt2_compliant_tag'] -> ['core', 'pt2_compliant_tag']" in out
    assert f"executed {workload}: now runs ['{ran}'], no longer runs ['aten::histc']" in out
    # Only the order of tags differs: not a drift.
    reordered = copy.deepcopy(baseline)
    reordered["operators"]["aten::mm"]["tags"].reverse()
    d = coverage_audit.diff(baseline, reordered)
    assert coverage_audit.is_empty(d), coverage_audit.render_diff(d)


def test_core_opset_and_model_zoo_have_no_unsupported_operator(audit, executed):
    summary = coverage_audit.summarize(audit, executed)
    assert summary["core"] > 150
    assert summary["core_unsupported"] == []
    assert summary["executed"] > 50
    assert summary["executed_unsupported"] == []


def test_formula_claims_are_backed_by_the_registry(torchscan, audit):
    from torchscan._library import Session

    table = json.loads(Session.formula_table())
    rows = {f["op"] for f in table["operator_formulas"]}
    module_rows = set(table["module_formulas"])
    exclusions = {e["op"] for e in table["exclusions"]}

    def functional(name):
        return name[:-1] if name.endswith("_") and not name.endswith("__") else name

    for key, op in audit["operators"].items():
        name = key.split(".", 1)[0]  # "aten::add.Tensor" -> "aten::add"
        if op["class"] == "operator_formula":
            assert name in rows or functional(name) in rows, key
        if op["class"] == "excluded":
            assert name in exclusions or functional(name) in exclusions, key
        if op["class"] == "module_formula":
            assert name in module_rows or functional(name) in module_rows, key
    # No registry row names an operator this torch does not register.
    registered = {key.split(".", 1)[0] for key in audit["operators"]}
    # TorchScan's own marker operators are rows too, but not PyTorch's to audit.
    ours = {r for r in rows if r.startswith("torchscan::")}
    assert ours == {"torchscan::compiled_region"} and hasattr(torch.ops.torchscan, "compiled_region")
    # A row may name an operator this release lacks (aten::cholesky is gone in
    # 2.15) if another supported release's baseline registers it: no typos.
    elsewhere = set()
    for path in glob.glob(os.path.join(ROOT, "tools", "audit", "torch-*.json")):
        elsewhere |= {key.split(".", 1)[0] for key in coverage_audit.load(path)["operators"]}
    assert rows - ours - registered - elsewhere == set()
    assert exclusions - registered - elsewhere == set()


# What a scan's operator view reports for one call, read back from its report
# (the audit's `at_run` values): the entry or diagnostic under the operator's
# packet, or nothing at all when it ran its decomposition (its children are
# counted on their own).
def observed(report, packet):
    codes = {d["code"] for d in report["diagnostics"] if d.get("operator") == packet}
    for code in ("uncounted_operator", "excluded_operator", "random_sampling"):
        if code in codes:
            return code
    if packet in report["by_operator"] or codes:
        return "formula"  # valued (or refused) by its formula
    if packet in report["ignored_operators"]:
        return "ignored"
    return "decomposition"


def _rnn(gates):
    """Arguments of a one-layer RNN without biases: input (T=3, N=2, I=4),
    hidden 5, weights (gates*5, 4) and (gates*5, 5); packed data of 3 steps
    with batch sizes 2, 2, 1."""
    params = [torch.randn(gates * 5, 4), torch.randn(gates * 5, 5)]
    return torch.randn(3, 2, 4), torch.randn(5, 4), torch.tensor([2, 2, 1]), torch.zeros(1, 2, 5), params


def _samples():
    """(overload, call) for the operators whose class the audit once got wrong, plus one
    of each other class; each call runs that overload directly."""
    aten = torch.ops.aten
    x, q = torch.randn(2, 3, 4), torch.randn(1, 2, 3, 4)
    cond = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    lstm_x, _, sizes, h, lstm_p = _rnn(4)
    gru_x, data, _, _, gru_p = _rnn(3)
    rnn_x, _, _, _, rnn_p = _rnn(1)
    lstm_data = torch.randn(5, 4)
    return [
        ("aten::where", lambda: aten.where.default(cond)),
        ("aten::where.self", lambda: aten.where.self(cond > 0, cond, cond)),
        ("aten::scaled_dot_product_attention", lambda: aten.scaled_dot_product_attention(q, q, q)),
        ("aten::_scaled_dot_product_attention_math", lambda: aten._scaled_dot_product_attention_math(q, q, q)),
        ("aten::lstm.input", lambda: aten.lstm.input(lstm_x, [h, h], lstm_p, False, 1, 0.0, False, False, False)),
        ("aten::lstm.data", lambda: aten.lstm.data(lstm_data, sizes, [h, h], lstm_p, False, 1, 0.0, False, False)),
        ("aten::gru.input", lambda: aten.gru.input(gru_x, h, gru_p, False, 1, 0.0, False, False, False)),
        ("aten::gru.data", lambda: aten.gru.data(lstm_data, sizes, h, gru_p, False, 1, 0.0, False, False)),
        ("aten::rnn_tanh.input", lambda: aten.rnn_tanh.input(rnn_x, h, rnn_p, False, 1, 0.0, False, False, False)),
        ("aten::rnn_tanh.data", lambda: aten.rnn_tanh.data(lstm_data, sizes, h, rnn_p, False, 1, 0.0, False, False)),
        ("aten::rnn_relu.input", lambda: aten.rnn_relu.input(rnn_x, h, rnn_p, False, 1, 0.0, False, False, False)),
        ("aten::rnn_relu.data", lambda: aten.rnn_relu.data(lstm_data, sizes, h, rnn_p, False, 1, 0.0, False, False)),
        ("aten::alpha_dropout", lambda: aten.alpha_dropout(x, 0.5, True)),
        ("aten::alpha_dropout_", lambda: aten.alpha_dropout_(x.clone(), 0.5, True)),
        ("aten::feature_alpha_dropout", lambda: aten.feature_alpha_dropout(x, 0.5, True)),
        ("aten::feature_alpha_dropout_", lambda: aten.feature_alpha_dropout_(x.clone(), 0.5, True)),
        ("aten::rrelu", lambda: aten.rrelu(x)),
        ("aten::rrelu_", lambda: aten.rrelu_(x.clone())),
        # Tagged nondeterministic_seeded and not composite: a metadata choice,
        # random sampling rows, and one with no formula (uncounted).
        ("aten::_fused_sdp_choice", lambda: aten._fused_sdp_choice(q, q, q)),
        ("aten::binomial", lambda: aten.binomial(torch.full((3,), 4.0), torch.full((3,), 0.5))),
        ("aten::_sample_dirichlet", lambda: aten._sample_dirichlet(torch.ones(3))),
        ("aten::normal_functional", lambda: aten.normal_functional(x)),
        ("aten::rrelu_with_noise_functional",
         lambda: aten.rrelu_with_noise_functional(x, torch.zeros_like(x), training=True)),
        # One of each other class.
        ("aten::mm", lambda: aten.mm(x[0], x[0].t())),
        ("aten::bernoulli", lambda: aten.bernoulli(torch.full((3,), 0.5))),
        ("aten::view", lambda: aten.view(x, [6, 4])),
        ("aten::_linalg_det", lambda: aten._linalg_det(torch.eye(3) * 2)),
        ("aten::_upsample_bilinear2d_aa", lambda: aten._upsample_bilinear2d_aa(q, [2, 2], False, None)),
        ("aten::logdet", lambda: aten.logdet(torch.eye(3) * 2)),
    ]


def test_the_audit_class_is_what_a_scan_reports(torchscan, audit):
    """The audit derives its class as the run does; a
    scan of each sample reports what the audit's `at_run` says."""
    ops = audit["operators"]
    # The class and at_run of every overload agree with each other.
    at_run_of = {"operator_formula": {"formula"}, "random": {"random_sampling"}, "zero_cost": {"ignored"},
                 "composite": {"decomposition"}, "excluded": {"excluded_operator"},
                 "unsupported": {"uncounted_operator"},
                 "collective": {"ignored", "excluded_operator", "uncounted_operator"},
                 "module_formula": {"decomposition", "uncounted_operator", "ignored", "excluded_operator"}}
    for name, op in ops.items():
        assert op["at_run"] in at_run_of[op["class"]], (name, op)
    checked = []
    for overload, call in _samples():
        packet = overload.split(".")[0].replace("::", ".")
        with torchscan.scan() as s:
            call()
        assert overload in s._session.recorded_operators(), overload
        report = s.report()
        assert observed(report, packet) == ops[overload]["at_run"], (overload, ops[overload], report["diagnostics"])
        checked.append((overload, ops[overload]["class"]))
    classes = dict(checked)
    # Item 16: the 16 composite overloads decompose and are filed composite;
    # the tagged kernels are what the run reports.
    assert all(classes[o] == "composite" for o, _ in checked[2:18]), checked[2:18]
    assert [c for _, c in checked[18:23]] == ["zero_cost", "random", "random", "random", "unsupported"], checked[18:23]
    assert [classes[o] for o in ("aten::mm", "aten::bernoulli", "aten::view", "aten::_linalg_det",
                                 "aten::_upsample_bilinear2d_aa", "aten::logdet")] == [
        "operator_formula", "random", "zero_cost", "excluded", "unsupported", "composite"]
    # Every tagged overload without a formula row: the 16 composite ones
    # decompose; _fused_sdp_choice is a metadata choice; the 20 others (CUDA/MPS
    # kernels among them, not runnable here) are uncounted, like the CPU one run above.
    seeded = {k: v for k, v in ops.items() if "nondeterministic_seeded" in v["tags"] and not v["operator_formula"]}
    assert sum(v["class"] == "composite" for v in seeded.values()) == 16
    others = collections.Counter(v["class"] for v in seeded.values() if not v["composite_implicit"])
    # Release differences among such CUDA kernels: 2.15 adds
    # _cudnn_attention_forward_no_dropout_inplace, 2.11 lacks
    # _flash_attention_forward_no_dropout_inplace.
    release = (int("aten::_cudnn_attention_forward_no_dropout_inplace" in ops)
               - int("aten::_flash_attention_forward_no_dropout_inplace" not in ops))
    assert others == {"unsupported": 20 + release, "zero_cost": 1}, others


def test_where_with_one_argument_decomposes_to_nonzero_and_is_complete(torchscan, audit):
    """aten::where(condition) was valued by the pointwise
    where row, whose formula cannot read its list of index tensors."""
    cond = torch.tensor([[1.0, 0.0, 3.0], [0.0, 2.0, 0.0]])
    report = torchscan.measure_flops(lambda: torch.where(cond))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # nonzero: one comparison per input value, 2*3 = 6; unbind into the
    # per-dimension index tensors is a view.
    assert report["by_operator"] == {"aten.nonzero": 6}
    assert report["ignored_operators"]["aten.unbind"]["reason"] == "view"
    assert audit["operators"]["aten::where"]["class"] == "composite"
    # The three-argument selection keeps its formula: one selection per output.
    report = torchscan.measure_flops(lambda: torch.where(cond > 0, cond, -cond))
    assert report["by_operator"]["aten.where"] == 6
    assert audit["operators"]["aten::where.self"]["class"] == "operator_formula"


# The operators whose two views' classes differ, by reason (coverage_audit.views_differ).
PRODUCTS_NOT_WRITTEN = {
    "aten::_addmm_activation", "aten::_cdist_backward", "aten::_cdist_forward",
    "aten::_embedding_bag_per_sample_weights_backward", "aten::_foreach_mm", "aten::_int_mm", "aten::_pdist_backward",
    "aten::_pdist_forward", "aten::addbmm", "aten::addbmm_", "aten::convolution_backward",
    "aten::grid_sampler_2d_backward", "aten::mkldnn_rnn_layer", "aten::mkldnn_rnn_layer_backward",
    "aten::upsample_bicubic2d_backward", "aten::upsample_bilinear2d_backward", "aten::upsample_linear1d_backward",
    "aten::upsample_trilinear3d_backward"}
GPU_KERNELS = {
    "aten::_efficient_attention_backward", "aten::_efficient_attention_forward", "aten::_flash_attention_backward",
    "aten::_flash_attention_forward", "aten::_scaled_dot_product_cudnn_attention",
    "aten::_scaled_dot_product_cudnn_attention_backward", "aten::_scaled_dot_product_efficient_attention",
    "aten::_scaled_dot_product_efficient_attention_backward", "aten::_scaled_dot_product_flash_attention",
    "aten::_scaled_dot_product_flash_attention_backward", "aten::_scaled_mm", "aten::cudnn_convolution"}
BELOW_CONVOLUTION = {"aten::_slow_conv2d_forward", "aten::convolution_overrideable", "aten::mkldnn_convolution"}


def test_the_audit_lists_the_operators_whose_two_views_differ(audit):
    differ = coverage_audit.views_differ(audit)
    assert differ, "some operator-view rows have no module-view formula"
    by_reason = {}
    for overload, reason in differ.items():
        assert "no stated reason" not in reason, (overload, reason)
        by_reason.setdefault(reason.split(": ", 1)[-1], set()).add(overload.split(".")[0])
    expected = {
        "computes products or weighted sums whose module-view MACs are not written for this kernel: the module "
        "view is partial on it (the operator view counts it)": PRODUCTS_NOT_WRITTEN,
        "a GPU kernel (CUDA, cuDNN, MIOpen, fused attention): its module-view products are not written; a CPU "
        "scan never reaches it": GPU_KERNELS,
        "a CPU convolution kernel that runs below aten::convolution, whose module row owns it": BELOW_CONVOLUTION,
        # linear: the module row values it; the operator view counts its decomposition
        # (t + addmm, as FlopCounterMode does), and linear.out, which has none, stays uncounted.
        "decomposition (the native convention counts its children)": {"aten::linear"},
        "uncounted_operator": {"aten::linear"},
    }
    # Only the operators this release registers (2.11 lacks some of the kernels).
    registered = {name.split(".")[0] for name in audit["operators"]}
    expected = {reason: names & registered for reason, names in expected.items() if names & registered}
    assert by_reason == expected
    # _grouped_mm and grid_sampler_2d have module-view formulas: not among them.
    assert not {"aten::_grouped_mm", "aten::grid_sampler_2d"} & {o.split(".")[0] for o in differ}
