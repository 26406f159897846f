#!/usr/bin/env bash
# Installs TorchScan's C++ package under PREFIX, for programs built outside
# this repository (CMake, pkg-config, plain make):
#
#   PREFIX/include/torchscan/   torchscan.h and the headers it includes (only)
#   PREFIX/lib/libtorchscan.so.<version>   SONAME libtorchscan.so.<major>,
#                               plus the .so.<major> and .so links
#   PREFIX/lib/libtorchscan_attach.so      the attach library (tools/attach.py --library)
#   PREFIX/lib/libtorchscan_preload.so     what tools/attach.py --wrapper preloads (beside the attach library)
#   PREFIX/lib/cmake/TorchScan/            find_package(TorchScan CONFIG) -> TorchScan::torchscan
#   PREFIX/lib/pkgconfig/torchscan.pc      pkg-config --cflags --libs torchscan (with -Wl,-rpath
#                               to PREFIX/lib and to LibTorch's lib/: the program runs as built)
#
# Usage: bash tools/install.sh PREFIX   (builds first; run tools/setup.sh once before)
# TORCHSCAN_PYTHON: the Python whose torch to build against (default: .venv, else python3)
set -euo pipefail
if (($# != 1)) || [[ -z $1 ]]; then
  echo "usage: bash tools/install.sh PREFIX" >&2
  exit 2
fi
# A relative PREFIX is relative to the caller's directory.
mkdir -p "$1"
PREFIX=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."
. tools/env.sh
# The Python whose torch the library is built against and the package files
# name (TORCHSCAN_PYTHON; default: the checkout's .venv, else python3), as
# tools/build_wheel.sh chooses it.
if [[ -z ${TORCHSCAN_PYTHON:-} && -x .venv/bin/python ]]; then
  export TORCHSCAN_PYTHON=$PWD/.venv/bin/python
fi
PY=${TORCHSCAN_PYTHON:-python3}

# One version, the one the reports carry (reports/version.h).
VERSION=$(sed -n 's/.*kTorchscanVersion\[\] = "\([0-9.]*\)".*/\1/p' reports/version.h)
MAJOR=${VERSION%%.*}
[[ -n $VERSION ]] || { echo "install: no version in reports/version.h" >&2; exit 1; }
SONAME=$(sed -n 's/.*-soname,\(libtorchscan\.so\.[0-9]*\).*/\1/p' torchscan_dispatch/BUILD)
[[ $SONAME == "libtorchscan.so.$MAJOR" ]] || {
  echo "install: the library's SONAME ($SONAME, torchscan_dispatch/BUILD) does not match version $VERSION" >&2
  exit 1
}

bazel build //:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so 2>&1 |
  awk '/^INFO: [0-9]+ process/ || !/^(INFO|Loading|Analyzing)/'

# Headers: the public ones, their in-repository include paths rewritten to
# <torchscan/...>; no other header of the repository is installed.
INC=$PREFIX/include/torchscan
rm -rf "$INC"
mkdir -p "$INC"
for h in torchscan_dispatch/torchscan.h torchscan_dispatch/types.h torchscan_dispatch/status.h formulas/op_call.h formulas/result.h \
         formulas/count.h; do
  sed -E 's@#include "(torchscan_dispatch|formulas)/([a-z_]+\.h)"@#include "torchscan/\2"@' "$h" > "$INC/$(basename "$h")"
done
if grep -n '#include "' "$INC"/*.h | grep -v '#include "torchscan/'; then
  echo "install: a public header includes a non-public one (above)" >&2
  exit 1
fi

LIB=$PREFIX/lib
mkdir -p "$LIB"
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan.so "$LIB/libtorchscan.so.$VERSION"
ln -sf "libtorchscan.so.$VERSION" "$LIB/libtorchscan.so.$MAJOR"
ln -sf "libtorchscan.so.$MAJOR" "$LIB/libtorchscan.so"
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan_attach.so "$LIB/libtorchscan_attach.so"
install -m 0755 bazel-bin/torchscan_dispatch/libtorchscan_preload.so "$LIB/libtorchscan_preload.so"

# The torch the library was built against: consumers must build against it.
read -r TORCH_DIR TORCH_VERSION ABI < <($PY -c "import os, torch; print(os.path.dirname(torch.__file__), torch.__version__, int(torch._C._GLIBCXX_USE_CXX11_ABI))")

mkdir -p "$LIB/cmake/TorchScan"
cat > "$LIB/cmake/TorchScan/TorchScanConfig.cmake" <<CMAKE
# TorchScan $VERSION: find_package(TorchScan CONFIG) gives the imported
# target TorchScan::torchscan (headers, libtorchscan.so, and Torch, which it
# finds with find_package(Torch): put torch's share/cmake on CMAKE_PREFIX_PATH,
# e.g. \$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')).
include(CMakeFindDependencyMacro)
find_dependency(Torch)
set(TorchScan_TORCH_VERSION "$TORCH_VERSION")
if(NOT Torch_VERSION VERSION_EQUAL "${TORCH_VERSION%%+*}")
  message(FATAL_ERROR "TorchScan was built against torch $TORCH_VERSION but find_package(Torch) found torch "
                      "\${Torch_VERSION} (\${Torch_DIR}); point CMAKE_PREFIX_PATH at torch $TORCH_VERSION")
endif()
get_filename_component(_torchscan_prefix "\${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET TorchScan::torchscan)
  add_library(TorchScan::torchscan SHARED IMPORTED)
  set_target_properties(TorchScan::torchscan PROPERTIES
    IMPORTED_LOCATION "\${_torchscan_prefix}/lib/libtorchscan.so.$VERSION"
    IMPORTED_SONAME "libtorchscan.so.$MAJOR"
    INTERFACE_INCLUDE_DIRECTORIES "\${_torchscan_prefix}/include"
    INTERFACE_LINK_LIBRARIES "\${TORCH_LIBRARIES}"
    INTERFACE_COMPILE_FEATURES cxx_std_20)
endif()
set(TorchScan_ATTACH_LIBRARY "\${_torchscan_prefix}/lib/libtorchscan_attach.so")
unset(_torchscan_prefix)
CMAKE
cat > "$LIB/cmake/TorchScan/TorchScanConfigVersion.cmake" <<CMAKE
# Same major version, at least the requested one.
set(PACKAGE_VERSION "$VERSION")
if(PACKAGE_FIND_VERSION_MAJOR STREQUAL "" OR
   (PACKAGE_FIND_VERSION_MAJOR EQUAL $MAJOR AND NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
else()
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
endif()
CMAKE

mkdir -p "$LIB/pkgconfig"
cat > "$LIB/pkgconfig/torchscan.pc" <<PC
# LibTorch has no pkg-config file: its flags are the ones of torch $TORCH_VERSION,
# the torch this library was built against. torch_dir is a directory with
# LibTorch's include/ and lib/: the torch package of a Python installation or
# an unpacked standalone LibTorch archive of the same release; choose another
# with pkg-config --define-variable=torch_dir=DIR. The -Wl,-rpath flags let the
# program find both libraries without LD_LIBRARY_PATH.
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
torch_dir=$TORCH_DIR

Name: TorchScan
Description: FLOPs, MACs, memory and receptive fields of LibTorch calls, from the dispatcher
Version: $VERSION
Cflags: -std=c++20 -D_GLIBCXX_USE_CXX11_ABI=$ABI -I\${includedir} -I\${torch_dir}/include -I\${torch_dir}/include/torch/csrc/api/include
Libs: -L\${libdir} -Wl,-rpath,\${libdir} -ltorchscan -L\${torch_dir}/lib -Wl,-rpath,\${torch_dir}/lib -ltorch -ltorch_cpu -lc10
PC
echo "[install] TorchScan $VERSION (torch $TORCH_VERSION) in $PREFIX"
