"""The wheel (tools/build_wheel.sh): one per torch release, self-contained
(abseil inside, no path of the build machine), installable with one
`pip install` into a fresh virtual environment that has that release of
torch, where measure_flops works from the wheel alone; another release is
refused at import with what to do."""

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
import torch

from tests.python.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("bazel") is None, reason="needs the Bazel build (tools/setup.sh)")

RELEASE = ".".join(torch.__version__.split("+")[0].split(".")[:2])
VERSION = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
# What a library in the wheel may need from outside it: the running torch's
# libraries, and the C and C++ runtime every Linux program has.
RUNTIME = {"libc.so.6", "libm.so.6", "libstdc++.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2", "libpthread.so.0",
           "libdl.so.2", "librt.so.1"}
TORCH = re.compile(r"^lib(c10|torch)[a-z0-9_]*\.so$")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run(["bash", str(REPO_ROOT / "tools/build_wheel.sh"), "--out-dir", str(out)],
                         capture_output=True, text=True, timeout=900, env=dict(os.environ, TORCHSCAN_PYTHON=sys.executable))
    assert res.returncode == 0, res.stdout + res.stderr
    return out / os.path.basename(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    # A fresh environment (no pip of its own, no system site-packages) that
    # sees only the torch this test runs with, as a user's venv with that torch
    # installed would: one path line to the folder torch is installed in, not
    # the folder's own .pth files (so no editable install of the checkout).
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True, timeout=120)
    py = env_dir / "bin" / "python"
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    torch_site = os.path.dirname(os.path.dirname(torch.__file__))
    with open(os.path.join(site, "torch-env.pth"), "w") as f:
        f.write(torch_site + "\n")
    # The README's command, from a folder of wheels (--no-index: nothing downloaded).
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "-q",
                          "--find-links", str(wheel.parent), f"torchscan-dispatch=={VERSION}+torch{RELEASE}"],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return py


def _clean_env():
    # Nothing from the checkout: no PYTHONPATH, no TORCHSCAN_LIBRARY.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHSCAN_LIBRARY")}


def _run(venv, code, tmp_path):
    return subprocess.run([str(venv), "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                          env=_clean_env())


def test_versions_agree():
    # One version: the package metadata, the reports' torchscan_version and torchscan.__version__.
    header = re.search(r'kTorchscanVersion\[\] = "([0-9.]+)"', (REPO_ROOT / "reports/version.h").read_text()).group(1)
    init = re.search(r'^__version__ = "([0-9.]+)"', (REPO_ROOT / "python_shim/torchscan/__init__.py").read_text(),
                     flags=re.M).group(1)
    assert VERSION == header == init


def test_wheel_name_and_metadata_name_the_release_it_serves(wheel):
    m = re.fullmatch(rf"torchscan_dispatch-{re.escape(VERSION)}\+torch{re.escape(RELEASE)}-py3-none-"
                     r"manylinux_2_(\d+)_x86_64\.whl", wheel.name)
    assert m, wheel.name
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = f"torchscan_dispatch-{VERSION}+torch{RELEASE}.dist-info"
        meta = z.read(f"{info}/METADATA").decode().split("\n\n")[0].splitlines()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
        wheel_file = z.read(f"{info}/WHEEL").decode()
    assert "Name: torchscan-dispatch" in meta
    assert f"Requires-Dist: torch=={RELEASE}.*" in meta
    assert "License: BSD-3-Clause" in meta and "Requires-Python: >=3.10" in meta
    assert "torchscan = torchscan.__main__:main" in entry_points
    assert f"Tag: py3-none-manylinux_2_{m.group(1)}_x86_64" in wheel_file.splitlines()
    assert "torchscan/_lib/libtorchscan.so.0" in names and "torchscan/_lib/libtorchscan_attach.so" in names
    assert "torchscan/_lib/libtorchscan_preload.so" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def _dynamic(path):
    out = subprocess.run(["readelf", "-d", str(path)], capture_output=True, text=True, check=True).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)
    runpath = re.findall(r"\((?:RUNPATH|RPATH)\)\s+Library r(?:un)?path: \[([^\]]*)\]", out)
    return needed, [p for entry in runpath for p in entry.split(":")]


def test_wheel_libraries_need_nothing_outside_it_but_torch_and_the_runtime(wheel, tmp_path):
    with zipfile.ZipFile(wheel) as z:
        z.extractall(tmp_path)
    libs = [p for p in tmp_path.rglob("*") if p.is_file() and ".so" in p.name]
    inside = {p.name for p in libs}
    # abseil travels inside (renamed by auditwheel), never Debian's copy.
    assert any(n.startswith("libabsl_strings") for n in inside), sorted(inside)
    for lib in libs:
        needed, runpath = _dynamic(lib)
        outside = [n for n in needed if n not in inside and n not in RUNTIME and not TORCH.match(n)]
        assert not outside, f"{lib.name} needs {outside} from outside the wheel"
        # No path of the build machine: every search path is relative to the library.
        assert all(p.startswith("$ORIGIN") for p in runpath), (lib.name, runpath)
        assert not any("_solib" in p or "bazel" in p for p in runpath), (lib.name, runpath)


def test_installed_wheel_counts_flops_in_a_fresh_venv(venv, tmp_path):
    # Linear(8 -> 4) on a batch of 2: addmm 2 * 2 * 8 * 4 = 128 FLOPs in the
    # operator view (2K per K-term dot, bias omitted), as FlopCounterMode counts.
    code = (
        "import json, torch, torchscan\n"
        "m = torch.nn.Linear(8, 4)\n"
        "x = torch.ones(2, 8)\n"
        "r = torchscan.measure_flops(lambda: m(x))\n"
        "maps = [l.split()[-1] for l in open('/proc/self/maps') if 'libabsl' in l]\n"
        "print(json.dumps({'file': torchscan.__file__, 'total': r['total'], 'absl': sorted(set(maps))}))\n")
    res = _run(venv, code, tmp_path)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(venv.parent.parent)), out["file"]  # the wheel's copy, not the checkout's
    assert out["total"]["status"] == "complete" and out["total"]["value"] == 128
    # The abseil the process runs is the wheel's, even though the system has one.
    assert out["absl"] and all("torchscan_dispatch.libs" in p for p in out["absl"]), out["absl"]


