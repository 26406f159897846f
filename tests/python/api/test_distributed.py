"""Distributed jobs: rank context, the communication section, the
job report (`python3 -m torchscan merge`), and a real 2-rank job (DDP and
FSDP2 steps under torch.distributed.run with gloo on loopback).

Expected byte counts are derived by hand in the comments, from the model's
parameter count and the stated conventions; none is pasted from output.
"""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
WORKER = REPO / "tests" / "fixtures" / "distributed_worker.py"


def _gloo_reason():
    """Why a gloo job on loopback cannot run here (None when it can)."""
    import torch.distributed as dist

    if not dist.is_available():
        return "torch.distributed is not available in this torch build"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
    except OSError as e:
        return f"cannot bind a loopback socket ({e})"
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------ merge, offline


def _rank_report(rank, world, flops, sent, received, flops_status="complete", calls=1):
    """A FlopReport as measure_flops writes it inside a job (the fields merge reads)."""
    def metric(status, value, unit):
        return {"status": status, "value": value if status == "complete" else None,
                "known_value": None if status == "unavailable" else value, "unit": unit,
                "scope": "workload", "method": "m"}
    return {
        "schema_version": 1,
        "context": {"torch_version": torch.__version__, "rank": rank, "world_size": world, "backend": "gloo"},
        "total": metric(flops_status, flops, "FLOPs"),
        "by_module": {}, "by_operator": {}, "ignored_operators": {}, "diagnostics": [],
        "communication": {"kind": "torchscan_communication", "totals": {
            "bytes_sent": metric("complete", sent, "bytes"), "bytes_received": metric("complete", received, "bytes"),
            "collective_calls": calls},
            "by_operator": {"c10d.allreduce_": {"calls": calls, "bytes_sent": sent, "bytes_received": received,
                                                "unavailable_calls": 0}}},
    }


def test_merge_sums_maxima_slowest_rank_and_imbalance(torchscan):
    # Three ranks: FLOPs 300, 100, 200 -> sum 600, mean 200, max 300 (rank 0),
    # imbalance 300 / 200 = 1.5. Bytes sent 10, 40, 10 and received 10, 40, 10:
    # moved 20, 80, 20 -> rank 1 moves most; sent sum 60, mean 20, max 40 -> 2.0.
    reports = [_rank_report(2, 3, 200, 10, 10), _rank_report(0, 3, 300, 10, 10), _rank_report(1, 3, 100, 40, 40)]
    job = torchscan.merge_reports(reports, ["c.json", "a.json", "b.json"])
    assert job["kind"] == "torchscan_job_report" and job["context"]["world_size"] == 3
    assert [r["rank"] for r in job["ranks"]] == [0, 1, 2]
    assert [r["file"] for r in job["ranks"]] == ["a.json", "b.json", "c.json"]
    assert job["totals"]["operator_flops"]["value"] == 600
    assert job["totals"]["bytes_sent"]["value"] == 60 and job["totals"]["bytes_received"]["value"] == 60
    assert job["totals"]["collective_calls"] == 3
    slow = job["slowest_rank"]
    assert slow["most_operator_flops"] == {"rank": 0, "file": "a.json", "status": "complete", "value": 300}
    assert slow["most_bytes_moved"]["rank"] == 1 and slow["most_bytes_moved"]["value"] == 80
    assert slow["max"]["operator_flops"]["value"] == 300 and slow["max"]["bytes_sent"]["value"] == 40
    assert job["imbalance"]["operator_flops"] == {"status": "complete", "value": 1.5}
    assert job["imbalance"]["bytes_sent"] == {"status": "complete", "value": 2.0}
    assert job["communication"]["by_operator"]["c10d.allreduce_"]["bytes_sent"] == 60
    text = torchscan.render_job_report(job)
    assert "world_size 3" in text and "1.500" in text and "600" in text


