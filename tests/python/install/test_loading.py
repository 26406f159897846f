"""Loading the plugin: from any directory, and refusing next to a library that
already holds the mode key's fallback."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(code: str, cwd: str = "/") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_import_from_any_directory():
    r = _run("import torchscan, torch; print(torchscan.measure_flops(lambda: torch.ones(2, 3) @ torch.ones(3, 4))"
             "['total']['value'])")
    assert r.returncode == 0, r.stderr
    # (2x3)@(3x4): 8 outputs x 3 terms x 2 = 48
    assert r.stdout.strip() == "48"


def test_refuses_when_another_library_holds_the_fallback():
    other = os.path.join(ROOT, "bazel-bin", "tests", "libconflicting_fallback.so")
    assert os.path.exists(other), f"{other} is built by `bash tools/setup.sh --tests`; run it first"
    r = _run(f"import torch; torch.ops.load_library({other!r}); import torchscan")
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "another library already registered a fallback kernel on dispatch key" in r.stderr


# ---- the import error tells the truth about the torch found and the fix


def test_a_local_build_tag_of_the_same_release_is_accepted():
    from torchscan._library import mismatch_error

    # The CPU library serves the CUDA build of its release, and a patch release.
    assert mismatch_error("2.13.0+cpu", "2.13.0+cu130") is None
    assert mismatch_error("2.15.0+cu132", "2.15.0") is None
    assert mismatch_error("2.13.0+cpu", "2.13.1+cpu") is None


def test_another_supported_release_is_refused_with_what_fixes_it():
    from torchscan._library import mismatch_error

    e = mismatch_error("2.13.0+cpu", "2.15.0+cu132")
    message = str(e)
    assert isinstance(e, ImportError)
    assert "built against torch 2.13.0+cpu" in message
    assert "the running torch is 2.15.0+cu132" in message
    assert "supports torch 2.11, 2.12, 2.13, 2.14, 2.15" in message
    assert "`pip install 'torch==2.13.*'`" in message
    # In a checkout the other fix is a rebuild for the release found.
    assert "`bash tools/matrix.sh 2.15`" in message
    assert "not a supported release" not in message


def test_an_unsupported_release_is_named_as_such():
    from torchscan._library import mismatch_error

    message = str(mismatch_error("2.13.0+cpu", "2.9.1+cu126"))
    assert "torch 2.9 is not a supported release" in message
    assert "`pip install 'torch==2.13.*'`" in message
    assert "tools/matrix.sh" not in message  # no build for an unsupported release


def test_a_library_the_loader_refuses_is_reported_with_the_loaders_message(tmp_path):
    import ctypes

    import torch

    # Not an ELF file, but with the marker a library built against another
    # supported release carries.
    other = "2.11.0+cu130" if torch.__version__.startswith("2.15.") else "2.15.0+cu132"
    fake = tmp_path / "libtorchscan.so.0"
    fake.write_bytes(b"\x00" * 64 + b"torchscan-built-against-torch=" + other.encode() + b"\x00" + b"\x00" * 64)
    try:
        ctypes.CDLL(str(fake))
        raise AssertionError("the loader accepted a file that is not a library")
    except OSError as e:
        loader_message = str(e)  # what dlopen says, independently of TorchScan
    r = subprocess.run([sys.executable, "-c", "import torchscan"], cwd="/", capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, TORCHSCAN_LIBRARY=str(fake)))
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: torchscan: cannot load the plugin library"), r.stderr
    assert loader_message in last
    assert f"the running torch is {torch.__version__}" in last
    assert f"built against torch {other}" in last
    assert "supports torch 2.11, 2.12, 2.13, 2.14, 2.15" in last
    assert f"`pip install 'torch=={other[:4]}.*'`" in last
