"""The installed C++ package (tools/install.sh), used the way a team that did
not write TorchScan would: a separate CMake project and a plain Makefile
(pkg-config) build tests/consumers/main.cc against the installed tree only,
with their own abseil first on the include path and defined in the program;
the binaries run, alone and under the attach launcher. The C++ programs the
documents print are built the way they say (pkg-config, CMake) and run."""

import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import torch

from tests.python.docs import test_readme as readme
from tests.python.conftest import REPO_ROOT

CONSUMERS = REPO_ROOT / "tests" / "consumers"
VERSION = re.search(r'kTorchscanVersion\[\] = "([0-9.]+)"', (REPO_ROOT / "reports/version.h").read_text()).group(1)
MAJOR = VERSION.split(".")[0]

pytestmark = pytest.mark.skipif(shutil.which("bazel") is None, reason="needs the Bazel build (tools/setup.sh)")


def _run(cmd, **kw):
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kw)
    assert res.returncode == 0, f"{cmd} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    # A prefix with a space: nothing may depend on word splitting.
    p = tmp_path_factory.mktemp("install") / "opt torchscan"
    _run(["bash", str(REPO_ROOT / "tools/install.sh"), str(p)])
    return p


def _lines(stdout: str) -> dict:
    out = {}
    for line in stdout.splitlines():
        out.update(json.loads(line))
    return out


def _check_consumer_output(stdout: str):
    out = _lines(stdout)
    # The program's own abseil, not Debian's, answered ToString().
    assert out["own_abseil"] == "other-abseil: the program's own abseil"
    # A Session scans once: the second Start() is kFailedPrecondition (9).
    assert out["restart_code"] == 9
    flops = out["flops"]
    # mm of [4, 8] x [8, 16]: 2 * 4 * 8 * 16 = 1024 (2K per K-term dot);
    # relu by the program's caller formula, 3 per output element: 3 * 64 = 192.
    assert flops["by_operator"] == {"aten.mm": 1024, "aten.relu": 192}
    assert flops["total"]["status"] == "complete" and flops["total"]["value"] == 1216
    (layer,) = out["layers"]
    assert layer["path"] == "layer" and layer["call_index"] == 0
    # Module view of the same calls: 4 * 16 dot products of 8 terms, K MACs each.
    assert layer["metrics"]["macs"]["value"] == 4 * 16 * 8
    assert out["trace_refused"] == 1


def test_layout_is_public_headers_a_versioned_library_and_package_files(prefix):
    headers = sorted(p.name for p in (prefix / "include/torchscan").iterdir())
    assert headers == ["count.h", "op_call.h", "result.h", "status.h", "torchscan.h", "types.h"]
    for h in (prefix / "include/torchscan").iterdir():
        text = h.read_text()
        assert "absl" not in text.replace("abseil", ""), f"{h.name} names abseil"
        for inc in re.findall(r'#include "([^"]+)"', text):
            assert inc.startswith("torchscan/"), f"{h.name} includes {inc}"
    lib = prefix / "lib"
    assert os.path.realpath(lib / "libtorchscan.so") == str(lib / f"libtorchscan.so.{VERSION}")
    assert os.readlink(lib / f"libtorchscan.so.{MAJOR}") == f"libtorchscan.so.{VERSION}"
    assert (lib / "cmake/TorchScan/TorchScanConfig.cmake").is_file()
    assert (lib / "cmake/TorchScan/TorchScanConfigVersion.cmake").is_file()
    assert (lib / "pkgconfig/torchscan.pc").is_file()


def test_library_has_a_soname_no_runpath_and_exports_only_the_api(prefix):
    so = prefix / "lib" / f"libtorchscan.so.{VERSION}"
    dyn = _run(["readelf", "-d", str(so)]).stdout
    assert f"Library soname: [libtorchscan.so.{MAJOR}]" in dyn
    assert "RUNPATH" not in dyn and "RPATH" not in dyn
    needed = re.findall(r"Shared library: \[([^\]]+)\]", dyn)
    assert all("/" not in n for n in needed), needed
    # LibTorch by the two libraries every LibTorch program loads itself.
    assert "libc10.so" in needed and "libtorch_cpu.so" in needed and "libtorch.so" not in needed
    symbols = _run(["nm", "-DC", "--defined-only", str(so)]).stdout.splitlines()
    exported = [s.split(" ", 2)[2] for s in symbols if len(s.split(" ")) >= 3 and s.split(" ")[1] in "TWDRBV"]
    assert not [s for s in exported if "absl" in s or "nlohmann" in s]
    public = ("torchscan::Session::", "torchscan::ScanGuard::", "torchscan::ModuleScope::",
              "torchscan::RequestScope::", "torchscan::JoinAllThreadsScan()", "torchscan::ModeKeyIncluded()",
              "torchscan::MetricStatusName(", "torchscan::ParseCount(", "torchscan_p",
              # The shim's C entry points (ctypes): module scopes, the analysis pause, the
              # token-flow gate and requests, masks' values, and the module analysis's rows and reports.
              "torchscan_token_flow_masks", "torchscan_token_flow_request", "torchscan_token_native_request",
              "torchscan_read_mask",
              "torchscan_module_layers_pickle", "torchscan_reports_pickle", "torchscan_reports_prepare",
              "torchscan_resume_thread_recording")
    assert [s for s in exported if not s.startswith(public)] == []
    assert any(s.startswith("torchscan::Session::Start()") for s in exported)