def test_merge_keeps_incomplete_work_honest(torchscan):
    # Rank 1's FLOPs are a lower bound (partial, 100 known): the sum is a
    # partial 400, the max a partial 300, and there is no imbalance figure.
    job = torchscan.merge_reports([_rank_report(0, 2, 300, 8, 8), _rank_report(1, 2, 100, 8, 8, "partial")])
    assert job["totals"]["operator_flops"] == {"status": "partial", "value": None, "known_value": 400,
                                              "unit": "FLOPs", "scope": "job", "method": "operator_dispatch"}
    assert job["slowest_rank"]["max"]["operator_flops"]["status"] == "partial"
    assert job["slowest_rank"]["most_operator_flops"]["status"] == "partial"
    assert job["imbalance"]["operator_flops"]["status"] == "unavailable"
    assert job["imbalance"]["operator_flops"]["value"] is None
    # Bytes are complete on both ranks: 8 and 8, imbalance 8 / 8 = 1.
    assert job["imbalance"]["bytes_sent"] == {"status": "complete", "value": 1.0}
    # A rank without a communication section: its bytes are unknown, not zero.
    bare = _rank_report(1, 2, 100, 0, 0)
    del bare["communication"]
    job = torchscan.merge_reports([_rank_report(0, 2, 300, 8, 8), bare])
    assert job["totals"]["bytes_sent"]["status"] == "partial" and job["totals"]["bytes_sent"]["known_value"] == 8
    assert [d["code"] for d in job["diagnostics"]] == ["communication_unavailable"]


@pytest.mark.parametrize("case, message", [
    ("mixed_world", "different sizes (world_size 2: r0.json; world_size 3: r1.json)"),
    ("duplicate", "rank 0 appears twice (r0.json and r1.json)"),
    ("missing", "world_size is 3 but rank(s) 1 have no report"),
    ("huge_world", "world_size is 1000000000000 but rank(s) 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 999999999988 more"),
    ("no_rank", "r1.json has no context.rank"),
    ("bad_rank", "r1.json context.rank 5 is not a rank of a job of world_size 2"),
    ("bool_rank", "r1.json context.rank must be an integer, got True"),
    ("bad_metric", "r1.json total.status is 'roughly'; expected one of complete, partial, unavailable"),
    ("negative_bytes", "communication.totals.bytes_sent.known_value must be a non-negative integer"),
    ("not_object", "r1.json is not a JSON object (got list)"),
    ("not_report", "r1.json is not a TorchScan report"),
    ("schema", "r1.json has schema_version 2"),
    ("mixed_kinds", "different kinds"),
])
def test_merge_refuses_inconsistent_or_malformed_reports(torchscan, case, message):
    r0, r1 = _rank_report(0, 2, 1, 1, 1), _rank_report(1, 2, 1, 1, 1)
    if case == "mixed_world":
        r1 = _rank_report(1, 3, 1, 1, 1)
    elif case == "duplicate":
        r1 = _rank_report(0, 2, 1, 1, 1)
    elif case == "missing":
        r0, r1 = _rank_report(0, 3, 1, 1, 1), _rank_report(2, 3, 1, 1, 1)
    elif case == "huge_world":
        r0, r1 = _rank_report(0, 10**12, 1, 1, 1), _rank_report(11, 10**12, 1, 1, 1)
    elif case == "no_rank":
        del r1["context"]["rank"]
    elif case == "bad_rank":
        r1["context"]["rank"] = 5
    elif case == "bool_rank":
        r1["context"]["rank"] = True
    elif case == "bad_metric":
        r1["total"]["status"] = "roughly"
    elif case == "negative_bytes":
        r1["communication"]["totals"]["bytes_sent"]["known_value"] = -4
    elif case == "not_object":
        r1 = [1, 2]
    elif case == "not_report":
        r1 = {"schema_version": 1, "context": {"rank": 1, "world_size": 2}}
    elif case == "schema":
        r1["schema_version"] = 2
    elif case == "mixed_kinds":
        r1 = {"kind": "torchscan_scan_report", "schema_version": 1, "context": {"rank": 1, "world_size": 2},
              "operator_flops": None}
    with pytest.raises(ValueError) as info:
        torchscan.merge_reports([r0, r1], ["r0.json", "r1.json"])
    assert message in str(info.value)


def _cli(args, capsys):
    from torchscan.__main__ import main

    try:
        code = main(args)
    except SystemExit as e:
        code = e.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_merge_command(torchscan, tmp_path, capsys):
    paths = []
    for rank, flops in ((0, 30), (1, 10)):
        p = tmp_path / f"rank{rank}.json"
        p.write_text(json.dumps(_rank_report(rank, 2, flops, 4, 4)))
        paths.append(str(p))
    out = tmp_path / "job.json"
    code, text, _ = _cli(["merge", *paths, "--output", str(out)], capsys)
    assert code == 0, text
    job = json.loads(out.read_text())
    # 30 + 10 = 40 FLOPs; max 30 over mean 20 = 1.5.
    assert job["totals"]["operator_flops"]["value"] == 40
    assert job["imbalance"]["operator_flops"]["value"] == 1.5
    assert "max/mean" in text and "1.500" in text


