"""A small SVG writer for the pages: strip plots, trend plots and ratio bars.

Plots are drawn on the server as inline SVG (no JavaScript, fonts or images to fetch);
colours and line styles are classes `static/mallard.css` styles. Every data mark carries its
number (`data-v`, `data-i` for a commit index) and a `<title>` tooltip: a test can check
where a mark sits, a person can hover to read it.

* `strip_plot`: a row per group of trials (base, head; or allocators), a dot per trial
  (hollow when not robust), the median a tick; an interval band, a reference line.
* `trend_plot`: a series along a branch's commits (what it draws: `trend.py`), the p25-p75
  spread as a bar at each point, every point a link; change points dashed, alerts linked,
  a baseline's start a solid line, broken ranges a grey band behind the points.
* `ratio_bars`: horizontal bars of ratios to a reference (peers' throughput vs glibc).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from xml.sax.saxutils import escape, quoteattr

from markupsafe import Markup

from mallard_api.ui import fmt
from mallard_api.ui.trend import Level, Marker, Span, TrendAxis, TrendSeries

SVG_NS = "http://www.w3.org/2000/svg"


@dataclass(frozen=True)
class Scale:
    """Linear map of the data domain [d0, d1] onto the drawing range [r0, r1]."""

    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, v: float) -> float:
        if self.d1 == self.d0:
            return (self.r0 + self.r1) / 2
        return self.r0 + (v - self.d0) * (self.r1 - self.r0) / (self.d1 - self.d0)


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else []
    raw = (hi - lo) / max(1, count)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = []
    t = first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def domain(values: Sequence[float], pad: float = 0.06) -> tuple[float, float]:
    """[min, max] of the values, padded on both sides; a point gets a ±1% window."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return 0.0, 1.0
    lo, hi = min(finite), max(finite)
    if hi == lo:
        half = abs(lo) * 0.01 or 1.0
        return lo - half, hi + half
    span = hi - lo
    return lo - span * pad, hi + span * pad