@pytest.fixture(scope="module")
def cmake_consumer(prefix, tmp_path_factory):
    cmake = shutil.which("cmake")
    if cmake is None:
        pytest.fail("cmake is missing: tools/setup.sh installs it")
    build = tmp_path_factory.mktemp("cmake-consumer")
    _run([cmake, "-S", str(CONSUMERS / "cmake"), "-B", str(build),
          f"-DCMAKE_PREFIX_PATH={prefix};{torch.utils.cmake_prefix_path}"])
    _run([cmake, "--build", str(build)])
    return build / "consumer"


@pytest.fixture(scope="module")
def make_consumer(prefix, tmp_path_factory):
    out = tmp_path_factory.mktemp("make-consumer")
    # pkg-config quotes nothing: the Makefile consumer gets a prefix without spaces.
    plain = out / "prefix"
    plain.symlink_to(prefix)
    _run(["make", "-C", str(CONSUMERS / "make"), f"PKG_CONFIG_PATH={plain}/lib/pkgconfig", f"OUT={out}"])
    return out / "consumer"


def test_cmake_consumer_builds_from_the_installed_tree_and_runs(cmake_consumer):
    res = _run([str(cmake_consumer)], cwd="/", env={"PATH": os.environ["PATH"]})
    _check_consumer_output(res.stdout)


def test_makefile_consumer_builds_through_pkg_config_and_runs(make_consumer):
    dyn = _run(["readelf", "-d", str(make_consumer)]).stdout
    assert f"[libtorchscan.so.{MAJOR}]" in dyn  # by SONAME, not a path
    res = _run([str(make_consumer)], cwd="/", env={"PATH": os.environ["PATH"]})
    _check_consumer_output(res.stdout)


