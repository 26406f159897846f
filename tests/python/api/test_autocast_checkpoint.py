"""Mixed precision and activation checkpointing are ordinary workloads: they
count the same work as the plain run (plus what checkpointing recomputes),
with no diagnostics the plain run does not have."""

from collections import defaultdict

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import torchscan
from tests.fixtures.models import resnet50


def small_cnn():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                               torch.nn.Linear(8 * 6 * 6, 4)).eval()


def gaps(report):
    return sorted((d["code"], d.get("operator")) for d in report["diagnostics"])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_autocast_counts_the_fp32_work_complete(dtype):
    model, x = small_cnn(), torch.randn(2, 3, 8, 8)
    fp32 = torchscan.measure_flops(lambda: model(x))
    with torch.autocast("cpu", dtype=dtype):
        mixed = torchscan.measure_flops(lambda: model(x))
    # conv: 2*8*6*6 outputs x 27 terms x 2 = 31,104; relu 576 values;
    # linear (addmm, bias omitted): 2*4 outputs x 288 terms x 2 = 4,608.
    expected = {"aten.convolution": 31_104, "aten.relu": 576, "aten.addmm": 4_608}
    assert fp32["by_operator"] == expected and mixed["by_operator"] == expected
    assert mixed["total"]["status"] == "complete" and mixed["diagnostics"] == []


def test_autocast_module_view_is_complete_with_the_fp32_flops_and_macs():
    model, x = small_cnn(), torch.randn(2, 3, 8, 8)
    with torchscan.scan() as plain:
        model(x)
    with torch.autocast("cpu", dtype=torch.bfloat16), torchscan.scan() as mixed:
        model(x)
    p, m = plain.module_report()["totals"], mixed.module_report()["totals"]
    for metric in ("module_flops", "macs", "dmas"):
        assert m[metric]["status"] == "complete", metric
    # The casts autocast inserts move data but do no arithmetic.
    assert m["module_flops"]["value"] == p["module_flops"]["value"]
    assert m["macs"]["value"] == p["macs"]["value"]


def test_autocast_resnet50_matches_fp32():
    torch.manual_seed(0)
    model, x = resnet50().eval(), torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        fp32 = torchscan.measure_flops(lambda: model(x))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = torchscan.measure_flops(lambda: model(x))
    assert fp32["total"]["status"] == "complete"
    assert mixed["total"] == fp32["total"] and mixed["by_operator"] == fp32["by_operator"]


def test_autocast_small_llama_matches_fp32():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, vocab_size=100,
                                      max_position_embeddings=64)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 8))
    with torch.no_grad():
        fp32 = torchscan.measure_flops(lambda: model(input_ids=ids))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            mixed = torchscan.measure_flops(lambda: model(input_ids=ids))
    # Same work in every operator, and no gap the fp32 run does not have.
    assert mixed["by_operator"] == fp32["by_operator"]
    assert mixed["total"]["status"] == fp32["total"]["status"]
    assert gaps(mixed) == gaps(fp32)


# --- activation checkpointing --------------------------------------------------

def test_checkpoint_counts_the_recomputed_kernels_and_reports_no_error():
    torch.manual_seed(0)
    lin, drop = torch.nn.Linear(64, 64), torch.nn.Dropout(0.5)
    x = torch.randn(4, 64, requires_grad=True)

    def block(v):
        return drop(torch.relu(lin(v)))

    def plain():
        block(x).sum().backward()

    def checkpointed():
        checkpoint(block, x, use_reentrant=False).sum().backward()

    reports = []
    for step in (plain, checkpointed):
        lin.zero_grad(set_to_none=True)
        x.grad = None
        reports.append(torchscan.measure_flops(step))
    p, c = reports
    # One forward: addmm 4x64 outputs x 64 terms x 2 = 32,768; relu 256;
    # dropout mask + rescale 2 x 256 = 512. Checkpointing runs the forward
    # again in backward (non-reentrant, stopping once its last saved tensor
    # exists, after the dropout), so each doubles; backward is unchanged.
    assert p["by_operator"]["aten.addmm"] == 32_768 and c["by_operator"]["aten.addmm"] == 65_536
    assert p["by_operator"]["aten.relu"] == 256 and c["by_operator"]["aten.relu"] == 512
    assert p["by_operator"]["aten.dropout"] == 512 and c["by_operator"]["aten.dropout"] == 1_024
    for op in ("aten.mm", "aten.sum", "aten.mul"):
        assert c["by_operator"][op] == p["by_operator"][op], op
    assert gaps(c) == gaps(p)  # no operator_raised for PyTorch's own stop signal