def test_installed_wheel_has_the_console_script(venv, tmp_path):
    res = subprocess.run([str(venv.parent / "torchscan"), "--help"], capture_output=True, text=True, timeout=300,
                         cwd=str(tmp_path), env=_clean_env())
    assert res.returncode == 0, res.stderr
    assert "render" in res.stdout and "diff" in res.stdout


def test_installed_wheel_refuses_another_torch_with_what_to_do(venv, tmp_path):
    # Another torch, as the plugin sees it: torch reports a different version.
    other = "2.14.1+cpu" if RELEASE != "2.14" else "2.13.0+cpu"
    res = _run(venv, f"import torch\ntorch.__version__ = '{other}'\nimport torchscan\n", tmp_path)
    assert res.returncode != 0
    assert "ImportError" in res.stderr
    assert f"built against torch {torch.__version__} but the running torch is {other}" in res.stderr
    assert f"`pip install 'torch=={RELEASE}.*'`" in res.stderr
    # Not a checkout: the other fix is the wheel for the torch found.
    other_release = ".".join(other.split(".")[:2])
    assert f"'torchscan-dispatch=={VERSION}+torch{other_release}'" in res.stderr


def test_installed_wheel_accepts_another_build_of_its_release(venv, tmp_path):
    # The CUDA build of the same release (a local tag other than the one built
    # against) is the same release: accepted. (2 x 8) @ (8 x 4): 2*2*8*4 = 128.
    code = ("import torch\ntorch.__version__ = torch.__version__.split('+')[0] + '+cu130'\nimport torchscan\n"
            "print(torchscan.measure_flops(lambda: torch.ones(2, 8) @ torch.ones(8, 4))['total']['value'])\n")
    res = _run(venv, code, tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "128"


def test_import_names_pypi_torchscan_when_both_are_installed(venv, tmp_path):
    # PyPI's `torchscan` (another project, same import name) installed beside
    # it: a distribution record is enough for the check to see it.
    site = subprocess.run([str(venv), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    info = os.path.join(site, "torchscan-0.2.0.dist-info")
    os.makedirs(info)
    try:
        with open(os.path.join(info, "METADATA"), "w") as f:
            f.write("Metadata-Version: 2.1\nName: torchscan\nVersion: 0.2.0\n")
        res = _run(venv, "import warnings\nwarnings.simplefilter('always')\nimport torchscan\n", tmp_path)
    finally:
        shutil.rmtree(info)
    assert res.returncode == 0, res.stderr
    assert "the distribution `torchscan` 0.2.0, a different project with the same import name" in res.stderr
    assert "`pip uninstall torchscan`" in res.stderr
    # Without it: silent.
    res = _run(venv, "import warnings\nwarnings.simplefilter('always')\nimport torchscan\n", tmp_path)
    assert res.returncode == 0 and "different project" not in res.stderr, res.stderr
