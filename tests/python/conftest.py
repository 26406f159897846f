"""Shared fixtures and checks for the TorchScan Python test suite.

Expected values in these tests are never copied from TorchScan's own output:
they come either from ``torch.utils.flop_counter.FlopCounterMode`` run on an
identical workload (see ``run_flop_counter``) or from a hand derivation
written next to the assertion.
"""

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode, flop_registry

REPO_ROOT = Path(__file__).resolve().parents[2]
SHIM_DIR = REPO_ROOT / "python_shim"
LIB_PATH = SHIM_DIR / "torchscan" / "_lib" / "libtorchscan.so.0"

# The shim is used from the source tree unless an installed `torchscan`
# already shadows it (append, not insert, so an installed package wins).
if SHIM_DIR.is_dir() and str(SHIM_DIR) not in sys.path:
    sys.path.append(str(SHIM_DIR))

# The dispatch key TorchScan's mode lives on (see DESIGN.md).
MODE_KEY_NAME = "TESTING_ONLY_GenericMode"

# The installed torch's FlopCounterMode counts the CPU flash attention kernel
# (from 2.15 on: its matrix products, like the other SDPA kernels); before,
# TorchScan's "CPU SDPA fallback" rows count it. The operator view follows
# the installed release.
NATIVE_CPU_SDPA = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu in flop_registry

# The installed release, (major, minor): where PyTorch's own Python code (its
# decompositions) changed between releases, a hand derivation follows it.
TORCH_RELEASE = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])

# One intra-op thread in this process (TORCHSCAN_TEST_THREADS=N for more; the
# servers and jobs it starts keep their own). On a small machine shared with other work a
# second OpenMP thread spin-waits for a core: a ResNet-50 training step took
# 1.8 s with one thread and 31 s with two (2 cores, load average 6). Counts do
# not depend on it; the tests of num_threads set their own, and the coverage
# audit runs the zoo with DEFAULT_THREADS (the operators it runs do depend on it).
DEFAULT_THREADS = torch.get_num_threads()  # torch's own choice for this machine
TEST_THREADS = int(os.environ.get("TORCHSCAN_TEST_THREADS", "1"))
torch.set_num_threads(TEST_THREADS)

METRIC_STATUSES = {"complete", "partial", "unavailable"}
SCALAR_TYPES = (str, int, float, bool, type(None))


# ------------------------------------------------------------------ order


def pytest_collection_modifyitems(session, config, items):
    """The coverage audit runs first. It reads this process's operator
    registry, and importing torch._inductor or calling torch.export (as
    test_aoti.py and test_transforms.py do) registers Python-defined
    operators that the baseline, made in a fresh process, does not have."""
    first = [i for i in items if i.path.name == "test_coverage_audit.py"]
    if first:
        items[:] = first + [i for i in items if i.path.name != "test_coverage_audit.py"]


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def torchscan():
    """The `torchscan` module; skips only while the engine is not built yet.

    Set TORCHSCAN_REQUIRE_LIB=1 to turn the skip into a failure (CI).
    """
    may_skip = not LIB_PATH.exists() and os.environ.get("TORCHSCAN_REQUIRE_LIB") != "1"
    try:
        import torchscan as ts  # noqa: PLC0415
    except Exception as exc:  # ImportError, or OSError from load_library
        if may_skip:
            pytest.skip(f"torchscan not built ({LIB_PATH} missing; run tools/setup.sh): {exc!r}")
        raise
    if may_skip and not hasattr(ts, "measure_flops"):
        # An empty source directory imports as a namespace package.
        pytest.skip(f"torchscan not built ({LIB_PATH} missing; run tools/setup.sh)")
    return ts


@pytest.fixture(autouse=True)
def _dispatch_tls_left_clean():
    """Every test must leave this thread's dispatch TLS without the mode key."""
    yield
    ts = sys.modules.get("torchscan")
    if ts is not None and hasattr(ts, "tls_mode_included"):
        assert not ts.tls_mode_included(), "a scan leaked its mode key into TLS"
    assert MODE_KEY_NAME not in str(torch._C._dispatch_tls_local_include_set())


# ----------------------------------------------------------------- helpers


def run_flop_counter(workload, custom_mapping=None):
    """Run `workload` once under FlopCounterMode.

    Returns (counts, total): counts is {"aten.mm": int, ...} with the
    operator packets stringified the way TorchScan keys by_operator.
    FlopCounterMode omits "Global" entirely when it counted nothing.
    """
    mode = FlopCounterMode(display=False, custom_mapping=custom_mapping)
    with mode:
        workload()
    counts = mode.get_flop_counts().get("Global", {})
    return {str(k): int(v) for k, v in counts.items()}, int(mode.get_total_flops())


def module_view_totals(torchscan, fn):
    """(module_flops, macs, dmas) of the module view of one scanned call of
    `fn`; each must be complete."""
    with torchscan.scan() as s:
        fn()
    report = s.module_report()
    totals = report["totals"]
    for name in ("module_flops", "macs", "dmas"):
        assert totals[name]["status"] == "complete", report["diagnostics"]
    return tuple(totals[name]["value"] for name in ("module_flops", "macs", "dmas"))


