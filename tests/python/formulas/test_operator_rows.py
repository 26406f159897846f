"""Operator rows on real ATen calls: scatter and index_put, out= destinations,
fold/unfold, views and calls that return their input, CPU attention, causal
masks and caches, recurrent cells, LLM configs on CPU and meta. Each expected value is
derived by hand in the comment beside it (or taken from FlopCounterMode
where PyTorch has a formula)."""

import json

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from conftest import module_view_totals as module_view


def op_view(torchscan, fn, complete=True):
    report = torchscan.measure_flops(fn)
    if complete:
        assert report["total"]["status"] == "complete", report["diagnostics"]
    return report




def fcm(fn):
    with FlopCounterMode(display=False) as mode:
        fn()
    return dict(mode.get_flop_counts()["Global"])


# ---- scatter counts one reduction per index element


def test_scatter_counts_per_index_element_not_per_source_value(torchscan):
    zeros, src = torch.zeros(3, 5), torch.randn(3, 5)
    index = torch.tensor([[0, 1, 2, 0, 1]])
    # index (1,5): only src[0, :] is read, one add per index element: 5, not 15.
    assert op_view(torchscan, lambda: torch.scatter_add(zeros, 0, index, src))["by_operator"] == {
        "aten.scatter_add": 5}
    # Module view: reads zeros 15, index 5 and the 5 src values it points at; writes 15.
    assert module_view(torchscan, lambda: torch.scatter_add(zeros, 0, index, src)) == (5, 0, 40)
    # scatter_reduce "amax" and scatter(value, reduce="multiply"): 5 combines each.
    assert op_view(torchscan, lambda: zeros.scatter_reduce(0, index, src, "amax"))["by_operator"] == {
        "aten.scatter_reduce": 5}
    assert op_view(torchscan, lambda: zeros.scatter(0, index, 2.0, reduce="multiply"))["by_operator"] == {
        "aten.scatter": 5}


# ---- index_put_ accumulate counts indexed positions, with broadcasting


def test_index_put_module_view_moves_the_indexed_positions_not_the_whole_tensor(torchscan):
    cache, pos, k = torch.zeros(1, 2, 8, 4), torch.tensor([3]), torch.randn(1, 2, 1, 4)

    def update():
        cache[:, :, pos] = k

    # A KV-cache write: P = 1*2*1*4 = 8 positions. Reads: the index (1) and one
    # value per position (8); writes: 8 -> 17 (not the cache's 64 read and written).
    assert module_view(torchscan, update) == (0, 0, 17)
    # Accumulating also reads the 8 old values and adds 8: (8, 0, 25).
    assert module_view(torchscan, lambda: torch.ops.aten.index_put_(cache, [None, None, pos], k, True)) == (8, 0, 25)
    # The functional overload copies the cache first: 64 read + 64 written + 17 = 145.
    assert module_view(torchscan, lambda: torch.ops.aten.index_put(cache, [None, None, pos], k)) == (0, 0, 145)


def test_index_put_accumulate_counts_broadcast_positions(torchscan):
    idx, one = torch.arange(4).repeat(25), torch.tensor(1.0)
    # 100 indexed positions, the scalar value broadcast to each: 100 adds, not 1.
    report = op_view(torchscan, lambda: torch.zeros(4).index_put_((idx,), one, accumulate=True))
    assert report["by_operator"] == {"aten.index_put_": 100}
    # x (3,4,5)[:, i (2,1), j (3)] += 1: indices broadcast to (2,3), dim 0 kept: 3*6 = 18.
    i, j = torch.tensor([[0], [1]]), torch.tensor([0, 2, 4])
    # (a None index keeps its dimension, as x[:, i, j] does)
    report = op_view(torchscan, lambda: torch.ops.aten.index_put_(torch.zeros(3, 4, 5), [None, i, j], one, True))
    assert report["by_operator"] == {"aten.index_put_": 18}


# ---- out= destinations are not operands


