"""Roofline from the recorded data flow: hand-derived bytes, fusion, SoL."""

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest
import torch
from torch import nn

import torchscan
from torchscan.roofline import gpu_spec, roofline_svg

# H100 SXM (gpus.json): 3350 GB/s; fp32 67 TFLOPS (no fp32 tensor-core path: matmuls
# also at 67); bf16 989.4 TFLOPS tensor core, 133.8 TFLOPS non-tensor.
H100_BW = 3350e9
A100_BW = 2039e9


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128))


def test_linear_relu_linear_h100_fp32_is_the_reference_example():
    r = torchscan.roofline(mlp(), torch.randn(1, 512), gpu="h100-sxm", precision="fp32")
    t = r["totals"]
    # FLOPs (operator view, 2K per K-term dot, bias omitted): 2*512*256 + 256 (relu) + 2*256*128
    assert t["flops"] == 262144 + 256 + 65536 == 327936
    assert t["flops_matmul"] == 327680
    # Parameters: 512*256 + 256 + 256*128 + 128
    assert t["parameters"] == 164224
    # Unfused elements (fp32, 4 B):
    #   addmm 1: reads x 512 + W1^T 131072 + b1 256 = 131840, writes 256
    #   relu:    reads 256, writes 256
    #   addmm 2: reads 256 + W2^T 32768 + b2 128 = 33152, writes 128
    #   = 165888 elements = 663552 B
    assert t["hbm_bytes_unfused"] == 165888 * 4 == 663552
    # Fused: relu's producer and consumer are matmuls (epilogues are not fused): no
    # pointwise chain longer than one call, so nothing is saved.
    assert t["hbm_bytes_fused"] == 663552
    assert t["fusion_reduction"] == 0.0
    assert t["arithmetic_intensity"] == pytest.approx(327936 / 663552)  # 0.494 FLOPs/B
    assert t["ridge_point"] == pytest.approx(67e12 / H100_BW)  # 20.0, as the reference prints
    assert t["compute_sol_ms"] == pytest.approx(327936 / 67e12 * 1e3)  # 4.89e-6 ms
    assert t["memory_sol_ms"] == pytest.approx(663552 / H100_BW * 1e3)  # 1.98e-4 ms
    assert t["bottleneck"] == "memory"
    # The reference prints 0.30 GFLOPs, 0.002 GB / 0.001 GB and COMPUTE BOUND for this model:
    # its FLOPs are ~900x the 327,936 the three kernels do, so its intensity (300) and
    # bottleneck follow from that figure, not from the model.
    ops = {o["operator"]: o for o in r["operators"]}
    assert ops["aten.addmm"]["calls"] == 2 and ops["aten.addmm"]["class"] == "matmul"
    assert ops["aten.relu"]["hbm_bytes"] == 2 * 256 * 4 and ops["aten.relu"]["bound"] == "memory"
    layers = {(l["path"], l["depth"]): l for l in r["layers"]}
    assert layers[("0", 1)]["hbm_bytes"] == (131840 + 256) * 4
    assert layers[("Sequential", 0)]["flops"] == 327936
    json.dumps(r)  # JSON-serialisable


def test_precision_changes_bytes_and_peaks_not_flops():
    r = torchscan.roofline(mlp(), torch.randn(1, 512), gpu="h100-sxm", precision="bf16", actual_ms=0.01)
    t = r["totals"]
    assert t["flops"] == 327936
    assert t["hbm_bytes_unfused"] == 165888 * 2
    # matmuls at the bf16 tensor-core peak, relu at the non-tensor-core bf16 peak
    assert t["compute_sol_ms"] == pytest.approx((327680 / 989.4e12 + 256 / 133.8e12) * 1e3)
    assert t["ridge_point"] == pytest.approx(989.4e12 / H100_BW)
    assert t["achieved_fraction_of_sol"] == pytest.approx(t["sol_ms"] / 0.01)
    with pytest.raises(ValueError, match="no fp8 tensor peak"):
        torchscan.roofline(mlp(), torch.randn(1, 512), gpu="a100-80gb", precision="fp8")


