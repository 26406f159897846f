"""AOTInductor packages and exported programs (README "AOTInductor and
torch.export").

An AOTInductor package runs generated kernels outside the dispatcher: every
run inside a scan, from Python (python_shim/torchscan/_aoti.py) or in an
attached C++ server (torchscan_dispatch/integrations/attach/aoti_interpose.cc, driven through
tests/cpp/integrations/aoti_server.cc), makes the result partial with a compiled_region
diagnostic naming AOTInductor, never a complete undercount. The exported
program the package was compiled from is the supported way to count it.

Expected values are derived by hand for the model below or taken from
FlopCounterMode; the upper bounds come from the eager model's hand figures.
"""
import importlib
import json
import os
import subprocess
import sys
import zipfile

import pytest
import torch

from conftest import REPO_ROOT, run_flop_counter

SERVER = REPO_ROOT / "bazel-bin/tests/aoti_server"
ATTACH = REPO_ROOT / "tools/attach.py"
ATTACH_LIBRARY = REPO_ROOT / "python_shim/torchscan/_lib/libtorchscan_attach.so"
INPUT_SHAPE = (2, 3, 8, 8)

# By hand, operator view: the convolution's 2*8*6*6 = 576 outputs are 27-term
# dots at 2 FLOPs a term: 31104; the Linear 2*288*10*2 = 11520 (bias omitted);
# the ReLU one selection per value: 576.
EAGER_BY_OPERATOR = {"aten.convolution": 31104, "aten.addmm": 11520, "aten.relu": 576}
EAGER_TOTAL = 31104 + 11520 + 576
# The server sums each request's (2, 10) output: 19 adds.
SERVER_SUM = 2 * 10 - 1


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 10)).eval()


@pytest.fixture(scope="module")
def package(tmp_path_factory, torchscan):
    """The model, its exported program and its AOTInductor package, compiled
    once for this file (g++, about 10-30 s here)."""
    model = build_model()
    x = torch.ones(INPUT_SHAPE)  # the server's input: at::ones(2,3,8,8)
    ep = torch.export.export(model, (x,))
    path = tmp_path_factory.mktemp("aoti") / "model.pt2"
    torch._inductor.aoti_compile_and_package(ep, package_path=str(path))
    return {"model": model, "x": x, "ep": ep, "path": path}


def aoti_diagnostics(diagnostics):
    return [d for d in diagnostics if d["code"] == "compiled_region" and "AOTInductor" in d["message"]]


def check_partial(total, diagnostics, runs, upper_bound):
    """Partial, one compiled_region diagnostic counting every run once, and a
    known value that is a lower bound of the work that ran."""
    assert total["status"] == "partial", (total, diagnostics)
    (diag,) = aoti_diagnostics(diagnostics)
    assert diag["operator"] == "torchscan.compiled_region"
    assert diag["calls"] == runs
    assert "torch.export.export" in diag["message"]
    # Never the model's whole work: the ReLU and the Linear run in generated
    # code. Whatever the package still calls through the dispatcher is real
    # work, so the known value stays below the eager figure.
    assert 0 <= total["known_value"] < upper_bound


# --- Python ------------------------------------------------------------------

@pytest.mark.parametrize("loader", ["aoti_load_package", "load_package"])
def test_package_runs_are_partial_with_an_aotinductor_diagnostic(package, torchscan, loader):
    if loader == "aoti_load_package":
        compiled = torch._inductor.aoti_load_package(str(package["path"]))
    else:
        compiled = importlib.import_module("torch._inductor.package").load_package(str(package["path"]))
    x = package["x"]
    with torch.no_grad():
        report = torchscan.measure_flops(lambda: (compiled(x), compiled(x)))
    check_partial(report["total"], report["diagnostics"], 2, 2 * EAGER_TOTAL)
    # Outside a scan the wrapped run records nothing and computes the model.
    torch.testing.assert_close(compiled(x), package["model"](x))


def test_a_compiled_graph_and_a_package_get_a_diagnostic_each(package, torchscan):
    # One torch.compile graph run and two package runs in one scan: two
    # compiled_region diagnostics, each worded for what compiled it and
    # counting its own runs, in the operator view and in the module view.
    compiled = torch._inductor.aoti_load_package(str(package["path"]))
    doubled = torch.compile(lambda t: (t * 2).sin())
    t = torch.ones(4)
    doubled(t)  # compiled outside the scan
    x = package["x"]
    with torch.no_grad():
        with torchscan.scan() as s:
            doubled(t), compiled(x), compiled(x)
    for diagnostics, metric in ((s.report()["diagnostics"], "operator_flops"),
                                (s.module_report()["diagnostics"], "module_flops")):
        regions = [d for d in diagnostics if d["code"] == "compiled_region" and d["metric"] == metric]
        assert sorted((("AOTInductor" in d["message"]), d["calls"]) for d in regions) == [(False, 1), (True, 2)]
        assert all(d["operator"] == "torchscan.compiled_region" for d in regions)
        (graph,) = [d for d in regions if "AOTInductor" not in d["message"]]
        assert "torch.compile graph (inductor)" in graph["message"]


