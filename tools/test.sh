#!/usr/bin/env bash
# README command 2: set up (idempotent) and run every test: the code checks
# (ruff, mypy, clang-format), C++ then Python, then the C++ tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
# Every stage runs even when an earlier one fails, so one CI run shows all
# failures; the exit status is non-zero if any stage failed.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --tests
. tools/env.sh
PY=${TORCHSCAN_VENV:-$PWD/.venv}/bin/python

failed=()
stage() {
  local name=$1; shift
  printf '\n[test] === %s: %s ===\n' "$name" "$*"
  "$@" || failed+=("$name")
}
stage "Code checks" bash tools/lint.sh
stage "C++ tests" bazel test //...
stage "Python tests" env TORCHSCAN_REQUIRE_LIB=1 "$PY" -m pytest tests/python -q
# Own output directory (.bazelrc): does not invalidate the build above.
stage "C++ tests under ASan+UBSan" bazel test --config=asan //tests:all

if ((${#failed[@]})); then
  printf '\n[test] FAILED: %s\n' "$(IFS=,; echo "${failed[*]}")" | sed 's/,/, /g'
  exit 1
fi
printf '\n[test] all stages passed\n'