def test_conv_bn_relu_eval_fuses_bn_and_relu():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU()).eval()
    r = torchscan.roofline(m, torch.randn(1, 3, 8, 8), gpu="a100-80gb", precision="fp32")
    t = r["totals"]
    # conv: reads x 3*8*8 = 192 + W 8*3*3*3 = 216 + b 8 = 416, writes 8*6*6 = 288
    # batch norm (eval: pointwise): reads y 288 + weight, bias, running mean, running var 4*8 = 320,
    #   writes 288 (its saved statistics are empty in eval)
    # relu: reads 288, writes 288
    # unfused = 416 + 288 + 320 + 288 + 288 + 288 = 1888 elements
    assert t["hbm_bytes_unfused"] == 1888 * 4
    # fused: BN + ReLU are one kernel: BN's output has no other consumer, so it never
    # reaches HBM: 416 + 288 (conv) + 320 (BN's operands) + 288 (ReLU's output) = 1312
    assert t["hbm_bytes_fused"] == 1312 * 4
    assert t["fusion_reduction"] == pytest.approx(1 - 1312 / 1888)
    assert t["fused_kernels"] == 2 and t["kernels"] == 3
    # FLOPs: conv 2*27*288 = 15552 (2K per K = 3*3*3 term dot, bias omitted); BN with saved
    # statistics (torchscan_flops_v1: 2N + 2C + AN, A = 2 affine tensors) = 4*288 + 2*8 = 1168;
    # relu one selection per value: 288
    assert t["flops"] == 15552 + 1168 + 288 == 17008
    # A100: 19.5 TFLOPS fp32 for both classes, 2039 GB/s
    assert t["compute_sol_ms"] == pytest.approx(17008 / 19.5e12 * 1e3)
    assert t["memory_sol_ms"] == pytest.approx(1312 * 4 / A100_BW * 1e3)
    assert t["arithmetic_intensity"] == pytest.approx(17008 / (1312 * 4))
    assert t["bottleneck"] == "memory"


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = torch.relu(x)
        g = torch.sigmoid(h)
        return self.fc(g) + h  # h is read again by the add, after the linear


class Chain(Residual):
    def forward(self, x):
        return self.fc(torch.sigmoid(torch.relu(x)))


def test_residual_fusion_follows_real_consumers():
    x = torch.randn(4, 16)  # 64 elements; fc: W 256, b 16
    t = torchscan.roofline(Chain(), x, gpu="h100-sxm")["totals"]
    # relu (64 -> 64), sigmoid (64 -> 64), addmm (64 + 256 + 16 -> 64): unfused 128 + 128 + 400 = 656
    assert t["hbm_bytes_unfused"] == 656 * 4
    # relu + sigmoid fused: reads x, writes sigmoid's output (the addmm reads it): 128 + 400 = 528
    assert t["hbm_bytes_fused"] == 528 * 4
    t = torchscan.roofline(Residual(), x, gpu="h100-sxm")["totals"]
    # + add (reads addmm's 64 and h's 64, writes 64): unfused 656 + 192 = 848
    assert t["hbm_bytes_unfused"] == 848 * 4
    # relu + sigmoid fused, but h has a consumer outside the group (the add, which cannot join
    # it: its other operand comes from the addmm that runs after the group), so h is written:
    # group 64 + 64 (g) + 64 (h) = 192, addmm 400, add 192 -> 784 (a declaration-order
    # chain that dropped h would give 720)
    assert t["hbm_bytes_fused"] == 784 * 4
    assert t["fused_kernels"] == 3


def test_meta_7b_llama_forward():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                                   num_attention_heads=32, num_key_value_heads=32, vocab_size=32000)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.zeros(1, 128, dtype=torch.long, device="meta")
    r = torchscan.roofline(model, {"input_ids": ids}, gpu="h100-sxm", precision="bf16")
    t = r["totals"]
    assert t["parameters"] == 6738415616  # Llama-2-7B
    # Every weight matrix is read once per use: at least the non-embedding weights in bf16,
    # the lm_head included (6738415616 - 32000*4096 embedding rows, 64 norm vectors).
    weights = 6738415616 - 32000 * 4096
    assert t["hbm_bytes_fused"] > 2 * weights
    # FLOPs: 2 per weight per token for the products (128 tokens), plus attention.
    assert 2 * 128 * (weights - 65 * 4096) <= t["flops"] < 1.1 * 2 * 128 * weights
    assert t["flops_status"] == "complete"
    assert t["bottleneck"] in ("compute", "memory")
    assert any(l["path"] == "model.layers.31.mlp" for l in r["layers"])