@pytest.mark.parametrize("content, message", [
    (b"", "is empty, not a JSON report"),
    (b"{not json", "is not JSON"),
    (b"\xff\xfe\x00", "not UTF-8 text"),
    (b"[" * 100000 + b"]" * 100000, "the report"),
    (b'{"schema_version": 1}', "is not a TorchScan report"),
])
def test_merge_command_refuses_bad_files(torchscan, tmp_path, capsys, content, message):
    good = tmp_path / "rank0.json"
    good.write_text(json.dumps(_rank_report(0, 2, 1, 1, 1)))
    bad = tmp_path / "rank1.json"
    bad.write_bytes(content)
    code, _, _ = _cli(["merge", str(good), str(bad)], capsys)
    assert isinstance(code, str) and code.startswith("torchscan merge: ") and message in code, code
    assert "rank1.json" in code
    code, _, _ = _cli(["merge", str(good), str(tmp_path / "absent.json")], capsys)
    assert "does not exist" in code
    code, _, _ = _cli(["merge", str(good), str(tmp_path)], capsys)
    assert "is a directory" in code


# ------------------------------------------------- one process, one rank


def test_single_process_group_context_and_honest_flops(torchscan, tmp_path):
    """A world of one (gloo, in this process): the context names it; a
    broadcast costs zero FLOPs (complete), an all-reduce leaves the FLOP total
    partial with its reason; bytes of a group of one are zero (nothing to
    send); a collective that raised is unavailable, never zero."""
    reason = _gloo_reason()
    if reason:
        pytest.skip(reason)
    import torch.distributed as dist

    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        t = torch.ones(5)
        with torchscan.scan() as s:
            dist.broadcast(t, src=0)
        report = s.report()
        assert report["context"]["rank"] == 0 and report["context"]["world_size"] == 1
        assert report["context"]["backend"] == "gloo"
        assert "0" in [g["name"] for g in report["context"]["process_groups"]]
        assert report["total"]["status"] == "complete" and report["total"]["value"] == 0
        assert report["ignored_operators"]["c10d.broadcast_"]["reason"] == "communication"
        (call,) = report["communication"]["calls"]
        # 5 float32 = 20 bytes; the root of a group of one sends to nobody.
        assert call["tensor_bytes"] == 20 and call["bytes_sent"] == 0 and call["bytes_received"] == 0
        assert call["group"]["size"] == 1 and call["convention"] == "direct_broadcast"
        # Module view: no FLOPs or MACs either; its local memory accesses are
        # the backend's, so DMAs are not claimed (a lower bound, not zero).
        module = s.module_report()
        assert module["totals"]["module_flops"]["status"] == "complete"
        assert module["totals"]["module_flops"]["value"] == 0
        assert module["totals"]["dmas"]["status"] != "complete"
        assert any("communication" in d["message"] for d in module["diagnostics"] if d["metric"] == "dmas")

        # The C++ scan report (what the attach launcher writes) carries the
        # same context and section, and merges like the Python reports.
        scan_report = json.loads(s._session.scan_report())
        assert (scan_report["context"]["rank"], scan_report["context"]["world_size"]) == (0, 1)
        assert scan_report["communication"]["calls"][0]["tensor_bytes"] == 20
        job = torchscan.merge_reports([scan_report], ["scan.json"])
        assert job["context"]["report_kind"] == "scan_report"
        assert job["totals"]["operator_flops"]["value"] == 0 and job["totals"]["bytes_received"]["value"] == 0

        with torchscan.scan() as s:
            dist.all_reduce(t)
        report = s.report()
        assert report["total"]["status"] == "partial"
        assert [(d["code"], d["operator"]) for d in report["diagnostics"]] == [("excluded_operator", "c10d.allreduce_")]
        assert "communication section" in report["diagnostics"][0]["message"]
        assert "c10d.allreduce_" not in report["by_operator"]  # bytes are never FLOPs

        # A functional collective on a group name c10d does not know raises
        # inside the op: its bytes are unavailable with the reason.
        with torchscan.scan() as s:
            with pytest.raises(Exception):
                torch.ops._c10d_functional.all_reduce(t, "sum", "no-such-group")
        comm = s.report()["communication"]
        (call,) = comm["calls"]
        assert call["status"] == "unavailable" and call["bytes_sent"] is None and "raised" in call["reason"]
        assert comm["totals"]["bytes_sent"]["status"] == "partial"
        assert comm["totals"]["bytes_sent"]["known_value"] == 0
        assert {d["code"] for d in comm["diagnostics"]} == {"unavailable_collective"}
    finally:
        dist.destroy_process_group()
    # Outside a job, reports carry neither.
    with torchscan.scan() as s:
        torch.ones(2).sum()
    assert "rank" not in s.report()["context"] and "communication" not in s.report()


