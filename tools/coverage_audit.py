"""ATen coverage audit and torch-upgrade drift oracle.

    python3 tools/coverage_audit.py [--output AUDIT.json] [--zoo] [--summary]
    python3 tools/coverage_audit.py --diff OLD.json NEW.json
    python3 tools/coverage_audit.py --check tools/audit/torch-2.13.0.json

Classifies every operator overload registered in this process (all namespaces
that reach the dispatcher: aten, prims, c10d, quantized, ...) by what TorchScan
does with it; the classification itself runs in C++ against the formula
registry (torchscan_dispatch/integrations/coverage_audit.cc). --zoo also runs the model zoo
under a scan and marks the operators it executed. --check exits 1 when the
installed torch differs from a saved audit (the drift oracle): operators,
their classes, what a scan does with them (`at_run`), formula schemas, tags
(`core` among them), the plugin's footing, and, when the baseline records
it, the set of operators each zoo workload executes.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Dict, Iterable, List, Optional

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The fields a baseline keeps per operator (what a drift is made of).
KEPT = ("class", "at_run", "reason", "composite_implicit", "operator_formula", "module_formula", "views_differ",
        "schema", "tags")
# The fields whose change is a drift on its own (schemas only where a formula reads them).
COMPARED = ("class", "at_run", "composite_implicit", "operator_formula", "module_formula", "views_differ", "tags")


# torch packages that register operator namespaces when imported (prims,
# functional collectives, DTensor, Inductor's test operators): imported first,
# so the audit lists the same operators whatever the process imported before.
REGISTERING = ("torch._prims", "torch.distributed._functional_collectives", "torch.distributed.tensor",
               "torch._inductor.test_operators")


def run_audit() -> dict:
    """Audits the operators registered in this process. Packages outside torch
    add theirs when imported (the zoo's transformers adds `transformers::`):
    run the zoo first when the audit is compared with one that did."""
    import importlib

    from torchscan._library import Session

    for module in REGISTERING:
        try:
            importlib.import_module(module)
        except ImportError:  # a build without that package (no distributed support)
            pass

    audit = json.loads(Session.coverage_audit())
    audit["operators"] = {k: {f: v[f] for f in KEPT if f in v} for k, v in audit["operators"].items()}
    return audit


def executed_by_zoo() -> Dict[str, List[str]]:
    """Operator overloads each zoo workload executes (every recorded call)."""
    sys.path.insert(0, ROOT)
    import torchscan
    from tests.fixtures.zoo import workloads

    executed = {}
    for name, run in workloads().items():
        # Every call, those inside calls that own their subtree included (Note [Owned children], core/op_catalog.cc).
        with torchscan.flops.FlopScan(_record_owned_children=True) as s:
            run()
        executed[name] = list(s._session.recorded_operators())
    return executed


def summarize(audit: dict, executed: Optional[Dict[str, List[str]]] = None) -> dict:
    ops = audit["operators"]
    by_class = collections.Counter(v["class"] for v in ops.values())
    core = {k: v for k, v in ops.items() if "core" in v["tags"]}
    summary = {
        "torch_version": audit["torch_version"],
        "footing": audit["footing"],
        "operators": len(ops),
        "by_class": dict(sorted(by_class.items())),
        "with_formulas": sum(1 for v in ops.values() if v["class"] in ("operator_formula", "module_formula")),
        "core": len(core),
        "core_by_class": dict(sorted(collections.Counter(v["class"] for v in core.values()).items())),
        "core_unsupported": sorted(k for k, v in core.items() if v["class"] == "unsupported"),
        # Overloads whose operator and module views differ in class, with the reason.
        "views_differ": views_differ(audit),
    }
    if executed is not None:
        names = sorted({op for ops_ in executed.values() for op in ops_})
        summary["executed"] = len(names)
        summary["executed_by_class"] = dict(sorted(collections.Counter(
            ops[n]["class"] if n in ops else "missing_from_audit" for n in names).items()))
        summary["executed_unsupported"] = [n for n in names if n not in ops or ops[n]["class"] == "unsupported"]
    return summary


def views_differ(audit: dict) -> Dict[str, str]:
    """{operator overload: reason} for the overloads whose two views' classes
    differ (a formula in one view, none in the other)."""
    return {k: v["views_differ"] for k, v in sorted(audit["operators"].items()) if v.get("views_differ")}


def tags_defined(audit: dict) -> set:
    """The operator tags the audited release defines (those any operator
    carries): torch 2.11 has no `inplace` or `out`, for one."""
    return {t for v in audit["operators"].values() for t in v.get("tags") or ()}


def diff(old: dict, new: dict) -> dict:
    a, b = old["operators"], new["operators"]
    # A tag one release does not define is no change of the operators it marks.
    common_tags = tags_defined(old) & tags_defined(new)
    changed = {}
    for name in sorted(a.keys() & b.keys()):
        fields = {}
        for field in COMPARED:
            before, after = a[name].get(field), b[name].get(field)
            if field == "tags":  # a set: the registration order is not a change
                before = sorted(t for t in before or [] if t in common_tags)
                after = sorted(t for t in after or [] if t in common_tags)
            if field == "at_run" and (before is None or after is None):
                continue  # audits written before at_run existed
            if before != after:
                fields[field] = {"before": before, "after": after}
        # A schema change matters where a formula reads the arguments.
        if a[name]["schema"] != b[name]["schema"] and (b[name]["operator_formula"] or b[name]["module_formula"]):
            fields["schema"] = {"before": a[name]["schema"], "after": b[name]["schema"]}
        if fields:
            changed[name] = fields
    return {
        "before": old["torch_version"],
        "after": new["torch_version"],
        "added": {n: b[n]["class"] for n in sorted(b.keys() - a.keys())},
        "removed": {n: a[n]["class"] for n in sorted(a.keys() - b.keys())},
        "changed": changed,
        "footing": {"before": old["footing"], "after": new["footing"]} if old["footing"] != new["footing"] else {},
        "executed": diff_executed(old.get("executed_by_zoo"), new.get("executed_by_zoo")),
    }


def diff_executed(old: Optional[dict], new: Optional[dict]) -> dict:
    """Per zoo workload, the operators it executes now and did not before, and
    the reverse; empty when either side did not record the zoo."""
    if old is None or new is None:
        return {}
    out = {}
    for workload in sorted(old.keys() | new.keys()):
        a, b = set(old.get(workload, ())), set(new.get(workload, ()))
        if a != b or (workload in old) != (workload in new):
            out[workload] = {"added": sorted(b - a), "removed": sorted(a - b)}
    return out


def is_empty(d: dict) -> bool:
    return not (d["added"] or d["removed"] or d["changed"] or d["footing"] or d.get("executed"))


def render_diff(d: dict) -> str:
    lines = [f"coverage drift {d['before']} -> {d['after']}: {len(d['added'])} added, "
             f"{len(d['removed'])} removed, {len(d['changed'])} changed"
             + (f", {len(d['executed'])} zoo workload(s) run other operators" if d.get("executed") else "")]
    for title, entries in (("added", d["added"]), ("removed", d["removed"])):
        for name, cls in entries.items():
            lines.append(f"  {title:<8} {name:<60} {cls}")
    for name, fields in d["changed"].items():
        for field, change in fields.items():
            lines.append(f"  changed  {name:<60} {field}: {change['before']} -> {change['after']}")
    if d["footing"]:
        lines.append(f"  footing  {d['footing']['before']} -> {d['footing']['after']}")
    for workload, change in d.get("executed", {}).items():
        lines.append(f"  executed {workload}: now runs {change['added'] or 'nothing new'}, "
                     f"no longer runs {change['removed'] or 'nothing'}")
    return "\n".join(lines)


def render_summary(s: dict) -> str:
    lines = [f"TorchScan coverage audit, torch {s['torch_version']}",
             f"  footing: mode key {s['footing']['mode_key']}, fallback registered: "
             f"{s['footing']['fallback_registered']} {s['footing']['fallback_problem']}",
             f"  {s['operators']} operator overloads; {s['with_formulas']} have formulas"]
    lines += [f"    {cls:<17} {n:>5}" for cls, n in s["by_class"].items()]
    lines.append(f"  core ATen opset: {s['core']} overloads: {s['core_by_class']}")
    lines.append(f"  core unsupported: {s['core_unsupported'] or 'none'}")
    lines.append(f"  views differ (a formula in one view only): {len(s['views_differ'])} overloads")
    lines += [f"    {op}: {why}" for op, why in s["views_differ"].items()]
    if "executed" in s:
        lines.append(f"  executed by the model zoo: {s['executed']} overloads: {s['executed_by_class']}")
        lines.append(f"  executed unsupported: {s['executed_unsupported'] or 'none'}")
    return "\n".join(lines)


def load(path: str) -> dict:
    with open(path) as f:
        audit = json.load(f)
    if audit.get("schema_version") != 1:
        raise SystemExit(f"{path}: unknown audit schema_version {audit.get('schema_version')!r}")
    return audit


def main(argv: Optional[Iterable[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--output", help="write the audit JSON here")
    p.add_argument("--zoo", action="store_true", help="also run the model zoo and report its operators")
    p.add_argument("--summary", action="store_true", help="print the human summary")
    p.add_argument("--diff", nargs=2, metavar=("OLD", "NEW"), help="compare two saved audits")
    p.add_argument("--check", metavar="BASELINE", help="exit 1 when this torch differs from the baseline")
    args = p.parse_args(argv)

    if args.diff:
        d = diff(load(args.diff[0]), load(args.diff[1]))
        print(render_diff(d))
        return 0
    baseline = load(args.check) if args.check else None
    # The zoo runs first: the packages it imports register operators too.
    run_zoo = args.zoo or (baseline is not None and "executed_by_zoo" in baseline)
    executed = executed_by_zoo() if run_zoo else None
    audit = run_audit()
    if executed is not None:
        audit["executed_by_zoo"] = executed
    if args.output:
        with open(args.output, "w") as f:
            json.dump(audit, f, indent=1, sort_keys=True)
            f.write("\n")
    if args.summary or not (args.output or args.check):
        print(render_summary(summarize(audit, executed)))
    if args.check:
        d = diff(baseline, audit)
        if not is_empty(d):
            print(render_diff(d))
            print("the installed torch differs from the baseline; if this is intended, regenerate it with "
                  f"`python3 tools/coverage_audit.py --zoo --output {args.check}`")
            return 1
        print(f"no drift against {args.check}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
