"""A bounded, deterministic fuzz of every Python report reader and of the
command line's readers: mutated reports (deleted, retyped, renamed and
duplicated fields, counts past 2^128 - 1, deep nesting) and mutated JSON text
(repeated keys, NaN, truncation).

What is allowed: the reader accepts, or refuses with a ValueError / TypeError
whose message is TorchScan's (it names the reader: "torchscan..."; the trace
figure raises its TraceError); the command line exits with status 1 and one
line. Anything else (KeyError, AttributeError, IndexError, RecursionError,
OverflowError, ZeroDivisionError, a TypeError from inside) fails the test.
The C++ readers have their own fuzz (tests/cpp/reports/reports_fuzz_test.cc); here
they are reached through render_report / compare_reports.
"""

import contextlib
import copy
import importlib.util
import io
import json
import random

import pytest
import torch
from torch import nn

from conftest import REPO_ROOT

SEED = 0x7453
CASES_PER_SEED = 300  # x 8 seeds; the whole file runs in well under 30 s

_PALETTE = [None, True, False, 0, 1, -1, 2**64, 2**128 - 1, 2**128, 2**200, 0.5, -0.5, 1e308, float("nan"),
            float("inf"), "", "x", "complete", "partial", "unavailable", [], {}, [1, 2], {"status": "complete"},
            {"status": "complete", "value": 3, "known_value": 3, "unit": "FLOPs", "scope": "s", "method": "m"}]


def _slots(doc):
    """(parent, key) of every value below the root, in a fixed order."""
    out, stack = [], [doc]
    while stack:
        v = stack.pop()
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            out.append((v, k))
            stack.append(x)
    return out


def _deep(levels):
    v = 1
    for _ in range(levels):
        v = [v]
    return v


def mutate(doc, rng):
    slots = _slots(doc)
    if not slots:
        return
    parent, key = slots[rng.randrange(len(slots))]
    kind = rng.randrange(7)
    if kind == 0:
        del parent[key]
    elif kind in (1, 2):
        parent[key] = copy.deepcopy(rng.choice(_PALETTE))
    elif kind == 3 and isinstance(parent[key], list):
        parent[key].extend(copy.deepcopy(parent[key]))
    elif kind == 4 and isinstance(parent, dict):
        parent[str(key) + "_"] = parent.pop(key)
    elif kind == 5:
        other_parent, other_key = slots[rng.randrange(len(slots))]
        parent[key] = copy.deepcopy(other_parent[other_key])
    else:
        parent[key] = _deep(rng.choice((3, 199, 250, 300)))  # deeper: cli/test_cli_errors.py


def _ours(exc, prefixes):
    return isinstance(exc, (ValueError, TypeError)) and str(exc).startswith(prefixes)


@pytest.fixture(scope="module")
def seeds(torchscan):
    a, b = torch.ones(4, 8), torch.ones(8, 2)
    bench = torchscan.measure_workload(lambda: a @ b, latency=True, min_run_time=0.01)
    latency = torchscan.measure_latency(lambda: a @ b, min_run_time=0.01)
    comparison = torchscan.compare_benchmarks(bench, bench, check=True)
    roof = json.loads(json.dumps(torchscan.roofline(nn.Sequential(nn.Linear(8, 8), nn.ReLU()), torch.ones(2, 8))))
    flop = torchscan.measure_flops(lambda: a @ b)
    ranks = []
    for rank in range(2):
        r = copy.deepcopy(flop)
        r["context"].update(rank=rank, world_size=2, backend="gloo")
        r["communication"] = {"totals": {"bytes_sent": {"status": "complete", "value": 64, "known_value": 64},
                                         "bytes_received": {"status": "complete", "value": 64, "known_value": 64},
                                         "collective_calls": 1},
                              "by_operator": {"c10d.allreduce_": {"calls": 1, "bytes_sent": 64,
                                                                  "bytes_received": 64}}}
        ranks.append(r)
    analysis = torchscan.crawl_module(nn.Sequential(nn.Linear(4, 4), nn.ReLU()), (4,), trace=True)
    trace = analysis.pop("trace")
    return {"bench": bench, "latency": latency, "comparison": comparison, "roofline": roof, "ranks": ranks,
            "flop": flop, "analysis": analysis, "trace": trace}


