"""PyTorch's own transforms inside a scan: torch.func (vmap, grad, jvp) and
torch.compile, and scans a workload leaves open. Each result is either the
figure FlopCounterMode gives for the same work or honestly partial."""

import warnings

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import torchscan


def native_counts(workload):
    with FlopCounterMode(display=False) as m:
        workload()
    return {str(k): v for k, v in m.get_flop_counts()["Global"].items()}


def small_mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


# --- torch.func --------------------------------------------------------------

def test_vmap_counts_the_physical_batched_product():
    a, b = torch.randn(10, 64, 64), torch.randn(10, 64, 64)
    report = torchscan.measure_flops(lambda: torch.func.vmap(torch.mm)(a, b))
    # 10 products of 64x64 @ 64x64: 10 * 2*64*64*64 = 5,242,880 (not one 64x64 product)
    assert report["total"] == {**report["total"], "status": "complete", "value": 5_242_880}
    assert sum(native_counts(lambda: torch.func.vmap(torch.mm)(a, b)).values()) == 5_242_880


def test_vmap_of_a_model_counts_what_the_batching_rules_ran():
    model = small_mlp()
    xs = torch.randn(5, 8, 16)
    batched = torchscan.measure_flops(lambda: torch.func.vmap(model)(xs))
    assert batched["total"]["status"] == "complete"
    # vmap's rule for addmm runs beta*bias (32 + 4 multiplies on the unbatched
    # biases), one mm over the flattened batch (5 * (8*32*16*2 + 8*4*32*2) =
    # 51,200) and a separate bias add per output (5 * (8*32 + 8*4) = 1,440);
    # relu runs on all 5*8*32 = 1,280 values.
    assert batched["by_operator"] == {"aten.mm": 51_200, "aten.add": 1_440, "aten.mul": 36, "aten.relu": 1_280}
    native = native_counts(lambda: torch.func.vmap(model)(xs))
    assert native == {"aten.mm": 51_200}


def test_vmap_module_view_counts_physical_work():
    a, b = torch.randn(10, 64, 64), torch.randn(10, 64, 64)
    with torchscan.scan() as s:
        torch.func.vmap(torch.mm)(a, b)
    flops = s.module_report()["totals"]["module_flops"]
    # 10 * 64*64 dots of 64 terms, module convention K + (K-1): 10 * 4096 * 127
    assert flops["status"] == "complete" and flops["value"] == 10 * 4096 * 127


@pytest.mark.parametrize("transform", ["grad", "jvp", "vjp"])
def test_function_transforms_agree_with_flop_counter_mode(transform):
    w = torch.randn(32, 16)
    x = torch.randn(8, 32)

    def f(v):
        return (v @ w).sum()

    def run():
        if transform == "grad":
            return torch.func.grad(f)(x)
        if transform == "jvp":
            return torch.func.jvp(f, (x,), (torch.ones_like(x),))
        return torch.func.vjp(f, x)[1](torch.tensor(1.0))

    report = torchscan.measure_flops(run)
    native = native_counts(run)
    for op, flops in native.items():
        assert report["by_operator"][op] == flops, op


def test_jvp_of_a_convolution_is_complete_with_its_zero_tangents():
    # The weight, a closed-over constant, gets a zero tangent
    # (aten::_efficientzerotensor, a tensor without memory): no work of its
    # own, so the report is complete, with FlopCounterMode's products.
    torch.manual_seed(0)
    w, x, t = torch.randn(4, 3, 3, 3), torch.randn(1, 3, 8, 8), torch.randn(1, 3, 8, 8)

    def run():
        return torch.func.jvp(lambda a: torch.nn.functional.conv2d(a, w), (x,), (t,))

    report = torchscan.measure_flops(run)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["ignored_operators"]["aten._efficientzerotensor"]["reason"] == "fill"
    for op, flops in native_counts(run).items():
        assert report["by_operator"][op] == flops, op


# --- torch.compile -----------------------------------------------------------

