"""TorchScript module scopes in a C++ server scanned through the C++ API
(tests/cpp/integrations/example_server.cc, example_server_scanned build): per-layer rows
equal crawl_module's on the eager model."""
import json
import subprocess

import torch

from conftest import REPO_ROOT

SCANNED_SERVER = REPO_ROOT / "bazel-bin/tests/example_server_scanned"


class SharedTwice(torch.nn.Module):
    """The same submodule called twice back to back: in TorchScript both
    calls are inlined into the root's forward with no call between them."""

    def __init__(self):
        super().__init__()
        self.shared = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.shared(self.shared(x)))


def rows(layers):
    """(path, call_index) -> the module view's per-layer values."""
    return {(l["path"], l["call_index"]): {m: l["metrics"][m]["value"] for m in ("module_flops", "macs", "dmas")}
            for l in layers}


def test_back_to_back_calls_of_one_submodule_are_two_rows_as_in_crawl_module(torchscan, tmp_path):
    assert SCANNED_SERVER.exists(), f"{SCANNED_SERVER} is missing: run `bash tools/setup.sh --tests`"
    torch.manual_seed(0)
    model = SharedTwice().eval()
    path = tmp_path / "shared_twice.pt"
    torch.jit.script(model).save(str(path))
    crawl = rows(torchscan.crawl_module(model, args=(torch.ones(2, 8),))["layers"])
    # By hand, input (2, 8): shared is Linear(8, 8): 16 outputs x (8 multiplies
    # + 7 adds + 1 bias) = 256 FLOPs, 16 x 8 = 128 MACs, 16 inputs + 64
    # weights + 8 biases + 16 outputs = 104 accesses, per call; head is
    # Linear(8, 2): 4 x 16 = 64, 4 x 8 = 32, 16 + 16 + 2 + 4 = 38.
    shared = {"module_flops": 256, "macs": 128, "dmas": 104}
    assert crawl == {("", 0): {"module_flops": 0, "macs": 0, "dmas": 0}, ("shared", 0): shared,
                     ("shared", 1): shared, ("head", 0): {"module_flops": 64, "macs": 32, "dmas": 38}}

    # The server's own rows (kept on request) and its default, the rows
    # aggregated across requests (one request: each row one call), both as
    # crawl_module's.
    for extra, field in (([], "aggregate"), (["--per-request-layers", "all"], "layers")):
        out = tmp_path / f"report-{field}.json"
        run = subprocess.run([str(SCANNED_SERVER), "--model", str(path), "--requests", "1", "--workers", "1",
                              "--input", "2,8", "--scan", str(out), *extra], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        report = json.loads(out.read_text())
        layers = report["aggregate"]["layers"] if field == "aggregate" else report["layers"]
        assert rows(layers) == crawl, field
        if field == "aggregate":
            assert report["context"]["layer_rows"] == "aggregated"
            assert all(l["calls"] == 1 for l in layers)
