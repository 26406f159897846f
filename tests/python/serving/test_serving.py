"""The example C++ server (tests/cpp/integrations/example_server.cc) serving a TorchScript
model, scanned through the C++ API and through the attach launcher
(tools/attach.py). Expected values: the same model and input measured in
this process by measure_flops / crawl_module (and, for the operators it
covers, FlopCounterMode), times the number of requests."""
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict

import pytest
import torch

from conftest import REPO_ROOT, run_flop_counter

sys.path.insert(0, str(REPO_ROOT / "tests"))
from fixtures.serving import INPUT_SHAPE, build_model, example_input, save_torchscript  # noqa: E402

SERVER = REPO_ROOT / "bazel-bin/tests/example_server"
SCANNED_SERVER = REPO_ROOT / "bazel-bin/tests/example_server_scanned"
ATTACH = REPO_ROOT / "tools/attach.py"
INPUT_ARG = ",".join(map(str, INPUT_SHAPE))


@pytest.fixture(scope="module")
def served(tmp_path_factory, torchscan):
    for binary in (SERVER, SCANNED_SERVER):
        assert binary.exists(), f"{binary} is missing: run `bash tools/setup.sh --tests` (it builds the example servers)"
    model = build_model()
    path = save_torchscript(model, tmp_path_factory.mktemp("serving") / "model.pt")
    with torch.no_grad():
        flops = torchscan.measure_flops(lambda: model(example_input()))
    crawl = torchscan.crawl_module(model, args=(example_input(),))
    return {"model": path, "flops": flops, "crawl": crawl, "eager": model}


def per_path(layers, metric):
    """path -> sorted per-call values of one layer metric."""
    out = defaultdict(list)
    for row in layers:
        out[row["path"]].append(row["metrics"][metric]["value"])
    return {p: sorted(v, key=repr) for p, v in out.items()}


FIELDS = ("receptive_field", "effective_stride", "effective_padding")


def check_report(report, served, requests, per_request_layers=False):
    flops, crawl = served["flops"], served["crawl"]
    assert report["kind"] == "torchscan_scan_report"
    total = report["operator_flops"]["total"]
    assert total["status"] == "complete", report["operator_flops"]["diagnostics"]
    assert total["value"] == requests * flops["total"]["value"]
    assert report["operator_flops"]["by_operator"] == {op: requests * v for op, v in flops["by_operator"].items()}
    # Each request also builds its input, at::ones(1,3,32,32): a fill, no
    # FLOPs or MACs, one write per element (torchscan_flops_v1: fills cost N
    # accesses) = 3*32*32 = 3072 accesses outside the model.
    input_fill = {"module_flops": 0, "macs": 0, "dmas": 3 * 32 * 32}
    for metric in ("module_flops", "macs", "dmas"):
        got = report["module_report"]["totals"][metric]
        assert got["status"] == "complete", report["module_report"]["diagnostics"]
        assert got["value"] == requests * (crawl["totals"][metric]["value"] + input_fill[metric]), metric
    check_aggregate(report["aggregate"], served, requests)
    if per_request_layers is None:  # the caller checks the rows it kept
        return
    if not per_request_layers:
        # Aggregated by default: no row per module call, none per request.
        assert report["layers"] == [] and report["requests"] == []
        return
    # Per-layer rows from the TorchScript model's own module paths: every
    # crawl_module layer call appears once per request with the same values
    # (receptive fields from the data flow included).
    for metric in ("module_flops", "macs", "dmas", *FIELDS):
        want = {p: sorted(v * requests, key=repr) for p, v in per_path(crawl["layers"], metric).items()}
        assert per_path(report["layers"], metric) == want, metric


