"""Per-cell statistics for people: median, IQR, CV, n ok / n, ratio of medians to a baseline.

Only measured (non-warm-up) trials that succeeded count. The verdicts with
confidence intervals and p-values are the API's job; this is the local table.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from mallard_wire.fields import JsonDict
from mallard_wire.results import TrialIn

SPEEDS = ("ops_per_sec", "items_per_second")


def allocator_display(t: TrialIn) -> str:
    """`mimalloc@a3ca0e5 arena_eager_commit=1` (built: it has a commit), `jemalloc`."""
    a = t.allocator
    if a.commit is None:
        return a.name
    return f"{a.name}@{a.commit[:7]} {a.variant or 'default'}"


def case_key(t: TrialIn) -> str:
    return f"{t.workload.name} " + " ".join(f"{k}={v}" for k, v in t.workload.params.items())


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return float("nan")
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


@dataclass
class CellSummary:
    label: str
    allocator: str
    workload: str
    case: str
    params: JsonDict
    n: int
    n_ok: int
    name: str = ""
    variant: str | None = None
    values: dict[str, list[float]] = field(default_factory=dict)
    seqs: dict[str, list[int]] = field(default_factory=dict)  # round of each value
    ratio: float | None = None  # speed median / baseline median
    failures: list[str] = field(default_factory=list)

    @property
    def speed(self) -> str:
        """The throughput measure of the cell: ops_per_sec (the built-in workloads'), else
        a Google Benchmark program's items_per_second (programs.py)."""
        return next((m for m in SPEEDS if m in self.values), SPEEDS[0])

    def median(self, measure: str) -> float | None:
        v = self.values.get(measure)
        return statistics.median(v) if v else None

    def iqr(self, measure: str) -> float | None:
        v = self.values.get(measure)
        return quantile(v, 0.75) - quantile(v, 0.25) if v else None

    def cv(self, measure: str) -> float | None:
        v = self.values.get(measure)
        if not v or len(v) < 2:
            return None
        mean = statistics.fmean(v)
        return statistics.stdev(v) / mean if mean else None


def summarize(trials: list[TrialIn], baseline: str | None = None,
              measure: str | None = None) -> list[CellSummary]:
    """Per cell; the ratio of `measure`'s medians (default: each cell's `speed`)."""
    cells: dict[tuple[str, str, str], CellSummary] = {}
    for t in trials:
        if t.warmup:
            continue
        key = (t.label, allocator_display(t), case_key(t))
        s = cells.get(key)
        if s is None:
            s = cells[key] = CellSummary(label=t.label, allocator=key[1], workload=t.workload.name,
                                         case=key[2], params=dict(t.workload.params), n=0, n_ok=0,
                                         name=t.allocator.name, variant=t.allocator.variant)
        s.n += 1
        if t.ok:
            s.n_ok += 1
            for m, v in t.measures.items():
                s.values.setdefault(m, []).append(v)
                s.seqs.setdefault(m, []).append(t.seq)
        else:
            why = f"signal {t.signal}" if t.signal else f"exit {t.exit_code}"
            s.failures.append(f"seq {t.seq}: {why}: {(t.stderr_tail or '').strip()[-200:]}")
    out = list(cells.values())
    if baseline:
        name, _, variant = baseline.partition(":")
        base = {s.case: s.median(measure or s.speed) for s in out
                if s.name == name and (not variant or s.variant == variant)}
        for s in out:
            b = base.get(s.case)
            med = s.median(measure or s.speed)
            if b and med is not None:
                s.ratio = med / b
    out.sort(key=lambda s: (s.workload, s.case, s.allocator, s.label))
    return out
