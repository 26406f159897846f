#!/usr/bin/env bash
# README command 1: set up (idempotent) and run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
# The environment tools/test.sh gives Bazel and Python, too.
. tools/env.sh
bash tools/setup.sh
python3 tools/demo.py "$@"
