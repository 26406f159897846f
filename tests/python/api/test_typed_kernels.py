"""The operators with typed kernels on the mode key (Note [Typed kernels] in
torchscan_dispatch/core/fallback.cc) are recorded exactly as the boxed
fallback records them: every report of a set of zoo workloads, and of each
typed operator under the conditions that change how a call is recorded, is
the same in a process whose library loaded without them
(TORCHSCAN_TYPED_KERNELS=0). The switch is checked to take effect, so the
comparison cannot pass with both processes on the same path."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# The zoo without ResNet-50: its three workloads take most of the zoo's time,
# and the script below calls every typed operator itself.
ZOO = ["small_cnn_train", "mlp_train", "decoder_eval", "decoder_train", "encoder_fast_path", "mha_slow_path", "lstm",
       "bert_eval", "gpt2_eval", "bert_step_adamw_foreach", "llama_step_adamw_foreach", "lstm_step_adamw_fused"]

# Every typed operator, then each condition that changes the recording: autograd
# work (grad mode with an operand that requires grad), a call that raises,
# torch.func.vmap, in-place calls on views, nested scans, an all-threads scan
# with a second thread, a trace and memory view (which record owned
# children), a streaming scan, and the module analyses.
SCRIPT = r"""
import json, sys, threading
import torch, torch.nn as nn, torch.nn.functional as F
sys.path[:0] = [ROOT, ROOT + "/python_shim"]
import torchscan
from tools.zoo_reports import normalise, trace_shape

torch.manual_seed(0)
x, w, b = torch.randn(4, 8), torch.randn(3, 8), torch.randn(3)
img, kernel = torch.randn(1, 3, 8, 8), torch.randn(4, 3, 3, 3)
q = torch.randn(1, 2, 4, 8)
mean, var, ids, table = torch.zeros(3), torch.ones(3), torch.tensor([1, 2]), torch.randn(5, 8)
bags, bag_table = torch.tensor([0, 1]), torch.randn(5, 8, requires_grad=True)

def ops(x, w):
    y = torch.add(x, x, alpha=2) - x
    y = y * x / (x.abs() + 1)
    y = torch.pow(y, 2).neg().exp().rsqrt().sin().cos().tanh().sigmoid()
    y = F.hardsigmoid(F.hardswish(F.silu(F.gelu(F.gelu(F.relu(y), approximate="tanh")))))
    z = y.clone()
    z.add_(x)
    z.mul_(x)
    z[1:3].relu_()
    F.silu(z, inplace=True)
    F.hardswish(z, inplace=True)
    F.linear(y, w, b)
    torch.addmm(b, y, w.t())
    y @ w.t()
    torch.mm(y, w.t())
    torch.bmm(y[None], w.t()[None])
    F.conv2d(img, kernel, padding=1)
    F.batch_norm(img, mean, var, training=False)
    F.layer_norm(y, (8,))
    F.embedding(ids, table)
    # Four results each: embedding_bag.padding_idx, and below it
    # _embedding_bag_forward_only, or _embedding_bag where grad mode is on
    # and the table requires grad; the overload without padding_idx.
    F.embedding_bag(ids, table, bags, mode="max")
    F.embedding_bag(ids, bag_table, bags)
    torch.embedding_bag(table, ids, bags)
    F.scaled_dot_product_attention(q, q, q, is_causal=True)
    F.softmax(y, -1)
    F.dropout(y, 0.5, training=False)
    y.mean(-1)
    y.view(32); y.reshape(8, 4); y.t(); y.transpose(0, 1); y.permute(1, 0); y.unsqueeze(0)
    y[None].expand(2, 4, 8); y[1]; y.flatten(); y.t().contiguous()
    F.hardtanh(y); F.relu6(z.clone()); y.abs().sqrt(); y.clamp_min(0.1); torch.where(y > 0.5, y, x)
    y.masked_fill(y > 0.5, 0.0); F.hardtanh(z, inplace=True); z.clamp_min_(0.0); z.div_(x.abs() + 1); z.div_(2)
    z.copy_(y); z[0].fill_(1.5); y.sum(); y.sum(0); y.narrow(1, 2, 3); y.index_select(0, ids); y.detach()
    F.max_pool2d(img, 2); F.avg_pool2d(img, 2); F.adaptive_avg_pool2d(img, 1)
    y.to(torch.float64); y.to("cpu", torch.float64); y.to(dtype=torch.float64, copy=True)
    return z

out = {}
with torch.no_grad(), torchscan.scan() as s:
    ops(x, w)
out["no_grad"] = s.report()
out["typed"] = torch._C._dispatch_has_kernel_for_dispatch_key("aten::add.Tensor", "TESTING_ONLY_GenericMode")

wg = w.clone().requires_grad_()
with torchscan.scan() as s:
    ops(x, wg).sum()
    F.linear(x, wg).sum().backward()
