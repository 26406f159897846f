"""CUDA scans: the same counts as on CPU, operator by operator (ResNet-50,
GPT-2 forward and an AdamW training step), the fused GPU attention kernels
as FlopCounterMode counts them, peak memory per call and per module call as
the CUDA allocator's statistics say, latency that waits for the device, and
a roofline of measured time. Skipped without a GPU (tools/gpu_check.sh runs
them on a GPU machine)."""

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
    report = torchscan.measure_peak_memory(work, device="cuda")
    assert report["peak_memory"]["value"] == expected


def test_gpt2_adamw_step_on_cuda_equals_cpu_outside_attention(torchscan):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=32)

    def step_counts(device):
        torch.manual_seed(0)
        model = transformers.GPT2LMHeadModel(config).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
        ids = torch.randint(0, 100, (1, 16), device=device)

        def step():
            opt.zero_grad(set_to_none=True)
            model(input_ids=ids, labels=ids).loss.backward()
            opt.step()

        step()  # AdamW's state exists from here on: the measured step is a steady one
        return _by_operator(torchscan, step)

    cpu, _ = step_counts("cpu")
    cuda, report = step_counts("cuda")
    assert cuda == cpu
    assert report["total"]["known_value"] > 0


def test_module_peak_memory_matches_allocator_deltas(torchscan):
    # Each Linear's output block (32 x 4096 floats = 524,288 bytes) is the
    # most its call holds; the whole forward holds two outputs at once.
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    x = torch.randn(32, 1024, device="cuda")
    with torch.no_grad():
        mlp(x)  # cuBLAS allocates its workspace once, on the first matmul: not part of any later call
    report = torchscan.crawl_module(mlp, args=(x,), memory=True)
    layers = {l["path"]: l["metrics"] for l in report["layers"]}
    expected = {}
    with torch.no_grad():
        for path, fn in (("0", lambda: mlp[0](x)), ("", lambda: mlp(x))):
            torch.cuda.synchronize()
            before = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            out = fn()
            torch.cuda.synchronize()
            expected[path] = torch.cuda.max_memory_allocated() - before
            del out
    assert expected["0"] == 32 * 4096 * 4
    assert layers["0"]["peak_memory"]["value"] == expected["0"]
    assert layers[""]["peak_memory"]["value"] == expected[""]


def _sleep_kernel_seconds(seconds):
    # torch.cuda._sleep spins for a number of GPU clock cycles; calibrated with events.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    cycles = 1_000_000
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    torch.cuda.synchronize()
    per_cycle = start.elapsed_time(end) / 1e3 / cycles
    return max(1, int(seconds / per_cycle))


def test_latency_waits_for_the_device(torchscan):
    # A kernel that runs about 5 ms but returns to the host at once: a timer
    # that did not synchronise would measure microseconds.
    cycles = _sleep_kernel_seconds(5e-3)
    report = torchscan.measure_latency(lambda: torch.cuda._sleep(cycles), device="cuda", min_run_time=0.1)
    assert report["totals"]["latency"]["status"] == "complete"
    assert report["totals"]["latency"]["value"] >= 4e-3, report["totals"]["latency"]


def test_roofline_of_measured_cuda_time(torchscan):
    # 4096^3 fp32 matmul: 2 * 4096^3 FLOPs; the measured time makes the
    # achieved fraction of speed-of-light a real number in (0, 1.5]: above 1
    # only by the timer's noise, never because time was not measured.
    a = torch.randn(4096, 4096, device="cuda")
    work = lambda: a @ a  # noqa: E731
    latency = torchscan.measure_latency(work, device="cuda", min_run_time=0.2)["totals"]["latency"]["value"]
    name = torch.cuda.get_device_name().lower()
    gpu = next((g for g in ("h200", "h100-sxm", "b200", "a100-80gb", "l40s", "l4") if g.split("-")[0] in name),
               "h100-sxm")
    report = torchscan.roofline(work, gpu=gpu, actual_ms=latency * 1e3)
    totals = report["totals"]
    assert totals["flops"] == 2 * 4096 ** 3
    assert totals["actual_ms"] == pytest.approx(latency * 1e3)
    assert 0 < totals["achieved_fraction_of_sol"] <= 1.5
