"""Distributed jobs: each rank's place in its job, its collectives'
bytes, and the job report that merges the ranks' reports.

A rank's report (crawl_module, measure_flops, scan().report()) carries, when
torch.distributed is initialized, ``rank``, ``world_size``, ``backend`` and
``process_groups`` in its context and a ``communication`` section: the bytes
this rank sent and received in each collective it called, valued by a stated
algorithm convention (the C++ analysis, torchscan_dispatch/analyses/communication.cc).
Communication is never FLOPs. ``merge_reports`` / ``python3 -m torchscan
merge`` combine one report per rank into a job report.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torchscan import _metric as _metric_result
from torchscan._readers import MAX_COUNT, check_depth, count_problem, is_number, other_kind

__all__ = ["distributed_context", "merge_reports", "render_job_report"]

_JOB_KIND = "torchscan_job_report"


def _initialized():
    """torch.distributed when it has a default group in this process, else None."""
    try:
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    return dist


def distributed_context() -> dict:
    """{"rank", "world_size", "backend", "process_groups"} of this process
    when torch.distributed is initialized; {} otherwise. process_groups lists
    every group torch.distributed created here, by its registered name (the
    name functional collectives and the communication section use)."""
    dist = _initialized()
    if dist is None:
        return {}
    context = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "backend": str(dist.get_backend())}
    groups = []
    try:
        # Private but stable across 2.x: the group -> registered name map.
        names = dict(dist.distributed_c10d._world.pg_names)
    except Exception:  # an older or newer layout: the default group alone
        names = {dist.group.WORLD: getattr(dist.group.WORLD, "group_name", "")}
    for pg, name in names.items():
        try:
            groups.append({"name": str(name), "description": str(getattr(pg, "group_desc", "")),
                           "size": pg.size(), "rank": pg.rank()})
        except Exception:  # a group being torn down: leave it out
            continue
    context["process_groups"] = sorted(groups, key=lambda g: g["name"])
    return context


def add_to_report(report: dict, session) -> None:
    """Adds the distributed context and the communication section to a
    FlopReport or AnalysisReport built from `session`, when
    torch.distributed is initialized (reports of single-process programs are
    unchanged)."""
    context = distributed_context()
    if not context:
        return
    report.setdefault("context", {}).update(context)
    scan_report = json.loads(session.scan_report())
    report["communication"] = scan_report["communication"]


# --------------------------------------------------------------------- merge


class _Malformed(ValueError):
    pass


def _metric(value: Any, where: str) -> dict:
    """The status and known_value of a rank's MetricResult (merge reads only
    those); _Malformed when it is not one."""
    problem = _metric_result.problem(value, where, described=False, counts=True)
    if problem:
        raise _Malformed(problem)
    return {"status": value["status"], "known_value": value.get("known_value")}


def _report_kind(report: Mapping) -> str:
    if report.get("kind") == "torchscan_scan_report":
        return "scan_report"
    if "layers" in report and "totals" in report:
        return "analysis_report"
    if "total" in report and "by_operator" in report:
        return "flop_report"
    raise _Malformed("is not a TorchScan report (an AnalysisReport, FlopReport or scan report)")


def _rank_entry(report: Any) -> dict:
    """What merge needs from one rank's report; _Malformed says what is wrong."""
    if not isinstance(report, Mapping):
        raise _Malformed(f"is not a JSON object (got {type(report).__name__})")
    if other_kind(report):
        raise _Malformed(f"is {other_kind(report)}, not one rank's report")
    kind = _report_kind(report)
    if report.get("schema_version") != 1:
        raise _Malformed(f"has schema_version {report.get('schema_version')!r}; this TorchScan reads version 1")
    context = report.get("context")
    if not isinstance(context, Mapping):
        raise _Malformed("has no context object")
    for key in ("rank", "world_size"):
        if key not in context:
            raise _Malformed(f"has no context.{key}: it was not collected inside an initialized torch.distributed "
                             "job (or by a TorchScan without distributed support)")
        v = context[key]
        if isinstance(v, bool) or not isinstance(v, int):
            raise _Malformed(f"context.{key} must be an integer, got {v!r}")
    if context.get("backend") is not None and not isinstance(context["backend"], str):
        raise _Malformed(f"context.backend must be a string, got {type(context['backend']).__name__}")
    rank, world = context["rank"], context["world_size"]
    if world < 1 or not 0 <= rank < world:
        raise _Malformed(f"context.rank {rank} is not a rank of a job of world_size {world}")
    if kind == "flop_report":
        flops = _metric(report.get("total"), "total")
    elif kind == "analysis_report":
        totals = report.get("totals")
        if not isinstance(totals, Mapping):
            raise _Malformed("has no totals object")
        flops = _metric(totals.get("operator_flops"), "totals.operator_flops")
    else:
        op = report.get("operator_flops")
        flops = (_metric(op.get("total"), "operator_flops.total") if isinstance(op, Mapping)
                 else {"status": "unavailable", "known_value": None})
    communication = report.get("communication")
    entry = {"rank": rank, "world_size": world, "kind": kind, "backend": context.get("backend"),
             "operator_flops": flops, "by_operator": {}, "collective_calls": 0, "missing_communication": False}
    if communication is None:
        entry["missing_communication"] = True
        entry["bytes_sent"] = entry["bytes_received"] = {"status": "unavailable", "known_value": None}
        return entry
    if not isinstance(communication, Mapping) or not isinstance(communication.get("totals"), Mapping):
        raise _Malformed("has a communication section without a totals object")
    ctotals = communication["totals"]
    entry["bytes_sent"] = _metric(ctotals.get("bytes_sent"), "communication.totals.bytes_sent")
    entry["bytes_received"] = _metric(ctotals.get("bytes_received"), "communication.totals.bytes_received")
    calls = ctotals.get("collective_calls", 0)
    if count_problem(calls):
        raise _Malformed(f"communication.totals.collective_calls {count_problem(calls)}")
    entry["collective_calls"] = calls
    by_op = communication.get("by_operator", {})
    if not isinstance(by_op, Mapping):
        raise _Malformed("communication.by_operator is not an object")
    for op, row in by_op.items():
        if not isinstance(row, Mapping):
            raise _Malformed(f"communication.by_operator[{op!r}] is not an object")
        clean = {}
        for key in ("calls", "bytes_sent", "bytes_received", "unavailable_calls"):
            v = row.get(key, 0)
            if count_problem(v):
                raise _Malformed(f"communication.by_operator[{op!r}].{key} {count_problem(v)}")
            clean[key] = v
        entry["by_operator"][str(op)] = clean
    return entry


