"""Text reports: one line per cell, and a whole comparison report.

The line of a primary cell (``format_line`` builds every line; nothing else does)::

    larson threads=2 ops_per_sec: -17.3% ±1.3% (p=0.000, 8 trials, 7 robust, mde 2.1%,
        band ±1.0%) REGRESSED      (one line)

* the change is ``(median(head) / median(base) - 1) * 100`` with one decimal and a sign;
* ``±`` is the half-width of the bootstrap interval, ``(hi - lo) / 2`` (the interval of a
  ratio is not symmetric; the exact bounds are in the JSON and ``v_comparison_cells``);
  where the interval is so lopsided that change ± half-width would say otherwise than the
  interval about zero (``-5.9% ±8.6%`` of an interval ``[-17.0%, -0.2%]``), the line shows
  the bounds instead, ``-5.9% [-17.0%, -0.2%]`` (``change_text``): a REGRESSED or IMPROVED
  line never shows an interval that includes zero; so too where change ± half-width would
  lie inside the SAME band and the interval does not, or the other way round
  (``-0.6% [-1.2%, -0.5%]`` against a band of ±1.2%: ``±0.4%`` would read as same);
* ``p`` is the Benjamini-Hochberg *adjusted* p-value (``n/a`` for a deterministic cell,
  which needs none); in a comparison that plans follow-ups, ``p=0.004 at alpha 0.0126``
  names the level of the cell's look (``mallard_stats.spending``);
* ``trials``/``robust`` are **per side, the smaller side**: base and head run interleaved
  with the same number of trials, and the weaker side is what limits the verdict; a cell
  judged on pairs of rounds (``pairs.py``) says ``paired, 40 pairs, 39 robust`` instead,
  and ``blocks x1.8`` when its blocks of rounds differ and that design effect widened it;
* ``mde`` is the cell's minimum detectable effect at its trials and noise (80% power;
  ``mde n/a`` while too few robust trials ran to detect anything);
* ``band`` is the half-width of the cell's SAME band (``stats.same_band``: the series'
  calibrated band, else the minimum effect; a deterministic cell's minimum effect); shown
  once the verdict is decided;
* the verdict is upper-case.

A diagnostic cell (no verdict, see ``stats``) has the same line without
``p`` and ``mde`` and ends in ``diagnostic``; the report prints it indented under the
primary lines of its workload and params::

      larson threads=2 wall_seconds: +0.4% ±1.2% (8 trials, 8 robust) diagnostic

Params shown after the workload: ``threads`` always, plus every other param whose value
differs between cells of the same workload in the report (so lines never collide).

A comparison's hypothesis and its outcome per cell: ``hypothesis``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from mallard_stats.hypothesis import Hypothesis, hypothesis_outcome
from mallard_stats.measures import THROUGHPUT
from mallard_stats.stats import DIAGNOSTIC, CellStats
from pydantic import JsonValue

from mallard_api.analysis.extras import Extras
from mallard_api.params import params_key

# Raw allocator counts the runner reports as diagnostics (contracts section 2); with the
# hit ratios they are the counters ranked by ``mallard_api.analysis.moved``.
COUNT_MEASURES = frozenset({
    "transfer_insert_inflight_misses", "transfer_remove_inflight_misses",
    "transfer_waits", "central_refills", "pages_reclaimed",
})


def is_counter(measure: str) -> bool:
    """Allocator counters (contracts section 2): the hit ratios and the raw counts."""
    return measure.endswith("_ratio") or measure in COUNT_MEASURES


def is_ratio(measure: str) -> bool:
    """The counters listed beside throughput on the ``counters:`` line."""
    return measure.endswith("_ratio")


@dataclass
class ReportCell:
    workload: str
    params: Mapping[str, JsonValue]
    measure: str
    stats: CellStats


def _fmt_value(v: JsonValue) -> str:
    return str(v)


def params_text(params: Mapping[str, JsonValue], keys: Iterable[str] = ()) -> str:
    shown = []
    if "threads" in params:
        shown.append(f"threads={_fmt_value(params['threads'])}")
    for k in sorted(set(keys) - {"threads"}):
        if k in params:
            shown.append(f"{k}={_fmt_value(params[k])}")
    return " ".join(shown)


def _pct(v: float | None) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:+.1f}%"


def _mde(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:.1f}%" if v >= 1.0 else f"{v:.2f}%"


def _side(lo: float, hi: float) -> int:
    """Which side of zero ``[lo, hi]`` lies on: 1 above, -1 below, 0 across."""
    return 1 if lo > 0 else -1 if hi < 0 else 0


def _inside(lo: float, hi: float, band: float | None) -> bool:
    return band is not None and -band < lo and hi < band


def interval_text(d: float | None, lo: float | None, hi: float | None,
                  band: float | None = None) -> str:
    """``±1.3%``, the half-width of the interval ``[lo, hi]`` of change ``d``; its bounds,
    ``[-17.0%, -0.2%]``, where change ± half-width and the interval disagree on the side of
    zero or on lying inside the SAME band ``band`` (module doc); "" without an interval."""
    if d is None or lo is None or hi is None or not math.isfinite(hi - lo):
        return ""
    hw = (hi - lo) / 2.0
    if _side(d - hw, d + hw) != _side(lo, hi) or (
            _inside(d - hw, d + hw, band) != _inside(lo, hi, band)):
        return f"[{_pct(lo)}, {_pct(hi)}]"
    return f"±{hw:.1f}%"


def change_text(s: CellStats) -> str:
    """``-5.9% ±1.3%`` or ``-5.9% [-17.0%, -0.2%]`` (``interval_text``)."""
    return " ".join(filter(None, (_pct(s.diff_pct), interval_text(
        s.diff_pct, s.ci_low_pct, s.ci_high_pct, s.band_pct))))


def count_text(s: CellStats) -> str:
    """``8 trials, 7 robust`` (the smaller side), or ``paired, 40 pairs, 39 robust``."""
    robust = min(s.robust_base, s.robust_head)
    if s.paired:
        blocks = f", blocks x{s.block_effect:.1f}" if s.block_effect >= 1.05 else ""
        return f"paired, {min(s.n_base, s.n_head)} pairs, {robust} robust{blocks}"
    return f"{min(s.n_base, s.n_head)} trials, {robust} robust"


def format_line(workload: str, params: str, measure: str, s: CellStats) -> str:
    """The line for one cell (see module doc): primary cells with p, MDE and verdict;
    diagnostic cells without."""
    name = f"{workload} {params}".strip()
    change = change_text(s)
    if not s.primary:
        return f"{name} {measure}: {change} ({count_text(s)}) {DIAGNOSTIC}"
    p = "n/a" if s.p_adjusted is None else f"{s.p_adjusted:.3f}"
    if s.alpha is not None:
        p = f"{p} at alpha {s.alpha:.4f}"  # the level of the cell's look (spending)
    band = "" if s.band_pct is None else f", band ±{_mde(s.band_pct)}"
    return (
        f"{name} {measure}: {change} (p={p}, {count_text(s)}, "
        f"mde {_mde(s.mde_pct)}{band}) {s.verdict.upper()}"
    )


def varying_keys(cells: Sequence[ReportCell]) -> dict[str, set[str]]:
    """Per workload, the param keys whose values differ between its cells."""
    values: dict[str, dict[str, set[str]]] = {}
    for c in cells:
        per = values.setdefault(c.workload, {})
        for k, v in c.params.items():
            per.setdefault(k, set()).add(repr(v))
    out: dict[str, set[str]] = {}
    for wl, per in values.items():
        counts = [c for c in cells if c.workload == wl]
        out[wl] = {
            k for k, vs in per.items()
            if len(vs) > 1 or any(k not in c.params for c in counts)
        }
    return out


def cell_lines(cells: Sequence[ReportCell]) -> list[str]:
    vary = varying_keys(cells)
    return [
        format_line(c.workload, params_text(c.params, vary.get(c.workload, ())), c.measure, c.stats)
        for c in cells
    ]


@dataclass
class ReportHeader:
    comparison_id: int | None
    project: str
    arch: str | None
    base_label: str
    head_label: str
    state: str
    testbed: str | None = None
    follow_ups: int = 0
    hypothesis: Hypothesis | None = None
    notes: list[str] = field(default_factory=list)


def _measure_order(measure: str) -> tuple[int, str]:
    if measure == THROUGHPUT:
        return (0, measure)
    if measure == "ops_per_cpu_sec":  # the throughput judged where the CPUs are shared
        return (1, measure)
    return (2, measure)


def format_report(
    header: ReportHeader,
    cells: Sequence[ReportCell],
    peers: Mapping[tuple[str, str], Mapping[str, float]] | None = None,
    extras: Extras | None = None,
) -> str:
    """A whole comparison report: a header whose summary counts the primary cells, then per
    workload (a blank line between workloads) one line per primary cell at the start of its
    line, the first (throughput) followed by its allocator counters and each by its
    hypothesis check (indented); then the diagnostic cells of the same workload and params,
    indented under them; and the peers as reference lines; a closing line says in how many
    cells the hypothesis held.

    ``peers`` maps ``(workload, params_key(params))`` to ``{allocator: median ops_per_sec}``
    for the peer trials of the comparison (``glibc``, ``jemalloc``, ...). They are printed as
    reference lines ``jemalloc: 1.32x glibc`` (against glibc, or against base when glibc was
    not run), with base and head placed on the same scale.

    ``extras`` (made by the caller from the same cells) adds, under the throughput line,
    the counters that moved most (``mallard_api.analysis.moved``) and the speed x memory label
    (``mallard_api.analysis.joint``), and at the end the thread-scaling curves
    (``mallard_api.analysis.curves``).
    """
    peers = peers or {}
    extras = extras or Extras()
    out = _header_lines(header, cells)
    hyp = header.hypothesis
    vary = varying_keys(cells)
    groups: dict[str, dict[str, list[ReportCell]]] = {}
    for c in cells:
        groups.setdefault(c.workload, {}).setdefault(params_key(c.params), []).append(c)
    outcomes: list[str] = []
    for workload in sorted(groups):
        out.append("")
        for pkey in sorted(groups[workload]):
            group = sorted(groups[workload][pkey], key=lambda c: _measure_order(c.measure))
            ptext = params_text(group[0].params, vary.get(workload, ()))
            out.extend(_group_lines(workload, pkey, ptext, group, hyp, extras, outcomes))
            out.extend(_reference_lines(peers.get((workload, pkey)), group))
    out.extend(_closing_lines(extras, hyp, outcomes))
    return "\n".join(out) + "\n"


def _header_lines(header: ReportHeader, cells: Sequence[ReportCell]) -> list[str]:
    """The title, testbed, the summary count of the primary cells, hypothesis and notes."""
    counts = {v: 0 for v in ("improved", "regressed", "same", "unknown")}
    primary_cells = [c for c in cells if c.stats.primary]
    for c in primary_cells:
        counts[c.stats.verdict] = counts.get(c.stats.verdict, 0) + 1
    title = "Comparison"
    if header.comparison_id is not None:
        title = f"Comparison #{header.comparison_id}"
    out = [
        f"{title} ({header.project}{', ' + header.arch if header.arch else ''}): "
        f"base {header.base_label} vs head {header.head_label}",
    ]
    if header.testbed:
        out.append(f"testbed: {header.testbed}")
    out.append(
        f"state: {header.state}; {len(primary_cells)} primary cells: {counts['improved']} "
        f"improved, {counts['regressed']} regressed, {counts['same']} same, "
        f"{counts['unknown']} unknown; follow-ups: {header.follow_ups}"
    )
    if header.hypothesis is not None:
        out.append(f"hypothesis: {header.hypothesis.describe()}")
    out.extend(header.notes)
    return out


def _group_lines(workload: str, pkey: str, ptext: str, group: list[ReportCell],
                 hyp: Hypothesis | None, extras: Extras, outcomes: list[str]) -> list[str]:
    """One workload x params: its primary lines (the first with its counters and extras,
    each with its hypothesis check), then its diagnostics; appends to ``outcomes``."""
    out: list[str] = []
    main = [c for c in group if c.stats.primary]
    counters = [c for c in group if not c.stats.primary and is_ratio(c.measure)]
    diagnostics = [c for c in group if not c.stats.primary and not is_counter(c.measure)]
    for c in main:
        out.append(format_line(workload, ptext, c.measure, c.stats))
        if c is main[0]:  # beside throughput (sorted first)
            if counters:
                out.append("  counters: " + ", ".join(_counter_text(k) for k in counters))
            out.extend("  " + line for line in extras.under((workload, pkey)))
        if hyp is not None and c.measure == hyp.measure:
            res = hypothesis_outcome(hyp, c.stats)
            outcomes.append(res)
            out.append(
                f"  {hyp.describe()}, actual {_pct(c.stats.diff_pct)} "
                f"[{_pct(c.stats.ci_low_pct)}, {_pct(c.stats.ci_high_pct)}]: {res.upper()}"
            )
    indent = "  " if main else ""
    out.extend(indent + format_line(workload, ptext, c.measure, c.stats) for c in diagnostics)
    if not main and counters:
        joined = ", ".join(_counter_text(k) for k in counters)
        out.append(f"{workload} {ptext} counters: {joined}")
    if not main:
        out.extend(f"{workload} {ptext} {line}" for line in extras.under((workload, pkey)))
    return out


def _reference_lines(ref: Mapping[str, float] | None, group: Sequence[ReportCell]
                     ) -> list[str]:
    lines = peer_lines(ref, group) if ref else []
    if not lines:
        return []
    return [f"  reference ({THROUGHPUT} medians):", *("    " + line for line in lines)]


def _closing_lines(extras: Extras, hyp: Hypothesis | None, outcomes: list[str]) -> list[str]:
    """The scaling curves, and how often the hypothesis held."""
    out: list[str] = []
    if extras.curves:
        out.append("")
        out.append("scaling curves (b base, h head, * both):")
        for curve in extras.curves:
            out.append(curve.summary())
            out.extend("  " + row for row in curve.plot())
    if hyp is not None:
        held = sum(1 for o in outcomes if o == "held")
        out.append("")
        out.append(
            f"hypothesis ({hyp.describe()}): held in {held} of {len(outcomes)} cells"
            + ("" if outcomes else f" (no {hyp.measure} cells)")
        )
    return out


def _counter_text(c: ReportCell) -> str:
    s = c.stats
    if s.base_median is None or s.head_median is None:
        return f"{c.measure} n/a"
    return f"{c.measure} {s.base_median:.3f} -> {s.head_median:.3f} ({_pct(s.diff_pct)})"


def peer_lines(ref: Mapping[str, float], group: Sequence[ReportCell]) -> list[str]:
    """Reference lines ``jemalloc: 1.32x glibc`` for one workload x params."""
    values = dict(ref)
    thr = next((c for c in group if c.measure == THROUGHPUT), None)
    if thr is not None:
        if thr.stats.base_median is not None:
            values.setdefault("base", thr.stats.base_median)
        if thr.stats.head_median is not None:
            values.setdefault("head", thr.stats.head_median)
    ref_name = "glibc" if values.get("glibc") else "base"
    denom = values.get(ref_name)
    if not denom:
        return []
    return [
        f"{name}: {val / denom:.2f}x {ref_name}"
        for name, val in sorted(values.items())
        if name != ref_name
    ]
