#!/usr/bin/env bash
# The code checks: ruff (lint) over the Python, mypy (types) over the package,
# clang-format over the C++ (the configuration: pyproject.toml, .clang-format),
# and the engine's include direction (tools/check_layers.py).
# The tools come from the checkout's environment (tools/setup.sh installs them).
#   bash tools/lint.sh [--fix]    (--fix: apply ruff's safe fixes and clang-format)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${TORCHSCAN_VENV:-$PWD/.venv}/bin
failed=()
mapfile -t cpp < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--fix" ]; then
  "$BIN/ruff" check --fix python_shim tools tests || true
  "$BIN/clang-format" -i "${cpp[@]}"
fi
"$BIN/ruff" check python_shim tools tests || failed+=(ruff)
"$BIN/mypy" || failed+=(mypy)
"$BIN/clang-format" --dry-run --Werror "${cpp[@]}" || failed+=(clang-format)
"$BIN/python" tools/check_layers.py || failed+=(layers)
if ((${#failed[@]})); then
  echo "lint: failed: ${failed[*]} (bash tools/lint.sh --fix applies the automatic fixes)" >&2
  exit 1
fi
echo "lint: ruff, mypy, clang-format and the layers pass"