def test_checkpointed_gpt2_step_has_the_plain_steps_diagnostics():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=64,
                                     bos_token_id=0, eos_token_id=0, use_cache=False)
    model = transformers.GPT2LMHeadModel(config).train()
    ids = torch.randint(0, 100, (2, 8))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    plain = torchscan.measure_flops(step)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    checkpointed = torchscan.measure_flops(step)
    assert gaps(checkpointed) == gaps(plain)
    assert not any(code == "operator_raised" for code, _ in gaps(checkpointed))
    # Every addmm of GPT-2 is a Conv1D inside a checkpointed block (the LM head
    # is a bias-free mm): each runs once more in backward, so addmm doubles.
    assert checkpointed["by_operator"]["aten.addmm"] == 2 * plain["by_operator"]["aten.addmm"]


# --- calls a checkpoint stop unwinds (Note [Calls a control-flow stop unwinds]) ---

def _scanned_and_counted(step):
    """TorchScan's report of step() and FlopCounterMode's counts of a second run."""
    from torch.utils.flop_counter import FlopCounterMode

    report = torchscan.measure_flops(step)
    with FlopCounterMode(display=False) as counter:
        step()
    return report, {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


def _checkpointed_step(block, lin, x):
    def step():
        lin.zero_grad(set_to_none=True)
        x.grad = None
        checkpoint(block, x, use_reentrant=False).sum().backward()
    return step


def test_a_block_ending_in_a_linear_layer_counts_no_recomputed_product():
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(16, 8), torch.randn(4, 16, requires_grad=True)
    report, expected = _scanned_and_counted(_checkpointed_step(lin, lin, x))
    # The recomputation stops as addmm saves its operands, which its autograd
    # kernel does before the product runs: forward addmm 2*4*16*8 = 1,024
    # once; backward mm for the input's and the weight's gradients, 1,024 each.
    assert expected == {"aten.addmm": 1024, "aten.mm": 2048}
    assert {op: report["by_operator"][op] for op in expected} == expected
    assert report["total"]["status"] == "complete", report["diagnostics"]


def test_a_block_ending_in_an_activation_counts_what_its_recomputation_ran():
    torch.manual_seed(0)
    lin, x = torch.nn.Linear(16, 8), torch.randn(4, 16, requires_grad=True)
    counts = {}
    for name, activation in (("relu", torch.relu), ("relu_", torch.relu_), ("gelu", torch.nn.functional.gelu)):
        def block(v, activation=activation):
            return activation(lin(v))

        plain = torchscan.measure_flops(lambda: (lin.zero_grad(set_to_none=True), block(x).sum().backward()))
        checkpointed = torchscan.measure_flops(_checkpointed_step(block, lin, x))
        assert checkpointed["total"]["status"] == "complete", (name, checkpointed["diagnostics"])
        op = f"aten.{name}"
        counts[name] = (plain["by_operator"][op], checkpointed["by_operator"][op],
                        plain["by_operator"]["aten.addmm"], checkpointed["by_operator"]["aten.addmm"])
    # relu and relu_ save their result, after their kernel: the recomputation
    # ran them (32 outputs, 1 FLOP each) and stopped there, so they count
    # twice. gelu saves its input, before its kernel: the recomputation
    # stopped before it ran. The addmm before each (1,024) ran again in all three.
    assert counts["relu"] == (32, 64, 1024, 2048)
    assert counts["relu_"] == (32, 64, 1024, 2048)
    gelu_once = counts["gelu"][0]
    assert counts["gelu"] == (gelu_once, gelu_once, 1024, 2048)


def test_checkpoint_sequential_over_a_cnn_matches_flop_counter_mode():
    from torch.utils.checkpoint import checkpoint_sequential

    torch.manual_seed(0)
    cnn = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Conv2d(4, 4, 3, padding=1), torch.nn.BatchNorm2d(4),
                                                    torch.nn.ReLU()) for _ in range(4)])
    x = torch.randn(2, 4, 8, 8, requires_grad=True)

    def step():
        cnn.zero_grad(set_to_none=True)
        checkpoint_sequential(cnn, 2, x, use_reentrant=False).sum().backward()

    report, expected = _scanned_and_counted(step)
    assert {op: report["by_operator"][op] for op in expected} == expected
    # Each segment ends in a ReLU, which saves its result: complete, with no
    # diagnostic for PyTorch's stop signal.
    assert report["total"]["status"] == "complete", report["diagnostics"]


