"""Mixture-of-experts and detection workloads the selection table and the
module-view rows make complete: a Mixtral-style transformers config (4
experts, top-2) forward and AdamW training step in both views, a detection
head's post-processing written in PyTorch, and a third-party operator that
stays partial, naming itself, unless the caller values it."""

import pytest
import torch
import torch.nn.functional as F

from conftest import module_view_totals as module_view, run_flop_counter


def _problems(report):
    return [(d["code"], d.get("operator"), d.get("metric")) for d in report["diagnostics"]
            if d["severity"] == "error" or d["code"] in (
                "uncounted_operator", "excluded_operator", "unsupported_operator_formula",
                "incomplete_operator_formula", "random_sampling")]


def _mixtral():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.MixtralConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=32)
    return transformers.MixtralForCausalLM(config)


def _assert_complete_in_both_views(s):
    report = s.report()
    assert report["total"]["status"] == "complete", _problems(report)
    module = s.module_report()
    for name in ("module_flops", "macs", "dmas"):
        assert module["totals"][name]["status"] == "complete", (name, _problems(module))
    return report, module


def test_mixtral_forward_is_complete_in_both_views(torchscan):
    model = _mixtral().eval()
    ids = torch.randint(0, 64, (1, 8))
    with torch.no_grad(), torchscan.scan(modules=True) as s:
        model(ids)
    report, _ = _assert_complete_in_both_views(s)
    # The router's top-2 over 4 experts per token is counted (8 tokens: 8 x 4*1 = 32 per layer).
    assert report["by_operator"]["aten.topk"] == 2 * 32


def test_mixtral_adamw_training_step_is_complete_in_both_views(torchscan):
    model = _mixtral().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 64, (1, 8))

    def step():
        opt.zero_grad(set_to_none=True)
        model(ids, labels=ids).loss.backward()
        opt.step()

    step()  # the optimizer's state exists: a steady-state step
    with torchscan.scan(modules=True) as s:
        step()
    report, _ = _assert_complete_in_both_views(s)
    # Every operator FlopCounterMode counts agrees with it (the same steady-state step again).
    expected, _ = run_flop_counter(step)
    assert expected
    for op, flops in expected.items():
        assert report["by_operator"].get(op) == flops, (op, report["by_operator"].get(op), flops)


def test_grouped_mm_is_complete_in_the_module_view(torchscan):
    x, w, offs = torch.randn(8, 4), torch.randn(2, 4, 8), torch.tensor([4, 8], dtype=torch.int32)
    # Each of the 8x8 outputs is one 4-term dot: MACs 8*4*8 = 256; FLOPs 64*(4 + 3) = 448;
    # accesses 32 + 64 + 2 (offs) read, 64 written = 162.
    assert module_view(torchscan, lambda: torch._grouped_mm(x, w, offs=offs)) == (448, 256, 162)


def test_grid_sample_is_complete_in_both_views(torchscan):
    x, grid = torch.randn(1, 2, 4, 4), torch.rand(1, 4, 4, 2) * 2 - 1
    # Bilinear, 2 channels x 16 locations = 32 outputs: 7 each in the operator view = 224.
    report = torchscan.measure_flops(lambda: F.grid_sample(x, grid, align_corners=False))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["total"]["value"] == 224
    # Module view: the same 224 FLOPs, 4 taps -> MACs 4*32 = 128,
    # accesses 5*32 + the grid's 32 = 192.
    assert module_view(torchscan, lambda: F.grid_sample(x, grid, align_corners=False)) == (224, 128, 192)


def _iou(box, boxes):
    lt = torch.maximum(box[:2], boxes[:, :2])
    rb = torch.minimum(box[2:], boxes[:, 2:])
    inter = (rb - lt).clamp(min=0).prod(dim=1)
    area = lambda b: (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])
    return inter / (area(box) + area(boxes) - inter)


def _post_process(logits, deltas, anchors, nms):
    """A detection head's post-processing: scores, top-k candidates, box
    decoding, per-class NMS by offsetting boxes, kept labels."""
    scores, labels = logits.sigmoid().max(dim=1)
    top, idx = scores.topk(10)
    a, d = anchors[idx], deltas[idx]
    wh = a[:, 2:] - a[:, :2]
    centre = a[:, :2] + 0.5 * wh + d[:, :2] * wh
    size = wh * torch.exp(d[:, 2:])
    boxes = torch.cat([centre - 0.5 * size, centre + 0.5 * size], dim=1)
    offset = labels[idx].to(boxes.dtype)[:, None] * (boxes.max() + 1)
    keep = nms(boxes + offset, top, 0.5)
    return boxes[keep], torch.unique(labels[idx][keep])


def _torch_nms(boxes, scores, threshold):
    order = scores.argsort(descending=True)
    keep = []
    while order.numel() > 0:
        i = order[0]
        keep.append(i)
        if order.numel() == 1:
            break
        order = order[1:][_iou(boxes[i], boxes[order[1:]]) <= threshold]
    return torch.stack(keep)


def _inputs():
    torch.manual_seed(0)
    anchors = torch.rand(50, 2) * 10
    anchors = torch.cat([anchors, anchors + 1 + torch.rand(50, 2) * 4], dim=1)
    return torch.randn(50, 3), torch.randn(50, 4) * 0.1, anchors


def test_detection_post_processing_in_pytorch_is_counted(torchscan):
    logits, deltas, anchors = _inputs()
    report = torchscan.measure_flops(lambda: _post_process(logits, deltas, anchors, _torch_nms))
    assert report["total"]["status"] == "complete", _problems(report)
    # topk of 10 over 50 scores: 50*ceil(log2 10) = 200; argsort of the 10 kept: 10*4 = 40.
    assert report["by_operator"]["aten.topk"] == 200
    assert report["by_operator"]["aten.argsort"] == 40
    assert "aten._unique2" in report["by_operator"]  # integer labels: 0, complete


@pytest.fixture
def third_party_nms():
    @torch.library.custom_op("torchscan_moe_test::nms", mutates_args=())
    def nms(boxes: torch.Tensor, scores: torch.Tensor, threshold: float) -> torch.Tensor:
        """Stands in for torchvision::nms: a kernel outside ATen."""
        return _torch_nms(boxes, scores, threshold)

    @nms.register_fake
    def _(boxes, scores, threshold):
        return boxes.new_empty(boxes.shape[0], dtype=torch.long)

    yield nms
    nms._lib._destroy()


def test_a_third_party_operator_stays_partial_naming_itself(torchscan, third_party_nms):
    logits, deltas, anchors = _inputs()
    fn = lambda: _post_process(logits, deltas, anchors, third_party_nms)
    report = torchscan.measure_flops(fn)
    assert report["total"]["status"] == "partial"
    assert ("uncounted_operator", "torchscan_moe_test.nms") in {(d["code"], d.get("operator"))
                                                               for d in report["diagnostics"]}
    # With a caller formula for it, the rest is counted as before: complete.
    report = torchscan.measure_flops(fn, custom_mapping={torch.ops.torchscan_moe_test.nms: lambda *a, **k: 0})
    assert report["total"]["status"] == "complete", _problems(report)
