#!/usr/bin/env bash
# README command 1: set up (idempotent) and run the main job. Builds only the
# plugin the demo runs; tools/test.sh builds the test programs.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
exec "${TORCHSCAN_VENV:-$PWD/.venv}/bin/python" tools/demo.py "$@"