def test_runner_entry_points_are_marked_too(package, torchscan, tmp_path):
    # torch._export.aot_load and the bare runner take the package's model .so.
    with zipfile.ZipFile(package["path"]) as z:
        (so,) = [n for n in z.namelist() if n.endswith(".so")]
        so_path = z.extract(so, tmp_path)
    runner = torch._C._aoti.AOTIModelContainerRunnerCpu(so_path, 1)
    x = package["x"]
    report = torchscan.measure_flops(lambda: runner.run([x]))
    check_partial(report["total"], report["diagnostics"], 1, EAGER_TOTAL)
    aot_load = getattr(torch._export, "aot_load", None)
    if aot_load is not None:  # deprecated; present in 2.13
        loaded = aot_load(so_path, "cpu")
        report = torchscan.measure_flops(lambda: loaded(x))
        check_partial(report["total"], report["diagnostics"], 1, EAGER_TOTAL)


def test_module_reports_around_an_aoti_model_are_partial(package, torchscan):
    compiled = torch._inductor.aoti_load_package(str(package["path"]))

    class Serving(torch.nn.Module):
        def forward(self, x):
            return compiled(x)

    report = torchscan.crawl_module(Serving(), args=(package["x"],))
    for metric in ("module_flops", "macs", "dmas"):
        assert report["totals"][metric]["status"] == "partial", metric
    assert aoti_diagnostics(report["diagnostics"])


def test_the_exported_program_counts_complete(package, torchscan):
    ep, x = package["ep"], package["x"]
    with torch.no_grad():
        report = torchscan.measure_flops(ep)  # on ep.example_inputs: (x,)
        by_call = torchscan.measure_flops(lambda: ep.module()(x))
        fcm, _ = run_flop_counter(lambda: ep.module()(x))
    assert report["total"] == {**report["total"], "status": "complete", "value": EAGER_TOTAL}
    assert report["by_operator"] == EAGER_BY_OPERATOR
    assert by_call["by_operator"] == EAGER_BY_OPERATOR
    # FlopCounterMode counts the convolution and addmm (no ReLU formula).
    assert fcm == {"aten.convolution": 31104, "aten.addmm": 11520}
    assert all(report["by_operator"][op] == v for op, v in fcm.items())
    # The module view of its module: the same totals as the eager model's.
    eager = torchscan.crawl_module(package["model"], args=(x,))
    exported = torchscan.crawl_module(ep.module(), args=(x,))
    for metric in ("module_flops", "macs", "dmas"):
        assert exported["totals"][metric]["status"] == "complete"
        assert exported["totals"][metric]["value"] == eager["totals"][metric]["value"], metric


def test_bad_arguments_say_what_to_pass(package, torchscan):
    compiled = torch._inductor.aoti_load_package(str(package["path"]))
    with pytest.raises(TypeError, match=r"AOTInductor model.*torch\.export\.export.*lambda: model\(\*args\)"):
        torchscan.measure_flops(compiled)
    with pytest.raises(TypeError, match=r"got AOTICompiledModel.*exported program"):
        torchscan.crawl_module(compiled, args=(package["x"],))
    with pytest.raises(TypeError, match=r"got ExportedProgram; for an ExportedProgram, pass ep\.module\(\)"):
        torchscan.crawl_module(package["ep"], args=(package["x"],))
    bare = torch.export.export(package["model"], (package["x"],))
    bare.example_inputs = None  # like a program saved without them
    with pytest.raises(ValueError, match=r"no example inputs.*lambda: ep\.module\(\)\(\*args\)"):
        torchscan.measure_flops(bare)


# --- an attached C++ server ----------------------------------------------------

def defined_symbols(library):
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split()[-1] for line in out.splitlines() if line.strip()}