# ------------------------------------------------- a real 2-rank job


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    reason = _gloo_reason()
    if reason:
        pytest.skip(reason)
    out = tmp_path_factory.mktemp("job")
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(REPO / "python_shim"), str(REPO), os.environ.get("PYTHONPATH", "")]))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
           "--master-port", str(_free_port()), str(WORKER), str(out)]
    start = time.monotonic()
    run = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    print(f"2-rank job: {time.monotonic() - start:.1f} s")
    return out


def _load(job_dir, name):
    return json.loads((job_dir / name).read_text())


def test_ddp_step_allreduce_bytes_and_merge(torchscan, job_dir, capsys):
    # Hand derivation. The model has 4*8 + 8 + 8*2 + 2 = 58 float32
    # parameters: 58 * 4 = 232 bytes of gradients. DDP fills buckets in
    # reverse parameter order; its first bucket is capped at
    # dist._DEFAULT_FIRST_BUCKET_BYTES (1 MiB) and later ones at bucket_cap_mb
    # (25 MiB), so all 232 bytes form one bucket: one all-reduce of B = 232
    # bytes per step. A ring all-reduce on n = 2 ranks sends and receives
    # 2(n-1)/n * B = B = 232 bytes per rank. The constructor's broadcast ran
    # before the scan, and a model without buffers broadcasts none in forward.
    import torch.distributed as dist

    assert dist._DEFAULT_FIRST_BUCKET_BYTES >= 232
    paths = []
    for rank in (0, 1):
        report = _load(job_dir, f"ddp_rank{rank}.json")
        ctx = report["context"]
        assert (ctx["rank"], ctx["world_size"], ctx["backend"]) == (rank, 2, "gloo")
        assert [g["name"] for g in ctx["process_groups"]] == ["0"]
        comm = report["communication"]
        (call,) = comm["calls"]
        assert call["op"] == "c10d.allreduce_" and call["collective"] == "all_reduce"
        assert call["group"]["name"] == "0" and call["group"]["size"] == 2 and call["group"]["rank"] == rank
        assert call["reduce_op"] == "sum" and call["convention"] == "ring_all_reduce"
        assert call["tensor_bytes"] == 232
        assert call["bytes_sent"] == 232 and call["bytes_received"] == 232
        assert comm["totals"]["bytes_sent"]["status"] == "complete"
        assert comm["totals"]["bytes_sent"]["value"] == 232
        # The all-reduce adds what it receives: the FLOP total says so and is a
        # lower bound; no communication op is among the FLOPs.
        assert report["total"]["status"] == "partial"
        assert ("excluded_operator", "c10d.allreduce_") in [(d["code"], d.get("operator"))
                                                            for d in report["diagnostics"]]
        assert not [op for op in report["by_operator"] if "c10d" in op]
        paths.append(str(job_dir / f"ddp_rank{rank}.json"))
    out = job_dir / "job.json"
    code, text, _ = _cli(["merge", *paths, "--output", str(out)], capsys)
    assert code == 0, text
    job = json.loads(out.read_text())
    # Two ranks of 232 bytes each: 464 sent and received in the job; the max is
    # 232 and max / mean = 232 / 232 = 1.
    assert job["context"]["world_size"] == 2 and job["context"]["backends"] == ["gloo"]
    assert job["totals"]["bytes_sent"]["value"] == 464 and job["totals"]["bytes_received"]["value"] == 464
    assert job["slowest_rank"]["max"]["bytes_sent"]["value"] == 232
    assert job["imbalance"]["bytes_sent"] == {"status": "complete", "value": 1.0}
    assert job["communication"]["by_operator"]["c10d.allreduce_"] == {
        "calls": 2, "bytes_sent": 464, "bytes_received": 464, "unavailable_calls": 0}
    # Both ranks ran the same shapes: equal known FLOPs, a partial sum.
    known = [r["totals"]["operator_flops"]["known_value"] for r in job["ranks"]]
    assert known[0] == known[1] > 0
    assert job["totals"]["operator_flops"] == {"status": "partial", "value": None, "known_value": 2 * known[0],
                                              "unit": "FLOPs", "scope": "job", "method": "operator_dispatch"}
    assert job["imbalance"]["operator_flops"]["status"] == "unavailable"