def test_svg_and_cli(tmp_path):
    r = torchscan.roofline(mlp(), torch.randn(1, 512), gpu="l4")
    root = ET.fromstring(r.to_svg())
    assert root.tag.endswith("svg")
    points = [e for e in root.iter() if any(c.tag.endswith("title") for c in e)]
    assert len(points) == 4  # three layers and the model (the legend's markers have no title)
    # Each layer its own colour and a number keyed to its name in the legend.
    layers = [e for e in points if not e.get("fill") == "none"]
    assert len({e.get("fill") for e in layers}) == 3
    texts = ["".join(e.itertext()) for e in root.iter() if e.tag.endswith("text")]
    assert {"1", "2", "3"} <= set(texts)
    assert any(t.startswith("1  0 (Linear): ") for t in texts) and any(t.startswith("2  1 (ReLU): ") for t in texts)
    ET.fromstring(roofline_svg(r, points="operators"))
    out, plot = tmp_path / "r.json", tmp_path / "r.svg"
    subprocess.run([sys.executable, "-m", "torchscan", "roofline", "torchscan.examples:small_cnn", "--input-shape",
                    "3,32,32", "--gpu", "rtx-4090", "--plot", str(plot), "--output", str(out)], check=True,
                   capture_output=True)
    ET.parse(plot)
    saved = json.loads(out.read_text())
    assert saved["schema_version"] == 1 and saved["context"]["gpu"]["key"] == "rtx-4090"


def test_gpu_table_and_custom_specs():
    gpus = torchscan.list_gpus()
    for name in ("h100-sxm", "h100-pcie", "h200", "b200", "a100-40gb", "a100-80gb", "l40s", "l40", "l4", "t4",
                 "a10g", "rtx-4090", "rtx-4080", "rtx-3090", "rtx-3080", "v100", "mi300x", "mi325x", "mi350x",
                 "mi355x"):
        spec = gpu_spec(name)
        assert spec["memory_bandwidth"] > 0 and spec["vector"]["fp32"] > 0 and spec["source"]
    assert len(gpus) == 20
    custom = {"name": "toy", "memory_bandwidth": 1000, "vector": {"fp32": 10}, "tensor": {"bf16": 100}}
    t = torchscan.roofline(mlp(), torch.randn(1, 512), gpu=custom)["totals"]
    assert t["memory_sol_ms"] == pytest.approx(663552 / 1e12 * 1e3)
    assert t["compute_sol_ms"] == pytest.approx(327936 / 10e12 * 1e3)
    with pytest.raises(ValueError, match="unknown gpu"):
        torchscan.roofline(mlp(), torch.randn(1, 512), gpu="h900")
    with pytest.raises(ValueError, match="precision"):
        torchscan.roofline(mlp(), torch.randn(1, 512), precision="fp64")


def test_compare_kernelbench():
    r = torchscan.roofline(mlp(), torch.randn(1, 512))
    c = torchscan.compare_kernelbench(0.02, 0.01, r)
    sol = r["totals"]["sol_ms"]
    assert c["ref_fraction_of_sol"] == pytest.approx(sol / 0.02)
    assert c["gen_fraction_of_sol"] == pytest.approx(sol / 0.01)
    assert c["speedup"] == 2.0


class ReluSum(nn.Module):
    def forward(self, x):
        return torch.relu(x).sum(-1)


def test_reduction_epilogue_estimate_is_separate():
    t = torchscan.roofline(ReluSum(), torch.randn(4, 16), gpu="h100-sxm")["totals"]
    # relu: 64 -> 64; sum over the last dim: 64 -> 4. Unfused 64 + 64 + 64 + 4 = 196 elements.
    assert t["hbm_bytes_unfused"] == 196 * 4
    # Pointwise fusion alone: relu is a chain of one (its consumer is a reduction): 196.
    assert t["hbm_bytes_fused"] == 196 * 4
    # With reduction epilogues/prologues: relu + sum in one kernel: reads x 64, writes 4.
    assert t["hbm_bytes_fused_reductions"] == 68 * 4


def test_readme_example():
    model = nn.Sequential(nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 128))
    report = torchscan.roofline(model, torch.randn(1, 512), gpu="h100-sxm", precision="fp32")
    assert report["totals"]["flops"] == 327936
    assert report["totals"]["hbm_bytes_unfused"] == 663552
    assert report["totals"]["bottleneck"] == "memory"
    assert "Bottleneck : MEMORY BOUND" in report.render()


FIGURE = __import__("os").path.join(__import__("os").path.dirname(__file__), "..", "..", "..", "tools", "figures",
                                    "roofline_example.svg")