def check_aggregate(aggregate, served, requests):
    """The rows aggregated across requests: one per crawl_module layer call
    (path and call index within the forward; every request has the same
    shapes, so one signature), called once per request, its sums `requests`
    times the in-process crawl's values; its receptive fields the crawl's."""
    crawl = served["crawl"]
    rows = {(r["path"], r["call_index"]): r for r in aggregate["layers"]}
    assert len(rows) == len(aggregate["layers"])  # one signature per module call
    want = {(l["path"], l["call_index"]): l for l in crawl["layers"]}
    assert set(rows) == set(want) | {("", 0)}  # "": the scripted model's root
    per_request_flops = served["flops"]["total"]["value"]
    op_sum = 0
    for key, row in rows.items():
        assert row["calls"] == requests, key
        assert row["input"]["dtype"] == "float32"
        op_sum += row["metrics"]["operator_flops"]["value"]
        if key not in want:
            continue
        for metric in ("module_flops", "macs", "dmas"):
            m = row["metrics"][metric]
            assert m["status"] == "complete" and m["value"] == requests * want[key]["metrics"][metric]["value"], (key, metric)
        for metric in FIELDS:  # the crawl's scope is "forward", the scan's "workload"
            got, crawled = ({k: v for k, v in m.items() if k != "scope"}
                            for m in (row["metrics"][metric], want[key]["metrics"][metric]))
            assert got == crawled, (key, metric)
    # The layers' operator FLOPs are the model's, every request's.
    assert op_sum == requests * per_request_flops
    assert aggregate["requests"] == requests
    # Every request did the same work: one class, and a distribution of one value.
    dist = aggregate["request_totals"]["operator_flops"]
    assert dist == {"requests": requests, "exact": True, "unit": "FLOPs", "min": per_request_flops,
                    "median": per_request_flops, "p99": per_request_flops, "max": per_request_flops}
    (common,) = aggregate["request_classes"]
    assert common["common"] is True and common["requests"] == requests
    assert common["input"] == {"shape": list(INPUT_SHAPE), "dtype": "float32"}
    assert common["totals"]["operator_flops"]["value"] == per_request_flops
    assert common["totals"]["macs"]["value"] == crawl["totals"]["macs"]["value"]


