"""CUDA scans: the same counts as on CPU, operator by operator, and the fused
GPU attention kernels as FlopCounterMode counts them. Skipped without a GPU."""

import pytest
import torch
import torch.nn.functional as F

from tests.fixtures.models import resnet50

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# The attention kernel a device runs differs by name (CPU flash vs CUDA
# flash/efficient/cuDNN); everything else must agree exactly.
_ATTENTION = ("aten._scaled_dot_product_", "aten._flash_attention", "aten._efficient_attention")


def _by_operator(torchscan, fn):
    report = torchscan.measure_flops(fn)
    return {k: v for k, v in report["by_operator"].items() if not k.startswith(_ATTENTION)}, report


def test_resnet50_forward_on_cuda_equals_cpu_operator_by_operator(torchscan):
    torch.manual_seed(0)
    model = resnet50(num_classes=10).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        cpu, _ = _by_operator(torchscan, lambda: model(x))
        model_cuda, x_cuda = model.cuda(), x.cuda()
        cuda, report = _by_operator(torchscan, lambda: model_cuda(x_cuda))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert cuda == cpu


def test_gpt2_forward_on_cuda_equals_cpu_outside_attention(torchscan):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32)
    model = transformers.GPT2LMHeadModel(config).eval()
    ids = torch.randint(0, 100, (1, 16))
    with torch.no_grad():
        cpu, _ = _by_operator(torchscan, lambda: model(input_ids=ids))
        model_cuda, ids_cuda = model.cuda(), ids.cuda()
        cuda, _ = _by_operator(torchscan, lambda: model_cuda(input_ids=ids_cuda))
    assert cuda == cpu


def test_adamw_step_on_cuda_equals_cpu(torchscan):
    # foreach on both devices: the same list kernels.
    def step(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        x = torch.randn(8, 16, device=device)
        model(x).sum().backward()
        return torchscan.measure_flops(opt.step)["by_operator"]

    assert step("cuda") == step("cpu")


@pytest.mark.parametrize("backend", ["FLASH_ATTENTION", "EFFICIENT_ATTENTION", "CUDNN_ATTENTION"])
def test_fused_sdpa_kernels_equal_flop_counter_mode(torchscan, checks, backend):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    q = torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    k = torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.float16, requires_grad=True)
    v = torch.randn(2, 4, 64, 32, device="cuda", dtype=torch.float16, requires_grad=True)

    def work():
        with sdpa_kernel(getattr(SDPBackend, backend)):
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()

    try:
        work()
    except RuntimeError as e:  # the backend does not run on this GPU
        pytest.skip(f"{backend}: {e}")
    fcm_counts, _ = checks.run_flop_counter(work)
    report = torchscan.measure_flops(work)
    assert fcm_counts, "FlopCounterMode counted the kernel"
    checks.assert_parity(report, fcm_counts)


def test_peak_memory_matches_max_memory_allocated(torchscan):
    x = torch.randn(1024, 1024, device="cuda")

    def work():
        return (x @ x).relu().sum()

    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    work()
    torch.cuda.synchronize()
    expected = torch.cuda.max_memory_allocated() - before
    report = torchscan.measure_peak_memory(work)
    assert report["peak_memory"]["value"] == expected