class _Stop(Exception):
    pass


def _stopped_at_first_save(work, with_tensor):
    """work() with a saved-tensor hook that stops it, as checkpoint does, at
    the first tensor an autograd kernel saves; the stop is told to the scan
    with that tensor or without it."""
    from torchscan._library import Session

    def pack(t):
        if with_tensor:
            Session.note_control_flow_stop_saving(t)
        else:
            Session.note_control_flow_stop()
        raise _Stop

    def run():
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            try:
                work()
            except _Stop:
                pass
    return torchscan.measure_flops(run)


def test_a_stop_while_saving_an_operand_counts_nothing_for_that_call():
    a, b = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    # mm saves its first operand (for b's gradient) before its product runs.
    report = _stopped_at_first_save(lambda: torch.mm(a, b), with_tensor=True)
    assert report["total"]["status"] == "complete", report["diagnostics"]
    assert "aten.mm" not in report["by_operator"] and report["total"]["value"] == 0


def test_a_stop_while_saving_a_result_counts_that_call_with_its_result():
    a = torch.randn(3, 4, requires_grad=True)
    # sigmoid saves its result, after its kernel: 12 outputs, counted
    # with the result's shape (torchscan_flops_v1: 4 FLOPs per element).
    stopped = _stopped_at_first_save(lambda: torch.sigmoid(a), with_tensor=True)
    plain = torchscan.measure_flops(lambda: torch.sigmoid(a))
    assert stopped["total"]["status"] == "complete", stopped["diagnostics"]
    assert stopped["by_operator"]["aten.sigmoid"] == plain["by_operator"]["aten.sigmoid"] == 48


def test_a_stop_without_the_saved_tensor_leaves_the_call_unknown():
    a, b = torch.randn(3, 4), torch.randn(4, 5, requires_grad=True)
    report = _stopped_at_first_save(lambda: torch.mm(a, b), with_tensor=False)
    # Whether mm ran is not known: not counted, and said.
    assert report["total"]["status"] == "partial"
    assert ("operator_raised", "aten.mm") in gaps(report)


# --- selective activation checkpointing (Note [Calls a cache answers]) ---------

def _selective_step(saved_ops, modes=None):
    """A training step of two checkpointed Linear+ReLU layers whose policy
    saves `saved_ops`; modes(policy): the pair of dispatch modes each
    checkpoint runs under (PyTorch's, from create_selective_checkpoint_contexts,
    by default)."""
    import functools

    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    torch.manual_seed(0)
    lin1, lin2 = torch.nn.Linear(16, 16), torch.nn.Linear(16, 16)
    x = torch.randn(4, 16, requires_grad=True)

    def policy(ctx, op, *args, **kwargs):
        return CheckpointPolicy.MUST_SAVE if op in saved_ops else CheckpointPolicy.PREFER_RECOMPUTE

    context = functools.partial(modes or create_selective_checkpoint_contexts, policy)

    def block(v):
        return torch.relu(lin2(torch.relu(lin1(v))))

    def step(checkpointed=True):
        for p in [*lin1.parameters(), *lin2.parameters(), x]:
            p.grad = None
        out = checkpoint(block, x, use_reentrant=False, context_fn=context) if checkpointed else block(x)
        out.sum().backward()
    return step


def test_selective_checkpointing_counts_no_operator_its_cache_answered():
    aten = torch.ops.aten
    report, expected = _scanned_and_counted(_selective_step({aten.addmm.default}))
    # The two products' results are saved: the recomputation takes them from
    # the cache, so each addmm (2*4*16*16 = 2,048) counts once, as in
    # FlopCounterMode; the backward's four mm count 2,048 each.
    assert expected == {"aten.addmm": 4096, "aten.mm": 8192}
    assert {op: report["by_operator"][op] for op in expected} == expected
    assert report["total"]["status"] == "complete", report["diagnostics"]
    # The ReLUs (64 outputs each) are recomputed: twice each.
    assert report["by_operator"]["aten.relu"] == 2 * 2 * 64
    saving_relu = torchscan.measure_flops(_selective_step({aten.addmm.default, aten.relu.default}))
    assert saving_relu["by_operator"]["aten.relu"] == 2 * 64
    assert saving_relu["by_operator"]["aten.addmm"] == 4096