def _metric_json(status: str, known: Optional[int], unit: str, method: str) -> dict:
    return _metric_result.metric(status, None if status == "unavailable" else known, unit=unit, scope="job",
                                 method=method)


def _combine(values: List[dict], how: str) -> Tuple[str, Optional[int]]:
    """Sum or max of per-rank results: complete only when every rank's is;
    otherwise the known part (a lower bound), unavailable when none is known.
    A sum past 2^128 - 1 (the most a report holds exactly) is partial: the
    ranks summed before it passed are its known lower bound."""
    known = [v["known_value"] for v in values if v["status"] != "unavailable"]
    if not known:
        return "unavailable", None
    status = "complete" if all(v["status"] == "complete" for v in values) else "partial"
    if how != "sum":
        return status, max(known)
    total = 0
    for k in known:
        if total + k > MAX_COUNT:
            return "partial", total
        total += k
    return status, total


def merge_reports(reports: Sequence[Any], names: Optional[Sequence[str]] = None) -> dict:
    """One job report from one report per rank (the same kind for every rank:
    crawl_module's AnalysisReports, measure_flops' FlopReports or scan
    reports). Refuses, with a ValueError naming the file: a report that is
    not one of those or has no context.rank / context.world_size, mixed world
    sizes or report kinds, two reports of one rank, and missing ranks.

    The job report: per-rank totals (operator FLOPs, bytes sent and received),
    their sum, the slowest-rank view (the rank with most FLOPs, the rank with
    most bytes moved = sent + received, and the max over ranks of each) and
    the imbalance max / mean of each total (complete values only)."""
    if names is None:
        names = [f"report {i}" for i in range(len(reports))]
    if len(names) != len(reports):
        raise ValueError("torchscan.merge_reports: names must have one entry per report")
    if not reports:
        raise ValueError("torchscan.merge_reports: no reports to merge (one per rank)")
    entries = []
    for report, name in zip(reports, names):
        try:
            entry = _rank_entry(report)
        except _Malformed as problem:
            raise ValueError(f"torchscan.merge_reports: {name} {problem}") from None
        entry["file"] = name
        entries.append(entry)
    worlds = sorted({e["world_size"] for e in entries})
    if len(worlds) > 1:
        by_world = "; ".join(f"world_size {w}: " + ", ".join(e["file"] for e in entries if e["world_size"] == w)
                             for w in worlds)
        raise ValueError(f"torchscan.merge_reports: the reports come from jobs of different sizes ({by_world})")
    kinds = sorted({e["kind"] for e in entries})
    if len(kinds) > 1:
        raise ValueError(f"torchscan.merge_reports: the reports are of different kinds ({', '.join(kinds)}); "
                         "merge reports made the same way on every rank")
    seen: Dict[int, str] = {}
    for e in entries:
        if e["rank"] in seen:
            raise ValueError(f"torchscan.merge_reports: rank {e['rank']} appears twice ({seen[e['rank']]} and "
                             f"{e['file']})")
        seen[e["rank"]] = e["file"]
    world = worlds[0]
    if len(seen) < world:
        # Every seen rank is below world: the first few missing ones are found
        # within len(seen) + 10 steps, however large world_size claims to be.
        missing: List[int] = []
        r = 0
        while len(missing) < 10 and r < world:
            if r not in seen:
                missing.append(r)
            r += 1
        more = world - len(seen) - len(missing)
        raise ValueError(f"torchscan.merge_reports: world_size is {world} but rank(s) "
                         f"{', '.join(map(str, missing))}{f' and {more} more' if more else ''} have no report")
    entries.sort(key=lambda e: e["rank"])

    diagnostics = []
    for m in ("operator_flops", "bytes_sent", "bytes_received"):
        if sum(e[m]["known_value"] or 0 for e in entries) > MAX_COUNT:
            diagnostics.append({"code": "count_overflow", "severity": "warning", "metric": m,
                                "message": f"the ranks' {m} add up past 2^128 - 1, the largest count a report "
                                           "holds exactly; the job's sum is a lower bound"})
    for e in entries:
        if e["missing_communication"]:
            diagnostics.append({"code": "communication_unavailable", "severity": "warning", "metric": "bytes_sent",
                                "message": f"rank {e['rank']} ({e['file']}) has no communication section: its bytes "
                                           "are unknown and the job's are a lower bound"})
    metrics = {"operator_flops": ("FLOPs", "operator_dispatch"), "bytes_sent": ("bytes", "collective_conventions"),
               "bytes_received": ("bytes", "collective_conventions")}
    ranks = []
    for e in entries:
        ranks.append({"rank": e["rank"], "file": e["file"], "collective_calls": e["collective_calls"],
                      "totals": {m: _metric_json(e[m]["status"], e[m]["known_value"], *metrics[m]) for m in metrics}})
    totals, maxima, imbalance = {}, {}, {}
    for m, (unit, method) in metrics.items():
        values = [e[m] for e in entries]
        s_status, s_known = _combine(values, "sum")
        totals[m] = _metric_json(s_status, s_known, unit, method)
        m_status, m_known = _combine(values, "max")
        maxima[m] = _metric_json(m_status, m_known, unit, method)
        # A ratio of lower bounds bounds nothing: incomplete totals have no
        # imbalance figure, and an all-zero total has none at all.
        if s_status != "complete":
            imbalance[m] = {"status": "unavailable", "value": None,
                            "reason": f"{m} is not complete on every rank"}
        elif s_known == 0:
            imbalance[m] = {"status": "unavailable", "value": None, "reason": f"{m} is zero on every rank"}
        else:
            imbalance[m] = {"status": "complete", "value": m_known * world / s_known}
    totals["collective_calls"] = sum(e["collective_calls"] for e in entries)

    def slowest(key) -> dict:
        values = [(key(e), e) for e in entries]
        known = [(v, e) for v, e in values if v is not None]
        if not known:
            return {"rank": None, "status": "unavailable", "value": None}
        v, e = max(known, key=lambda item: (item[0], -item[1]["rank"]))
        complete = all(v2 is not None for v2, _ in values) and all(
            e2[m]["status"] == "complete" for _, e2 in values for m in key.metrics)
        if v > MAX_COUNT:  # sent + received past what a report holds exactly: a lower bound
            v, complete = MAX_COUNT, False
        return {"rank": e["rank"], "file": e["file"], "status": "complete" if complete else "partial", "value": v}

    def flops_of(e):
        return e["operator_flops"]["known_value"]
    flops_of.metrics = ("operator_flops",)  # type: ignore[attr-defined]

    def bytes_of(e):
        s, r = e["bytes_sent"]["known_value"], e["bytes_received"]["known_value"]
        return None if s is None or r is None else s + r
    bytes_of.metrics = ("bytes_sent", "bytes_received")  # type: ignore[attr-defined]

    by_operator: Dict[str, dict] = {}
    for e in entries:
        for op, row in e["by_operator"].items():
            acc = by_operator.setdefault(op, {"calls": 0, "bytes_sent": 0, "bytes_received": 0,
                                              "unavailable_calls": 0})
            for key in acc:
                acc[key] += row[key]
    return {
        "kind": _JOB_KIND,
        "schema_version": 1,
        "context": {"world_size": world, "report_kind": kinds[0],
                    "backends": sorted({str(e["backend"]) for e in entries if e["backend"] is not None})},
        "ranks": ranks,
        "totals": totals,
        "slowest_rank": {
            "most_operator_flops": slowest(flops_of),
            "most_bytes_moved": slowest(bytes_of),
            "max": maxima,
            "meaning": "bytes moved = bytes sent + bytes received; a partial entry ranks the known parts",
        },
        "imbalance": {**imbalance, "meaning": "max over ranks / mean over ranks of each total (1.0: balanced); "
                                               "unavailable when a total is incomplete or zero"},
        "communication": {"by_operator": by_operator},
        "diagnostics": diagnostics,
    }