def eager_figures(model, x):
    report = torchscan.measure_flops(lambda: model(x))
    assert report["total"]["status"] == "complete"
    return report


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_compiled_functions_with_dispatcher_backends_count_like_eager(backend):
    torch._dynamo.reset()
    model = small_mlp()
    x = torch.randn(8, 16)
    compiled = torch.compile(model, backend=backend)
    eager = eager_figures(model, x)
    # The first scanned call compiles inside the scan (the scan's dispatch
    # state fails Dynamo's guards); tracing on fake tensors must not count.
    for _ in range(2):
        report = torchscan.measure_flops(lambda: compiled(x))
        assert report["total"]["status"] == "complete", report
        assert report["total"]["value"] == eager["total"]["value"] == 10_496
        assert report["by_operator"]["aten.addmm"] == 10_240  # not 20,480 (tracing)


def test_compile_that_starts_inside_the_scan_is_not_counted():
    torch._dynamo.reset()
    model = small_mlp()
    x = torch.randn(8, 16)
    report = torchscan.measure_flops(lambda: torch.compile(model, backend="aot_eager")(x))
    assert report["total"]["status"] == "complete" and report["total"]["value"] == 10_496


def test_inductor_regions_are_partial_with_a_compiled_region_diagnostic():
    torch._dynamo.reset()
    model = small_mlp()
    x = torch.randn(8, 16)
    compiled = torch.compile(model)  # Inductor: relu is fused into generated C++ code
    with torch.no_grad():
        compiled(x)  # warm up outside any scan
        for _ in range(2):
            report = torchscan.measure_flops(lambda: compiled(x))
            total = report["total"]
            assert total["status"] == "partial", report
            assert any(d["code"] == "compiled_region" for d in report["diagnostics"])
            # What is known is what ran through the dispatcher: never the
            # tracing, never more than the eager work (10,496).
            assert 0 <= total["known_value"] <= 10_496


def test_inductor_regions_make_module_reports_partial_too():
    torch._dynamo.reset()
    model = small_mlp()
    compiled = torch.compile(model)
    x = torch.randn(8, 16)
    with torch.no_grad():
        compiled(x)
    report = torchscan.crawl_module(compiled, args=(x,))
    assert report["totals"]["module_flops"]["status"] != "complete"
    assert any(d["code"] == "compiled_region" for d in report["diagnostics"])


# --- scans left open by a workload ---------------------------------------------

def test_a_scan_the_workload_never_closed_ends_with_the_enclosing_scan():
    x = torch.randn(4, 5)
    inner = torchscan.scan()

    def workload():
        inner.__enter__()  # opened, never exited
        torch.add(x, x)    # 20 adds

    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        outer = torchscan.measure_flops(workload)
    assert not torchscan.tls_mode_included()
    assert outer["total"]["status"] == "complete" and outer["total"]["value"] == 20
    torch.add(x, x)  # after the outer scan: recorded by nobody
    assert inner.report()["total"]["value"] == 20
    with pytest.raises(RuntimeError, match="already stopped"):
        inner.__exit__(None, None, None)


def test_an_exported_program_counts_as_the_eager_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 10)).eval()
    x = torch.randn(2, 3, 8, 8)
    ep = torch.export.export(model, (x,))
    with torch.no_grad():
        exported = torchscan.measure_flops(lambda: ep.module()(x))
        eager = torchscan.measure_flops(lambda: model(x))
    assert exported["total"]["status"] == "complete"
    assert exported["by_operator"] == eager["by_operator"]
    # By hand: the convolution's 2*8*6*6 = 576 outputs of 27-term dots, 2 FLOPs
    # a term: 31104; the Linear 2*288*10*2 = 11520; the ReLU 576 selections.
    assert exported["by_operator"]["aten.convolution"] == 31104
    assert exported["by_operator"]["aten.addmm"] == 11520
    assert exported["by_operator"]["aten.relu"] == 576