def test_server_scanned_through_the_cpp_api(served, tmp_path):
    requests = 6
    out = tmp_path / "report.json"
    run = subprocess.run([str(SCANNED_SERVER), "--model", str(served["model"]), "--requests", str(requests),
                          "--workers", "3", "--input", INPUT_ARG, "--scan", str(out), "--per-request-layers", "all"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    report = json.loads(out.read_text())
    check_report(report, served, requests, per_request_layers=True)
    assert report["context"]["threads"] == "all"
    # Per request: each one is exactly one forward; per thread: they add up.
    per_request = served["flops"]["total"]["value"]
    assert sorted(q["request"] for q in report["requests"]) == sorted(f"request-{i}" for i in range(requests))
    assert {q["totals"]["operator_flops"]["value"] for q in report["requests"]} == {per_request}
    assert sum(t["totals"]["operator_flops"]["value"] for t in report["threads"]) == requests * per_request


def test_workers_that_join_at_start_are_scanned_alike(served, tmp_path):
    requests = 4
    out = tmp_path / "report.json"
    subprocess.run([str(SCANNED_SERVER), "--model", str(served["model"]), "--requests", str(requests),
                    "--workers", "2", "--input", INPUT_ARG, "--scan", str(out), "--join-at-start"],
                   check=True, capture_output=True, timeout=300)
    full = json.loads(out.read_text())
    check_report(full, served, requests)
    # Lean: calls that own their subtree run their children unrecorded; the
    # report is the same, from fewer recorded calls.
    subprocess.run([str(SCANNED_SERVER), "--model", str(served["model"]), "--requests", str(requests),
                    "--workers", "2", "--input", INPUT_ARG, "--scan", str(out), "--join-at-start", "--lean"],
                   check=True, capture_output=True, timeout=300)
    lean = json.loads(out.read_text())
    check_report(lean, served, requests)
    assert sum(t["calls"] for t in lean["threads"]) < sum(t["calls"] for t in full["threads"])


def test_operator_view_agrees_with_flop_counter_mode(served, tmp_path):
    # FlopCounterMode counts convolution and addmm here (no formula for
    # pooling, norm or activations): those rows must match it exactly.
    model = served["eager"]
    with torch.no_grad():
        fcm_counts, _ = run_flop_counter(lambda: model(example_input()))
    requests = 2
    out = tmp_path / "report.json"
    subprocess.run([str(SCANNED_SERVER), "--model", str(served["model"]), "--requests", str(requests),
                    "--workers", "2", "--scan", str(out)], check=True, capture_output=True, timeout=300)
    by_op = json.loads(out.read_text())["operator_flops"]["by_operator"]
    assert fcm_counts
    for op, value in fcm_counts.items():
        assert by_op[op] == requests * value, op


def attach(served, output, requests, workers, *extra, signal_name=None, pace_ms=0, launcher=(), **popen):
    """The example server under the launcher; `extra` go to the server, `launcher` to tools/attach.py."""
    cmd = [sys.executable, str(ATTACH), "--output", str(output), *launcher]
    if signal_name:
        cmd += ["--signal", signal_name]
    cmd += ["--", str(SERVER), "--model", str(served["model"]), "--requests", str(requests),
            "--workers", str(workers), "--input", INPUT_ARG, "--pace-ms", str(pace_ms), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def test_attach_launcher_scans_an_unmodified_server(served, tmp_path):
    requests = 6
    out = tmp_path / "attached.json"
    proc = attach(served, out, requests, 3, launcher=["--per-request-layers"])
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    assert f"served {requests}" in stdout
    report = json.loads(out.read_text())
    assert report["attach"]["reason"] == "exit"
    # Everything the process ran: model loading on the main thread adds no
    # FLOPs (allocation and storage binding are zero-cost), the requests add
    # exactly N forwards.
    check_report(report, served, requests, per_request_layers=True)
    # Each top-level TorchScript forward is a request of its own: N of them,
    # numbered from 1 (model loading runs TorchScript functions that make no
    # operator call: they are not requests), each exactly one forward of the
    # model (the server's input fill runs before it, outside the request).
    reqs = {q["request"]: q for q in report["requests"]}
    assert sorted(reqs) == sorted(f"forward-{i}" for i in range(1, requests + 1))
    for q in reqs.values():
        assert q["totals"]["operator_flops"] == {**served["flops"]["total"], "scope": "workload"}
        assert q["totals"]["macs"]["value"] == served["crawl"]["totals"]["macs"]["value"]
    # Every layer row names its thread and request: per request, the model's
    # layer calls once, all on one worker thread.
    workers = {t["thread"] for t in report["threads"]}
    by_request = defaultdict(list)
    for row in report["layers"]:
        assert row["thread"] in workers
        by_request[row["request"]].append(row)
    assert sorted(by_request) == sorted(reqs)
    for rows in by_request.values():
        assert len({r["thread"] for r in rows}) == 1
        assert sorted(r["path"] for r in rows) == sorted([""] + [l["path"] for l in served["crawl"]["layers"]
                                                                 if l["path"]])


def test_attach_streams_by_default_and_reports_what_holding_every_call_reports(served, tmp_path):
    # One worker, so requests, threads and layer rows come in the same order
    # in both runs. Streaming folds after every request (fold every call);
    # --hold-calls keeps all of them until the exit report. The aggregate
    # and the last requests' rows do not depend on when calls were folded.
    requests = 5
    reports = {}
    for mode, launcher, env in (("held", ["--hold-calls", "--per-request-layers", "3"], {}),
                                ("streamed", ["--per-request-layers", "3"], {"TORCHSCAN_ATTACH_FOLD_EVERY": "1"})):
        out = tmp_path / f"{mode}.json"
        proc = attach(served, out, requests, 1, launcher=launcher, env={**os.environ, **env})
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr
        reports[mode] = json.loads(out.read_text())
    held, streamed = reports["held"], reports["streamed"]
    assert held["context"].pop("streaming") is False and streamed["context"].pop("streaming") is True
    for r in (held, streamed):
        r.pop("attach")  # pid, timing and memory of each run
        check_report(r, served, requests, per_request_layers=None)
        # The last 3 requests, whole.
        assert [q["request"] for q in r["requests"]] == [f"forward-{i}" for i in (3, 4, 5)]
        assert sorted({row["request"] for row in r["layers"]}) == ["forward-3", "forward-4", "forward-5"]
        for metric in ("module_flops", "macs", "dmas", *FIELDS):
            want = {p: sorted(v * 3, key=repr) for p, v in per_path(served["crawl"]["layers"], metric).items()}
            assert per_path(r["layers"], metric) == want, metric
    assert streamed == held


def test_a_traced_server_reports_the_distribution_of_request_times(served, tmp_path):
    # --trace times every call: each request's time is its first call's
    # start to its last call's end, and the aggregate gives their spread.
    requests = 8
    out = tmp_path / "traced.json"
    proc = attach(served, out, requests, 2, launcher=["--trace", str(tmp_path / "trace.json")])
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    report = json.loads(out.read_text())
    assert report["context"]["layer_rows"] == "aggregated"
    check_report(report, served, requests)
    t = report["aggregate"]["request_totals"]["time"]
    assert t["unit"] == "ns" and t["requests"] == requests
    assert 0 < t["min"] <= t["median"] <= t["p99"] <= t["max"]
    # Untraced (streaming, no clock read): no time distribution.
    proc = attach(served, out, requests, 2)
    proc.communicate(timeout=300)
    assert "time" not in json.loads(out.read_text())["aggregate"]["request_totals"]


@pytest.mark.parametrize("fold_every", ["4096", "1"])
def test_attach_report_on_signal_while_requests_are_in_flight(served, tmp_path, fold_every):
    # Streaming (the default), folding as the scan's default does and after every request.
    requests, per_request = 120, served["flops"]["total"]["value"]
    out = tmp_path / "signalled.json"
    proc = attach(served, out, requests, 2, signal_name="USR1", pace_ms=10,
                  env={**os.environ, "TORCHSCAN_ATTACH_FOLD_EVERY": fold_every})
    snapshots = []
    try:
        for line in proc.stdout:
            if line.strip() == "served 20":
                break
        for _ in range(2):  # two signals: two snapshots, numbered
            os.kill(proc.pid, signal.SIGUSR1)
            deadline = time.time() + 60
            while time.time() < deadline:
                if out.exists():
                    report = json.loads(out.read_text())
                    if report["attach"]["reason"] == "signal" and report["attach"]["sequence"] == len(snapshots) + 1:
                        snapshots.append(report)
                        break
                time.sleep(0.01)
            else:
                pytest.fail("no snapshot report after the signal")
        rest, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    for snap in snapshots:
        # Requests were being served while the snapshot was taken: it holds
        # whole forwards only (calls of a running forward wait for the next
        # report), a strict subset of the requests, all counted.
        assert snap["context"]["snapshot"] is True
        total = snap["operator_flops"]["total"]
        assert total["status"] == "complete"
        assert total["value"] % per_request == 0
        assert 20 <= total["value"] // per_request < requests, (
            snap["threads"], [(q["request"], q["calls"]) for q in snap["requests"]], snap["context"])
    assert snapshots[0]["operator_flops"]["total"]["value"] <= snapshots[1]["operator_flops"]["total"]["value"]
    final = json.loads(out.read_text())
    assert final["attach"].pop("report_seconds") >= 0 and final["attach"].pop("peak_rss_kib") > 0
    assert final["attach"] == {"reason": "exit", "sequence": 3, "pid": proc.pid}
    check_report(final, served, requests)  # no call lost


def test_snapshots_under_load_list_finished_requests_only(served, tmp_path):
    # Four workers serving back to back, snapshotted again and again: each
    # snapshot's requests are whole forwards that had finished (a running
    # one waits for a later snapshot; listed now it would be a complete 0
    # with calls 0), and together they are all the snapshot counted.
    # Enough requests that several snapshots land while serving even when
    # other work loads the machine (each snapshot waits for the previous one).
    requests, per_request = 1200, served["flops"]["total"]["value"]
    out = tmp_path / "loaded.json"
    proc = attach(served, out, requests, 4, signal_name="USR1", pace_ms=4)
    snapshots = []
    try:
        for line in proc.stdout:
            if line.strip() == "served 8":
                break
        # Twelve, and more (up to 40) until one lands while a request runs:
        # on a loaded machine the snapshots may keep landing between requests.
        while (len(snapshots) < 12 or not any(snap["context"]["in_flight_calls"] > 0 for snap in snapshots)) \
                and len(snapshots) < 40 and proc.poll() is None:
            os.kill(proc.pid, signal.SIGUSR1)
            deadline = time.time() + 60
            while time.time() < deadline and proc.poll() is None:
                if out.exists():
                    report = json.loads(out.read_text())
                    if report["attach"]["reason"] == "signal" and report["attach"]["sequence"] == len(snapshots) + 1:
                        snapshots.append(report)
                        break
                time.sleep(0.005)
        rest, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr
    assert len(snapshots) >= 4, "the server finished before enough snapshots were taken"
    running = 0
    for snap in snapshots:
        running += snap["context"]["in_flight_calls"] > 0
        # Aggregated: the finished requests only, each one whole forward.
        aggregate = snap["aggregate"]
        listed = aggregate["requests"]
        assert listed > 0 and snap["requests"] == [] and snap["layers"] == []
        (common,) = aggregate["request_classes"]
        assert common["requests"] == listed and common["calls"] > 0
        assert common["totals"]["operator_flops"] == {**served["flops"]["total"], "scope": "workload"}
        assert aggregate["request_totals"]["operator_flops"]["max"] == per_request
        assert {row["calls"] for row in aggregate["layers"]} == {listed}, snap["context"]
        total = snap["operator_flops"]["total"]
        assert total["status"] == "complete"
        assert total["value"] == listed * per_request, snap["context"]
    assert running > 0  # requests were running while snapshots were taken
    check_report(json.loads(out.read_text()), served, requests)


def test_launcher_refuses_binaries_it_cannot_scan(tmp_path):
    run = subprocess.run([sys.executable, str(ATTACH), "--output", str(tmp_path / "r.json"), "--", "/bin/true"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "not dynamically linked against LibTorch" in run.stderr
    assert not (tmp_path / "r.json").exists()
    run = subprocess.run([sys.executable, str(ATTACH), "--output", str(tmp_path / "r.json")],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "give the binary to run after --" in run.stderr


def test_launcher_refuses_other_torch_versions_and_abis():
    sys.path.insert(0, str(REPO_ROOT / "tools"))
    import attach as launcher

    ok = {"built_against": "2.13.0+cpu", "loaded": "2.13.0", "library_abi": 1, "loaded_abi": 1}
    assert launcher.compatibility_problem(ok) == ""
    problem = launcher.compatibility_problem({**ok, "loaded": "2.14.1"})
    assert "runs torch 2.14.1" in problem and "built against torch 2.13.0+cpu" in problem
    problem = launcher.compatibility_problem({**ok, "loaded_abi": 0})
    assert "_GLIBCXX_USE_CXX11_ABI=0" in problem


def test_probe_reports_this_machines_torch(served, tmp_path):
    # The library's own check, run inside the real server binary.
    lib = REPO_ROOT / "python_shim/torchscan/_lib/libtorchscan_attach.so"
    run = subprocess.run([str(SERVER), "--model", "unused"], env={**os.environ, "LD_PRELOAD": str(lib),
                                                                   "TORCHSCAN_ATTACH_PROBE": "1"},
                         capture_output=True, text=True, timeout=60)
    probe = json.loads(run.stdout.split("TORCHSCAN_PROBE ", 1)[1])
    assert probe["loaded"] == torch.__version__.split("+")[0]
    assert probe["loaded_abi"] == int(torch._C._GLIBCXX_USE_CXX11_ABI)
    assert probe["problem"] == ""