def _fmt(metric: Mapping) -> str:
    if metric["status"] == "unavailable":
        return "unavailable"
    text = f"{metric['known_value']:,}"
    return text if metric["status"] == "complete" else f">= {text} (partial)"


_TOTALS = ("operator_flops", "bytes_sent", "bytes_received")


def _check_job(job: Any) -> None:
    """What render_job_report reads of a job report; _Malformed names the field."""
    def metrics(row: Any, path: str) -> None:
        if not isinstance(row, Mapping):
            raise _Malformed(f"{path} is not an object")
        for m in _TOTALS:
            _metric(row.get(m), f"{path}.{m}")

    check_depth(job, "the job report")
    if job.get("schema_version") != 1:
        raise _Malformed(f"schema_version is {job.get('schema_version')!r}; this TorchScan reads version 1")
    context = job.get("context")
    if not isinstance(context, Mapping) or count_problem(context.get("world_size")):
        raise _Malformed("context.world_size must be a non-negative integer")
    ranks = job.get("ranks")
    if not isinstance(ranks, list):
        raise _Malformed("ranks is not a list")
    for i, r in enumerate(ranks):
        if not isinstance(r, Mapping) or count_problem(r.get("rank")):
            raise _Malformed(f"ranks[{i}].rank must be a non-negative integer")
        metrics(r.get("totals"), f"ranks[{i}].totals")
    metrics(job.get("totals"), "totals")
    slowest = job.get("slowest_rank")
    if not isinstance(slowest, Mapping):
        raise _Malformed("slowest_rank is not an object")
    metrics(slowest.get("max"), "slowest_rank.max")
    for key in ("most_operator_flops", "most_bytes_moved"):
        if not isinstance(slowest.get(key), Mapping) or "rank" not in slowest[key]:
            raise _Malformed(f"slowest_rank.{key} is not an object with a rank")
    imbalance = job.get("imbalance")
    if not isinstance(imbalance, Mapping):
        raise _Malformed("imbalance is not an object")
    for m in _TOTALS:
        v = imbalance.get(m)
        if not isinstance(v, Mapping) or v.get("status") not in ("complete", "unavailable") or (
                v["status"] == "complete" and not is_number(v.get("value"))):
            raise _Malformed(f"imbalance.{m} must be an object with a status, and a number when complete")
    diagnostics = job.get("diagnostics", [])
    if not isinstance(diagnostics, list) or not all(isinstance(d, Mapping) and isinstance(d.get("message"), str)
                                                    for d in diagnostics):
        raise _Malformed("diagnostics must be a list of objects with a message")


