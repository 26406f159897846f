#!/usr/bin/env bash
# Builds the libraries with Bazel against the installed torch (never in pip's
# isolated build environment, which would install a torch of its own) and
# packs the wheel: dist/torchscan-<version>+torch<torch>-<tag>.whl.
#   bash tools/build_wheel.sh [--out-dir DIR]    (run tools/setup.sh once before)
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
bazel build //:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so 2>&1 |
  awk '/^INFO: [0-9]+ process/ || !/^(INFO|Loading|Analyzing)/'
exec "${TORCHSCAN_PYTHON:-python3}" tools/build_wheel.py "$@"
