"""The comparison page's memory-over-time and latency-tail figures, per workload cell:
what base's and head's trials recorded when their job asked (`record`,
mallard_wire/timelines.py), drawn as inline SVG (svg.py's conventions: classes styled by
static/mallard.css, every mark with its number in `data-v` and a `<title>`).

* `memory_plot`: RSS against time, one line per trial (base s0, head s1);
* `latency_plot`: the sampled latency histogram of one call (malloc or free), base and
  head each summed over their trials, as bars over log-spaced buckets with the share of
  calls on a log axis (so the tail shows), p99 and p99.9 of each side marked.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from mallard_wire.timelines import (
    LATENCY_CALLS,
    LatencyHistogram,
    MemoryTimeline,
    bucket_bounds,
    percentile,
)
from markupsafe import Markup
from pydantic import ValidationError
from sqlalchemy.orm import Session

from mallard_api.models.comparisons import Comparison
from mallard_api.params import params_key
from mallard_api.sql import timelines as tl_sql
from mallard_api.ui import fmt
from mallard_api.ui.svg import SVG_NS, Scale, nice_ticks

SIDES = (("base", "s0"), ("head", "s1"))
MIB = 2.0**20  # the memory axis ticks at round MiB
WIDTH, HEIGHT = 400, 170
LEFT, RIGHT, TOP, BOTTOM = 62, 10, 10, 30


@dataclass
class TimelinesView:
    memory: Markup | None = None
    latency: list[tuple[str, Markup]] = field(default_factory=list)  # (call, plot)


def _n(v: float) -> str:
    return f"{v:.2f}".rstrip("0").rstrip(".")


def _ns(v: int) -> str:
    """A power of ten of nanoseconds as a tick reads it: 100 ns, 10 µs, 1 ms."""
    for scale, unit in ((10**9, "s"), (10**6, "ms"), (10**3, "µs")):
        if v >= scale:
            return f"{v // scale} {unit}"
    return f"{v} ns"


def _svg(label: str, body: list[str], css: str) -> Markup:
    return Markup(
        f'<svg xmlns="{SVG_NS}" class="plot {css}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(label)}">'
        f"<title>{escape(label)}</title>{''.join(body)}</svg>")


def _axes(x: Scale, y: Scale, xticks: Sequence[tuple[float, str]],
          yticks: Sequence[tuple[float, str]], xlabel: str) -> list[str]:
    base = HEIGHT - BOTTOM
    out = [f'<line class="axis" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{base}" y2="{base}"/>']
    for v, text in xticks:
        out.append(f'<text class="tick" x="{_n(x(v))}" y="{base + 12}" '
                   f'text-anchor="middle">{escape(text)}</text>')
    for v, text in yticks:
        out.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{_n(y(v))}" '
                   f'y2="{_n(y(v))}"/><text class="tick" x="{LEFT - 4}" y="{_n(y(v) + 3)}" '
                   f'text-anchor="end">{escape(text)}</text>')
    out.append(f'<text class="tick" x="{(LEFT + WIDTH - RIGHT) // 2}" y="{HEIGHT - 3}" '
               f'text-anchor="middle">{escape(xlabel)}</text>')
    return out


def memory_plot(sides: dict[str, list[MemoryTimeline]], label: str) -> Markup:
    """RSS against seconds since the workload started, a line per trial."""
    lines = [(side, css, t) for side, css in SIDES for t in sides.get(side, [])]
    end = max((len(t.rss_bytes) * t.interval_ms / 1000 for _, _, t in lines), default=1.0)
    top = max((max(t.rss_bytes) for _, _, t in lines), default=1) * 1.05
    x, y = Scale(0.0, end, LEFT, WIDTH - RIGHT), Scale(0.0, top, HEIGHT - BOTTOM, TOP)
    body = _axes(x, y, [(t, fmt.value(t, "", "s", 2)) for t in nice_ticks(0.0, end, 4)],
                 [(t * MIB, fmt.value(t * MIB, "rss_bytes")) for t in
                  nice_ticks(0.0, top / MIB, 4)[1:]],
                 "seconds since start")
    for i, (side, css, t) in enumerate(lines):
        step = t.interval_ms / 1000
        pts = " ".join(f"{_n(x(k * step))},{_n(y(v))}" for k, v in enumerate(t.rss_bytes))
        tip = (f"{side} trial {i + 1}: peak {fmt.value(max(t.rss_bytes), 'rss_bytes')}, "
               f"final {fmt.value(t.rss_bytes[-1], 'rss_bytes')}, every "
               f"{fmt.value(step, '', 's')}")
        body.append(f'<polyline class="timeline {css}" data-side="{side}" '
                    f'data-v="{max(t.rss_bytes)}" points="{pts}"><title>{escape(tip)}</title>'
                    "</polyline>")
    return _svg(label, body, "memory")


def summed(hists: Sequence[LatencyHistogram], call: str) -> list[tuple[int, int]]:
    total: dict[int, int] = defaultdict(int)
    for h in hists:
        for b, n in getattr(h, call):
            total[b] += n
    return sorted(total.items())


def latency_plot(sides: dict[str, list[LatencyHistogram]], call: str, label: str) -> Markup:
    """The share of sampled `call`s per bucket (log axes), each side's p99 and p99.9."""
    per_side = {side: summed(sides.get(side, []), call) for side, _ in SIDES}
    buckets = [b for h in per_side.values() for b, _ in h] or [1]
    lo = max(1.0, float(bucket_bounds(min(buckets))[0]))
    hi = float(bucket_bounds(max(buckets))[1])
    floor = min((n / sum(c for _, c in h) for h in per_side.values() if h for _, n in h),
                default=0.1)
    exp_lo = math.floor(math.log10(floor))
    x = Scale(math.log10(lo), math.log10(max(hi, lo * 10)), LEFT, WIDTH - RIGHT)
    y = Scale(float(exp_lo), 0.0, HEIGHT - BOTTOM, TOP)
    xt = [(float(e), _ns(10**e)) for e in range(math.ceil(x.d0), math.floor(x.d1) + 1)]
    yt = [(float(e), f"{10.0**e:g}") for e in range(exp_lo, 1)]
    body = _axes(x, y, xt, yt, f"{call} latency (share of sampled calls)")
    for side, css in SIDES:
        hist = per_side[side]
        total = sum(n for _, n in hist)
        if not total:
            continue
        for b, n in hist:
            b0, b1 = bucket_bounds(b)
            share = n / total
            x0, x1 = x(math.log10(max(b0, lo))), x(math.log10(b1))
            top = y(math.log10(share))
            body.append(f'<rect class="hist {css}" data-side="{side}" data-v="{n}" '
                        f'x="{_n(x0)}" width="{_n(max(x1 - x0, 1.5))}" y="{_n(top)}" '
                        f'height="{_n(max(HEIGHT - BOTTOM - top, 1.0))}"><title>{side}: {n} '
                        f"calls in [{b0}, {b1}) ns ({share:.2%})</title></rect>")
        for q, name in ((0.99, "p99"), (0.999, "p99.9")):
            v = percentile(hist, q)
            if v is None:
                continue
            px = _n(x(math.log10(max(v, lo))))
            body.append(f'<line class="quantile {css}" data-side="{side}" data-v="{v!r}" '
                        f'x1="{px}" x2="{px}" y1="{TOP}" y2="{HEIGHT - BOTTOM}"><title>{side} '
                        f"{call} {name}: {fmt.value(v, '', 'ns')}</title></line>")
    return _svg(label, body, "latency")


