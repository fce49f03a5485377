"""Synthetic report cells for the joint / moved / curves tests (no database)."""

from mallard_api.analysis.report import ReportCell
from mallard_stats.stats import DIAGNOSTIC, CellStats


def rc(workload: str, measure: str, base: float | None, head: float | None, verdict: str,
       threads: int = 2, hib: bool = True, **params: object) -> ReportCell:
    primary = verdict != DIAGNOSTIC
    diff = None if base in (None, 0) or head is None else (head / base - 1) * 100
    return ReportCell(workload, {"threads": threads, **params}, measure, CellStats(
        n_base=5, n_head=5, robust_base=5, robust_head=5, base_median=base, head_median=head,
        ratio=None if diff is None else 1 + diff / 100, diff_pct=diff,
        ci_low_pct=None if diff is None else diff - 1,
        ci_high_pct=None if diff is None else diff + 1,
        p_value=0.01 if primary else None, p_adjusted=0.01 if primary else None,
        verdict=verdict, higher_is_better=hib, primary=primary, mde_pct=1.0 if primary else None))
