#!/usr/bin/env bash
# Idempotent set-up of a fresh machine: system packages, Python packages,
# the Bazel build of the plugin, and `import torchscan` from any directory.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. tools/env.sh

log() { printf '[setup] %s\n' "$*"; }

# 1. Debian packages (Bazel 4.2.3 and the C++ libraries it links).
# cmake, make and pkg-config: the consumer tests build programs against the
# installed package (tools/install.sh) the way other projects do.
APT_PACKAGES=(bazel-bootstrap libabsl-dev nlohmann-json3-dev libgtest-dev g++ cmake make pkg-config)
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

# 2. Python packages. torch is pinned: the plugin must match it exactly, and an
#    unpinned resolve would download a multi-GB CUDA build.
PY=${PYTHON:-python3}
if ! $PY -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '2.13.0')" 2>/dev/null; then
  log "pip install torch==2.13.0"
  $PY -m pip install -q torch==2.13.0
fi
$PY -m pip install -q -c tools/constraints.txt -r tools/requirements-test.txt

# 3. Build the plugin against the installed torch and put it beside the shim.
# Also the attach library (tools/attach.py) and the example servers the tests drive.
log "bazel build //:torchscan"
bazel build //:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so \
  //tests:libconflicting_fallback.so //tests:example_server //tests:example_server_scanned //tests:aoti_server \
  //tests:dlopen_host //tests:libexample_server.so 2>&1 |
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

# 4. `import torchscan` from anywhere: a .pth file naming the shim folder.
SITE=$($PY -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
echo "$ROOT/python_shim" > "$SITE/torchscan.pth"
(cd / && $PY -c "import torchscan" ) && log "ready: import torchscan works ($ROOT/python_shim)"
