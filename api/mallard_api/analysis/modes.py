"""A cell whose trials fall into two speeds (``mallard_stats.modes``): judged within its
modes, or left UNKNOWN when the modes moved, and a report line that says which.

``within_modes`` takes one primary, timed cell's statistics before the verdict, its
values per side, its pairs (base and head trials of one round, index by index) and their
blocks (``pairs.Sides.blocks``: the same-mode pairs keep theirs, so the interval is
widened for the blocks as the cell's was); a
cell of another measure comes back as it was (peak RSS takes a few page counts, whose
steps a mixture fit would take for modes and call moved):

* neither side has two modes: the cell as it was;
* both sides share the modes (same count, upper-mode shares equal): the cell is judged
  again on the pairs whose two trials fell into the same mode of their own side
  (``paired.compare_paired``): a draw of modes is then no change, a shift of a mode is;
* the modes moved (one side has two, the other one; or the shares differ): no p-value,
  so ``stats.decide`` calls it UNKNOWN, and the line says ``modes moved``.

``line`` is the cell's report line: ``larson threads=1 ops_per_cpu_sec modes: base 62% at
28.1M, 38% at 21.4M; head 60% at 28.0M, 40% at 21.5M`` (``modes moved (why); ...`` first).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from mallard_stats.measures import is_timing
from mallard_stats.modes import ModeComparison, compare_modes, same_mode_rounds
from mallard_stats.paired import compare_paired
from mallard_stats.policy import Policy
from mallard_stats.stats import CellStats

_SI = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


@dataclass(frozen=True)
class Judged:
    """A cell's statistics after ``within_modes``; ``modes`` None when neither side has
    two (or the cell is not a primary timed one)."""

    cell: CellStats
    modes: ModeComparison | None = None


def si(v: float) -> str:
    """``28.1M``, ``3.74k``, ``0.412``: three significant digits and an SI prefix."""
    for scale, prefix in _SI:
        if abs(v) >= scale:
            return f"{v / scale:.3g}{prefix}"
    return f"{v:.3g}"


def within_modes(cell: CellStats, base: Sequence[float], head: Sequence[float],
                 pairs: tuple[Sequence[float | None], Sequence[float | None]],
                 policy: Policy, *, measure: str,
                 blocks: Sequence[int] | None = None) -> Judged:
    """``cell`` (of ``measure``) judged within its sides' modes (module doc)."""
    if not cell.primary or cell.deterministic or not is_timing(measure):
        return Judged(cell)
    cmp = compare_modes(base, head)
    if not cmp.multimodal:
        return Judged(cell)
    if cmp.moved:
        return Judged(replace(cell, p_value=None), cmp)
    kept = same_mode_rounds(cmp, *pairs)
    if len(kept) < policy.min_trials:
        return Judged(replace(cell, p_value=None), cmp)
    judged = compare_paired([pairs[0][i] for i in kept], [pairs[1][i] for i in kept],
                            higher_is_better=cell.higher_is_better, primary=True,
                            policy=policy,
                            blocks=None if blocks is None else [blocks[i] for i in kept])
    judged.min_effect_abs = cell.min_effect_abs
    return Judged(judged, cmp)


def line(name: str, measure: str, cmp: ModeComparison) -> str:
    """The report line of a cell whose sides have two modes (module doc)."""
    return f"{name} {measure} {cmp.text(si)}"
