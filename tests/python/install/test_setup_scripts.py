"""One build per machine. tools/env.sh is sourced by
tools/test.sh and again by tools/setup.sh (and by demo.sh); it used to append
to PATH each time, and a different PATH made Bazel rebuild everything. It must
be idempotent, and Bazel actions must not see the caller's PATH at all."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _path_after(times: int, path: str) -> str:
    """PATH after sourcing tools/env.sh `times` times, starting from `path`."""
    env = {"HOME": "/root", "PATH": path}
    script = "; ".join([". tools/env.sh"] * times) + '; printf %s "$PATH"'
    return subprocess.run(["/bin/bash", "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout


def test_env_sh_appends_only_what_path_lacks_and_is_idempotent():
    # /opt/x lacks all three directories: they are appended in env.sh's order.
    assert _path_after(1, "/opt/x") == "/opt/x:/usr/local/bin:/usr/bin:/bin"
    # Sourced again (test.sh -> setup.sh): unchanged.
    assert _path_after(2, "/opt/x") == "/opt/x:/usr/local/bin:/usr/bin:/bin"
    assert _path_after(3, "/opt/x") == _path_after(1, "/opt/x")
    # Already complete, in another order: nothing added, nothing reordered.
    assert _path_after(2, "/bin:/usr/bin:/usr/local/bin") == "/bin:/usr/bin:/usr/local/bin"
    # Empty: exactly the three directories, no empty (current-directory) entry.
    # (Unset is not testable here: bash itself then sets a default PATH.)
    assert _path_after(2, "") == "/usr/local/bin:/usr/bin:/bin"


def test_env_sh_sets_a_missing_home_from_the_password_database():
    # HOME unset (a minimal CI environment): env.sh takes the user's home from getent.
    import pwd

    out = subprocess.run(["/bin/bash", "-c", '. tools/env.sh; printf %s "$HOME"'], cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, check=True).stdout
    assert out == pwd.getpwuid(os.getuid()).pw_dir


def test_bazel_actions_get_a_fixed_path():
    # --incompatible_strict_action_env: actions run with Bazel's fixed PATH, so a
    # caller's PATH (another shell, CI) does not change any action key.
    with open(os.path.join(ROOT, ".bazelrc")) as f:
        lines = [line.split("#")[0].split() for line in f]
    assert ["build", "--incompatible_strict_action_env"] in lines
    # The sanitizer build has its own output directory: it never invalidates the normal one.
    assert ["build:asan", "--platform_suffix=-asan", "--symlink_prefix=bazel-asan-"] in lines