def test_out_destinations_are_never_read_as_operands(torchscan):
    x = torch.randn(4, 5)
    o = torch.empty(())
    # Full reductions of 20 values into 1: 19 comparisons (not one "binary" comparison).
    assert op_view(torchscan, lambda: torch.max(x, out=o))["by_operator"] == {"aten.max": 19}
    assert op_view(torchscan, lambda: torch.min(x, out=o))["by_operator"] == {"aten.min": 19}
    # Per-row sum and mean with out=: N - R = 16; mean adds R = 4 divides.
    r = torch.empty(4)
    assert op_view(torchscan, lambda: torch.sum(x, 1, out=r))["by_operator"] == {"aten.sum": 16}
    assert op_view(torchscan, lambda: torch.mean(x, 1, out=r))["by_operator"] == {"aten.mean": 20}
    # Power dtype comes from base and exponent, not from a float out=: integer, 0.
    ints, f = torch.arange(6), torch.empty(6)
    assert op_view(torchscan, lambda: torch.pow(ints, 2, out=f))["by_operator"] == {"aten.pow": 0}
    # Native rows agree with FlopCounterMode on out= overloads too: (3x4)(4x2) = 2*3*2*4 = 48.
    a, b, mm_out = torch.randn(3, 4), torch.randn(4, 2), torch.empty(3, 2)
    assert op_view(torchscan, lambda: torch.mm(a, b, out=mm_out))["by_operator"] == {"aten.mm": 48}
    assert fcm(lambda: torch.mm(a, b, out=mm_out)) == {torch.ops.aten.mm: 48}


def test_out_destination_is_written_not_read_in_the_module_view(torchscan):
    y, z, o = torch.randn(4, 5), torch.randn(4, 5), torch.empty(4, 5)
    # add: 20 FLOPs; reads y and z (40) and writes 20 -- with or without out=.
    assert module_view(torchscan, lambda: torch.add(y, z)) == (20, 0, 60)
    assert module_view(torchscan, lambda: torch.add(y, z, out=o)) == (20, 0, 60)


# ---- col2im sums overlapping windows


def test_fold_and_unfold_backward_sum_overlapping_windows(torchscan):
    cols = torch.randn(1, 8, 9)
    # F.fold into 4x4 with 2x2 windows: 2 channels, 3x3 blocks, 72 values onto 32: N - R = 40.
    assert op_view(torchscan, lambda: F.fold(cols, (4, 4), 2))["by_operator"] == {"aten.col2im": 40}
    # Module view: 40 adds, reads 72 and writes 32.
    assert module_view(torchscan, lambda: F.fold(cols, (4, 4), 2)) == (40, 0, 104)
    # F.unfold's backward folds the gradient back: the same 40 adds.
    x = torch.randn(1, 2, 4, 4, requires_grad=True)
    report = torchscan.measure_flops(lambda: F.unfold(x, 2).sum().backward())
    assert report["by_operator"]["aten.col2im"] == 40


# ---- resolve_neg negates when the input carries the negative bit


def test_resolve_neg_counts_negations_only_when_it_materializes(torchscan):
    x = torch.randn(4, 5)
    neg = torch._neg_view(x)
    assert neg.is_neg()
    # A new tensor with 20 negated values: 20 FLOPs; 20 reads + 20 writes.
    assert op_view(torchscan, lambda: neg.resolve_neg())["by_operator"] == {"aten.resolve_neg": 20}
    assert module_view(torchscan, lambda: neg.resolve_neg()) == (20, 0, 40)
    # No bit: it returns x itself, nothing computed or moved.
    assert op_view(torchscan, lambda: x.resolve_neg())["by_operator"] == {"aten.resolve_neg": 0}
    assert module_view(torchscan, lambda: x.resolve_neg()) == (0, 0, 0)


# ---- zero-cost rules against alias information and what came back