def include_set_has_mode_key():
    return MODE_KEY_NAME in str(torch._C._dispatch_tls_local_include_set())


def assert_no_tensors(obj, path="report"):
    """Only JSON scalars, lists and str-keyed dicts; never a tensor."""
    if isinstance(obj, torch.Tensor):
        raise AssertionError(f"tensor found at {path}")
    if isinstance(obj, dict):
        for key, value in obj.items():
            assert isinstance(key, str), f"non-str key {key!r} at {path}"
            assert_no_tensors(value, f"{path}[{key!r}]")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            assert_no_tensors(value, f"{path}[{i}]")
    else:
        assert isinstance(obj, SCALAR_TYPES), f"{type(obj).__name__} at {path}"


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def assert_metric_result(result, *, unit="FLOPs", method="operator_dispatch"):
    assert set(result) >= {"status", "value", "known_value", "unit", "scope", "method"}, result
    assert result["status"] in METRIC_STATUSES
    assert result["unit"] == unit
    assert result["method"] == method
    assert isinstance(result["scope"], str) and result["scope"]
    if result["status"] == "complete":
        assert _is_int(result["value"]) and result["value"] == result["known_value"]
    elif result["status"] == "partial":
        # A partial result is a lower bound: no value, only known_value.
        assert result["value"] is None
        assert _is_int(result["known_value"])
    else:
        assert result["value"] is None and result["known_value"] is None


def uncounted(report):
    """{operator: calls} of the uncounted_operator diagnostics."""
    out = {}
    for diag in report["diagnostics"]:
        if diag["code"] == "uncounted_operator":
            out[diag["operator"]] = out.get(diag["operator"], 0) + diag["calls"]
    return out


def assert_valid_report(report):
    """Structural invariants every FlopReport must satisfy."""
    assert isinstance(report, dict)
    assert report["schema_version"] == 1
    ctx = report["context"]
    # The running torch; a C++-side version string may lack the "+cpu" local tag.
    assert ctx["torch_version"].split("+")[0] == torch.__version__.split("+")[0]
    assert isinstance(ctx["torchscan_version"], str) and ctx["torchscan_version"]
    assert ctx["method"] == "operator_dispatch"
    assert isinstance(ctx["counting_convention"], str) and ctx["counting_convention"]

    total = report["total"]
    assert_metric_result(total)
    # measure_flops always ran its workload: complete or partial, never unavailable.
    assert total["status"] in {"complete", "partial"}

    by_op = report["by_operator"]
    assert isinstance(by_op, dict)
    for key, value in by_op.items():
        assert isinstance(key, str) and key.count(".") >= 1, key
        assert _is_int(value) and value >= 0, (key, value)
    # known_value is the sum of counted work.
    assert total["known_value"] == sum(by_op.values())

    assert isinstance(report["by_module"], dict)

    for key, entry in report["ignored_operators"].items():
        assert isinstance(key, str)
        assert _is_int(entry["calls"]) and entry["calls"] >= 1, (key, entry)
        assert isinstance(entry["reason"], str) and entry["reason"], (key, entry)

    assert isinstance(report["diagnostics"], list)
    for diag in report["diagnostics"]:
        for field in ("code", "severity", "metric", "message"):
            assert isinstance(diag[field], str) and diag[field], (field, diag)
        assert diag["severity"] in {"warning", "error"}, diag
        if diag["code"] == "uncounted_operator":
            assert isinstance(diag["operator"], str) and diag["operator"]
            assert _is_int(diag["calls"]) and diag["calls"] >= 1, diag

    # Never "complete" while an executed operator went uncounted, and a
    # partial total always comes with a diagnostic explaining why.
    if uncounted(report):
        assert total["status"] != "complete", report["diagnostics"]
    if total["status"] == "partial":
        assert report["diagnostics"], "partial total without any diagnostic"

    assert_no_tensors(report)


def assert_parity(report, fcm_counts):
    """Every operator FlopCounterMode counted has exactly the same count."""
    by_op = report["by_operator"]
    mismatches = {
        key: (by_op.get(key), expected)
        for key, expected in fcm_counts.items()
        if by_op.get(key, 0) != expected
    }
    assert not mismatches, f"(torchscan, FlopCounterMode) disagree: {mismatches}; ours={by_op}"


@pytest.fixture(scope="session")
def checks():
    """The helpers above, as a fixture (avoids importing `conftest` by name)."""
    return SimpleNamespace(
        run_flop_counter=run_flop_counter,
        include_set_has_mode_key=include_set_has_mode_key,
        assert_no_tensors=assert_no_tensors,
        assert_metric_result=assert_metric_result,
        assert_valid_report=assert_valid_report,
        assert_parity=assert_parity,
        uncounted=uncounted,
        MODE_KEY_NAME=MODE_KEY_NAME,
        NATIVE_CPU_SDPA=NATIVE_CPU_SDPA,
    )