def test_cmake_package_refuses_a_version_it_does_not_provide(prefix, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.18)\nproject(p CXX)\n"
        f"find_package(TorchScan {int(MAJOR) + 1}.0 CONFIG REQUIRED)\n")
    res = subprocess.run(["cmake", "-S", str(src), "-B", str(tmp_path / "b"),
                          f"-DCMAKE_PREFIX_PATH={prefix};{torch.utils.cmake_prefix_path}"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode != 0
    assert "TorchScan" in res.stderr and VERSION in res.stderr


def test_a_program_using_the_api_under_the_launcher_gets_one_engine(prefix, make_consumer, tmp_path):
    # Before: the launcher's library carried a second engine and the program
    # aborted ("another library already registered a fallback kernel").
    report = tmp_path / "attach.json"

    def attach(library):
        return subprocess.run([sys.executable, str(REPO_ROOT / "tools/attach.py"), "--output", str(report),
                               "--library", str(library), "--", str(make_consumer)],
                              capture_output=True, text=True, timeout=300)

    # LD_PRELOAD cannot carry the prefix's space: refused, saying what to do.
    refused = attach(prefix / "lib/libtorchscan_attach.so")
    assert refused.returncode == 2 and "LD_PRELOAD" in refused.stderr and "symlink" in refused.stderr
    assert not report.exists()
    # Through a symlink without one (the attach library finds the engine,
    # libtorchscan.so.0, beside itself through it).
    plain = tmp_path / "prefix"
    plain.symlink_to(prefix)
    res = attach(plain / "lib/libtorchscan_attach.so")
    assert res.returncode == 0, res.stderr
    # The program's own scan nests in the attach scan: its report is its own
    # (its caller formula for relu applies)...
    _check_consumer_output(res.stdout)
    # ...and the attach report counts the same calls with the built-in
    # formulas: mm 1024 and relu one per element, 64.
    attached = json.loads(report.read_text())
    assert attached["operator_flops"]["by_operator"] == {"aten.mm": 1024, "aten.relu": 64}
    assert attached["operator_flops"]["total"]["value"] == 1088


def _plain_prefix(prefix, tmp_path):
    # pkg-config quotes nothing: the documents' commands get a prefix without spaces.
    plain = tmp_path / "prefix"
    plain.symlink_to(prefix)
    return plain


def _run_documented_commands(doc, block, prefix, cwd):
    """Runs a document's ```sh block as printed, with the test's prefix for
    /opt/torchscan and without LD_LIBRARY_PATH; the install line is the
    prefix fixture's own run of tools/install.sh."""
    lines = [line for line in block.splitlines() if not line.startswith("bash tools/install.sh")]
    script = "set -euo pipefail\n" + "\n".join(lines).replace("/opt/torchscan", str(prefix)) + "\n"
    # python3 is the interpreter running the tests (its torch is the one built against).
    env = {"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"], "HOME": str(cwd)}
    res = subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, f"{doc}: the printed commands failed:\n{script}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def _check_count_program_output(doc, stdout):
    report = json.loads(stdout.strip().splitlines()[-1])
    # relu(x @ w) for (8x16) @ (16x4): 8*4 outputs of 16-term dots at 2 FLOPs a
    # term = 1024 for mm; relu one selection per value of the (8x4) result = 32.
    assert report["by_operator"] == {"aten.mm": 1024, "aten.relu": 32}, doc
    assert report["total"]["status"] == "complete" and report["total"]["value"] == 1056, doc


def _sh_blocks(doc, needle):
    return [b for b in readme.blocks(doc, "sh") if needle in b]


@pytest.mark.parametrize("doc", sorted({doc for doc, _ in readme.cpp_programs()}))
def test_documented_program_builds_with_pkg_config_as_printed_and_runs(doc, prefix, tmp_path):
    (program,) = [src for d, src in readme.cpp_programs() if d == doc]
    (commands,) = _sh_blocks(doc, "pkg-config")
    assert "g++ count.cc" in commands and "./count" in commands
    (tmp_path / "count.cc").write_text(program)
    stdout = _run_documented_commands(doc, commands, _plain_prefix(prefix, tmp_path), tmp_path)
    _check_count_program_output(doc, stdout)


def test_documented_cmake_project_builds_as_printed_and_runs(prefix, tmp_path):
    doc = "torchscan_dispatch/README.md"
    (program,) = [src for d, src in readme.cpp_programs() if d == doc]
    (cmakelists,) = readme.blocks(doc, "cmake")
    (commands,) = _sh_blocks(doc, "cmake -S")
    (tmp_path / "count.cc").write_text(program)
    (tmp_path / "CMakeLists.txt").write_text(cmakelists)
    stdout = _run_documented_commands(doc, commands, _plain_prefix(prefix, tmp_path), tmp_path)
    _check_count_program_output(doc, stdout)


def test_pkg_config_flags_carry_rpaths_and_torch_dir_is_the_user_s_choice(prefix, tmp_path):
    plain = _plain_prefix(prefix, tmp_path)
    env = {**os.environ, "PKG_CONFIG_PATH": str(plain / "lib/pkgconfig")}

    def pc(*args):
        return subprocess.run(["pkg-config", *args, "torchscan"], capture_output=True, text=True, env=env,
                              timeout=60, check=True).stdout.split()

    libdir = pc("--variable=libdir")[0]
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")
    libs = pc("--libs")
    assert f"-Wl,-rpath,{libdir}" in libs and f"-Wl,-rpath,{torch_lib}" in libs
    assert os.path.realpath(libdir) == str(prefix / "lib")
    # A standalone LibTorch (same layout: include/, lib/) is chosen without editing the file.
    other = pc("--define-variable=torch_dir=/opt/libtorch", "--cflags", "--libs")
    assert "-I/opt/libtorch/include" in other and "-L/opt/libtorch/lib" in other
    assert "-Wl,-rpath,/opt/libtorch/lib" in other and not [f for f in other if torch_lib in f]


def test_readme_names_the_install_command():
    assert "bash tools/install.sh /opt/torchscan" in (REPO_ROOT / "README.md").read_text()


def test_the_launcher_never_runs_main_to_check_a_library_that_cannot_load(make_consumer, tmp_path):
    # A file the loader cannot preload: ld.so ignores it and runs the
    # program. Before, the probe then ran the program's main() in full (a
    # server served, and the launcher waited for it); the loader's trace
    # mode now finds the problem without running any of the program's code.
    bogus = tmp_path / "libtorchscan_attach.so"
    bogus.write_text("not a shared object\n")
    marker = tmp_path / "main-ran"
    res = subprocess.run([sys.executable, str(REPO_ROOT / "tools/attach.py"), "--output", str(tmp_path / "r.json"),
                          "--library", str(bogus), "--", str(make_consumer)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CONSUMER_MAIN_RAN": str(marker)})
    assert res.returncode == 2, res.stderr
    assert "could not be loaded" in res.stderr and "cannot be preloaded" in res.stderr
    assert not marker.exists()
    assert not (tmp_path / "r.json").exists()