out["grad"] = s.report()

with torchscan.scan() as s:
    try:
        torch.add(torch.ones(2), torch.ones(3))
    except RuntimeError:
        pass
    F.linear(x, w)
out["raised"] = s.report()

with torchscan.scan() as s:
    torch.func.vmap(lambda r: F.linear(r, w) * 2 + r.sum())(x)
out["vmap"] = s.report()

with torchscan.scan() as outer:
    torch.add(x, x)
    with torchscan.scan() as inner:
        ops(x, w)
    torch.mul(x, x)
out["outer"], out["inner"] = outer.report(), inner.report()

with torchscan.scan(threads="all") as s:
    t = threading.Thread(target=lambda: ops(x, w))
    t.start()
    t.join()
    ops(x, w)
out["all_threads"] = s.report()

with torchscan.scan(trace=True, memory=True) as s:
    ops(x, w)
trace = s.trace()
out["trace_memory"] = [s.report(), trace_shape(trace), s.memory_report()]
# Operators with a typed kernel (by name: the trace does not name overloads)
# that ops() never called.
typed = {n.split("::")[1].split(".")[0]
         for n in torch._C._dispatch_get_registrations_for_dispatch_key("TESTING_ONLY_GenericMode")}
out["uncalled"] = sorted(typed - {e["name"].split(".")[1] for e in trace["traceEvents"] if e.get("ph") == "X"})

with torchscan.scan(streaming=True) as s:
    for _ in range(3):
        ops(x, w)
out["streaming"] = s.report()

model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(inplace=True), nn.Flatten(),
                      nn.Linear(144, 5), nn.GELU())
out["crawl"] = torchscan.crawl_module(model, args=(img,))
out["modules"] = torchscan.measure_flops(lambda: model(img), modules=True)
print(json.dumps(normalise(out), sort_keys=True))
"""


def _env(typed: bool) -> dict:
    env = dict(os.environ)
    env.pop("TORCHSCAN_TYPED_KERNELS", None)
    if not typed:
        env["TORCHSCAN_TYPED_KERNELS"] = "0"
    return env


def _run_both(code: str, *argv: str) -> dict:
    """stdout of `code` in a process with typed kernels and one without,
    run side by side."""
    procs = {typed: subprocess.Popen([sys.executable, "-c", f"ROOT = {ROOT!r}\n" + code,
                                      *(a.format(typed=typed) for a in argv)],
                                     cwd=ROOT, env=_env(typed), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
             for typed in (True, False)}
    out = {}
    for typed, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        assert p.returncode == 0, stderr[-3000:]
        out[typed] = stdout
    return out


def _differences(a, b, where: str) -> list:
    from tools import zoo_reports

    diffs: list = []
    zoo_reports._differences(a, b, where, diffs, 10)
    return diffs


@pytest.fixture(scope="module")
def both():
    out = _run_both(SCRIPT)
    return tuple(json.loads(out[typed].strip().splitlines()[-1]) for typed in (True, False))


def test_the_switch_takes_effect(both):
    typed, boxed = both
    assert typed["typed"] is True and boxed["typed"] is False


def test_every_typed_operator_is_called(both):
    typed, _ = both
    assert typed["uncalled"] == []


def test_each_condition_records_the_same_reports(both):
    typed, boxed = both
    for case in sorted(typed):
        if case not in ("typed", "uncalled"):
            diffs = _differences(typed[case], boxed[case], case)
            assert not diffs, "typed (A) and boxed (B) recordings differ:\n" + "\n".join(diffs)
    # A hand check that the scans counted what they ran: the outer scan saw
    # torch.add and torch.mul on 4x8 floats (32 FLOPs each) and the inner
    # scan's calls too (scans nest: each counts every call made inside it).
    assert typed["outer"]["total"]["value"] == 64 + typed["inner"]["total"]["value"]
    assert typed["outer"]["total"]["status"] == typed["inner"]["total"]["status"] == "complete"


def test_zoo_reports_are_the_same(tmp_path):
    code = ("import sys\nsys.path[:0] = [ROOT, ROOT + '/python_shim']\nfrom tools import zoo_reports\n"
            f"zoo_reports.write(sys.argv[1], {ZOO!r})\n")
    _run_both(code, str(tmp_path / "{typed}"))
    typed, boxed = str(tmp_path / "True"), str(tmp_path / "False")
    names = sorted(os.listdir(typed))
    assert names == sorted(os.listdir(boxed)) and len(names) >= 7 * len(ZOO)
    for name in names:
        with open(os.path.join(typed, name)) as f:
            a = json.load(f)
        with open(os.path.join(boxed, name)) as f:
            b = json.load(f)
        diffs = _differences(a, b, name)
        assert not diffs, "typed (A) and boxed (B) zoo reports differ:\n" + "\n".join(diffs)