def test_the_attach_library_interposes_on_libtorchs_own_run_functions():
    # attach.lds names the mangled symbols by hand: a torch release that
    # renamed them would leave the interposer unexported (GNU ld ignores a
    # name it does not find), and an attached server undercounting again.
    exported = defined_symbols(ATTACH_LIBRARY)
    aoti = {s for s in exported if "AOTIModel" in s}
    assert exported == {"pthread_create", "torchscan_attach_pthread_create", "torchscan_attach_marks_aotinductor"} | aoti
    # libtorchscan_preload.so (tools/attach.py --wrapper) stands in for the same four.
    assert defined_symbols(ATTACH_LIBRARY.parent / "libtorchscan_preload.so") == {"dlopen", "pthread_create"} | aoti
    assert {s.split("AOTIModel")[1] for s in aoti} == {
        "PackageLoader3runERKSt6vectorIN2at6TensorESaIS4_EEPv",
        "PackageLoader9boxed_runEOSt6vectorIN2at6TensorESaIS4_EEPv",
        "ContainerRunner3runERKSt6vectorIN2at6TensorESaIS4_EEPv",
        "ContainerRunner9boxed_runEOSt6vectorIN2at6TensorESaIS4_EEPv"}
    assert aoti <= defined_symbols(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))


def serve(package, *extra, output=None, env=None, requests=3, workers=2, via="run", wrapper=False):
    cmd = [str(SERVER), "--package", str(package["path"]), "--requests", str(requests), "--workers",
           str(workers), "--input", ",".join(map(str, INPUT_SHAPE)), "--via", via, *extra]
    if wrapper:  # attached through a wrapper command: libtorchscan_preload.so stands in for the interposers
        cmd = [sys.executable, str(ATTACH), "--output", str(output), "--wrapper", "--", "taskset", "-c", "0"] + cmd
    elif output is not None:
        cmd = [sys.executable, str(ATTACH), "--output", str(output), "--"] + cmd
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert f"served {requests}" in run.stdout
    # The interposed run still computes the model.
    (line,) = [l for l in run.stdout.splitlines() if l.startswith("output_sum ")]
    want = package["model"](package["x"]).sum().item()
    assert float(line.split()[1]) == pytest.approx(want, rel=1e-4, abs=1e-4)
    return run


@pytest.mark.parametrize("via,wrapper", [("run", False), ("boxed_run", False), ("runner", False),
                                         ("run", True), ("runner", True)])
def test_attached_server_running_a_package_is_partial(package, tmp_path, via, wrapper):
    assert SERVER.exists(), f"{SERVER} is missing: bazel build //tests:aoti_server"
    requests = 3
    out = tmp_path / "report.json"
    serve(package, output=out, requests=requests, via=via, wrapper=wrapper)
    report = json.loads(out.read_text())
    flops = report["operator_flops"]
    # Once per request, whatever the entry point: AOTIModelPackageLoader::run
    # reaches AOTIModelContainerRunner::run, which is interposed too.
    check_partial(flops["total"], flops["diagnostics"], requests, requests * (EAGER_TOTAL + SERVER_SUM))
    module = report["module_report"]
    for metric in ("module_flops", "macs", "dmas"):
        assert module["totals"][metric]["status"] == "partial", metric
    assert aoti_diagnostics(module["diagnostics"])


def test_the_preloaded_library_forwards_when_not_attached(package):
    # LD_PRELOAD alone: no scan, the interposed runs record nothing and
    # still return the model's outputs (checked in serve).
    env = {**os.environ, "LD_PRELOAD": str(ATTACH_LIBRARY)}
    env.pop("TORCHSCAN_ATTACH_OUTPUT", None)
    serve(package, env=env)


def test_python_under_the_attach_library_marks_each_run_once(package, tmp_path):
    # The attach library marks runs itself; the shim then leaves them alone.
    out = tmp_path / "attached.json"
    code = ("import json, torch, torchscan\n"
            f"m = torch._inductor.aoti_load_package({str(package['path'])!r})\n"
            f"x = torch.ones({INPUT_SHAPE})\n"
            "r = torchscan.measure_flops(lambda: m(x))\n"
            "print(json.dumps([d['calls'] for d in r['diagnostics'] if d['code'] == 'compiled_region']))\n")
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    env = {**os.environ, "LD_PRELOAD": str(ATTACH_LIBRARY), "TORCHSCAN_ATTACH_OUTPUT": str(out),
           "LD_LIBRARY_PATH": torch_lib, "PYTHONPATH": str(REPO_ROOT / "python_shim")}
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [1]
    flops = json.loads(out.read_text())["operator_flops"]
    assert [d["calls"] for d in aoti_diagnostics(flops["diagnostics"])] == [1]
