"""The roofline chart (SVG) of a RooflineReport: attainable FLOP/s against
arithmetic intensity, the roofs, and one numbered, coloured marker per point
keyed to its name in the legend under the plot."""

from __future__ import annotations

import math
from collections.abc import Mapping

from torchscan._readers import validate_roofline_report

__all__ = ["roofline_svg"]


# Point colours (colour-blind-safe where possible) and marker shapes: 40 distinct (colour, shape) pairs.
_PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#d55e00", "#56b4e9", "#8c564b", "#7f7f7f", "#bcbd22",
            "#9467bd")
_SHAPES = ("circle", "square", "triangle", "diamond")
_MAX_LEGEND = 40
_LEGEND_COLUMNS = 2


def roofline_svg(report: Mapping, *, points: str = "layers", width: int = 720, height: int = 480) -> str:
    """A log-log roofline chart: attainable FLOP/s against arithmetic intensity,
    the memory slope, the matmul and vector roofs, the ridge point, one point per
    leaf layer call (points="layers") or operator ("operators"), and the model."""
    from xml.sax.saxutils import escape

    where = "torchscan.roofline_svg"
    validate_roofline_report(report, where)
    if points not in ("layers", "operators"):
        raise ValueError(f"{where}: points must be 'layers' or 'operators', got {points!r}")
    for name, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, int) or not 200 <= v <= 20000:
            raise ValueError(f"{where}: {name} must be an int from 200 to 20000 pixels, got {v!r}")
    t, c = report["totals"], report["context"]
    bw = c["memory_bandwidth_gbps"] * 1e9
    peak_m, peak_v = c["peak_matmul_tflops"] * 1e12, c["peak_vector_tflops"] * 1e12
    rows = report["layers"] if points == "layers" else report["operators"]
    if points == "layers":
        # leaves: layer calls with no deeper row directly following them (module tree is pre-order)
        leaf = []
        for i, r in enumerate(rows):
            nxt = rows[i + 1] if i + 1 < len(rows) else None
            if nxt is None or nxt["depth"] <= r["depth"]:
                leaf.append(r)
        rows = leaf
    pts = []  # (label, intensity, FLOP/s, kind, bound)
    for r in rows:
        i = r.get("arithmetic_intensity")
        sol = max(r["compute_sol_ms"], r["memory_sol_ms"]) / 1e3
        if not i or r["flops"] <= 0 or not math.isfinite(r["flops"] / sol if sol else peak_m):
            continue
        label = r.get("path") or r.get("operator")
        if r.get("module_type") and r["module_type"] != label:
            label = f"{label} ({r['module_type']})"
        if r.get("call_index"):
            label += f" #{r['call_index']}"
        pts.append((label, i, r["flops"] / sol if sol else peak_m, "row", r["bound"]))
    if t.get("arithmetic_intensity") and t["sol_ms"] > 0 and t["flops"] > 0 and \
            math.isfinite(t["flops"] / (t["sol_ms"] / 1e3)):
        pts.append(("model", t["arithmetic_intensity"], t["flops"] / (t["sol_ms"] / 1e3), "model", t["bottleneck"]))
        if t.get("actual_ms") and math.isfinite(t["flops"] / (t["actual_ms"] / 1e3)):
            pts.append(("model, measured", t["arithmetic_intensity"], t["flops"] / (t["actual_ms"] / 1e3), "measured",
                        f"{100 * t['achieved_fraction_of_sol']:.3g} % of SoL"))
    # Axis ends as decades (integer exponents): a report's extreme values
    # never underflow or overflow a float bound.
    xs = [math.log10(p[1]) for p in pts] + [math.log10(peak_m) - math.log10(bw), math.log10(peak_v) - math.log10(bw)]
    lo_ex, hi_ex = math.floor(min(xs) - 0.5), math.ceil(max(xs) + 0.5)
    ys = [math.log10(p[2]) for p in pts] + [math.log10(peak_m), math.log10(bw) + lo_ex]
    lo_ey, hi_ey = math.floor(min(ys)), math.ceil(max(ys) + 0.2)
    if hi_ey <= lo_ey:
        hi_ey = lo_ey + 1
    ml, mr, mt, mb = 70, 20, 40, 50
    pw, ph = width - ml - mr, height - mt - mb

    def XE(e):  # x of the decade exponent e
        return ml + pw * (e - lo_ex) / (hi_ex - lo_ex)

    def YE(e):
        e = min(max(e, lo_ey), hi_ey)
        return mt + ph * (1 - (e - lo_ey) / (hi_ey - lo_ey))

    def X(v):
        return XE(math.log10(v))

    def Y(v):
        return YE(math.log10(v) if v > 0 else lo_ey)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
           f'<rect x="0" y="0" width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle" font-size="14">'
           f'{escape(c["gpu"]["name"])} roofline ({escape(c["precision"])})</text>',
           f'<rect x="{ml}" y="{mt}" width="{pw}" height="{ph}" fill="none" stroke="black"/>']
    for e in range(lo_ex, hi_ex + 1):
        x = ml + pw * (e - lo_ex) / (hi_ex - lo_ex)
        out.append(f'<line x1="{x:.1f}" y1="{mt}" x2="{x:.1f}" y2="{mt + ph}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{mt + ph + 15}" text-anchor="middle">1e{e}</text>')
    for e in range(lo_ey, hi_ey + 1):
        y = mt + ph * (1 - (e - lo_ey) / (hi_ey - lo_ey))
        out.append(f'<line x1="{ml}" y1="{y:.1f}" x2="{ml + pw}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml - 5}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<text x="{ml + pw / 2}" y="{height - 10}" text-anchor="middle">arithmetic intensity (FLOPs/byte)</text>')
    out.append(f'<text x="15" y="{mt + ph / 2}" text-anchor="middle" transform="rotate(-90 15 {mt + ph / 2})">'
               'attainable FLOP/s</text>')
    roofs = [(peak_v, "#e67e22", "vector peak"), (peak_m, "#c0392b", "matmul/conv peak")]  # shared slope red
    if peak_v == peak_m:  # one roof (fp32 with no fp32 matrix path): one line, one label
        roofs = [(peak_m, "#c0392b", "matmul/conv = vector peak")]
    log_bw = math.log10(bw)
    for peak, colour, label in roofs:
        # In decades: the memory slope from the left edge to the ridge, then the roof.
        ridge_e = math.log10(peak) - log_bw
        pts_line = [(lo_ex, log_bw + lo_ex), (ridge_e, math.log10(peak)), (hi_ex, math.log10(peak))]
        d = " ".join(f"{XE(a):.1f},{YE(b):.1f}" for a, b in pts_line if lo_ex <= a <= hi_ex)
        out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="2"/>')
        out.append(f'<text x="{ml + pw - 5}" y="{Y(peak) - 4:.1f}" text-anchor="end" fill="{colour}">'
                   f'{label} {peak / 1e12:.4g} TFLOP/s</text>')
    ridge_px = XE(math.log10(peak_m) - log_bw)
    out.append(f'<line x1="{ridge_px:.1f}" y1="{mt}" x2="{ridge_px:.1f}" y2="{mt + ph}" stroke="#c0392b" '
               'stroke-dasharray="4,3"/>')
    right = ridge_px + 130 > ml + pw  # the label would leave the plot: written left of the line
    anchor = ' text-anchor="end"' if right else ""
    out.append(f'<text x="{ridge_px + (-4 if right else 4):.1f}" y="{mt + 12}" fill="#c0392b"{anchor}>'
               f'ridge {peak_m / bw:.3g} FLOPs/B</text>')
    # Each row point has its own colour and marker (10 colours x 4 shapes) and
    # its number beside it, keyed to its name in the legend under the plot;
    # the model is a hollow ring over them, so layers under it stay visible.
    rows_pts = [p for p in pts if p[3] == "row"]
    shown = rows_pts if len(rows_pts) <= _MAX_LEGEND else sorted(
        rows_pts, key=lambda p: -p[2])[:_MAX_LEGEND]
    shown_ids = {id(p) for p in shown}
    number = {id(p): n + 1 for n, p in enumerate([p for p in rows_pts if id(p) in shown_ids])}
    placed = []  # label boxes (x0, y0, x1, y1) already drawn

    def marker(n, x, y, title, k=1.0):
        colour, shape = _PALETTE[(n - 1) % len(_PALETTE)], _SHAPES[((n - 1) // len(_PALETTE)) % len(_SHAPES)]
        inner = f"<title>{title}</title>" if title else ""
        common = f'fill="{colour}" stroke="white" stroke-width="1"'
        if shape == "circle":
            return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="{5 * k:.1f}" {common}>{inner}</circle>'
        if shape == "square":
            return (f'<rect x="{x - 4.5 * k:.1f}" y="{y - 4.5 * k:.1f}" width="{9 * k:.1f}" height="{9 * k:.1f}" '
                    f'{common}>{inner}</rect>')
        corners = ([(0, -6), (5.5, 4), (-5.5, 4)] if shape == "triangle" else [(0, -6), (6, 0), (0, 6), (-6, 0)])
        d = " ".join(f"{x + k * dx:.1f},{y + k * dy:.1f}" for dx, dy in corners)
        return f'<polygon points="{d}" {common}>{inner}</polygon>'

    def title_text(name, i, perf, bound):
        return f"{escape(str(name))}: {i:.3g} FLOPs/B, {perf / 1e12:.3g} TFLOP/s, {escape(str(bound))}"

    model_pts = [p for p in pts if p[3] != "row"]
    for name, i, perf, kind, bound in model_pts:  # titled first: the model's figures lead the tooltips
        colour = "#2c3e50" if kind == "model" else "#27ae60"
        out.append(f'<circle cx="{X(i):.1f}" cy="{Y(perf):.1f}" r="9" fill="none" stroke="{colour}" '
                   f'stroke-width="2.5"><title>{title_text(name, i, perf, bound)}</title></circle>')
    for p in rows_pts:
        name, i, perf, _, bound = p
        n = number.get(id(p))
        x, y = X(i), Y(perf)
        if n is None:  # past the legend: a small grey dot
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5" fill="#999">'
                       f'<title>{title_text(name, i, perf, bound)}</title></circle>')
            continue
        # A point that later points cover (the same place, within a few pixels)
        # is drawn larger, one step per covering point, so it shows as a rim.
        later = rows_pts[rows_pts.index(p) + 1:]
        covering = sum(1 for q in later if id(q) in number and abs(X(q[1]) - x) < 4 and abs(Y(q[2]) - y) < 4)
        out.append(marker(n, x, y, title_text(name, i, perf, bound), 1 + 0.5 * min(covering, 3)))
    # Numbers after every marker, where they cover no marker and no other number
    # (nearest free place first); a number with no free place is left to the legend.
    placed += [(X(p[1]) - 6, Y(p[2]) - 6, X(p[1]) + 6, Y(p[2]) + 6) for p in pts]
    for p in rows_pts:
        n = number.get(id(p))
        if n is None:
            continue
        x, y = X(p[1]), Y(p[2])
        w = 6.5 * len(str(n)) + 2
        spots = [(r * cx - (w if cx < 0 else w / 2 if cx == 0 else 0), r * cy + 4)
                 for r in (8, 14, 22) for cx, cy in ((1, -1), (1, 1), (-1, -1), (-1, 1), (0, -1.3), (0, 1.5))]
        for dx, dy in spots:
            box = (x + dx, y + dy - 10, x + dx + w, y + dy + 1)
            inside = ml <= box[0] and box[2] <= ml + pw and mt <= box[1] and box[3] <= mt + ph
            if inside and not any(box[0] < b[2] and b[0] < box[2] and box[1] < b[3] and b[1] < box[3]
                                  for b in placed):
                placed.append(box)
                out.append(f'<text x="{box[0] + 1:.1f}" y="{y + dy:.1f}" font-size="10" '
                           f'fill="{_PALETTE[(n - 1) % len(_PALETTE)]}" font-weight="bold" stroke="white" '
                           f'stroke-width="3" '
                           f'paint-order="stroke">{n}</text>')
                break
    # Notes (top left: above the memory slope nothing is attainable, so no point sits there).
    which = "leaf layer calls" if points == "layers" else "operators"
    notes = [f"{which}: eager (unfused) bytes; model (ring): fused bytes"]
    notes += [f"{name}: {i:.3g} FLOPs/B, {bound}" + ("" if kind == "measured" else "-bound")
              for name, i, perf, kind, bound in model_pts]
    for n, text in enumerate(notes):
        out.append(f'<text x="{ml + 6}" y="{mt + 16 + 15 * n}">{escape(text)}</text>')
    # The legend under the plot: number, marker, name and figures of each point.
    top = height
    out.append(f'<text x="{ml}" y="{top + 4}" font-weight="bold">{len(shown)} of {len(rows_pts)} {which}'
               + (f" (the {len(shown)} with the highest attainable FLOP/s)" if len(shown) < len(rows_pts) else "")
               + "</text>")
    col_w = (width - ml - mr) / _LEGEND_COLUMNS
    for k, p in enumerate([p for p in rows_pts if id(p) in shown_ids]):
        name, i, perf, _, bound = p
        n = number[id(p)]
        row, col = divmod(k, _LEGEND_COLUMNS)
        x, y = ml + col * col_w, top + 20 + 16 * row
        out.append(marker(n, x + 6, y - 4, ""))
        label = f"{n}  {name}: {i:.3g} FLOPs/B, {bound}"
        limit = int(col_w / 5.8) - 3
        shown_label = label if len(label) <= limit else label[:limit - 1] + "…"
        out.append(f'<text x="{x + 16:.1f}" y="{y}">{escape(shown_label)}</text>')
    total_h = top + 28 + 16 * ((len(shown) + _LEGEND_COLUMNS - 1) // _LEGEND_COLUMNS)
    out[0] = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{total_h}" '
              f'viewBox="0 0 {width} {total_h}" font-family="sans-serif" font-size="11">')
    out[1] = f'<rect x="0" y="0" width="{width}" height="{total_h}" fill="white"/>'
    out.append("</svg>")
    return "\n".join(out) + "\n"