@pytest.fixture(scope="module")
def trace_figure():
    spec = importlib.util.spec_from_file_location("trace_figure", REPO_ROOT / "tools" / "trace_figure.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _readers(torchscan, seeds, trace_figure):
    """name -> (seed document, reader(doc), accepted error prefixes)."""
    from torchscan.roofline import roofline_svg

    ts = ("torchscan",)
    return {
        "render_benchmark": (seeds["bench"], torchscan.render_benchmark, ts),
        "render_latency": (seeds["latency"], torchscan.render_report, ts),
        "compare_benchmarks": (seeds["bench"], lambda d: torchscan.compare_benchmarks(d, seeds["bench"]), ts),
        "render_comparison": (seeds["comparison"], torchscan.render_benchmark, ts),
        "render_roofline": (seeds["roofline"], torchscan.render_roofline, ts),
        "roofline_svg": (seeds["roofline"], roofline_svg, ts),
        "merge_reports": (seeds["ranks"][1], lambda d: torchscan.render_job_report(
            torchscan.merge_reports([seeds["ranks"][0], d])), ts),
        "render_job_report": (torchscan.merge_reports(seeds["ranks"]), torchscan.render_job_report, ts),
        "render_report": (seeds["analysis"], torchscan.render_report, ts),
        "compare_reports": (seeds["flop"], lambda d: torchscan.compare_reports(seeds["flop"], d), ts),
        "trace_figure": (seeds["trace"], lambda d: trace_figure.render(
            d.get("traceEvents") if isinstance(d, dict) else d), ("",)),
    }


def test_seeds_are_accepted(torchscan, seeds, trace_figure):
    # The unmutated documents read cleanly: a reader that refused everything would pass the fuzz.
    for name, (doc, reader, _) in _readers(torchscan, seeds, trace_figure).items():
        assert reader(copy.deepcopy(doc)), name


def test_mutated_reports(torchscan, seeds, trace_figure):
    failures, outcomes = [], {}
    for n, (name, (doc, reader, prefixes)) in enumerate(_readers(torchscan, seeds, trace_figure).items()):
        rng = random.Random(SEED + n)
        accepted = refused = 0
        for case in range(CASES_PER_SEED):
            m = copy.deepcopy(doc)
            for _ in range(1 + rng.randrange(3)):
                mutate(m, rng)
            try:
                reader(m)
                accepted += 1
            except Exception as e:  # noqa: BLE001 - classifying is the test
                if name == "trace_figure" and isinstance(e, trace_figure.TraceError):
                    refused += 1
                elif _ours(e, prefixes) and name != "trace_figure":
                    refused += 1
                else:
                    failures.append(f"{name} case {case}: {type(e).__name__}: {str(e)[:300]}")
        outcomes[name] = (accepted, refused)
    assert not failures, f"{len(failures)} internal errors, first: {failures[:5]}"
    for name, (accepted, refused) in outcomes.items():
        # Both outcomes in quantity: a mutation that never breaks a reader, or always does, proves nothing.
        assert accepted >= 10 and refused >= 30, (name, accepted, refused)


def test_wide_counts_are_exact_or_refused(torchscan, seeds):
    # A complete count past 2^128 - 1 is refused by every reader; 2^128 - 1 is read exactly.
    bench = copy.deepcopy(seeds["bench"])
    bench["totals"]["operator_flops"].update(status="complete", value=2**128 - 1, known_value=2**128 - 1)
    small = copy.deepcopy(bench)
    small["totals"]["operator_flops"].update(value=2**64, known_value=2**64)
    diff = torchscan.compare_benchmarks(small, bench, check=True)["totals"]["operator_flops"]["delta"]
    assert diff == 2**128 - 1 - 2**64
    assert "340,282,366,920,938,463,463,374,607,431,768,211,455 FLOPs" in torchscan.render_benchmark(bench)
    bench["totals"]["operator_flops"].update(value=2**128, known_value=2**128)
    for reader in (torchscan.render_benchmark, lambda d: torchscan.compare_benchmarks(d, d)):
        with pytest.raises(ValueError, match=r"totals.operator_flops.value is 3402\d+, past 2\^128 - 1"):
            reader(bench)
    ranks = copy.deepcopy(seeds["ranks"])
    ranks[1]["total"].update(value=2**200, known_value=2**200)
    with pytest.raises(ValueError, match=r"past 2\^128 - 1"):
        torchscan.merge_reports(ranks)
    # Two ranks of 2^127 + 2^126 each: the sum passes 2^128 - 1, so it is a
    # partial lower bound (the first rank's count), never a complete value past it.
    n = 2**127 + 2**126
    for r in ranks:
        r["total"].update(value=n, known_value=n)
    job = torchscan.merge_reports(ranks)
    assert job["totals"]["operator_flops"]["status"] == "partial"
    assert job["totals"]["operator_flops"]["known_value"] == n
    assert "count_overflow" in [d["code"] for d in job["diagnostics"]]
    # One rank sends and receives 2^127 bytes each: bytes moved 2^128 is past
    # what a report holds, so the slowest-rank figure is a partial 2^128 - 1.
    for key in ("bytes_sent", "bytes_received"):
        ranks[1]["communication"]["totals"][key].update(value=2**127, known_value=2**127)
    slowest = torchscan.merge_reports(ranks)["slowest_rank"]["most_bytes_moved"]
    assert slowest["rank"] == 1 and slowest["status"] == "partial" and slowest["value"] == 2**128 - 1


def _cli(argv):
    """(exit status, stderr line or None) of the command line run in this process."""
    from torchscan.__main__ import main

    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            return main(argv), None
    except SystemExit as e:
        return 1 if isinstance(e.code, str) else e.code, e.code if isinstance(e.code, str) else None


def test_mutated_files_through_the_command_line(torchscan, seeds, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    good = {"bench": json.dumps(seeds["bench"]), "ranks": json.dumps(seeds["ranks"][0]),
            "flop": json.dumps(seeds["flop"]), "roofline": json.dumps(seeds["roofline"])}
    (tmp_path / "good.json").write_text(good["bench"])
    (tmp_path / "rank0.json").write_text(good["ranks"])
    (tmp_path / "flop.json").write_text(good["flop"])
    commands = [["render", "m.json"], ["compare", "good.json", "m.json"], ["merge", "rank0.json", "m.json"],
                ["diff", "flop.json", "m.json"]]
    failures, codes = [], {0: 0, 1: 0}
    for case in range(240):
        which = rng.choice(sorted(good))
        text = good[which]
        how = rng.randrange(4)
        if how == 0:  # a key repeated in the first object that has one
            at = text.index('{"') + 1
            key = text[at:text.index('":', at) + 2]
            text = text[:at] + key + " null, " + text[at:]
        elif how == 1:  # truncated
            text = text[:rng.randrange(len(text))]
        elif how == 2:  # a number replaced by a wide or non-JSON one
            digits = [i for i, c in enumerate(text) if c.isdigit() and text[i - 1] in ":[, "]
            at = rng.choice(digits)
            end = at
            while end < len(text) and (text[end].isdigit() or text[end] in ".eE-+"):
                end += 1
            text = text[:at] + rng.choice(["340282366920938463463374607431768211456", "NaN", "Infinity",
                                           "18446744073709551616", "-1", "1e400"]) + text[end:]
        else:  # structural
            doc = json.loads(text)
            mutate(doc, rng)
            text = json.dumps(doc)
        (tmp_path / "m.json").write_text(text)
        argv = commands[case % len(commands)]
        try:
            code, line = _cli(argv)
        except Exception as e:  # noqa: BLE001
            failures.append(f"case {case} {argv}: {type(e).__name__}: {str(e)[:300]}")
            continue
        codes[code] = codes.get(code, 0) + 1
        if code not in (0, 1) or (code == 1 and (line is None or "\n" in line or
                                                 not line.startswith(f"torchscan {argv[0]}: "))):
            failures.append(f"case {case} {argv}: exit {code}, {line!r}")
        if how == 0 and code != 1:
            failures.append(f"case {case} {argv}: a repeated key was accepted")
    assert not failures, f"{len(failures)} failures, first: {failures[:5]}"
    assert codes[0] >= 10 and codes[1] >= 100, codes
