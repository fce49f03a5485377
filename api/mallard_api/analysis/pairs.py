"""A comparison cell's trials by round, and the statistic it is judged with.

A job's runner runs its rounds in blocks (runner executor ``round_order``): in round
``seq`` of job ``j`` a case's base and head trials run back to back, in a seeded random
order. The two trials of one (job, seq) are a *pair*: a drift of the machine slower than a
block moves both alike, and their log ratio cancels it. A cell is judged on its pairs
(``paired.compare_paired``: the median of the rounds' ratios, its bootstrap interval, a
one-sample t-test) wherever it has at least ``MIN_PAIRS`` of them; the two-sample form
(``stats.compare_samples``) only where it has not (a side whose trials failed in every
round, trials of another runner's order) and for deterministic measures (cachegrind's
counts, rule D3, which need no pairing: they repeat). A round that lost a side is left
out of the pairs. The cell's record says which (``paired``), and its line "paired, N pairs".

Each pair also carries its *block*: its job and ``seq // BLOCK_ROUNDS``, rounds run within
about a minute of each other; ``compare_paired`` widens a cell's interval when its blocks'
ratios differ by more than its rounds' do (``block_effect``). And each cell knows its
*look*: how many comparison rounds (the first job, then follow-ups) added trials to it,
less one; ``spending.at_look`` gives the alpha of that look (``comparisons.py``).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from mallard_stats import stats
from mallard_stats.paired import compare_paired
from mallard_stats.policy import Policy

from mallard_api.params import params_key
from mallard_api.sql.comparisons import TrialRow

MIN_PAIRS = 2  # the fewest pairs judged as pairs (fewer: the two-sample form)
BLOCK_ROUNDS = 5  # consecutive rounds of one job that make a block (module doc)
Key = tuple[str, str, str]  # workload, params key, measure
Round = tuple[int, int]  # job id, seq: the block base and head ran in


@dataclass
class Sides:
    """One cell's base and head values, each by the round it ran in."""

    base: dict[Round, float] = field(default_factory=dict)
    head: dict[Round, float] = field(default_factory=dict)
    loose: int = 0  # a value with no round of its own (no job, or its round taken)
    looks: set[int] = field(default_factory=set)  # the comparison rounds its values came from

    def add(self, label: str, rnd: Round | None, value: float, look: int = 0) -> None:
        side = self.base if label == "base" else self.head
        if rnd is None or rnd in side:
            self.loose -= 1  # a key no job's round has: never a pair
            rnd = (self.loose, 0)
        side[rnd] = value
        self.looks.add(look)

    def look(self) -> int:
        """This cell's look (0-based): the comparison rounds that added to it, less one."""
        return max(0, len(self.looks) - 1)

    def values(self, label: str) -> list[float]:
        side = self.base if label == "base" else self.head
        return [side[r] for r in sorted(side)]

    def pairs(self) -> tuple[list[float], list[float]]:
        """Base and head of every round that has both, in the order they ran."""
        rounds = self._paired_rounds()
        return [self.base[r] for r in rounds], [self.head[r] for r in rounds]

    def blocks(self) -> list[int]:
        """The block of every pair of ``pairs`` (module doc), numbered from 0."""
        keys = [(job, seq // BLOCK_ROUNDS) for job, seq in self._paired_rounds()]
        number = {k: i for i, k in enumerate(dict.fromkeys(keys))}
        return [number[k] for k in keys]

    def _paired_rounds(self) -> list[Round]:
        return sorted(set(self.base) & set(self.head))


def by_round(rows: Iterable[TrialRow]) -> dict[Key, Sides]:
    """Every base and head value per cell key, by (job, seq)."""
    out: dict[Key, Sides] = defaultdict(Sides)
    for r in rows:
        if r.label not in ("base", "head"):
            continue
        pk = params_key(r.params)
        rnd = None if r.job_id is None or r.seq is None else (r.job_id, r.seq)
        for m, v in r.measures.items():
            if math.isfinite(v):
                out[(r.workload, pk, m)].add(r.label, rnd, float(v), r.look)
    return out


def judge(sides: Sides, *, higher_is_better: bool, deterministic: bool, primary: bool,
          policy: Policy, min_effect_abs: float | None = None) -> stats.CellStats:
    """The cell's statistics before the adjustment and verdict: on its pairs where it has
    ``MIN_PAIRS`` and is not deterministic, else the two samples (module doc)."""
    base, head = sides.pairs()
    if not deterministic and len(base) >= MIN_PAIRS:
        out = compare_paired(base, head, higher_is_better=higher_is_better, primary=primary,
                             policy=policy, blocks=sides.blocks())
        out.min_effect_abs = min_effect_abs
        return out
    return stats.compare_samples(sides.values("base"), sides.values("head"),
                                 higher_is_better=higher_is_better,
                                 deterministic=deterministic, primary=primary, policy=policy,
                                 min_effect_abs=min_effect_abs)
