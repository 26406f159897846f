# Sourced by the tools/*.sh scripts: an environment Bazel can run in even when
# the caller (a CI runner) passes a minimal one.
# Idempotent: scripts source it from each other (test.sh -> setup.sh), and an
# environment that changed between sourcings used to make Bazel rebuild.
# Append only the directories PATH lacks (set -u safe: PATH may be unset).
for _torchscan_dir in /usr/local/bin /usr/bin /bin; do
  case ":${PATH:-}:" in
    *":$_torchscan_dir:"*) ;;
    *) PATH="${PATH:+$PATH:}$_torchscan_dir" ;;
  esac
done
unset _torchscan_dir
export PATH
# After PATH: getent, id and cut live in /usr/bin.
if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  export HOME
fi
# The Python whose torch Bazel builds against (third_party/local_torch.bzl):
# the checkout's environment (tools/setup.sh makes it) unless the caller names
# another. Always the same for one checkout, so every build shares one cache.
if [ -z "${TORCHSCAN_PYTHON:-}" ]; then
  _torchscan_venv=${TORCHSCAN_VENV:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/.venv}
  if [ -x "$_torchscan_venv/bin/python" ]; then
    TORCHSCAN_PYTHON=$_torchscan_venv/bin/python
    export TORCHSCAN_PYTHON
  fi
  unset _torchscan_venv
fi