def _parsed(rows: list[tl_sql.Recorded]) -> tuple[dict[tuple[str, str, str], list[
        MemoryTimeline]], dict[tuple[str, str, str], list[LatencyHistogram]]]:
    memory: dict[tuple[str, str, str], list[MemoryTimeline]] = defaultdict(list)
    latency: dict[tuple[str, str, str], list[LatencyHistogram]] = defaultdict(list)
    for r in rows:
        key = (r.workload, params_key(r.params), r.label)
        try:
            if r.memory is not None:
                memory[key].append(MemoryTimeline.model_validate(r.memory))
            if r.latency is not None:
                latency[key].append(LatencyHistogram.model_validate(r.latency))
        except ValidationError:
            continue  # stored by an older shape: not drawn
    return memory, latency


def views(session: Session, comp: Comparison, titles: dict[tuple[str, str], str]
          ) -> dict[tuple[str, str], TimelinesView]:
    """(workload, params key) -> its figures, for the cells whose trials recorded any
    (`titles`: each cell's heading, for the figures' labels)."""
    memory, latency = _parsed(tl_sql.recorded(session, comp.id, comp.testbed_fingerprint))
    out: dict[tuple[str, str], TimelinesView] = {}
    for cell, title in titles.items():
        mem = {side: memory.get((*cell, side), []) for side, _ in SIDES}
        lat = {side: latency.get((*cell, side), []) for side, _ in SIDES}
        view = TimelinesView()
        if any(mem.values()):
            view.memory = memory_plot(mem, f"{title}: RSS over time, base and head trials")
        if any(lat.values()):
            view.latency = [(call, latency_plot(lat, call, f"{title}: {call} latency, base "
                                                "and head")) for call in LATENCY_CALLS]
        if view.memory is not None or view.latency:
            out[cell] = view
    return out
