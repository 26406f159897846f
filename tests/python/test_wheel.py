"""The wheel (tools/build_wheel.sh): tagged for the torch and CPython it was
built against, installable with one `pip install` into a fresh virtual
environment that has that torch, where measure_flops works from the wheel
alone; another torch is refused at import with what to do."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
import torch

from tests.python.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(shutil.which("bazel") is None, reason="needs the Bazel build (tools/setup.sh)")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    res = subprocess.run(["bash", str(REPO_ROOT / "tools/build_wheel.sh"), "--out-dir", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    return out / os.path.basename(res.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    # A fresh environment whose only torch is the system's 2.13.0 (no
    # download: pip sees it satisfies torch==2.13.0 and installs nothing else).
    # Without its own pip and setuptools, which would shadow the system's
    # (torch requires a newer setuptools than ensurepip's); the system pip
    # installs into it, from the wheel alone (--no-index).
    env_dir = tmp_path_factory.mktemp("venv") / "env"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)],
                   check=True, timeout=120)
    py = env_dir / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-index", "-q", str(wheel)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return py


def _clean_env():
    # Nothing from the checkout: no PYTHONPATH, no TORCHSCAN_LIBRARY.
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TORCHSCAN_LIBRARY")}


def test_wheel_name_and_metadata_name_the_torch_it_was_built_against(wheel):
    version = re.search(r'kTorchscanVersion\[\] = "([0-9.]+)"', (REPO_ROOT / "reports/version.h").read_text()).group(1)
    local = "torch" + torch.__version__.replace("+", ".")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert wheel.name == f"torchscan-{version}+{local}-{tag}-{tag}-linux_x86_64.whl"
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(f"torchscan-{version}+{local}.dist-info/METADATA").decode()
    assert f"Requires-Dist: torch=={torch.__version__.split('+')[0]}" in meta.splitlines()
    assert "torchscan/_lib/libtorchscan.so.0" in names and "torchscan/_lib/libtorchscan_attach.so" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_installed_wheel_counts_flops_in_a_fresh_venv(venv, tmp_path):
    # Linear(8 -> 4) on a batch of 2: addmm 2 * 2 * 8 * 4 = 128 FLOPs in the
    # operator view (2K per K-term dot, bias omitted), as FlopCounterMode counts.
    code = (
        "import json, torch, torchscan\n"
        "m = torch.nn.Linear(8, 4)\n"
        "x = torch.ones(2, 8)\n"
        "r = torchscan.measure_flops(lambda: m(x))\n"
        "print(json.dumps({'file': torchscan.__file__, 'total': r['total']}))\n")
    res = subprocess.run([str(venv), "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=_clean_env())
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["file"].startswith(str(venv.parent.parent)), out["file"]  # the wheel's copy, not the checkout's
    assert out["total"]["status"] == "complete" and out["total"]["value"] == 128


def test_installed_wheel_refuses_another_torch_with_what_to_do(venv, tmp_path):
    # Another torch, as the plugin sees it: torch reports a different version.
    code = "import torch\ntorch.__version__ = '2.14.1+cpu'\nimport torchscan\n"
    res = subprocess.run([str(venv), "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=_clean_env())
    assert res.returncode != 0
    assert "ImportError" in res.stderr
    release = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    assert f"built against torch {torch.__version__} but the running torch is 2.14.1+cpu" in res.stderr
    assert f"`pip install 'torch=={release}.*'`" in res.stderr
    # Not a checkout: the other fix is the wheel for the torch found.
    assert "the TorchScan wheel built for torch 2.14" in res.stderr


def test_installed_wheel_accepts_another_build_of_its_release(venv, tmp_path):
    # The CUDA build of the same release (a local tag other than the one built
    # against) is the same release: accepted. (2 x 8) @ (8 x 4): 2*2*8*4 = 128.
    code = ("import torch\ntorch.__version__ = torch.__version__.split('+')[0] + '+cu130'\nimport torchscan\n"
            "print(torchscan.measure_flops(lambda: torch.ones(2, 8) @ torch.ones(8, 4))['total']['value'])\n")
    res = subprocess.run([str(venv), "-c", code], capture_output=True, text=True, timeout=300, cwd=str(tmp_path),
                         env=_clean_env())
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "128"