def _num(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _attrs(**kw: object) -> str:
    parts = []
    for k, v in kw.items():
        if v is None:
            continue
        name = k.rstrip("_").replace("_", "-")
        text = _num(v) if isinstance(v, float) else str(v)
        parts.append(f"{name}={quoteattr(text)}")
    return " ".join(parts)


def _el(tag: str, body: str = "", **kw: object) -> str:
    attrs = _attrs(**kw)
    head = f"<{tag} {attrs}" if attrs else f"<{tag}"
    return f"{head}>{body}</{tag}>" if body else f"{head}/>"


def _title(text: str) -> str:
    return f"<title>{escape(text)}</title>"


def _svg(width: int, height: int, label: str, body: list[str], css: str) -> Markup:
    return Markup(
        f'<svg xmlns="{SVG_NS}" class={quoteattr("plot " + css)} width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f"aria-label={quoteattr(label)}>{_title(label)}{''.join(body)}</svg>")


def tick_labels(ticks: Sequence[float], label: Callable[[float, int], str]) -> list[str]:
    """Tick texts with as few significant digits (3 to 7) as keep them apart."""
    texts = [label(t, 3) for t in ticks]
    for digits in range(4, 8):
        if len(set(texts)) == len(texts):
            break
        texts = [label(t, digits) for t in ticks]
    return texts


def _x_axis(scale: Scale, y: float, ticks: Sequence[float], label: Callable[[float, int], str]
            ) -> list[str]:
    out = [_el("line", x1=scale.r0, x2=scale.r1, y1=y, y2=y, class_="axis")]
    for t, text in zip(ticks, tick_labels(ticks, label), strict=True):
        x = scale(t)
        out.append(_el("line", x1=x, x2=x, y1=y, y2=y + 3, class_="axis"))
        out.append(_el("text", escape(text), x=x, y=y + 12, class_="tick",
                       text_anchor="middle"))
    return out


def _y_axis(scale: Scale, x0: float, x1: float, ticks: Sequence[float],
            label: Callable[[float, int], str]) -> list[str]:
    out = []
    for t, text in zip(ticks, tick_labels(ticks, label), strict=True):
        y = scale(t)
        out.append(_el("line", x1=x0, x2=x1, y1=y, y2=y, class_="grid"))
        out.append(_el("text", escape(text), x=x0 - 4, y=y + 3, class_="tick",
                       text_anchor="end"))
    return out


# -- strip plot -----------------------------------------------------------------------------
@dataclass
class StripRow:
    label: str
    values: Sequence[float]
    robust: Sequence[bool] | None = None  # per value; None: all robust
    median: float | None = None
    css: str = ""


@dataclass
class Band:
    """An interval drawn on one row, in data units (e.g. base median x (1 + ci/100))."""

    row: int
    lo: float
    hi: float
    label: str = ""


# Vertical offsets (in fractions of the row height) that spread dots of equal value.
_JITTER = (0.0, -0.22, 0.22, -0.11, 0.11, -0.3, 0.3)


def strip_plot(rows: Sequence[StripRow], *, measure: str, unit: str = "",
               band: Band | None = None, reference: float | None = None,
               width: int = 400, row_h: int = 24, label: str = "") -> Markup:
    """Trials as dots, one row per group; `reference` a dashed line across all rows.

    The axis spans the robust trials, the band and the reference: an outlier beyond them
    is drawn hollow at the edge with a small arrow (`clipped`), its value in its tooltip
    and `data-v`, so one wild trial does not squash the others into a pixel.
    """
    left = 14 + 6 * max((len(r.label) for r in rows), default=4)
    right, top, axis_h = 14, 4, 18
    height = top + row_h * len(rows) + axis_h
    robust_values = [v for r in rows for j, v in enumerate(r.values)
                     if r.robust is None or r.robust[j]]
    extra = [band.lo, band.hi] if band else []
    extra += [reference] if reference is not None else []
    extra += [r.median for r in rows if r.median is not None]
    d0, d1 = domain((robust_values or [v for r in rows for v in r.values]) + extra)
    x = Scale(d0, d1, left, width - right)
    body = _x_axis(x, top + row_h * len(rows) + 2, nice_ticks(d0, d1, 4),
                   lambda t, d: fmt.value(t, measure, unit, digits=d))
    for i, row in enumerate(rows):
        cy = top + row_h * (i + 0.5)
        body.append(_el("line", x1=left, x2=width - right, y1=cy, y2=cy, class_="lane"))
        body.append(_el("text", escape(row.label), x=left - 6, y=cy + 4, class_="rowlabel",
                        text_anchor="end"))
        if band is not None and band.row == i:
            bx0, bx1 = sorted((x(band.lo), x(band.hi)))
            body.append(_el("rect", _title(band.label) if band.label else "", x=bx0,
                            y=cy - row_h * 0.42, width=max(bx1 - bx0, 1.0), height=row_h * 0.84,
                            class_="band", data_lo=repr(band.lo), data_hi=repr(band.hi)))
        for j, v in enumerate(row.values):
            robust = row.robust[j] if row.robust is not None else True
            tip = _title(f"{row.label}: {fmt.value(v, measure, unit, digits=4)}"
                         + ("" if robust else " (outlier)"))
            cy_j = cy + _JITTER[j % len(_JITTER)] * row_h
            css = f"dot {row.css}" + ("" if robust else " outlier")
            if d0 <= v <= d1:
                body.append(_el("circle", tip, cx=x(v), cy=cy_j, r=3.0, class_=css,
                                data_v=repr(v)))
                continue
            edge = x(d0) if v < d0 else x(d1)
            step = 7.0 if v < d0 else -7.0
            body.append(_el("circle", tip, cx=edge + step / 2, cy=cy_j, r=3.0,
                            class_=css + " clipped", data_v=repr(v)))
            body.append(_el("path", d=f"M{_num(edge)},{_num(cy_j)} l{_num(step / 3)},-3 "
                                      f"l0,6 Z", class_=f"arrow {row.css}"))
        if row.median is not None:
            mx = x(row.median)
            body.append(_el("line", _title(f"median {fmt.value(row.median, measure, unit, 4)}"),
                            x1=mx, x2=mx, y1=cy - row_h * 0.45, y2=cy + row_h * 0.45,
                            class_=f"median {row.css}", data_v=repr(row.median)))
    if reference is not None:
        rx = x(reference)
        body.append(_el("line", x1=rx, x2=rx, y1=top, y2=top + row_h * len(rows),
                        class_="ref", data_v=repr(reference)))
    return _svg(width, height, label or f"{measure}: trials", body, "strip")


# -- trend plot -----------------------------------------------------------------------------
def trend_plot(series: Sequence[TrendSeries], axis: TrendAxis, *, measure: str,
               unit: str = "", markers: Sequence[Marker] = (), levels: Sequence[Level] = (),
               spans: Sequence[Span] = (), width: int = 400, height: int = 150,
               label: str = "") -> Markup:
    left, right, top, bottom = 58, 10, 14, 18
    n = max(1, len(axis.labels))
    x = Scale(-0.5, n - 0.5, left, width - right)
    ys = [v for s in series for p in s.points for v in (p.p25, p.median, p.p75)]
    ys += [lv.value for lv in levels]
    d0, d1 = domain(ys, pad=0.08)
    y = Scale(d0, d1, height - bottom, top)
    body = _y_axis(y, left, width - right, nice_ticks(d0, d1, 4),
                   lambda t, d: fmt.value(t, measure, unit, digits=d))
    body.append(_el("line", x1=left, x2=width - right, y1=height - bottom,
                    y2=height - bottom, class_="axis"))
    shown = {0: axis.labels[0], n - 1: axis.labels[-1]} if axis.labels else {}
    shown.update(axis.extra)
    for i, text in sorted(shown.items()):
        anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
        body.append(_el("text", escape(text), x=x(i), y=height - bottom + 12, class_="tick",
                        text_anchor=anchor))
    body += _spans(spans, x, top, height - bottom)
    for m in markers:
        if 0 <= m.index < n:
            body += _marker(m, x, top, height - bottom)
    for lv in levels:
        body.append(_el("line", _title(lv.title) if lv.title else "", x1=x(lv.i0 - 0.4),
                        x2=x(lv.i1 + 0.4), y1=y(lv.value), y2=y(lv.value), class_="level",
                        data_v=repr(lv.value)))
    for s in series:
        pts = sorted(s.points, key=lambda p: p.index)
        for p in pts:
            px = x(p.index)
            body.append(_el("line", x1=px, x2=px, y1=y(p.p25), y2=y(p.p75),
                            class_=f"iqr {s.css}"))
        if len(pts) > 1:
            coords = " ".join(f"{_num(x(p.index))},{_num(y(p.median))}" for p in pts)
            body.append(_el("polyline", points=coords, class_=f"trend {s.css}"))
        for p in pts:
            dot = _el("circle", _title(p.title) if p.title else "", cx=x(p.index),
                      cy=y(p.median), r=2.6, class_=f"pt {s.css}", data_v=repr(p.median),
                      data_i=p.index)
            body.append(_el("a", dot, href=p.href) if p.href else dot)
    return _svg(width, height, label or f"{measure} along the branch", body, "trend")


def _marker(m: Marker, x: Scale, top: float, bottom: float) -> list[str]:
    """A baseline's start (solid), a change point (dashed, labelled) or an alert (a linked
    triangle above the plot)."""
    body: list[str] = []
    if m.kind == "baseline":
        mx = x(m.index - 0.5)
        body.append(_el("line", _title(m.title or "baseline"), x1=mx, x2=mx, y1=top,
                        y2=bottom, class_="baseline", data_i=m.index))
    elif m.kind == "change":
        mx = x(m.index - 0.5)
        body.append(_el("line", _title(m.title or m.label), x1=mx, x2=mx, y1=top,
                        y2=bottom, class_="changepoint", data_i=m.index))
        if m.label:  # right of the alert triangle that may sit on the next commit
            body.append(_el("text", escape(m.label), x=x(m.index) + 7, y=top - 3,
                            class_="marklabel"))
    else:
        mx = x(m.index)
        tri = _el("path", _title(m.title or m.label),
                  d=f"M{_num(mx - 5)},{_num(top - 11)} L{_num(mx + 5)},{_num(top - 11)} "
                    f"L{_num(mx)},{_num(top - 2)} Z", class_="alertmark", data_i=m.index)
        body.append(_el("a", tri, href=m.href) if m.href else tri)
    return body


def _spans(spans: Sequence[Span], x: Scale, y0: float, y1: float) -> list[str]:
    return [_el("rect", _title(s.title or "broken range: left out of analysis"),
                x=x(s.i0 - 0.5), y=y0, width=x(s.i1 + 0.5) - x(s.i0 - 0.5), height=y1 - y0,
                class_="broken", data_i0=s.i0, data_i1=s.i1) for s in spans if s.i1 >= s.i0]


# -- ratio bars -----------------------------------------------------------------------------
def ratio_bars(items: Sequence[tuple[str, float]], *, reference: str, highlight: Sequence[str]
               = ("base", "head"), width: int = 300, row_h: int = 15) -> Markup:
    """Bars of `value / reference` per name, a line at 1.0 (the reference itself)."""
    left, right, top, axis_h = 64, 40, 2, 16
    height = top + row_h * len(items) + axis_h
    hi = max([v for _, v in items] + [1.0]) * 1.05
    x = Scale(0.0, hi, left, width - right)
    body = _x_axis(x, top + row_h * len(items) + 1, nice_ticks(0.0, hi, 4),
                   lambda t, d: f"{t:g}x")
    for i, (name, v) in enumerate(items):
        y0 = top + row_h * i
        css = f"bar {name}" if name in highlight else "bar"
        body.append(_el("text", escape(name), x=left - 5, y=y0 + row_h * 0.72, class_="rowlabel",
                        text_anchor="end"))
        body.append(_el("rect", _title(f"{name}: {v:.2f}x {reference}"), x=float(left),
                        y=y0 + 2.0, width=max(x(v) - left, 0.5), height=row_h - 4.0, class_=css,
                        data_v=repr(v)))
        body.append(_el("text", f"{v:.2f}x", x=x(v) + 3, y=y0 + row_h * 0.72, class_="tick"))
    one = x(1.0)
    body.append(_el("line", x1=one, x2=one, y1=top, y2=top + row_h * len(items), class_="ref"))
    return _svg(width, height, f"throughput relative to {reference}", body, "bars")
