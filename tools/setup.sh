#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: system packages, a virtual environment
# with torch and the test packages, the Bazel build of the plugin, and an
# editable install of the package into that environment. Nothing is installed
# into the system interpreter.
#   bash tools/setup.sh [--tests]    (the environment: $TORCHSCAN_VENV, default .venv in the checkout)
# --tests also builds the programs the Python tests drive (example servers,
# the dlopen host, a conflicting fallback library); tools/test.sh passes it.
set -euo pipefail
TARGETS=(//:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so)
case "${1:-}" in
  "") ;;
  --tests) TARGETS+=(//tests:libconflicting_fallback.so //tests:example_server //tests:example_server_scanned
                     //tests:aoti_server //tests:dlopen_host //tests:libexample_server.so) ;;
  *) echo "usage: bash tools/setup.sh [--tests]" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${TORCHSCAN_VENV:-$ROOT/.venv}
PY=$VENV/bin/python

log() { printf '[setup] %s\n' "$*"; }

# 1. Debian packages (Bazel 4.2.3 and the C++ libraries it links; python3-venv
# for the environment). cmake, make and pkg-config: the consumer tests build
# programs against the installed package (tools/install.sh) the way other
# projects do.
APT_PACKAGES=(bazel-bootstrap libabsl-dev nlohmann-json3-dev libgtest-dev g++ cmake make pkg-config python3-venv)
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# 2. The environment. torch is pinned: the checkout builds against the release
#    CI tests, and an unpinned resolve would download a multi-GB CUDA build.
if [ ! -x "$PY" ]; then
  log "python3 -m venv $VENV"
  python3 -m venv "$VENV"
fi
if ! "$PY" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  log "pip install torch==2.13.0 (into $VENV)"
  "$PY" -m pip install -q torch==2.13.0
fi
"$PY" -m pip install -q -c tools/constraints.txt -r tools/requirements-test.txt

# 3. Build the plugin against the environment's torch (tools/env.sh names its
#    Python to Bazel) and put it beside the package's Python files. Also the
#    attach library (tools/attach.py) and the preload library it uses.
export TORCHSCAN_VENV=$VENV
. tools/env.sh
log "bazel build ${TARGETS[*]}"
bazel build "${TARGETS[@]}" 2>&1 |
  # Quiet, but keep Bazel's action count ("1 process: 1 internal" = nothing
  # rebuilt); awk, unlike grep, exits 0 on empty output, so a failed build
  # (pipefail) stops setup instead of installing a stale libtorchscan.so.
  awk '/^INFO: [0-9]+ process/ || !/^(INFO|Loading|Analyzing)/'
test -f bazel-bin/torchscan_dispatch/libtorchscan.so
test -f bazel-bin/torchscan_dispatch/libtorchscan_attach.so
test -f bazel-bin/torchscan_dispatch/libtorchscan_preload.so
mkdir -p python_shim/torchscan/_lib
# Named by its SONAME: the attach library needs it as libtorchscan.so.0
# beside itself, and a process that loads both then has one engine.
rm -f python_shim/torchscan/_lib/libtorchscan.so
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan.so python_shim/torchscan/_lib/libtorchscan.so.0
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan_attach.so python_shim/torchscan/_lib/libtorchscan_attach.so
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan_preload.so python_shim/torchscan/_lib/libtorchscan_preload.so

# 4. `import torchscan` and the `torchscan` command in the environment: an
#    editable install of the checkout (pyproject.toml), so edits to the Python
#    files need no reinstall.
if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('torchscan-dispatch') != '$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)')" 2>/dev/null ||
   ! [ -x "$VENV/bin/torchscan" ]; then
  log "pip install --editable . (into $VENV)"
  "$PY" -m pip install -q --no-deps --editable "$ROOT"
fi
(cd / && "$PY" -c "import torchscan") && log "ready: $VENV has torchscan (activate it: . ${VENV#$ROOT/}/bin/activate)"