def test_committed_readme_figure_is_the_example_models_chart():
    # tools/figures/roofline_example.svg was written by
    #   python3 -m torchscan roofline <module with the factory below>:model --input-shape 512 --gpu h100-sxm \
    #     --plot tools/figures/roofline_example.svg
    # and must stay what the current code draws for the reference's model (values do not matter: only shapes).
    with open(FIGURE, encoding="utf-8") as f:
        committed = f.read()
    r = torchscan.roofline(mlp().eval(), torch.rand(1, 512), gpu="h100-sxm", precision="fp32")
    assert committed == r.to_svg()
    root = ET.fromstring(committed)
    titles = [e.text for e in root.iter() if e.tag.endswith("title")]
    # layer 0: 2*512*256 = 262144 FLOPs over (131840 + 256) * 4 = 528384 B -> 0.496 FLOPs/B;
    # layer 1 (ReLU): 256 FLOPs over 2*256*4 = 2048 B -> 0.125; model: 327936 / 663552 -> 0.494
    assert titles[0].startswith("model: 0.494 FLOPs/B")
    assert [t.split(",")[0] for t in titles[1:]] == ["0 (Linear): 0.496 FLOPs/B", "1 (ReLU): 0.125 FLOPs/B",
                                                     "2 (Linear): 0.492 FLOPs/B"]


def test_bad_arguments_are_rejected_with_a_message():
    x = torch.randn(1, 512)
    for bad in (-1, 0, float("nan"), float("inf"), True, "1"):
        with pytest.raises(ValueError, match="actual_ms must be a positive number"):
            torchscan.roofline(mlp(), x, actual_ms=bad)
    with pytest.raises(ValueError, match="unknown gpu 'h900'; known: a100-40gb"):
        torchscan.roofline(mlp(), x, gpu="h900")
    with pytest.raises(ValueError, match="precision must be one of fp32, tf32, bf16, fp16, fp8, int8, got 'fp64'"):
        torchscan.roofline(mlp(), x, precision="fp64")
    with pytest.raises(ValueError, match="NVIDIA T4 has no bf16 tensor peak"):
        torchscan.roofline(mlp(), x, gpu="t4", precision="bf16")
    with pytest.raises(ValueError, match="memory_bandwidth > 0"):
        torchscan.roofline(mlp(), x, gpu={"vector": {"fp32": 10}})
    with pytest.raises(ValueError, match="vector.fp32 > 0"):
        torchscan.roofline(mlp(), x, gpu={"memory_bandwidth": 100, "tensor": {"bf16": 100}})
    with pytest.raises(ValueError, match="tensor.bf16 must be a precision"):
        torchscan.roofline(mlp(), x, gpu={"memory_bandwidth": 100, "vector": {"fp32": 1}, "tensor": {"bf16": "9"}})
    with pytest.raises(TypeError, match="gpu must be a name or a mapping"):
        torchscan.roofline(mlp(), x, gpu=3)
    with pytest.raises(TypeError, match="needs inputs"):
        torchscan.roofline(mlp())
    r = torchscan.roofline(mlp(), x)
    with pytest.raises(ValueError, match="gen_ms must be a positive number"):
        torchscan.compare_kernelbench(0.02, -1, r)
    with pytest.raises(ValueError, match="torchscan.compare_kernelbench: schema_version is None; this TorchScan "
                                         "reads RooflineReport schema_version 1"):
        torchscan.compare_kernelbench(0.02, 0.01, {"totals": {}})
    with pytest.raises(TypeError, match="torchscan.compare_kernelbench: a RooflineReport is a dict"):
        torchscan.compare_kernelbench(0.02, 0.01, [r])
    # The table a name returns is a copy: changing it does not change the next lookup.
    gpu_spec("h100-sxm")["vector"]["fp32"] = 1.0
    assert gpu_spec("h100-sxm")["vector"]["fp32"] == 67.0


class Raises(nn.Module):
    def __init__(self, error):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.error = error

    def forward(self, x):
        self.fc(x)
        raise self.error


def _hooks(model):
    return [(len(m._forward_pre_hooks), len(m._forward_hooks), len(m._forward_hooks_always_called))
            for m in model.modules()]


def test_a_forward_that_raises_propagates_unchanged_and_leaves_nothing_behind():
    error = KeyError("boom")
    model = Raises(error)
    before = _hooks(model)
    with pytest.raises(KeyError) as info:
        torchscan.roofline(model, torch.randn(2, 4))
    assert info.value is error
    assert _hooks(model) == before
    assert not torchscan.tls_mode_included()  # (conftest checks the include set too)
    # The same model scans again afterwards.
    model.error = None
    model.forward = lambda x: model.fc(x)
    assert torchscan.roofline(model, torch.randn(2, 4))["totals"]["flops"] == 2 * 2 * 4 * 4


