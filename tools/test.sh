#!/usr/bin/env bash
# README command 2: set up (idempotent) and run every test, C++ then Python.
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/env.sh
bash tools/setup.sh
bazel test //... 
TORCHSCAN_REQUIRE_LIB=1 python3 -m pytest tests/python -q
