#!/usr/bin/env python3
"""Draw a trace-event JSON trace (TorchScan's, or any) as an SVG timeline.

    python3 tools/trace_figure.py trace.json -o trace.svg [--width 1400] [--title TEXT]
                                  [--requests] [--start US] [--end US]

One band per track (pid, tid), labelled with its thread_name; complete
("X") slices as boxes stacked by nesting depth, module slices (cat
"module") blue and operator slices orange (darker: a kernel with FLOPs),
labelled where the box is wide enough; each box's tooltip (<title>) holds
its name, duration and arguments. Flows (bind_id with flow_in / flow_out,
as TorchScan writes requests) are requests: each is a bar, named by its
request, in a lane above its track's slices, spanning the request from its
first slice to its last, with the flow's arrows along the bar's lower edge
(from each slice's start to the next one's), clear of the slices' labels.
A static picture for documents and offline review: no zooming, so long
traces are best cut with --requests (from the first request's start to the
last one's end) or --start / --end (microseconds, the trace's own time
axis); a request the window cuts widens it, so requests are drawn whole.
Tracks with nothing in the window are left out.
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
REQUEST_FILL, FLOW_STROKE = "#d8e8d0", "#3c763d"


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


def _requests(slices: List[Dict[str, Any]]) -> Dict[Any, List[Dict[str, Any]]]:
    """Each flow's slices (bind_id), in start order: one request each."""
    chains: Dict[Any, List[Dict[str, Any]]] = defaultdict(list)
    for e in slices:
        if "bind_id" in e:
            chains[e["bind_id"]].append(e)
    for chain in chains.values():
        chain.sort(key=lambda e: e["ts"])
    return chains


def _request_name(chain: List[Dict[str, Any]], key: Any) -> str:
    named = next((e["args"]["request"] for e in chain if isinstance(e.get("args"), dict)
                  and isinstance(e["args"].get("request"), (str, int))), None)
    return str(named) if named is not None else f"flow {key}"


