"""The differential flame graph of a profile, drawn on the server as SVG (no JavaScript).

Two graphs of the merged call tree (`ProfileIn.frames`), one per side, each titled with
its total: the head's, each frame as wide as the head's inclusive instructions, then the
base's, as wide as the base's. A frame the head no longer runs (head 0) is drawn only in
the base's graph (dashed outline); one new in the head (base 0) only in the head's. Each
graph is drawn root at the bottom, a frame placed after its earlier siblings inside its
parent, so children never overflow their parent and the root spans the side's total.
Colour is the change from base, the same in both graphs: red where the head runs more
instructions in that frame (slower), blue where fewer (faster), grey when it did not
move, shaded by the relative change (capped at 100%); a legend says so. Every frame
carries `data-side`, `data-base`, `data-head` and a `<title>` tooltip with both counts."""

from __future__ import annotations

from typing import Literal
from xml.sax.saxutils import escape, quoteattr

from mallard_wire.profiles import Frame, ProfileIn
from markupsafe import Markup

SVG_NS = "http://www.w3.org/2000/svg"
WIDTH = 960
ROW = 16
TITLE = 20  # the height of a graph's title line, and of the legend
MIN_PX = 0.3  # frames narrower than this are not drawn (their parent's width holds them)
Side = Literal["head", "base"]
DASHED = ' stroke="rgb(0,0,110)" stroke-dasharray="3,2"'
LEGEND = (("rgb(230,30,30)", "", "more instructions in head (slower)"),
          ("rgb(30,30,230)", "", "fewer (faster)"),
          ("rgb(200,200,200)", "", "unchanged"),
          ("rgb(230,140,140)", "", "paler: a smaller change (full at ±100%)"),
          ("rgb(30,30,230)", DASHED, "the head no longer runs it"))


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
    rel = f" ({100 * change / f.base:+.1f}%)" if f.base else " (new in head)"
    return f"{f.name}: head {f.head:,}, base {f.base:,} instructions, {change:+,}{rel}"


def layout(frames: list[Frame], side: Side = "head") -> list[tuple[int, float, float, int]]:
    """(frame index, x, width, depth) of each frame with a width on `side`, parents first."""
    total = getattr(frames[0], side) if frames else 0
    scale = WIDTH / total if total else 0.0
    placed: dict[int, tuple[float, float, int]] = {}
    next_x: dict[int, float] = {}
    out = []
    for i, f in enumerate(frames):
        width = getattr(f, side)
        if width == 0:
            continue
        if f.parent < 0:
            x, depth = 0.0, 0
        elif f.parent in placed:
            px, _, pdepth = placed[f.parent]
            x, depth = next_x.get(f.parent, px), pdepth + 1
        else:
            continue
        w = width * scale
        placed[i] = (x, w, depth)
        next_x[f.parent] = x + w
        out.append((i, x, w, depth))
    return out


def _frame(p: ProfileIn, side: Side, i: int, x: float, w: float, y: int) -> str:
    f = p.frames[i]
    gone = side == "base" and f.head == 0
    text = ""
    if w > 40:
        text = (f'<text x="{x + 3:.2f}" y="{y + 12}" font-size="11" '
                f'font-family="monospace">{escape(f.name[: int(w / 7)])}</text>')
    outline = DASHED if gone else ""
    return (f'<g class="frame{" gone" if gone else ""}" data-side="{side}" data-i="{i}" '
            f'data-parent="{f.parent}" data-base="{f.base}" data-head="{f.head}">'
            f"<title>{escape(_label(f))}</title>"
            f'<rect x="{x:.2f}" y="{y}" width="{w:.2f}" height="{ROW - 1}" '
            f'fill="{colour(f)}"{outline}/>{text}</g>')


def _title(p: ProfileIn, side: Side) -> str:
    if side == "head":
        change = p.head_total - p.base_total
        rel = f" ({100 * change / p.base_total:+.1f}%)" if p.base_total else ""
        return (f"head: {p.head_total:,} instructions, {change:+,} vs base{rel}; "
                "width: the head's instructions")
    gone = sum(1 for f in p.frames if f.head == 0 and f.base > 0)
    return (f"base: {p.base_total:,} instructions; width: the base's instructions; "
            f"{gone} frame(s) the head no longer runs, dashed")


def _graph(p: ProfileIn, side: Side, top: int) -> tuple[list[str], int]:
    """A side's title and frames from `top` down; (elements, the height used)."""
    boxes = layout(p.frames, side)
    rows = max((d for *_, d in boxes), default=0) + 1
    out = [f'<text class="side-title" x="0" y="{top + 14}" font-size="12" '
           f'font-family="sans-serif">{escape(_title(p, side))}</text>']
    for i, x, w, d in boxes:
        if w >= MIN_PX:
            out.append(_frame(p, side, i, x, w, top + TITLE + (rows - 1 - d) * ROW))
    return out, TITLE + rows * ROW + 6


def _legend(top: int) -> list[str]:
    out, x = [], 0
    for fill, outline, text in LEGEND:
        out.append(f'<g class="legend"><rect x="{x}" y="{top + 3}" width="12" height="12" '
                   f'fill="{fill}"{outline}/><text x="{x + 16}" y="{top + 13}" font-size="11" '
                   f'font-family="sans-serif">{escape(text)}</text></g>')
        x += 30 + int(6.3 * len(text))
    return out


def flame_svg(p: ProfileIn) -> Markup:
    head, used = _graph(p, "head", 0)
    base, used_base = _graph(p, "base", used)
    height = used + used_base + TITLE
    label = (f"differential flame graphs of {p.case.workload}, head then base: width "
             "instructions, red more in head than base, blue fewer")
    return Markup(
        f'<svg xmlns="{SVG_NS}" class="plot flame" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" role="img" aria-label={quoteattr(label)}>'
        f"<title>{escape(label)}</title>{''.join(head + base + _legend(used + used_base))}"
        "</svg>")
