"""A server under the attach launcher for many requests: its resident memory
stays flat once warm (the report's layer rows are aggregated across
requests, and streaming drops what it aggregated), and the final report's
aggregated sums are requests x the in-process crawl_module of the same
input. tools/benchmark_serving.py --soak runs the same at 100,000 requests.

The model, a small MLP: Linear(64, 64) -> ReLU -> Linear(64, 10) on a
(1, 64) input of ones (the server's at::ones, built outside the request).
By hand, per request (torchscan_flops_v1):
  operator view: addmm 2*1*64*64 = 8192, relu 64, addmm 2*1*64*10 = 1280:
    9536 FLOPs;
  module view: Linear 64 outputs x (64 mul + 63 add + 1 bias) = 8192, ReLU
    64, Linear 10 x 128 = 1280: 9536 FLOPs; MACs 64*64 + 64*10 = 4736;
  accesses: Linear 64 in + 4096 weight + 64 bias + 64 out = 4288, ReLU
    64 + 64 = 128, Linear 64 + 640 + 10 + 10 = 724: 5140.
"""
import json
import sys

import pytest
import torch

from conftest import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT / "tools"))
import benchmark_serving as serving  # noqa: E402

PER_REQUEST = {"operator_flops": 9536, "module_flops": 9536, "macs": 4736, "dmas": 5140}
REQUESTS = 40_000
# Holding a row per module call costs about 1.3 KB per request of this
# model (four module calls and a request); aggregated, what is left is the
# allocator settling, well under this. Enough requests that a single step
# of a few MiB at a random moment (an allocator growing once, not rows
# kept per request) stays under it too: 3 MiB over the 28,000 requests
# after the warm-up is 112 bytes a request, over 8,400 it would be 374.
FLAT_BYTES_PER_REQUEST = 256
GROWING_REQUESTS = 12_000  # kept rows grow by far more: fewer requests show it


@pytest.fixture(scope="module")
def mlp(tmp_path_factory, torchscan):
    assert serving.SERVER.exists(), "run `bash tools/setup.sh --tests` (it builds the example server)"
    path, shape = serving.save_model("mlp", tmp_path_factory.mktemp("soak"))
    model = torch.jit.load(str(path))
    crawl = torchscan.crawl_module(model, args=(torch.ones(shape),))
    return {"path": path, "shape": shape, "crawl": crawl}


def soak(mlp, out, requests, *launcher):
    command = serving.attached_command(out, serving.server_command(mlp["path"], mlp["shape"], requests, 2),
                                       *launcher)
    _, samples = serving.serve_sampling_rss(command)
    return json.loads(out.read_text()), serving.slope_after_warmup(samples, requests, warmup=0.3)


def test_resident_memory_is_flat_and_the_aggregate_adds_up(mlp, tmp_path):
    report, slope = soak(mlp, tmp_path / "report.json", REQUESTS)
    assert slope is not None and slope < FLAT_BYTES_PER_REQUEST, slope
    agg = report["aggregate"]
    assert agg["requests"] == REQUESTS
    crawl = mlp["crawl"]["totals"]
    for metric, per_request in PER_REQUEST.items():
        # The hand derivation is the in-process crawl's (module view) ...
        if metric != "operator_flops":
            assert crawl[metric]["value"] == per_request, metric
        # ... the aggregated rows add up to requests x that ...
        rows = [l["metrics"][metric] for l in agg["layers"]]
        assert all(m["status"] == "complete" for m in rows), metric
        assert sum(m["value"] for m in rows) == REQUESTS * per_request, metric
        # ... and so do the per-request totals.
        (common,) = agg["request_classes"]
        assert common["requests"] * common["totals"][metric]["value"] == REQUESTS * per_request, metric
        d = agg["request_totals"][metric]
        assert (d["min"], d["median"], d["p99"], d["max"]) == (per_request,) * 4, metric
    assert report["operator_flops"]["total"]["value"] == REQUESTS * PER_REQUEST["operator_flops"]
    # One row per module call of the scripted model, each called once per request.
    assert sorted(l["path"] for l in agg["layers"]) == ["", "0", "1", "2"]
    assert {l["calls"] for l in agg["layers"]} == {REQUESTS}


def test_rows_of_every_request_grow_with_the_requests(mlp, tmp_path):
    # What the aggregate replaces: every request's own rows, kept on request,
    # grow the server by each module call served (the check above can fail).
    report, slope = soak(mlp, tmp_path / "report.json", GROWING_REQUESTS, "--per-request-layers")
    assert slope is not None and slope > FLAT_BYTES_PER_REQUEST, slope
    assert len(report["requests"]) == GROWING_REQUESTS and len(report["layers"]) == 4 * GROWING_REQUESTS