class CatchesChild(nn.Module):
    def __init__(self):
        super().__init__()
        self.bad = Raises(RuntimeError("inner"))
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        try:
            return self.bad(x)
        except RuntimeError:
            return self.fc(x)


def test_a_caught_submodule_exception_does_not_shift_the_layers():
    r = torchscan.roofline(CatchesChild(), torch.randn(2, 4))
    layers = {l["path"]: l for l in r["layers"]}
    # bad.fc ran (addmm 2 rows x 4 in x 4 out x 2 = 64) before bad raised; fc is the parent's
    # child (depth 1), not a child of the scope bad left open.
    assert layers["bad"]["flops"] == 64 and layers["bad.fc"]["depth"] == 2
    assert layers["fc"]["depth"] == 1 and layers["fc"]["flops"] == 64
    assert layers["CatchesChild"]["flops"] == 128


class ViewOnly(nn.Module):
    def forward(self, x):
        return x.view(-1).t()


def test_a_model_that_computes_and_moves_nothing():
    r = torchscan.roofline(ViewOnly(), torch.randn(2, 4))
    t = r["totals"]
    # views move nothing and compute nothing
    assert (t["flops"], t["hbm_bytes_unfused"], t["hbm_bytes_fused"]) == (0, 0, 0)
    assert t["arithmetic_intensity"] is None and t["sol_ms"] == 0.0 and t["bottleneck"] == "none"
    assert "Bottleneck : none" in r.render() and "n/a" in r.render()
    ET.fromstring(r.to_svg())
    json.dumps(r)


class InPlace(nn.Module):
    def forward(self, x):
        h = torch.relu(x)
        y = torch.sigmoid(h)
        h.tanh_()  # h changes after sigmoid read it
        return y + h


def test_in_place_writes_count_once_and_fuse_by_version():
    r = torchscan.roofline(InPlace(), torch.randn(4, 16))  # 64 elements, fp32
    t = r["totals"]
    # relu 64 + 64, sigmoid 64 + 64, tanh_ reads h 64 and writes it once 64, add 64 + 64 + 64
    assert t["hbm_bytes_unfused"] == (128 + 128 + 128 + 192) * 4
    ops = {o["operator"]: o for o in r["operators"]}
    assert ops["aten.tanh_"]["bytes_read"] == 64 * 4 and ops["aten.tanh_"]["bytes_written"] == 64 * 4
    # All four are pointwise and every intermediate (h before and after tanh_, y) is read only
    # inside the group: one kernel reading x and writing the sum.
    assert t["hbm_bytes_fused"] == 128 * 4 and t["fused_kernels"] == 1
    # nn.ReLU(inplace=True) after a Linear: relu_ reads and writes the addmm's output once each;
    # matmul epilogues are not fused. addmm (64 + 256 + 16 -> 64) 400 + relu_ 128 = 528.
    m = nn.Sequential(nn.Linear(16, 16), nn.ReLU(inplace=True))
    t = torchscan.roofline(m, torch.randn(4, 16))["totals"]
    assert t["hbm_bytes_unfused"] == t["hbm_bytes_fused"] == 528 * 4


class TwoBranches(nn.Module):
    def forward(self, x):
        h = torch.relu(x)
        return torch.sigmoid(h), torch.tanh(h)


class ReturnsIntermediate(nn.Module):
    def forward(self, x):
        h = torch.relu(x)
        return h, torch.sigmoid(h)


def test_a_tensor_read_by_two_branches():
    t = torchscan.roofline(TwoBranches(), torch.randn(4, 16))["totals"]
    # relu, sigmoid, tanh: 3 * (64 + 64) = 384 unfused
    assert t["hbm_bytes_unfused"] == 384 * 4
    # one kernel: reads x once, writes both branch outputs; h is read only inside: 64 + 128
    assert t["hbm_bytes_fused"] == 192 * 4 and t["fused_kernels"] == 1


