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
# Our packages by name, not //...: that would also walk the sanitizer
# server's convenience links (bazel-asan-*), which this server cannot load.
stage "C++ tests" bazel test //:all //formulas/... //reports/... //tests/... //torchscan_dispatch/...

# The Python tests run one process with one intra-op thread, which leaves a
# core idle: the sanitizer stage starts on it meanwhile, one job at a time.
# It has its own Bazel server (output base), because tests/python/install
# builds with the main one, and its own output directory (.bazelrc). When
# the Python tests finish, that head start is interrupted (Bazel keeps every
# action it finished, test results included) and the stage goes on in the
# foreground on both cores.
ASAN_BAZEL=(bazel "--output_base=$(bazel info output_base 2>/dev/null)-asan")
# Its output is dropped: an interrupted run reports its unfinished tests as
# failed, and the foreground run below reports everything again.
"${ASAN_BAZEL[@]}" test --config=asan --jobs=1 //tests:all >/dev/null 2>&1 &
asan_pid=$!
stage "Python tests" env TORCHSCAN_REQUIRE_LIB=1 "$PY" -m pytest tests/python -q
kill -INT "$asan_pid" 2>/dev/null || true
wait "$asan_pid" 2>/dev/null || true
stage "C++ tests under ASan+UBSan" "${ASAN_BAZEL[@]}" test --config=asan //tests:all

if ((${#failed[@]})); then
  printf '\n[test] FAILED: %s\n' "$(IFS=,; echo "${failed[*]}")" | sed 's/,/, /g'
  exit 1
fi
printf '\n[test] all stages passed\n'
