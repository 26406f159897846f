#!/usr/bin/env bash
# The support matrix, tested: for each torch release (and build) asked for,
# builds the plugin, the attach and preload libraries and the example servers
# against that torch in its own venv and Bazel output base, installs them in a
# copy of the source tree (the shim's _lib, bazel-bin), and runs the README
# examples, the FlopCounterMode parity tests, the coverage audit and the
# AOTInductor, attach and preload tests there. Prints a table
# (release x build x result). CI stays on one release (tools/test.sh); this
# is run by hand before a release.
#   bash tools/matrix.sh [RELEASE[:BUILD] ...]     e.g. 2.15 2.11:cuda 2.13:cpu
# Default: every supported release, CUDA build (PyPI's). A venv is made when
# missing: $TORCHSCAN_MATRIX_DIR/torch<release>-<build> (default
# ~/.cache/torchscan-matrix); a CPU build needs TORCHSCAN_CPU_INDEX, the
# package index that serves PyTorch's CPU wheels. An existing venv may be
# named instead: TORCHSCAN_VENV_<release with _>_<build>=/path (e.g.
# TORCHSCAN_VENV_2_15_cuda=/work/venvs/torch2.15), and so may an existing
# Bazel output base (TORCHSCAN_BASE_2_15_cuda=DIR). Never touches the system
# interpreter or the checkout's own python_shim/torchscan/_lib.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
. tools/env.sh
DIR=${TORCHSCAN_MATRIX_DIR:-$HOME/.cache/torchscan-matrix}
SUPPORTED=(2.11 2.12 2.13 2.14 2.15)
TESTS=(tests/python/docs/test_readme.py tests/python/api/test_measure_flops.py tests/python/api/test_measure_flops_report.py
       tests/python/api/test_custom_mapping.py tests/python/tools/test_coverage_audit.py
       tests/python/api/test_aoti.py tests/python/serving/test_attach.py tests/python/serving/test_attach_wrapper.py
       tests/python/serving/test_serving.py)
# The libraries tools/setup.sh installs and the programs those tests drive.
TARGETS=(//:torchscan //torchscan_dispatch:libtorchscan_attach.so //torchscan_dispatch:libtorchscan_preload.so
         //tests:example_server //tests:example_server_scanned //tests:aoti_server //tests:dlopen_host
         //tests:libexample_server.so)
mkdir -p "$DIR"

cells=("$@")
((${#cells[@]})) || for r in "${SUPPORTED[@]}"; do cells+=("$r:cuda"); done

rows=()
run_one() {  # release build -> one table row
  local rel=$1 build=$2 var venv py log tree base torch_version
  case " ${SUPPORTED[*]} " in *" $rel "*) ;; *) rows+=("$rel|$build|not supported"); return ;; esac
  var="TORCHSCAN_VENV_${rel//./_}_$build"
  venv=${!var:-$DIR/torch$rel-$build}
  log="$DIR/torch$rel-$build.log"
  : >"$log"
  if [ ! -x "$venv/bin/python" ]; then
    local index=()
    if [ "$build" = cpu ]; then
      [ -n "${TORCHSCAN_CPU_INDEX:-}" ] || { rows+=("$rel|$build|not run (set TORCHSCAN_CPU_INDEX)"); return; }
      index=(--index-url "$TORCHSCAN_CPU_INDEX" --extra-index-url https://pypi.org/simple)
    fi
    python3 -m venv "$venv" >>"$log" 2>&1 &&
      "$venv/bin/pip" install -q "${index[@]}" "torch==$rel.*" numpy pytest transformers >>"$log" 2>&1 ||
      { rows+=("$rel|$build|FAIL: venv ($log)"); return; }
  fi
  py=$venv/bin/python
  torch_version=$("$py" -c "import torch; print(torch.__version__)" 2>>"$log") ||
    { rows+=("$rel|$build|FAIL: import torch ($log)"); return; }
  case "$torch_version" in "$rel".*) ;; *) rows+=("$rel|$build|FAIL: $venv has torch $torch_version"); return ;; esac
  # Own output base per release and build: the local_torch repository rule
  # asks TORCHSCAN_PYTHON where torch lives, which tools/env.sh set to the
  # checkout's own environment: here it names the release's venv.
  var="TORCHSCAN_BASE_${rel//./_}_$build"
  base=${!var:-$HOME/.cache/bazel-torch$rel-$build}
  if ! TORCHSCAN_PYTHON="$py" PATH="$venv/bin:$PATH" bazel --output_base="$base" build --symlink_prefix=/ \
      "${TARGETS[@]}" >>"$log" 2>&1; then
    rows+=("$rel|$build|FAIL: build ($log)"); return
  fi
  local bin
  bin=$(TORCHSCAN_PYTHON="$py" PATH="$venv/bin:$PATH" bazel --output_base="$base" info bazel-bin 2>>"$log")
  # A copy of the source tree (tracked and untracked files, not the ignored
  # build outputs): the tests and tools/attach.py find the libraries and
  # programs beside themselves (python_shim/torchscan/_lib, bazel-bin), and
  # here those are this release's, never the checkout's own.
  tree="$DIR/tree-$rel-$build"
  rm -rf "$tree" && mkdir -p "$tree" &&
    git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$tree" 2>>"$log" ||
    { rows+=("$rel|$build|FAIL: copy of the tree ($log)"); return; }
  local lib=$tree/python_shim/torchscan/_lib
  rm -rf "$lib" && mkdir -p "$lib" && ln -s "$bin" "$tree/bazel-bin"
  install -m 0755 "$bin/torchscan_dispatch/libtorchscan.so" "$lib/libtorchscan.so.0"
  install -m 0755 "$bin/torchscan_dispatch/libtorchscan_attach.so" "$lib/libtorchscan_attach.so"
  install -m 0755 "$bin/torchscan_dispatch/libtorchscan_preload.so" "$lib/libtorchscan_preload.so"
  local summary
  summary=$(cd "$tree" && PYTHONPATH="$tree/python_shim" TORCHSCAN_REQUIRE_LIB=1 \
    "$py" -m pytest "${TESTS[@]}" -q -p no:cacheprovider 2>&1 | tee -a "$log" | tail -1)
  if grep -qE '(^| )[0-9]+ passed' <<<"$summary" && ! grep -qE 'failed|error' <<<"$summary"; then
    rows+=("$rel|$build|pass: torch $torch_version, ${summary//=/}")
  else
    rows+=("$rel|$build|FAIL: torch $torch_version, ${summary//=/} ($log)")
  fi
}

for cell in "${cells[@]}"; do
  rel=${cell%%:*}; build=cuda
  [[ "$cell" == *:* ]] && build=${cell#*:}
  echo "[matrix] torch $rel ($build)" >&2
  run_one "$rel" "$build"
done

printf '| torch | build | result |\n| --- | --- | --- |\n'
for row in "${rows[@]}"; do
  IFS='|' read -r a b c <<<"$row"
  printf '| %s | %s | %s |\n' "$a" "$b" "$(sed 's/^ *//; s/ *$//' <<<"$c")"
done