def test_a_returned_intermediate_reaches_hbm():
    r = torchscan.roofline(ReturnsIntermediate(), torch.randn(4, 16))
    t = r["totals"]
    # x is 4x16 = 64 elements; h = relu(x) and s = sigmoid(h) are 64 each.
    # Unfused: relu reads x 64, writes h 64; sigmoid reads h 64, writes s 64 = 256.
    assert t["hbm_bytes_unfused"] == 256 * 4
    # Fused: relu and sigmoid are one kernel (one group). It reads x 64 (the only operand
    # from outside); it writes s 64 (read by nobody) and h 64: h's only reader, sigmoid, is
    # inside the group, but forward returns h, so it leaves the program and reaches HBM.
    # 64 + 64 + 64 = 192 (128 if h were kept on chip).
    assert t["hbm_bytes_fused"] == 192 * 4 and t["fused_kernels"] == 1
    assert t["hbm_bytes_fused_reductions"] == 192 * 4
    assert any(a.startswith("Program outputs: the module's returned tensors") for a in r["context"]["assumptions"])


class ReturnsAChainLink(nn.Module):
    def forward(self, x):
        h = torch.relu(x)
        y = torch.sigmoid(h)
        return h, h.view(-1), y, torch.tanh(y)


def test_a_returned_link_of_a_pointwise_chain_is_written_once():
    t = torchscan.roofline(ReturnsAChainLink(), torch.randn(4, 16))["totals"]
    # relu, sigmoid, tanh on 64 elements: 3 * (64 + 64) = 384 unfused (the view moves nothing).
    assert t["hbm_bytes_unfused"] == 384 * 4
    # One kernel: reads x 64; writes h 64 once (returned itself and as a view: one tensor),
    # y 64 (returned, read inside by tanh) and tanh(y) 64 (read by nobody) = 256.
    assert t["hbm_bytes_fused"] == 256 * 4 and t["fused_kernels"] == 1


def test_a_callables_returned_intermediate_is_not_seen_and_the_report_says_so():
    def workload():
        x = torch.ones(4, 16)
        h = torch.relu(x)
        return h, torch.sigmoid(h)

    r = torchscan.roofline(workload)
    t = r["totals"]
    # ones writes 64; relu 64 + 64; sigmoid 64 + 64 = 320 unfused.
    assert t["hbm_bytes_unfused"] == 320 * 4
    # ones (no tensor operand, not fused) is its own kernel: writes x 64. The relu+sigmoid kernel reads x 64 and writes
    # sigmoid(h) 64; h's only recorded reader is inside the group and the callable's return
    # value is not seen, so h is not charged: 192, not 256.
    assert t["hbm_bytes_fused"] == 192 * 4
    assert any(a.startswith("Program outputs: a callable's return value is not seen")
               for a in r["context"]["assumptions"])


def test_meta_gives_the_cpu_figures():
    cpu = torchscan.roofline(mlp(), torch.randn(1, 512), gpu="h100-sxm")
    meta = torchscan.roofline(mlp().to("meta"), torch.randn(1, 512, device="meta"), gpu="h100-sxm")
    assert meta["totals"] == cpu["totals"]
    assert meta["totals"]["hbm_bytes_unfused"] == 663552  # test_linear_relu_linear_... derives it


def test_svg_points_at_one_place_stay_distinguishable():
    # Four ReLUs on the same input: one intensity (1 FLOP per 8 bytes read and
    # written, fp32), so four points at one place.
    class Relus(nn.Module):
        def __init__(self):
            super().__init__()
            self.acts = nn.ModuleList(nn.ReLU() for _ in range(4))

        def forward(self, x):
            return sum(a(x) for a in self.acts)

    root = ET.fromstring(torchscan.roofline(Relus(), torch.randn(1, 64), gpu="h100-sxm").to_svg())
    marks = [e for e in root.iter() if any(c.tag.endswith("title") for c in e) and e.get("fill") != "none"]
    acts = [e for e in marks if "acts." in "".join(e.itertext())]
    assert len(acts) == 4
    assert len({e.get("fill") for e in acts}) == 4  # a colour each
    # Each covered point is drawn larger than the ones over it: a visible rim.
    radii = [float(e.get("r")) for e in acts]
    assert radii == sorted(radii, reverse=True) and len(set(radii)) == 4
    # Their numbers do not overlap one another.
    numbers = [e for e in root.iter() if e.tag.endswith("text") and (e.text or "") in {"1", "2", "3", "4"}]
    spots = [(float(e.get("x")), float(e.get("y"))) for e in numbers]
    assert len(spots) == 4
    # A one-digit number in 10 px bold is about 7 px wide and 10 px high.
    assert all(abs(a[0] - b[0]) >= 7 or abs(a[1] - b[1]) >= 10 for i, a in enumerate(spots) for b in spots[i + 1:])
