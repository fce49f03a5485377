"""The differential flame graph of a profile, drawn on the server as SVG (no JavaScript).

The merged call tree (`ProfileIn.frames`) is drawn root at the bottom, each frame as wide
as the head's inclusive instructions and placed after its earlier siblings inside its
parent, so children never overflow their parent and the root spans the head's total.
Colour is the change from base: red where the head runs more instructions in that frame,
blue where fewer, grey when it did not move (shade by the relative change, capped at
100%). A frame the head no longer runs (width 0) is left out; the table lists it. Every
frame carries `data-base`, `data-head` and a `<title>` tooltip with both counts."""

from __future__ import annotations

from xml.sax.saxutils import escape, quoteattr

from mallard_wire.profiles import Frame, ProfileIn
from markupsafe import Markup

SVG_NS = "http://www.w3.org/2000/svg"
WIDTH = 960
ROW = 16
MIN_PX = 0.3  # frames narrower than this are not drawn (their parent's width holds them)


def colour(f: Frame) -> str:
    if f.base == f.head:
        return "rgb(200,200,200)"
    if f.base == 0:
        return "rgb(220,40,40)"
    rel = min(1.0, abs(f.head - f.base) / f.base)
    fade = int(200 - 170 * rel)
    return f"rgb(230,{fade},{fade})" if f.head > f.base else f"rgb({fade},{fade},230)"


def _label(f: Frame) -> str:
    change = f.head - f.base
    rel = f" ({100 * change / f.base:+.1f}%)" if f.base else ""
    return f"{f.name}: head {f.head:,}, base {f.base:,} instructions, {change:+,}{rel}"


def layout(frames: list[Frame]) -> list[tuple[int, float, float, int]]:
    """(frame index, x, width, depth) of each frame with a head width, parents first."""
    total = frames[0].head if frames else 0
    scale = WIDTH / total if total else 0.0
    placed: dict[int, tuple[float, float, int]] = {}
    next_x: dict[int, float] = {}
    out = []
    for i, f in enumerate(frames):
        if f.head == 0:
            continue
        if f.parent < 0:
            x, depth = 0.0, 0
        elif f.parent in placed:
            px, _, pdepth = placed[f.parent]
            x, depth = next_x.get(f.parent, px), pdepth + 1
        else:
            continue
        w = f.head * scale
        placed[i] = (x, w, depth)
        next_x[f.parent] = x + w
        out.append((i, x, w, depth))
    return out


def flame_svg(p: ProfileIn) -> Markup:
    boxes = layout(p.frames)
    depth = max((d for *_, d in boxes), default=0) + 1
    height = depth * ROW + 4
    body = []
    for i, x, w, d in boxes:
        if w < MIN_PX:
            continue
        f = p.frames[i]
        y = height - (d + 1) * ROW
        text = ""
        if w > 40:
            shown = f.name[: int(w / 7)]
            text = (f'<text x="{x + 3:.2f}" y="{y + 12}" font-size="11" '
                    f'font-family="monospace">{escape(shown)}</text>')
        body.append(
            f'<g class="frame" data-i="{i}" data-parent="{f.parent}" data-base="{f.base}" '
            f'data-head="{f.head}">'
            f"<title>{escape(_label(f))}</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW - 1}" '
            f'fill="{colour(f)}"/>{text}</g>')
    label = (f"differential flame graph of {p.case.workload}: width head instructions, "
             "red more than base, blue fewer")
    return Markup(
        f'<svg xmlns="{SVG_NS}" class="plot flame" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label={quoteattr(label)}>'
        f"<title>{escape(label)}</title>{''.join(body)}</svg>")
