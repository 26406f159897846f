"""tools/attach.py --wrapper: the command is a wrapper (taskset, a shell
script) that runs the LibTorch server, or a host that dlopens LibTorch later
(tests/cpp/integrations/dlopen_host.cc loading the example server as a library). The
preload (libtorchscan_preload.so) attaches once LibTorch is in a process,
so the report must be the one of the server attached directly: the same
model and input measured in this process, times the requests
(test_serving.check_report)."""
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
from test_serving import ATTACH, INPUT_ARG, SERVER, check_report, served  # noqa: F401 (fixture)

HOST = REPO_ROOT / "bazel-bin/tests/dlopen_host"
BACKEND = REPO_ROOT / "bazel-bin/tests/libexample_server.so"
PRELOAD = REPO_ROOT / "python_shim/torchscan/_lib/libtorchscan_preload.so"


def server_args(served, requests, workers=2):
    return ["--model", str(served["model"]), "--requests", str(requests), "--workers", str(workers),
            "--input", INPUT_ARG]


def attach_wrapped(tmp_path, command, env=None):
    out = tmp_path / "report.json"
    run = subprocess.run([sys.executable, str(ATTACH), "--output", str(out), "--wrapper", "--", *command],
                         capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stderr
    return run, out


@pytest.mark.parametrize("wrapper", ["taskset", "sh"])
def test_a_wrapper_command_attaches_the_server_it_runs(served, tmp_path, wrapper):
    requests = 4
    # One worker: the requests begin in the order they are numbered (with two,
    # the second can begin first, and the aggregate names the request that
    # began first).
    server = [str(SERVER), *server_args(served, requests, workers=1)]
    # taskset execs the server; sh forks it and waits (the shell stays unattached).
    command = ["taskset", "-c", "0", *server] if wrapper == "taskset" else ["/bin/sh", "-c", " ".join(server)]
    run, out = attach_wrapped(tmp_path, command)
    assert f"served {requests}" in run.stdout
    report = json.loads(out.read_text())
    assert report["attach"]["reason"] == "exit"
    check_report(report, served, requests)
    # Each forward a request: aggregated, the first and the last of them name the one class.
    (common,) = report["aggregate"]["request_classes"]
    assert (common["first_request"], common["last_request"]) == ("forward-1", f"forward-{requests}")


def test_a_host_that_dlopens_libtorch_is_attached_when_it_does(served, tmp_path):
    assert HOST.exists() and BACKEND.exists(), "run `bash tools/setup.sh --tests` (it builds the dlopen host)"
    # The host links no LibTorch: the launcher's checks would refuse it.
    assert "libc10" not in subprocess.run(["ldd", str(HOST)], capture_output=True, text=True).stdout
    refused = subprocess.run([sys.executable, str(ATTACH), "--output", str(tmp_path / "x.json"), "--", str(HOST)],
                             capture_output=True, text=True)
    assert refused.returncode == 2 and "--wrapper" in refused.stderr
    requests = 5
    run, out = attach_wrapped(tmp_path, [str(HOST), str(BACKEND), *server_args(served, requests)])
    assert f"served {requests}" in run.stdout
    report = json.loads(out.read_text())
    check_report(report, served, requests)
    # Worker threads the backend starts after LibTorch arrived join as they start.
    workers = [t for t in report["threads"] if t["totals"]["operator_flops"]["value"] > 0]
    assert len(workers) == 2


def test_the_preload_does_nothing_without_libtorch_or_without_the_launcher(tmp_path):
    # No LibTorch ever: the command runs as it would, and there is no report.
    run, out = attach_wrapped(tmp_path, ["/bin/echo", "hello"])
    assert run.stdout == "hello\n" and not out.exists()
    # Preloaded without the attach variables (a child of an attached server):
    # nothing loads, and a LibTorch program still runs.
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHSCAN_ATTACH")}
    env["LD_PRELOAD"] = str(PRELOAD)
    assert subprocess.run(["/bin/true"], env=env).returncode == 0
    assert subprocess.run([str(SERVER), "--help"], env=env, capture_output=True).returncode == 2  # its usage