def test_crawl_module_inside_a_job(torchscan, job_dir, capsys):
    paths = []
    for rank in (0, 1):
        report = _load(job_dir, f"crawl_rank{rank}.json")
        assert report["context"]["rank"] == rank and report["context"]["world_size"] == 2
        # A forward of a plain model communicates nothing: a complete zero.
        assert report["communication"]["calls"] == []
        assert report["communication"]["totals"]["bytes_sent"]["value"] == 0
        assert "communication" not in report["operator_flops"]  # once, at the top level
        paths.append(str(job_dir / f"crawl_rank{rank}.json"))
    code, text, _ = _cli(["merge", *paths], capsys)
    assert code == 0
    # Linear(4,8) on one row: addmm 4*8*2 = 64, relu 8, Linear(8,2) 8*2*2 = 32 -> 104 per rank, 208 in the job.
    assert "208" in text
    # Reports of different steps are not merged together.
    code, _, _ = _cli(["merge", paths[0], str(job_dir / "ddp_rank1.json")], capsys)
    assert "different kinds" in code


def test_fsdp2_step_gathers_and_scatters(torchscan, job_dir):
    import torch.distributed.fsdp  # noqa: F401, PLC0415  (registers the fsdp:: operators, as in the workers)
    report0 = _load(job_dir, "fsdp_rank0.json")
    if "fsdp_error" in report0:
        pytest.skip(f"FSDP2 (fully_shard) does not run on CPU gloo with this torch: {report0['fsdp_error']}")
    # Hand derivation. fully_shard shards each parameter on dim 0 over 2 ranks:
    # weight [8,4] -> 4 rows, bias [8] -> 4, weight [2,8] -> 1 row, bias [2] -> 1:
    # 16 + 4 + 8 + 1 = 29 floats per rank, 58 gathered = 232 bytes. The root
    # module keeps its parameters gathered between forward and backward, so the
    # step runs one all-gather into F = 232 bytes (forward) and one
    # reduce-scatter of an F = 232-byte gradient input (backward). Ring on
    # n = 2: (n-1)/n * F = 116 bytes sent and received by each.
    for rank in (0, 1):
        comm = _load(job_dir, f"fsdp_rank{rank}.json")["communication"]
        kinds = [(c["collective"], c["tensor_bytes"], c["bytes_sent"], c["bytes_received"]) for c in comm["calls"]]
        assert kinds == [("all_gather", 232, 116, 116), ("reduce_scatter", 232, 116, 116)], kinds
        assert comm["totals"]["bytes_sent"]["value"] == 232
        assert set(comm["conventions"]) == {"ring_all_gather", "ring_reduce_scatter"}
        # FSDP2's copy operators (fsdp::all_gather_copy_in, split_with_sizes_copy,
        # chunk_cat) run Python kernels made of recorded PyTorch calls: those
        # copies are their work, zero FLOPs, and nothing is left uncounted.
        report = _load(job_dir, f"fsdp_rank{rank}.json")
        uncounted = [d["operator"] for d in report["diagnostics"] if d["code"] == "uncounted_operator"]
        assert uncounted == [], uncounted
        # From torch 2.15 on the gradients' copy-in is fsdp::chunk_cat_mixed_dtype
        # (a C++ kernel, a copy itself) in place of fsdp::chunk_cat's _chunk_cat.
        chunk_cat = "fsdp.chunk_cat_mixed_dtype" if hasattr(torch.ops.fsdp, "chunk_cat_mixed_dtype") else "aten._chunk_cat"
        for copy in ("aten._foreach_copy_", "aten.split_with_sizes_copy", chunk_cat):
            assert report["ignored_operators"][copy]["reason"] == "copy", report["ignored_operators"]


