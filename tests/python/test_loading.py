"""Loading the plugin: from any directory, and refusing next to a library that
already holds the mode key's fallback."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


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
    assert os.path.exists(other), f"{other} is built by tools/setup.sh; run it first"
    r = _run(f"import torch; torch.ops.load_library({other!r}); import torchscan")
    assert r.returncode != 0
    assert "ImportError" in r.stderr
    assert "another library already registered a fallback kernel on dispatch key" in r.stderr
