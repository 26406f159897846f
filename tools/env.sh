# Sourced by the tools/*.sh scripts: an environment Bazel can run in even when
# the caller (a CI runner) passes a minimal one.
if [ -z "${HOME:-}" ]; then
  HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
  export HOME
fi
export PATH="$PATH:/usr/local/bin:/usr/bin:/bin"