def test_unsafe_view_after_matmul_is_a_view(torchscan):
    a, b = torch.randn(2, 3, 4), torch.randn(4, 5)
    # matmul folds (2,3,4) to (6,4) (a view), runs mm, then _unsafe_view to (2,3,5).
    # mm (6x4)(4x5): 30 dots of 4 terms: 30 * 7 = 210 FLOPs, 120 MACs,
    # reads 24 + 20 and writes 30 = 74 accesses; the _unsafe_view moves nothing.
    with torchscan.scan() as s:
        torch.matmul(a, b)
    assert s.report()["ignored_operators"]["aten._unsafe_view"]["reason"] == "view"
    assert module_view(torchscan, lambda: torch.matmul(a, b)) == (210, 120, 74)


def test_calls_that_return_their_input_move_nothing(torchscan):
    x = torch.randn(4, 5)
    # x.to(x.dtype) and contiguous() of a contiguous tensor hand x back: 0 accesses.
    assert module_view(torchscan, lambda: x.to(x.dtype)) == (0, 0, 0)
    assert module_view(torchscan, lambda: x.contiguous()) == (0, 0, 0)
    # A real cast and a real contiguous copy read and write 20 values each: 40.
    assert module_view(torchscan, lambda: x.to(torch.float64)) == (0, 0, 40)
    assert module_view(torchscan, lambda: x.t().contiguous()) == (0, 0, 40)
    # reshape is a view when the strides allow it (0) and a copy when not (40).
    assert module_view(torchscan, lambda: x.reshape(20)) == (0, 0, 0)
    assert module_view(torchscan, lambda: x.t().reshape(20)) == (0, 0, 40)


# ---- the CPU SDPA kernel is the complete fallback row


def test_cpu_sdpa_is_complete_in_both_views_and_its_backward_is_counted(torchscan, checks):
    q, k, v = torch.randn(1, 2, 3, 4), torch.randn(1, 2, 5, 4), torch.randn(1, 2, 5, 4)
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    # A = 1*2*3*5 = 30 scores, R = 6 rows: products 2*30*4 + 2*6*5*4 = 480.
    # Before torch 2.15 (the fallback row) plus score scale 30 and stable
    # softmax 5*30 - 2*6 = 138: 648; from 2.15 on (FlopCounterMode's
    # convention) the products alone: 480.
    # The native convention counts the matrix core only, which the table keeps
    # partial ("Native fused attention"), as for the GPU kernels.
    native = checks.NATIVE_CPU_SDPA
    report = op_view(torchscan, lambda: F.scaled_dot_product_attention(q, k, v), complete=not native)
    fwd = 480 if native else 648
    assert report["by_operator"] == {"aten._scaled_dot_product_flash_attention_for_cpu": fwd}
    if native:
        assert report["total"]["status"] == "partial"
        assert [d["code"] for d in report["diagnostics"]] == ["fused_attention_matrix_core_only"]
    assert report["context"]["native_convention"].startswith(f"torch.utils.flop_counter of torch {release} ")
    # A causal mask adds one op per score in the fallback: 678 (none natively).
    report = op_view(torchscan, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), complete=not native)
    causal = 480 if native else 678
    assert report["by_operator"] == {"aten._scaled_dot_product_flash_attention_for_cpu": causal}
    # The backward kernel: five products 5 * 2*30*4 = 1200 (FlopCounterMode's
    # convention from 2.15 on); torchscan_training_v1 before adds per score
    # scale, exp(s - lse) (2), softmax backward (2), scale back: 6*30 = 180,
    # per row rowsum(dO*O): 6 * (4 + 3) = 42 -> 1422.
    qg = q.clone().requires_grad_()
    with torchscan.scan() as s:
        F.scaled_dot_product_attention(qg, k, v).sum().backward()
    bwd = "aten._scaled_dot_product_flash_attention_for_cpu_backward"
    report = s.report()
    assert report["total"]["status"] == ("partial" if native else "complete"), report["diagnostics"]
    assert report["by_operator"][bwd] == (1200 if native else 1422)
    # Module view: the five products at 2K - 1 per output drop one add per
    # output, per head 2*3*5 (scores, grad scores) + 5*4 (grad v) + 3*4 (grad q)
    # + 4*5 (grad k) = 82, x2 heads = 164: 1422 - 164 = 1258 FLOPs; MACs
    # 1200 / 2 = 600; accesses: grad_out 24 + q 24 + k 40 + v 40 + out 24 +
    # logsumexp 6 read, grads 24 + 40 + 40 written = 262.
    module = s.module_report()
    assert module["totals"]["module_flops"]["status"] == "complete", module["diagnostics"]
    assert module["by_operator"][bwd] == {"module_flops": 1258, "macs": 600, "dmas": 262}