def test_functional_collectives_resolve_their_group(torchscan, job_dir):
    # Hand derivation, n = 2, float32 (4 bytes):
    # all_reduce of 6 values (24 bytes): 2(n-1)/n * 24 = 24 each way;
    # all_gather_into_tensor of 6 values per rank into 12 (48 bytes): (n-1)/n * 48 = 24;
    # reduce_scatter_tensor of an 8-value input (32 bytes): (n-1)/n * 32 = 16;
    # all_to_all_single of 4 values per rank, uneven: rank 0's input splits
    # [1, 3] (1 value to itself, 3 to rank 1), rank 1's [2, 2]; so rank 0
    # receives [1, 2] (3 values, 12 bytes) and rank 1 [3, 2] (5 values, 20
    # bytes). A rank sends its input but its own slice and receives its output
    # but its own slice: rank 0 sends 16 - 4 = 12, receives 12 - 4 = 8; rank 1
    # sends 16 - 8 = 8, receives 20 - 8 = 12 (what the other sent, both ways).
    for rank, a2a_sent, a2a_received in ((0, 12, 8), (1, 8, 12)):
        comm = _load(job_dir, f"functional_rank{rank}.json")["communication"]
        rows = [(c["op"], c["group"]["name"], c["group"]["size"], c["bytes_sent"], c["bytes_received"])
                for c in comm["calls"]]
        assert rows == [("_c10d_functional.all_reduce", "0", 2, 24, 24),
                        ("_c10d_functional.all_gather_into_tensor", "0", 2, 24, 24),
                        ("_c10d_functional.reduce_scatter_tensor", "0", 2, 16, 16),
                        ("_c10d_functional.all_to_all_single", "0", 2, a2a_sent, a2a_received)], rows
        # wait_tensor moves nothing and is no collective call.
        assert comm["totals"]["collective_calls"] == 4
        assert comm["totals"]["bytes_received"]["value"] == 24 + 24 + 16 + a2a_received
        # gloo's worker threads inherit the dispatch state and copy the
        # buffers (views, empty, copy_, reshape's decomposition): unseen, but
        # no FLOPs of their own, so they leave the FLOPs' status to the rest.
        codes = {d["code"] for d in _load(job_dir, f"functional_rank{rank}.json")["diagnostics"]}
        assert "unattributed_thread_work" not in codes, codes


def test_fsdp_copy_in_and_stream_bookkeeping_are_zero_cost(torchscan, checks):
    # FSDP2's operators from torch 2.15 on. chunk_cat_mixed_dtype is _chunk_cat
    # casting to out's dtype as it copies: no arithmetic (conversions and
    # copies are excluded from the FLOP table), 0 FLOPs, and counted as one
    # copy, not as an unknown operator. record_grad_output_stream only orders
    # a buffer's free behind a stream: metadata.
    import torch.distributed.fsdp  # noqa: F401, PLC0415  (registers the fsdp:: operators)
    if not hasattr(torch.ops.fsdp, "chunk_cat_mixed_dtype"):
        pytest.skip(f"torch {torch.__version__} has no fsdp::chunk_cat_mixed_dtype")
    tensors = [torch.randn(4, 3, dtype=torch.bfloat16), torch.randn(2, 3)]
    # Each input split into 2 chunks along dim 0: rows of 2*3 + 1*3 = 9 values.
    out = torch.empty(2, 9)

    def workload():
        torch.ops.fsdp.chunk_cat_mixed_dtype(tensors, dim=0, num_chunks=2, out=out)
        torch.ops.fsdp.record_grad_output_stream(out, 0, 0, 0)

    report = torchscan.measure_flops(workload)
    checks.assert_valid_report(report)
    assert torch.equal(out, torch._chunk_cat([t.float() for t in tensors], 0, 2))
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert report["total"]["value"] == 0
    assert checks.uncounted(report) == {}
    ignored = report["ignored_operators"]
    assert ignored["fsdp.chunk_cat_mixed_dtype"]["reason"] == "copy", ignored
    assert ignored["fsdp.record_grad_output_stream"]["reason"] == "metadata", ignored
