#!/usr/bin/env python3
"""Draw a trace-event JSON trace (TorchScan's, or any) as an SVG timeline.

    python3 tools/trace_figure.py trace.json -o trace.svg [--width 1400] [--title TEXT]
                                  [--start US] [--end US]

One band per track (pid, tid), labelled with its thread_name; complete
("X") slices as boxes stacked by nesting depth, module slices (cat
"module") blue and operator slices orange (darker: a kernel with FLOPs),
labelled where the box is wide enough; each box's tooltip (<title>) holds
its name, duration and arguments. Flows (bind_id with flow_in / flow_out,
as TorchScan writes requests) are drawn as grey arrows from each slice's
start to the next one's. A static picture for documents and offline
review: no zooming, so long traces are best cut with --start / --end
(microseconds, the trace's own time axis).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import stat
import sys
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple
from xml.sax.saxutils import escape

ROW = 18           # px per nesting level
TRACK_GAP = 14     # px between tracks
LABEL_W = 190      # px for the track names on the left
AXIS_H = 34        # px for the time axis on top
CHAR_W = 6.2       # px per character of the 11 px label font (an estimate, for fitting labels)

MODULE_FILLS = ("#3b6fb6", "#5b8cd0", "#7fa8e0", "#a4c3ec")  # by depth, cycling
OPERATOR_FILL, KERNEL_FILL = "#f2b36f", "#d9822b"


class TraceError(ValueError):
    """The input is not a trace this script can draw (the message says why)."""


def _readers():
    """TorchScan's shared JSON input rules (python_shim/torchscan/_readers.py),
    loaded by path: this script runs without importing torch."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python_shim", "torchscan", "_readers.py")
    if not os.path.exists(path):
        from torchscan import _readers as module  # an installed TorchScan
        return module
    spec = importlib.util.spec_from_file_location("torchscan_readers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_RULES = _readers()


def load_trace(path: str) -> List[Dict[str, Any]]:
    try:
        # Without blocking (a FIFO would wait for a writer); regular files only.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise TraceError(f"{path} is not a regular file (a directory, FIFO or device); give a trace file")
            raw = f.read()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise TraceError(f"{path} is not JSON (not UTF-8 text: byte {exc.start})") from None
    try:
        data = _RULES.loads(text, path)
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    # The format's two forms: {"traceEvents": [...]} or a bare array.
    events = data.get("traceEvents") if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise TraceError(f"{path} is not a trace-event file: expected {{\"traceEvents\": [...]}} or a JSON array")
    return [e for e in events if isinstance(e, dict)]


_SCALARS = (str, int, float, type(None))  # what a pid, tid or bind_id may be (they key tracks and flows)


def validate_events(events: Sequence[Any]) -> None:
    """TraceError naming the event and field when `events` cannot be drawn:
    what render reads of each event is checked here, nothing else."""
    if not isinstance(events, (list, tuple)):
        raise TraceError(f"expected a list of trace events, got {type(events).__name__}")
    try:
        _RULES.check_depth(list(events), "the trace")
    except ValueError as exc:
        raise TraceError(str(exc)) from None
    for i, e in enumerate(events):
        if not isinstance(e, dict):
            raise TraceError(f"event {i} is not an object ({type(e).__name__})")
        for key in ("pid", "tid", "bind_id"):
            if key in e and not isinstance(e[key], _SCALARS):
                raise TraceError(f"event {i}: {key} must be a string or a number, got {type(e[key]).__name__}")
        if "args" in e and e["args"] is not None and not isinstance(e["args"], dict):
            raise TraceError(f"event {i}: args must be an object, got {type(e['args']).__name__}")
        if e.get("ph") != "X":
            continue
        for key in ("ts", "dur"):
            v = e.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise TraceError(f"a complete slice needs numeric ts and dur: event {i} has {key} {v!r}"[:300])
        if e["dur"] < 0 or not math.isfinite(e["ts"] + e["dur"]):
            raise TraceError(f"event {i}: dur {e['dur']!r} is not a duration from ts {e['ts']!r}")
        if not isinstance(e.get("name"), str):
            raise TraceError(f"event {i}: a complete slice needs a name (a string), got {e.get('name')!r}"[:300])
        if not isinstance(e.get("cat", ""), str):
            raise TraceError(f"event {i}: cat must be a string, got {type(e['cat']).__name__}")


def _depths(slices: List[Dict[str, Any]]) -> int:
    """Sets each slice's "_depth" (0: outermost) on its track; returns the track's levels."""
    stack: List[float] = []  # ends of the open slices
    levels = 0
    # Parents first: earlier start, then longer.
    for e in sorted(slices, key=lambda e: (e["ts"], -e["dur"])):
        while stack and stack[-1] <= e["ts"] + 1e-3:  # 1 ns of rounding
            stack.pop()
        e["_depth"] = len(stack)
        levels = max(levels, len(stack) + 1)
        stack.append(e["ts"] + e["dur"])
    return levels


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return m * power
    return 10 * power


def _time_label(us: float) -> str:
    if us == 0:
        return "0"
    if abs(us) >= 1000:
        return f"{us / 1000:g} ms"
    return f"{us:g} µs"


def _tooltip(e: Dict[str, Any]) -> str:
    lines = [f"{e['name']} ({e.get('cat', '')}): {e['dur']:.3f} µs"]
    for k, v in (e.get("args") or {}).items():
        lines.append(f"{k}: {json.dumps(v, default=str)}")
    return "\n".join(lines)


def render(events: Sequence[Dict[str, Any]], width: int = 1400, title: Optional[str] = None,
           start: Optional[float] = None, end: Optional[float] = None) -> str:
    validate_events(events)
    for name, v in (("--start", start), ("--end", end)):
        if v is not None and not math.isfinite(v):
            raise TraceError(f"{name} must be a finite number of microseconds, got {v!r}")
    slices = []
    for e in events:
        if e.get("ph") != "X":
            continue
        slices.append({**e, "ts": float(e["ts"]), "dur": float(e["dur"])})
    if not slices:
        raise TraceError("the trace has no complete (\"X\") slices to draw")
    lo = min(e["ts"] for e in slices) if start is None else start
    hi = max(e["ts"] + e["dur"] for e in slices) if end is None else end
    if hi <= lo:
        raise TraceError(f"empty time window: --start {lo} is not before --end {hi}")
    if not math.isfinite(hi - lo) or (hi - lo) < abs(lo) * 1e-12:
        raise TraceError(f"the time window {lo}..{hi} µs cannot be drawn: give --start and --end closer together "
                         "(or further apart)")
    names = {(e.get("pid"), e.get("tid")): str((e.get("args") or {}).get("name"))
             for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    tracks: Dict[Tuple[Any, Any], List[Dict[str, Any]]] = defaultdict(list)
    for e in slices:
        tracks[e.get("pid"), e.get("tid")].append(e)
    plot_w = width - LABEL_W - 20
    scale = plot_w / (hi - lo)

    def x_of(t: float) -> float:
        return LABEL_W + (min(max(t, lo), hi) - lo) * scale

    body: List[str] = []
    y = AXIS_H + (24 if title else 0)
    top = y
    positions: Dict[int, Tuple[float, float]] = {}  # id(slice) -> (x, y) of its box's left middle
    # Numeric thread ids in order, then named ones (a number and a string do not compare).
    order = sorted(tracks, key=lambda k: (str(k[0]), 0, k[1], "") if isinstance(k[1], (int, float))
                   else (str(k[0]), 1, 0, str(k[1])))
    for key in order:
        track = tracks[key]
        levels = _depths(track)
        h = levels * ROW
        label = names.get(key, f"pid {key[0]} tid {key[1]}")
        body.append(f'<rect class="track" x="0" y="{y - 4}" width="{width}" height="{h + 8}" fill="#f6f6f6"/>')
        body.append(f'<text class="track-name" x="8" y="{y + 13}" font-weight="bold">{escape(label)}</text>')
        for e in sorted(track, key=lambda e: (e["_depth"], e["ts"])):
            if e["ts"] + e["dur"] < lo or e["ts"] > hi:
                continue  # outside the window
            x0, x1 = x_of(e["ts"]), x_of(e["ts"] + e["dur"])
            w = max(x1 - x0, 0.5)  # a call too short to see still shows as a hairline
            ry = y + e["_depth"] * ROW
            cat = e.get("cat", "")
            if cat == "module":
                fill = MODULE_FILLS[e["_depth"] % len(MODULE_FILLS)]
            else:
                fill = KERNEL_FILL if (e.get("args") or {}).get("flops") is not None else OPERATOR_FILL
            stroke = ' stroke="#c00000" stroke-width="1.5"' if (e.get("args") or {}).get("raised") else ""
            kind = "module" if cat == "module" else "operator"
            body.append(f'<g><title>{escape(_tooltip(e))}</title>'
                        f'<rect class="slice {kind}" x="{x0:.2f}" y="{ry}" width="{w:.2f}" height="{ROW - 2}" '
                        f'fill="{fill}"{stroke}/>')
            text = str(e["name"])
            fits = int((w - 4) / CHAR_W)
            if fits >= 3:
                shown = text if len(text) <= fits else text[:fits - 1] + "…"
                color = "#ffffff" if cat == "module" and e["_depth"] < 2 else "#1a1a1a"
                body.append(f'<text class="label" x="{x0 + 2:.2f}" y="{ry + 12}" fill="{color}">{escape(shown)}</text>')
            body.append("</g>")
            positions[id(e)] = (x0, ry + (ROW - 2) / 2)
        y += h + TRACK_GAP
    # Flows: each chain of slices sharing a bind_id, in start order.
    chains: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for e in slices:
        if "bind_id" in e and id(e) in positions:
            chains[e["bind_id"]].append(e)
    for chain in chains.values():
        chain.sort(key=lambda e: e["ts"])
        for a, b in zip(chain, chain[1:]):
            (xa, ya), (xb, yb) = positions[id(a)], positions[id(b)]
            body.append(f'<line class="flow" x1="{xa:.2f}" y1="{ya:.2f}" x2="{xb:.2f}" y2="{yb:.2f}" '
                        'stroke="#555555" stroke-width="0.8" marker-end="url(#arrow)"/>')
    height = y + 30
    # Time axis: ticks at a round step over the window.
    step = _nice_step(hi - lo, 10)
    axis = [f'<line x1="{LABEL_W}" y1="{top - 10}" x2="{LABEL_W + plot_w}" y2="{top - 10}" stroke="#888888"/>']
    first = math.ceil(lo / step)
    for n in range(first, first + 1000):  # about 10 ticks; the bound only guards rounding
        t = n * step
        if t > hi + 1e-9:
            break
        x = x_of(t)
        axis.append(f'<line x1="{x:.2f}" y1="{top - 14}" x2="{x:.2f}" y2="{y - TRACK_GAP + 4}" stroke="#dddddd"/>')
        axis.append(f'<text class="tick" x="{x:.2f}" y="{top - 18}" text-anchor="middle">{escape(_time_label(t))}</text>')
    legend_y = height - 12
    legend = [
        f'<rect x="{LABEL_W}" y="{legend_y - 10}" width="12" height="12" fill="{MODULE_FILLS[0]}"/>',
        f'<text x="{LABEL_W + 16}" y="{legend_y}">module call</text>',
        f'<rect x="{LABEL_W + 110}" y="{legend_y - 10}" width="12" height="12" fill="{OPERATOR_FILL}"/>',
        f'<text x="{LABEL_W + 126}" y="{legend_y}">operator call</text>',
        f'<rect x="{LABEL_W + 230}" y="{legend_y - 10}" width="12" height="12" fill="{KERNEL_FILL}"/>',
        f'<text x="{LABEL_W + 246}" y="{legend_y}">kernel with FLOPs (in the SVG itself, hover a box for its '
        'arguments)</text>',
    ]
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
            '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="6" markerHeight="6" '
            'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="#555555"/></marker></defs>',
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>']
    if title:
        head.append(f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title)}</text>')
    return "\n".join(head + axis + body + legend + ["</svg>"]) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="trace-event JSON file (e.g. from scan --trace, crawl_module(trace=True))")
    p.add_argument("-o", "--output", required=True, help="SVG file to write")
    p.add_argument("--width", type=int, default=1400, help="picture width in px (default 1400)")
    p.add_argument("--title", help="a title line above the timeline")
    p.add_argument("--start", type=float, help="window start, microseconds on the trace's axis")
    p.add_argument("--end", type=float, help="window end, microseconds on the trace's axis")
    args = p.parse_args(argv)
    if args.width < LABEL_W + 100:
        p.error(f"--width must be at least {LABEL_W + 100} px (the track names take {LABEL_W})")
    try:
        if os.path.exists(args.output) and not stat.S_ISREG(os.stat(args.output).st_mode):
            # Writing to a FIFO would wait for a reader.
            raise TraceError(f"-o {args.output} exists and is not a regular file; give a file name")
        svg = render(load_trace(args.trace), args.width, args.title, args.start, args.end)
    except TraceError as exc:
        print(f"trace_figure: {exc}", file=sys.stderr)
        return 2
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