# ---- operators real models hit


def test_causal_masks_membership_and_one_hot(torchscan):
    x = torch.randn(4, 5)
    # tril/triu: one selection per value: 20 each.
    assert op_view(torchscan, lambda: torch.tril(x))["by_operator"] == {"aten.tril": 20}
    assert op_view(torchscan, lambda: torch.triu(x, 1))["by_operator"] == {"aten.triu": 20}
    # isin of 3 values against 2 (pairwise below 10 * 3^0.145): 6 comparisons.
    e, t = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([2.0, 5.0])
    assert op_view(torchscan, lambda: torch.isin(e, t))["by_operator"] == {"aten.isin": 6}
    # Token ids (generation stopping criteria): integer comparisons are excluded: 0.
    ids, eos = torch.tensor([[5, 2, 7]]), torch.tensor([2])
    assert op_view(torchscan, lambda: torch.isin(ids[:, -1], eos))["by_operator"]["aten.isin"] == 0
    # F.one_hot runs aminmax on integer labels: complete, 0.
    assert op_view(torchscan, lambda: F.one_hot(torch.tensor([0, 2, 1])))["total"]["value"] == 0
    # aminmax of 20 floats into 1 + 1: 2 * 19 = 38.
    assert op_view(torchscan, lambda: torch.aminmax(x))["by_operator"] == {"aten.aminmax": 38}


def test_static_cache_update_and_in_place_views(torchscan):
    cache, new = torch.zeros(8, 4), torch.randn(2, 4)
    pos = torch.tensor([3, 4])
    assert op_view(torchscan, lambda: cache.index_copy_(0, pos, new))["by_operator"] == {"aten.index_copy_": 0}
    # Module view: reads 2 positions and 8 values, writes 8 (not all 32 of the cache).
    assert module_view(torchscan, lambda: cache.index_copy_(0, pos, new)) == (0, 0, 18)
    # In-place views and unsafe splits move nothing.
    y = torch.randn(2, 3)
    assert module_view(torchscan, lambda: y.t_().t_().unsqueeze_(0).squeeze_(0).transpose_(0, 1)) == (0, 0, 0)
    assert module_view(torchscan, lambda: y.unsafe_split(1) + y.unsafe_chunk(2)) == (0, 0, 0)


@pytest.mark.parametrize("cell", [nn.GRUCell, nn.LSTMCell])
def test_recurrent_cells_are_complete_in_both_views(torchscan, cell):
    torch.manual_seed(0)
    m, x = cell(4, 3), torch.randn(2, 4)
    report = torchscan.crawl_module(m, args=(x,))
    for name in ("module_flops", "macs", "dmas"):
        assert report["totals"][name]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []


def test_record_function_markers_cross_logsumexp_xlogy_cdist(torchscan):
    x = torch.randn(4, 5)

    def marked():
        with torch.profiler.record_function("block"):
            return x * 2

    # Only the multiply counts: 20.
    assert op_view(torchscan, marked)["total"]["value"] == 20
    # linalg_cross of (2,3): per value 2 multiplies + 1 subtract: 18.
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    assert op_view(torchscan, lambda: torch.linalg.cross(a, b))["by_operator"] == {"aten.linalg_cross": 18}
    # logsumexp over rows of (4,5): max 16 + subtract 20 + exp 20 + sum 16 + log 4 + add 4 = 80.
    assert op_view(torchscan, lambda: torch.logsumexp(x, 1))["by_operator"] == {"aten.logsumexp": 80}
    # xlogy: log + multiply + the x == 0 selection: 60.
    assert op_view(torchscan, lambda: torch.xlogy(x, x.abs()))["by_operator"]["aten.xlogy"] == 60
    # cdist p=2 with 30 > 25 rows runs _euclidean_dist: x1 rows 30*(5+3), x2 rows 4*5,
    # 120 outputs * (2*(3+2) + 2): 240 + 20 + 1440 = 1700.
    p, r = torch.randn(30, 3), torch.randn(4, 3)
    assert op_view(torchscan, lambda: torch.cdist(p, r))["by_operator"] == {"aten._euclidean_dist": 1700}
    # The module view values it too (module dots one FLOP fewer per output: 1580).
    assert module_view(torchscan, lambda: torch.cdist(p, r))[0] == 1580


def test_lstm_training_backward_is_counted(torchscan):
    torch.manual_seed(0)
    lstm, x = nn.LSTM(4, 3), torch.randn(5, 2, 4)
    report = torchscan.measure_flops(lambda: lstm(x)[0].sum().backward())
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # T=5, B=2 -> N = 10 steps x rows, G = 4 gates, H = 3, I = 4 (torchscan_training_v1):
    # cell backward 29 N H = 870; products dx, dh, dW_ih, dW_hh: 4 N G H (I + H) = 3360;
    # bias-gradient sums G H (N - 1) = 108; b_ih + b_hh G H = 12 -> 4350.
    assert report["by_operator"]["aten.mkldnn_rnn_layer_backward"] == 4350


# ---- the audit classifies these operators as a scan treats them


def test_audit_classes_match_what_a_scan_reports(torchscan):
    from torchscan._library import Session

    ops = json.loads(Session.coverage_audit())["operators"]
    expected = {
        "aten::scatter_add": "operator_formula", "aten::index_put_": "operator_formula",
        "aten::max.unary_out": "operator_formula", "aten::col2im": "operator_formula",
        "aten::resolve_neg": "operator_formula", "aten::_unsafe_view": "zero_cost",
        "aten::to.dtype": "zero_cost", "aten::reshape": "composite",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "operator_formula",
        "aten::_scaled_dot_product_flash_attention_for_cpu_backward": "operator_formula",
        "aten::tril": "operator_formula", "aten::triu": "operator_formula",
        "aten::isin.Tensor_Tensor": "operator_formula", "aten::index_copy_": "operator_formula",
        "aten::aminmax": "operator_formula", "aten::unsafe_split.Tensor": "zero_cost",
        "aten::unsafe_split_with_sizes": "zero_cost", "aten::unsafe_chunk": "zero_cost",
        "aten::transpose_": "zero_cost", "aten::t_": "zero_cost", "aten::squeeze_.dim": "zero_cost",
        "aten::unsqueeze_": "zero_cost", "profiler::_record_function_enter_new": "zero_cost",
        "profiler::_record_function_exit._RecordFunction": "zero_cost",
        "aten::linalg_cross": "operator_formula", "aten::logsumexp": "operator_formula",
        "aten::xlogy.Tensor": "operator_formula", "aten::_euclidean_dist": "operator_formula",
        "aten::mkldnn_rnn_layer_backward": "operator_formula", "aten::_ctc_loss": "excluded",
        "aten::_foreach_zero_": "zero_cost", "aten::unsafe_split.Tensor_out": "zero_cost",
    }
    assert {k: ops[k]["class"] for k in expected} == expected
    # And a scan does with them what the audit says: formulas count, zero-cost
    # calls are ignored, the decomposing reshape shows its children.
    x = torch.randn(4, 5)
    with torchscan.scan() as s:
        torch.tril(x)
        x.t().reshape(20)
        y = torch.randn(2, 3)
        y.t_()
        y.unsafe_split(1)
    report = s.report()
    assert {"aten.tril"} <= set(report["by_operator"])
    ignored = report["ignored_operators"]
    assert {"aten.t_", "aten.unsafe_split", "aten.clone", "aten._unsafe_view"} <= set(ignored)
    assert "aten.reshape" not in ignored and "aten.reshape" not in report["by_operator"]