def render_job_report(job: Mapping) -> str:
    """A job report (merge_reports) as text: one row per rank, the sum, the
    max and the imbalance. A dict that is not one is a ValueError naming the field."""
    if not isinstance(job, Mapping) or job.get("kind") != _JOB_KIND:
        raise ValueError("torchscan.render_job_report: not a job report (kind torchscan_job_report)")
    try:
        _check_job(job)
    except (_Malformed, ValueError) as e:
        raise ValueError(f"torchscan.render_job_report: {e}") from None
    header = f"{'rank':<8}{'operator FLOPs':>28}{'bytes sent':>26}{'bytes received':>26}"
    lines = [f"TorchScan job report: world_size {job['context']['world_size']}", header, "-" * len(header)]
    for r in job["ranks"]:
        t = r["totals"]
        lines.append(f"{r['rank']:<8}{_fmt(t['operator_flops']):>28}{_fmt(t['bytes_sent']):>26}"
                     f"{_fmt(t['bytes_received']):>26}")
    lines.append("-" * len(header))
    for label, row in (("sum", job["totals"]), ("max", job["slowest_rank"]["max"])):
        lines.append(f"{label:<8}{_fmt(row['operator_flops']):>28}{_fmt(row['bytes_sent']):>26}"
                     f"{_fmt(row['bytes_received']):>26}")

    def ratio(v):
        return "n/a" if v["status"] != "complete" else f"{v['value']:.3f}"
    imb = job["imbalance"]
    lines.append(f"{'max/mean':<8}{ratio(imb['operator_flops']):>28}{ratio(imb['bytes_sent']):>26}"
                 f"{ratio(imb['bytes_received']):>26}")
    s = job["slowest_rank"]
    lines.append(f"most operator FLOPs: rank {s['most_operator_flops']['rank']}; most bytes moved: rank "
                 f"{s['most_bytes_moved']['rank']}")
    for d in job.get("diagnostics", []):
        lines.append(f"warning: {d['message']}")
    return "\n".join(lines)
