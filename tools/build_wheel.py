"""Builds the torchscan wheel from the Bazel build (tools/build_wheel.sh runs it).

The wheel holds python_shim/torchscan (the package files git tracks, so no
__pycache__ or stale build output) and the two libraries in torchscan/_lib.
It is tagged for the torch and CPython it was built against: the version's
local label names the torch (0.1.0+torch2.13.0.cpu) and the tag the
interpreter (cp311-cp311-linux_x86_64), and it requires exactly that torch
release, so pip never resolves it against another one. The libraries also
need Debian's abseil at run time (libabsl20220623); `import torchscan` says
so when it is missing.

Written with zipfile and hashlib (the wheel format, PEP 427 / PEP 376
RECORD), not through a PEP 517 backend: a backend would run in pip's
isolated build environment, which installs a torch of its own.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import os
import platform
import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBS = {"libtorchscan.so.0": "bazel-bin/torchscan_dispatch/libtorchscan.so",
        "libtorchscan_attach.so": "bazel-bin/torchscan_dispatch/libtorchscan_attach.so",
        "libtorchscan_preload.so": "bazel-bin/torchscan_dispatch/libtorchscan_preload.so"}


def _version() -> str:
    text = (ROOT / "reports/version.h").read_text()
    return re.search(r'kTorchscanVersion\[\] = "([0-9.]+)"', text).group(1)


def _built_against() -> str:
    # Written by the local_torch repository rule when the library was built.
    base = subprocess.run(["bazel", "info", "output_base"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip()
    header = Path(base) / "external/torch/built_against/torchscan_built_against.h"
    return re.search(r'TORCHSCAN_BUILT_TORCH_VERSION "([^"]+)"', header.read_text()).group(1)


def _tag() -> str:
    impl = f"cp{sys.version_info.major}{sys.version_info.minor}"
    plat = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    return f"{impl}-{impl}-{plat}"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build(out_dir: Path) -> Path:
    torch_version = _built_against()
    release = torch_version.split("+")[0]
    local = "torch" + torch_version.replace("+", ".")
    version = f"{_version()}+{local}"
    name = f"torchscan-{version}-{_tag()}.whl"
    dist_info = f"torchscan-{version}.dist-info"

    tracked = subprocess.run(["git", "ls-files", "python_shim/torchscan"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    files: list[tuple[str, bytes]] = []
    for rel in tracked:
        arc = rel[len("python_shim/"):]
        files.append((arc, (ROOT / rel).read_bytes()))
    for arc, src in LIBS.items():
        path = ROOT / src
        if not path.exists():
            raise SystemExit(f"build_wheel: {src} is missing; run `bash tools/build_wheel.sh`, which builds it")
        files.append((f"torchscan/_lib/{arc}", path.read_bytes()))

    metadata = "\n".join([
        "Metadata-Version: 2.1",
        "Name: torchscan",
        f"Version: {version}",
        "Summary: FLOPs, MACs, memory and receptive fields of PyTorch calls, counted in the dispatcher",
        f"Requires-Python: =={sys.version_info.major}.{sys.version_info.minor}.*",
        # Exactly the release it was built against (2.13.0 matches 2.13.0+cpu).
        f"Requires-Dist: torch=={release}",
        "",
        f"Built against torch {torch_version} on {platform.machine()}. Needs Debian's abseil at run time "
        "(apt install libabsl20220623).",
        "",
    ])
    wheel = "\n".join(["Wheel-Version: 1.0", "Generator: torchscan tools/build_wheel.py", "Root-Is-Purelib: false",
                       f"Tag: {_tag()}", ""])
    files.append((f"{dist_info}/METADATA", metadata.encode()))
    files.append((f"{dist_info}/WHEEL", wheel.encode()))
    record = [_record_line(arc, data) for arc, data in files] + [f"{dist_info}/RECORD,,"]
    files.append((f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode()))

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / name
    tmp = target.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            info = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arc.endswith(".so") or ".so." in arc else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    os.replace(tmp, target)
    return target


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "dist")
    args = parser.parse_args(argv)
    print(build(args.out_dir))
    return 0


if __name__ == "__main__":
    sys.exit(main())
