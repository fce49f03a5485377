"""Speed x memory: one joint label for each (ops_per_sec, max_rss_bytes) pair of cells.

A change that buys throughput with memory (a shared thread-cache pool, a bigger batch)
must read as a trade-off, not an improvement. Both cells of a workload x params already
have a verdict (``mallard_stats.stats``); the label is read from the two verdicts alone:

(ops_per_sec verdict, max_rss_bytes verdict) -> label:

* improved, improved: ``better-both``; regressed, regressed: ``worse-both``;
* improved, regressed: ``faster-but-fatter``; regressed, improved: ``slower-but-leaner``;
* improved, same: ``faster``; same, improved: ``leaner``;
* regressed, same: ``slower``; same, regressed: ``fatter``;
* same, same: ``same``.

Its ``kind`` is ``better`` (something better, nothing worse), ``worse`` (the reverse),
``trade-off`` (one better, one worse), ``same``, or ``unknown`` when either verdict is
``unknown`` (the label is then ``unknown``: an undecided side can hide a trade-off).
Pure functions of report cells; nothing here reads the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mallard_wire.fields import JsonDict

from mallard_api.analysis.report import ReportCell
from mallard_api.params import params_key

SPEED = "ops_per_sec"
# the speed measures in order of preference: wall-clock throughput where it is judged, else
# throughput per CPU-second (a testbed whose CPUs are not isolated, measures.py)
SPEEDS = (SPEED, "ops_per_cpu_sec")
MEMORY = "max_rss_bytes"

_LABELS: dict[tuple[str, str], str] = {
    ("improved", "improved"): "better-both",
    ("improved", "same"): "faster",
    ("improved", "regressed"): "faster-but-fatter",
    ("same", "improved"): "leaner",
    ("same", "same"): "same",
    ("same", "regressed"): "fatter",
    ("regressed", "improved"): "slower-but-leaner",
    ("regressed", "same"): "slower",
    ("regressed", "regressed"): "worse-both",
}
_KINDS = {
    "better-both": "better", "faster": "better", "leaner": "better",
    "worse-both": "worse", "slower": "worse", "fatter": "worse",
    "faster-but-fatter": "trade-off", "slower-but-leaner": "trade-off",
    "same": "same", "unknown": "unknown",
}


@dataclass(frozen=True)
class Joint:
    workload: str
    params: JsonDict
    threads: int | None
    label: str
    kind: str
    speed_verdict: str
    memory_verdict: str
    speed_diff_pct: float | None
    memory_diff_pct: float | None
    speed_measure: str = SPEED

    def text(self) -> str:
        """The report line under the throughput cell (indented by the caller)."""
        return (f"speed x memory: {self.label} ({self.kind}): {self.speed_measure} "
                f"{_pct(self.speed_diff_pct)} {self.speed_verdict.upper()}, {MEMORY} "
                f"{_pct(self.memory_diff_pct)} {self.memory_verdict.upper()}")


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{v:+.1f}%"


def label(speed_verdict: str, memory_verdict: str) -> tuple[str, str]:
    """(label, kind) from the two cells' verdicts (module doc)."""
    name = _LABELS.get((speed_verdict, memory_verdict), "unknown")
    return name, _KINDS[name]


def joint_labels(cells: Sequence[ReportCell]) -> list[Joint]:
    """One Joint per workload x params that has both a speed and a memory cell with a
    verdict (diagnostic cells are never paired), in workload and params order."""
    pairs: dict[tuple[str, str], dict[str, ReportCell]] = {}
    for c in cells:
        if (c.measure in SPEEDS or c.measure == MEMORY) and c.stats.primary:
            pairs.setdefault((c.workload, params_key(c.params)), {})[c.measure] = c
    out = []
    for key in sorted(pairs):
        pair = pairs[key]
        speed = next((sp for sp in SPEEDS if sp in pair), None)
        if speed is None or MEMORY not in pair:
            continue
        s, m = pair[speed], pair[MEMORY]
        name, kind = label(s.stats.verdict, m.stats.verdict)
        threads = s.params.get("threads")
        out.append(Joint(
            workload=s.workload, params=dict(s.params),
            threads=int(threads) if isinstance(threads, int | float) else None,
            label=name, kind=kind, speed_verdict=s.stats.verdict,
            memory_verdict=m.stats.verdict, speed_diff_pct=s.stats.diff_pct,
            memory_diff_pct=m.stats.diff_pct, speed_measure=speed))
    return out
