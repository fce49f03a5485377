"""The bisection search, pure: no database, no I/O.

A range is the list of commits `good .. bad` (index 0 is known good, index n known bad).
Each round probes the untested commit nearest the middle of the open range and learns
`good`, `bad` or `skip` (its build failed, as `git bisect skip`). The culprit is the
first bad commit: the range closes when the last good and the first bad are adjacent.
When only skipped commits are left between them, the culprit is one of those and the
candidates are reported (as git bisect does). Without skips a range of n commits closes
in ceil(log2(n)) probes.

Classifying a probe from its evidence is pure too (:func:`classify`): the probe was
measured against both ends (good end vs probe, probe vs bad end); the change sits on the
side with the larger move in the bad direction.
"""

from __future__ import annotations

from dataclasses import dataclass, field

GOOD, BAD, SKIP = "good", "bad", "skip"


@dataclass
class Search:
    n: int  # commits are indexes 0..n: 0 good, n bad
    outcomes: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError("a range needs a good and a later bad commit")

    def bounds(self) -> tuple[int, int]:
        """(last known good, first known bad after it)."""
        lo = max([0] + [i for i, o in self.outcomes.items() if o == GOOD])
        hi = min([self.n] + [i for i, o in self.outcomes.items() if o == BAD and i > lo])
        return lo, hi

    def open(self) -> list[int]:
        """Untested, unskipped commits strictly between the bounds."""
        lo, hi = self.bounds()
        return [i for i in range(lo + 1, hi) if i not in self.outcomes]

    def next_probe(self) -> int | None:
        """The commit to measure next, or None when the search is over."""
        lo, hi = self.bounds()
        cands = self.open()
        if not cands:
            return None
        mid = (lo + hi) / 2
        return min(cands, key=lambda i: (abs(i - mid), i))

    def record(self, index: int, outcome: str) -> None:
        if outcome not in (GOOD, BAD, SKIP):
            raise ValueError(f"unknown outcome {outcome!r}")
        if not 0 < index < self.n:
            raise ValueError(f"index {index} is not inside the range")
        self.outcomes[index] = outcome

    def done(self) -> bool:
        return self.next_probe() is None

    def culprit(self) -> int | None:
        """The first bad commit, when the search has pinned it down."""
        lo, hi = self.bounds()
        return hi if hi - lo == 1 else None

    def candidates(self) -> list[int]:
        """When done: the culprit alone, or the skipped commits and the first bad one."""
        lo, hi = self.bounds()
        return list(range(lo + 1, hi + 1))


@dataclass(frozen=True)
class Evidence:
    """One comparison of a probe with an end: the judged cell's change, head vs base."""

    diff_pct: float | None
    verdict: str | None  # the cell's verdict; None when the comparison has no such cell


def badness(e: Evidence, higher_is_better: bool) -> float:
    """How far the move goes in the bad direction (percent; negative for improvements)."""
    if e.diff_pct is None:
        return 0.0
    return -e.diff_pct if higher_is_better else e.diff_pct


def classify(good_vs_probe: Evidence | None, probe_vs_bad: Evidence | None, *,
             higher_is_better: bool) -> str:
    """`skip` when either side has no result (failed build, no cell); else the probe is
    `bad` when the regression lies between the good end and it, `good` when between it and
    the bad end: a regressed verdict on one side only decides; otherwise the larger move in
    the bad direction does."""
    if good_vs_probe is None or probe_vs_bad is None \
            or good_vs_probe.diff_pct is None or probe_vs_bad.diff_pct is None:
        return SKIP
    left = good_vs_probe.verdict == "regressed"
    right = probe_vs_bad.verdict == "regressed"
    if left != right:
        return BAD if left else GOOD
    a, b = badness(good_vs_probe, higher_is_better), badness(probe_vs_bad, higher_is_better)
    return BAD if a > b else GOOD


def max_rounds(n: int) -> int:
    """Probes needed without skips for a range of n commits: ceil(log2(n))."""
    return max(0, (n - 1).bit_length())