class _Cache(torch.utils._python_dispatch.TorchDispatchMode):
    """Answers every mm from a saved result without running it, and tells
    the scan so as selective checkpointing's mode does, under `name`."""

    def __init__(self, result, name):
        super().__init__()
        self.result, self.name = result, name

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        from torchscan._library import Session

        if func is torch.ops.aten.mm.default:
            Session.note_answered_from_cache(self.name)
            return self.result
        return func(*args, **(kwargs or {}))


def test_a_call_answered_from_a_cache_adds_nothing_and_a_mismatch_is_unknown():
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with _Cache(torch.zeros(3, 5), "aten::mm"):
        answered = torchscan.measure_flops(lambda: torch.mm(a, b))
    assert answered["total"]["status"] == "complete" and answered["total"]["value"] == 0
    # Told of another operator than the open call: what the call did is unknown.
    with _Cache(torch.zeros(3, 5), "aten::addmm"):
        mismatched = torchscan.measure_flops(lambda: torch.mm(a, b))
    assert mismatched["total"]["status"] == "partial"
    assert ("operator_raised", "aten.mm") in gaps(mismatched)



class _UnfamiliarStorage:
    """Selective checkpointing's storage kept in a layout TorchScan does not
    know (not a dict): what the recomputation answered from it cannot be
    watched."""

    def __init__(self):
        self._entries = defaultdict(dict)

    def __getitem__(self, key):
        return self._entries[key]

    def get(self, key, default=None):
        return self._entries.get(key, default)


def test_selective_checkpointing_with_unwatchable_storage_is_partial_not_complete():
    from torch.utils import checkpoint as ckpt

    def modes(policy):
        storage = _UnfamiliarStorage()
        return ckpt._CachingTorchDispatchMode(policy, storage), ckpt._CachedTorchDispatchMode(policy, storage)

    report = torchscan.measure_flops(_selective_step({torch.ops.aten.addmm.default}, modes))
    # The recomputation takes both products from the storage (FlopCounterMode
    # counts each once: 2 * 2*4*16*16 = 4,096); TorchScan cannot tell that
    # here, so the recomputed calls are unknown rather than counted again.
    assert report["total"]["status"] == "partial", report["by_operator"]
    assert ("operator_raised", "aten.addmm") in gaps(report)
    assert report["by_operator"]["aten.addmm"] == 4096


def _own_replay(self, func, types, args=(), kwargs=None):
    """Replays selective checkpointing's storage without calling the
    recomputation mode's own dispatch (as a library subclassing the mode
    may)."""
    from torch.utils import checkpoint as ckpt
    from torch.utils._pytree import tree_map

    if func in ckpt.SAC_IGNORED_OPS:
        return func(*args, **(kwargs or {}))
    key = ckpt._sac_storage_key(func, args)
    index = self.func_counter[key]
    self.func_counter[key] += 1
    entry = self.storage[key][index]
    if entry is ckpt._RECOMPUTE:
        return func(*args, **(kwargs or {}))
    self.storage[key][index] = ckpt._CONSUMED
    return tree_map(lambda v: v.get_val(False), entry)


# Defined as the tests are collected, before a scan starts (which is when
# TorchScan looks for the subclasses that exist).
_EarlyReplay = type("_EarlyReplay", (torch.utils.checkpoint._CachedTorchDispatchMode,),
                    {"__torch_dispatch__": _own_replay})


@pytest.mark.parametrize("defined", ["before the first scan", "after a scan started"])
def test_selective_checkpointing_through_a_subclass_of_the_recomputation_mode_counts_each_kernel_once(defined):
    from torch.utils import checkpoint as ckpt

    replay = _EarlyReplay
    if defined == "after a scan started":
        torchscan.measure_flops(lambda: torch.ones(1) + 1)
        replay = type("_LateReplay", (ckpt._CachedTorchDispatchMode,), {"__torch_dispatch__": _own_replay})

    def modes(policy):
        storage: dict = defaultdict(dict)
        return ckpt._CachingTorchDispatchMode(policy, storage), replay(policy, storage)

    report, expected = _scanned_and_counted(_selective_step({torch.ops.aten.addmm.default}, modes))
    # As through PyTorch's own mode: each addmm (2*4*16*16 = 2,048) once, as
    # in FlopCounterMode, and the backward's four mm 2,048 each.
    assert expected == {"aten.addmm": 4096, "aten.mm": 8192}
    assert {op: report["by_operator"][op] for op in expected} == expected
    assert report["total"]["status"] == "complete", report["diagnostics"]
