"""A testbed's noise as its calibrations measured it: the SAME band of each series (which
comparisons on the testbed then use in place of one band for every series), and the
calibration's results as a table."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mallard_stats import stats
from mallard_stats.measures import min_effect_abs
from mallard_stats.policy import Policy
from sqlalchemy.orm import Session

from mallard_api.config import Settings
from mallard_api.models.calibrations import CalibrationResult
from mallard_api.params import params_key
from mallard_api.sql import calibrations as sql


def band_pct(cv_pct: float | None, deterministic: bool, settings: Settings) -> float | None:
    if deterministic or cv_pct is None:
        return None
    return min(max(cv_pct, settings.stats_min_effect_pct), settings.calibration_band_max_pct)


def bands(session: Session, fingerprint: str | None
          ) -> tuple[dict[tuple[str, str, str], float], list[int]]:
    """``{(workload, params key, measure): band_pct}`` from the testbed's latest calibration
    of each series, and the calibrations they came from."""
    if fingerprint is None:
        return {}, []
    out: dict[tuple[str, str, str], float] = {}
    ids: set[int] = set()
    for r in sql.latest_noise(session, fingerprint):
        if r.band_pct is not None:
            out[(r.workload, params_key(r.params), r.measure)] = r.band_pct
            ids.add(r.calibration_id)
    return out, sorted(ids)


def table(rows: Sequence[CalibrationResult]) -> str:
    """The results as a markdown table: workload x threads x measure, CV, false alarms of
    the A/A comparisons, per injected size ``detected/comparisons (measured change)``, and
    the SAME band."""
    if not rows:
        return ""
    sizes = sorted({d.size_pct for r in rows for d in r.detection})
    head = ["workload", "threads", "measure", "CV", "false alarms (A/A)"]
    head += [f"canary {s:g}%" for s in sizes] + ["SAME band"]
    out = ["| " + " | ".join(head) + " |",
           "|" + "---|" * 3 + "---:|" * (len(head) - 3)]
    for r in rows:
        by_size = {d.size_pct: d for d in r.detection}
        cells = [r.workload, str(r.threads if r.threads is not None else ""),
                 r.measure,
                 "n/a" if r.cv_pct is None else f"{r.cv_pct:.2f}%",
                 f"{r.false_alarms} of {r.aa_comparisons}"]
        for s in sizes:
            d = by_size.get(s)
            if d is None:
                cells.append("")
                continue
            measured = "" if d.measured_pct is None else f" ({d.measured_pct:+.1f}%)"
            cells.append(f"{d.detected}/{d.comparisons}{measured}")
        cells.append("n/a" if r.band_pct is None else f"±{r.band_pct:.1f}%")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def with_band(s: stats.CellStats, band: float | None, policy: Policy,
              measure: str) -> stats.CellStats:
    """A stored cell's stats with the SAME band its verdict used (shown on its line)."""
    s.min_effect_abs = min_effect_abs(measure, policy.min_effect_bytes)
    if s.primary:
        s.band_pct = stats.same_band(s, policy if band is None
                                     else replace(policy, same_band_pct=band))
    return s