def render(events: Sequence[Dict[str, Any]], width: int = 1400, title: Optional[str] = None,
           start: Optional[float] = None, end: Optional[float] = None, requests: bool = False) -> str:
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
    chains = _requests(slices)
    spans = {key: (chain[0]["ts"], max(e["ts"] + e["dur"] for e in chain)) for key, chain in chains.items()}
    if requests:
        if not spans:
            raise TraceError("--requests: the trace has no requests (flows: slices with a bind_id)")
        first, last = min(a for a, _ in spans.values()), max(b for _, b in spans.values())
        margin = (last - first) * 0.01
        start = first - margin if start is None else start
        end = last + margin if end is None else end
    lo = min(e["ts"] for e in slices) if start is None else start
    hi = max(e["ts"] + e["dur"] for e in slices) if end is None else end
    if hi <= lo:
        raise TraceError(f"empty time window: --start {lo} is not before --end {hi}")
    # A request the window cuts widens it: requests are drawn whole.
    for a, b in spans.values():
        if a < hi and b > lo:
            lo, hi = min(lo, a), max(hi, b)
    if not math.isfinite(hi - lo) or (hi - lo) < abs(lo) * 1e-12:
        raise TraceError(f"the time window {lo}..{hi} µs cannot be drawn: give --start and --end closer together "
                         "(or further apart)")
    names = {(e.get("pid"), e.get("tid")): str((e.get("args") or {}).get("name"))
             for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    tracks: Dict[Tuple[Any, Any], List[Dict[str, Any]]] = defaultdict(list)
    for e in slices:
        if e["ts"] + e["dur"] >= lo and e["ts"] <= hi:  # tracks with nothing in the window are left out
            tracks[e.get("pid"), e.get("tid")].append(e)
    plot_w = width - LABEL_W - 20
    scale = plot_w / (hi - lo)

    def x_of(t: float) -> float:
        return LABEL_W + (min(max(t, lo), hi) - lo) * scale

    body: List[str] = []
    flows: List[str] = []
    y = AXIS_H + (24 if title else 0)
    top = y
    positions: Dict[int, Tuple[float, float]] = {}  # id(slice) -> (x of its start, y of its request bar's edge)
    # Numeric thread ids in order, then named ones (a number and a string do not compare).
    order = sorted(tracks, key=lambda k: (str(k[0]), 0, k[1], "") if isinstance(k[1], (int, float))
                   else (str(k[0]), 1, 0, str(k[1])))
    for key in order:
        track = tracks[key]
        levels = _depths(track)
        # The requests whose first slice is on this track: a lane of bars above the slices.
        here = [(k, c) for k, c in chains.items() if (c[0].get("pid"), c[0].get("tid")) == key
                and any(id(e) in {id(t) for t in track} for e in c)]
        lane = ROW if here else 0
        h = levels * ROW + lane
        label = names.get(key, f"pid {key[0]} tid {key[1]}")
        body.append(f'<rect class="track" x="0" y="{y - 4}" width="{width}" height="{h + 8}" fill="#f6f6f6"/>')
        body.append(f'<text class="track-name" x="8" y="{y + 13}" font-weight="bold">{escape(label)}</text>')
        taken: List[Tuple[float, float]] = []  # x ranges of the lane's bars and names
        for k, chain in sorted(here, key=lambda kc: kc[1][0]["ts"]):
            a, b = spans[k]
            x0, x1 = x_of(a), x_of(b)
            w = max(x1 - x0, 3.0)  # a short request still shows
            name = _request_name(chain, k)
            body.append(f'<g><title>{escape(name)}: {b - a:.3f} µs, {len(chain)} slices</title>'
                        f'<rect class="request" x="{x0:.2f}" y="{y}" width="{w:.2f}" height="{ROW - 2}" '
                        f'fill="{REQUEST_FILL}" stroke="{FLOW_STROKE}" stroke-width="0.8"/></g>')
            text_w = len(name) * CHAR_W + 4
            if text_w <= w:  # inside the bar
                tx = x0 + 2
            elif x0 + w + 3 + text_w <= LABEL_W + plot_w and not any(
                    x0 + w < t1 and t0 < x0 + w + 3 + text_w for t0, t1 in taken):
                tx = x0 + w + 3  # beside it, where nothing else is
            else:
                tx = None  # the tooltip names it
            taken.append((x0, x0 + w))
            if tx is not None:
                taken.append((tx, tx + text_w))
                body.append(f'<text class="request-name" x="{tx:.2f}" y="{y + 11}" fill="{FLOW_STROKE}">'
                            f'{escape(name)}</text>')
            for e in chain:
                positions[id(e)] = (x_of(e["ts"]), y + ROW - 3)
        ys = y + lane
        for e in sorted(track, key=lambda e: (e["_depth"], e["ts"])):
            x0, x1 = x_of(e["ts"]), x_of(e["ts"] + e["dur"])
            w = max(x1 - x0, 0.5)  # a call too short to see still shows as a hairline
            ry = ys + e["_depth"] * ROW
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
        y += h + TRACK_GAP
    # Flows: along the lower edge of each request's bar, from each slice's
    # start to the next one's (a request that changes threads crosses between lanes).
    for chain in chains.values():
        for a, b in zip(chain, chain[1:]):
            if id(a) not in positions or id(b) not in positions:
                continue
            (xa, ya), (xb, yb) = positions[id(a)], positions[id(b)]
            flows.append(f'<line class="flow" x1="{xa:.2f}" y1="{ya:.2f}" x2="{xb:.2f}" y2="{yb:.2f}" '
                         f'stroke="{FLOW_STROKE}" stroke-width="0.8" marker-end="url(#arrow)"/>')
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
    x = LABEL_W
    legend = []
    if positions:
        legend += [f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{REQUEST_FILL}" '
                   f'stroke="{FLOW_STROKE}"/>',
                   f'<text x="{x + 16}" y="{legend_y}">request (arrows: its calls in order)</text>']
        x += 230
    legend += [
        f'<rect x="{x}" y="{legend_y - 10}" width="12" height="12" fill="{MODULE_FILLS[0]}"/>',
        f'<text x="{x + 16}" y="{legend_y}">module call</text>',
        f'<rect x="{x + 110}" y="{legend_y - 10}" width="12" height="12" fill="{OPERATOR_FILL}"/>',
        f'<text x="{x + 126}" y="{legend_y}">operator call</text>',
        f'<rect x="{x + 230}" y="{legend_y - 10}" width="12" height="12" fill="{KERNEL_FILL}"/>',
        f'<text x="{x + 246}" y="{legend_y}">kernel with FLOPs (in the SVG itself, hover a box for its '
        'arguments)</text>',
    ]
    head = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
            '<defs><marker id="arrow" viewBox="0 0 6 6" refX="6" refY="3" markerWidth="5" markerHeight="5" '
            f'orient="auto"><path d="M0,0 L6,3 L0,6 z" fill="{FLOW_STROKE}"/></marker></defs>',
            f'<rect width="{width}" height="{height}" fill="#ffffff"/>']
    if title:
        head.append(f'<text x="8" y="18" font-size="14" font-weight="bold">{escape(title)}</text>')
    return "\n".join(head + axis + body + flows + legend + ["</svg>"]) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", help="trace-event JSON file (e.g. from scan --trace, crawl_module(trace=True))")
    p.add_argument("-o", "--output", required=True, help="SVG file to write")
    p.add_argument("--width", type=int, default=1400, help="picture width in px (default 1400)")
    p.add_argument("--title", help="a title line above the timeline")
    p.add_argument("--requests", action="store_true",
                   help="window: from the first request's start to the last one's end (skips start-up work)")
    p.add_argument("--start", type=float, help="window start, microseconds on the trace's axis")
    p.add_argument("--end", type=float, help="window end, microseconds on the trace's axis")
    args = p.parse_args(argv)
    if args.width < LABEL_W + 100:
        p.error(f"--width must be at least {LABEL_W + 100} px (the track names take {LABEL_W})")
    try:
        if os.path.exists(args.output) and not stat.S_ISREG(os.stat(args.output).st_mode):
            # Writing to a FIFO would wait for a reader.
            raise TraceError(f"-o {args.output} exists and is not a regular file; give a file name")
        svg = render(load_trace(args.trace), args.width, args.title, args.start, args.end, args.requests)
    except TraceError as exc:
        print(f"trace_figure: {exc}", file=sys.stderr)
        return 2
    with open(args.output, "w", encoding="utf-8") as f:
        f.write(svg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