def _out_cases():
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    return {
        "add": (lambda **o: torch.add(x, y, alpha=2, **o), (4, 5)),
        "mul": (lambda **o: torch.mul(x, y, **o), (4, 5)),
        "exp": (lambda **o: torch.exp(x, **o), (4, 5)),
        "where": (lambda **o: torch.where(x > 0, x, y, **o), (4, 5)),
        "clamp": (lambda **o: torch.clamp(x, -1, 1, **o), (4, 5)),
        "sum_dim": (lambda **o: torch.sum(x, 1, **o), (4,)),
        "amax": (lambda **o: torch.amax(x, 0, **o), (5,)),
        "cumsum": (lambda **o: torch.cumsum(x, 1, **o), (4, 5)),
        "logsumexp": (lambda **o: torch.logsumexp(x, 1, **o), (4,)),
        "tril": (lambda **o: torch.tril(x, **o), (4, 5)),
        "xlogy": (lambda **o: torch.xlogy(x, y.abs(), **o), (4, 5)),
        "softmax": (lambda **o: torch._softmax(x, 1, False, **o), (4, 5)),
        "mm": (lambda **o: torch.mm(a, b, **o), (3, 2)),
        "addmm": (lambda **o: torch.addmm(torch.zeros(2), a, b, **o), (3, 2)),
    }


@pytest.mark.parametrize("case", sorted(_out_cases()))
def test_every_out_overload_counts_what_the_functional_call_counts(torchscan, case):
    fn, shape = _out_cases()[case]
    plain = op_view(torchscan, fn)
    dest = torch.empty(shape)
    with_out = op_view(torchscan, lambda: fn(out=dest))
    assert with_out["total"]["value"] == plain["total"]["value"] > 0
    # Module view: the destination is written, never read: the same accesses.
    assert module_view(torchscan, lambda: fn(out=dest)) == module_view(torchscan, fn)



# ---- the transformer forwards real users scan


def _llama(**config):
    transformers = pytest.importorskip("transformers")
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()


def test_llama_forward_on_cpu_is_complete_in_both_views(torchscan, checks):
    torch.manual_seed(0)
    model = _llama(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=100, max_position_embeddings=64)
    ids = torch.randint(0, 100, (1, 8))
    report = torchscan.crawl_module(model, kwargs={"input_ids": ids})
    for name in ("module_flops", "macs", "dmas"):
        assert report["totals"][name]["status"] == "complete", report["diagnostics"]
    # GQA attention runs the CPU kernel: the complete fallback row before torch
    # 2.15; from 2.15 FlopCounterMode's matrix core, partial in the operator
    # view only ("Native fused attention"), with that one diagnostic.
    core_only = ["fused_attention_matrix_core_only"] if checks.NATIVE_CPU_SDPA else []
    assert [d["code"] for d in report["diagnostics"]] == core_only
    flops = torchscan.measure_flops(lambda: model(input_ids=ids))
    assert flops["total"]["status"] == ("partial" if core_only else "complete"), flops["diagnostics"]
    assert [d["code"] for d in flops["diagnostics"]] == core_only
    assert flops["by_operator"]["aten._scaled_dot_product_flash_attention_for_cpu"] > 0


@pytest.mark.parametrize("size", ["7b", "70b"])
def test_llama_7b_and_70b_configs_on_meta_are_complete(torchscan, size):
    config = {
        "7b": dict(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32, num_attention_heads=32,
                   num_key_value_heads=32),
        "70b": dict(hidden_size=8192, intermediate_size=28672, num_hidden_layers=80, num_attention_heads=64,
                    num_key_value_heads=8),
    }[size]
    with torch.device("meta"):
        model = _llama(vocab_size=32000, **config)
    ids = torch.zeros(1, 16, dtype=torch.long, device="meta")
    report = torchscan.measure_flops(lambda: model(input_ids=ids))
    # The causal mask's tril was the last uncounted operator (on meta, SDPA
    # runs its math decomposition: bmm and _safe_softmax, both counted).
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["diagnostics"] == []
    # (a boolean mask: valued 0 by the boolean rule, but valued, not uncounted)
    assert report["by_operator"]["aten.tril"] == 0
    # The module view too: _safe_softmax's accesses are staged like softmax's
    # plus its -inf test and selection (13N + 4R, formulas/softmax.cc).
    crawled = torchscan.crawl_module(model, kwargs={"input_ids": ids})
    for name in ("module_flops", "macs", "dmas"):
        assert crawled["totals"][name]["status"] == "complete", crawled["diagnostics"]


def test_every_zero_cost_view_rule_agrees_with_the_schema(torchscan):
    # Item 6: a "view" must return an alias of an input without writing it;
    # only views PyTorch leaves unannotated are named by hand.
    from torchscan._library import Session

    unannotated_views = {"aten::_unsafe_view", "aten::unsafe_split", "aten::unsafe_split_with_sizes",
                         "aten::unsafe_chunk"}
    by_name = {}
    for schema in torch._C._jit_get_all_schemas():
        key = schema.name + ("." + schema.overload_name if schema.overload_name else "")
        by_name[key] = schema
    ops = json.loads(Session.coverage_audit())["operators"]
    checked = 0
    for key, op in ops.items():
        if op["class"] != "zero_cost" or not op["reason"].startswith("view") or key not in by_name:
            continue
        schema = by_name[key]
        if schema.name in unannotated_views:
            continue
        checked += 1
        assert schema.returns and all(r.alias_info is not None and not r.alias_info.is_write
                                      for r in schema.returns), key
    assert checked > 50
    # Schema views that may copy are not zero-cost: their decomposition is valued.
    for key in ("aten::reshape", "aten::reshape_as", "aten::ravel", "aten::flatten.using_ints"):
        assert ops[key]["class"] != "zero_cost", key


def test_sdpa_on_meta_runs_the_math_path_and_counts_by_its_kernels(torchscan, checks):
    # q = k = v (1, 2, 8, 16): A = 128 scores, R = 16 rows, d = 16.
    cpu = torch.randn(1, 2, 8, 16)
    meta = cpu.to("meta")
    # CPU fused row: products 2*128*16 + 2*16*8*16 = 8192, scale 128, softmax 5*128 - 2*16 = 608: 8928.
    # From torch 2.15 FlopCounterMode's convention: the products alone, 8192 (partial: matrix core only).
    native = checks.NATIVE_CPU_SDPA
    report = op_view(torchscan, lambda: F.scaled_dot_product_attention(cpu, cpu, cpu), complete=not native)
    assert report["by_operator"] == {"aten._scaled_dot_product_flash_attention_for_cpu": 8192 if native else 8928}
    # Meta math path: sqrt(scale) on q and on k (2 x 256 values), the two bmm (8192),
    # _safe_softmax 608 + 2 per score (256): 864 -> 9568.
    report = op_view(torchscan, lambda: F.scaled_dot_product_attention(meta, meta, meta))
    assert report["by_operator"] == {"aten.mul": 512, "aten.bmm": 8192, "aten._safe_softmax": 864}
    # The products agree: MACs 128*16 + 128*16 = 4096 in both module views.
    assert module_view(torchscan, lambda: F.scaled_dot_product_attention(cpu, cpu, cpu))[1] == 4096
    assert module_view(torchscan, lambda: F.scaled_dot_product_attention(meta, meta, meta))[1] == 4096
