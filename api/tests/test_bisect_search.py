"""The pure bisection search (mallard_api.bisect_search) on synthetic histories."""

from __future__ import annotations

import math
import random

import pytest
from mallard_api.analysis.bisect_search import (
    BAD,
    GOOD,
    SKIP,
    Evidence,
    Search,
    classify,
    max_rounds,
)


def run(n: int, culprit: int, broken: set[int]) -> tuple[Search, int, int]:
    """Bisect a history of n commits after the good one whose first bad commit is
    `culprit` (1..n) and whose `broken` commits fail to build; (search, probes, skips)."""
    s = Search(n)
    probes = skips = 0
    while (i := s.next_probe()) is not None:
        probes += 1
        assert probes <= n, "the search must end"
        if i in broken:
            s.record(i, SKIP)
            skips += 1
        else:
            s.record(i, BAD if i >= culprit else GOOD)
    return s, probes, skips


@pytest.mark.parametrize("n", range(2, 65))
def test_culprit_found_at_every_position_without_skips(n: int) -> None:
    for culprit in range(1, n + 1):
        s, probes, _ = run(n, culprit, set())
        assert s.culprit() == culprit
        assert probes <= math.ceil(math.log2(n)) + 2
        assert probes <= max_rounds(n)


@pytest.mark.parametrize("n", range(2, 65))
def test_culprit_found_around_failing_builds(n: int) -> None:
    rng = random.Random(n)
    for culprit in range(1, n + 1):
        # sprinkle broken builds: never the culprit itself, never the known ends
        pool = [i for i in range(1, n) if i != culprit]
        broken = set(rng.sample(pool, k=min(len(pool), max(1, n // 5)))) if pool else set()
        s, probes, skips = run(n, culprit, broken)
        if culprit - 1 in broken and culprit - 1 > 0:
            # the commit before the culprit never built: the culprit is one of the two
            # (and any broken run before it), as git bisect reports
            assert culprit in s.candidates()
            assert all(i in broken or i == culprit for i in s.candidates())
        else:
            assert s.culprit() == culprit, (n, culprit, sorted(broken), s.outcomes)
        assert probes - skips <= math.ceil(math.log2(n)) + 2


def test_only_skipped_commits_left_names_the_candidates() -> None:
    s, _, _ = run(4, 3, {1, 2})
    assert s.culprit() is None
    assert s.candidates() == [1, 2, 3]


def test_bad_input() -> None:
    with pytest.raises(ValueError):
        Search(0)
    s = Search(4)
    with pytest.raises(ValueError):
        s.record(4, GOOD)
    with pytest.raises(ValueError):
        s.record(2, "maybe")


def test_classify_from_both_ends() -> None:
    reg, same = Evidence(5.0, "regressed"), Evidence(0.1, "same")
    # lower is better (instructions): +5% between good and probe: the probe is bad
    assert classify(reg, same, higher_is_better=False) == BAD
    assert classify(same, reg, higher_is_better=False) == GOOD
    # ops/s: -30% between probe and bad end: the probe is good
    assert classify(Evidence(-1.0, "unknown"), Evidence(-30.0, "unknown"),
                    higher_is_better=True) == GOOD
    assert classify(Evidence(-30.0, "unknown"), Evidence(-1.0, "unknown"),
                    higher_is_better=True) == BAD
    # a side without a result (build failed): skip
    assert classify(None, same, higher_is_better=True) == SKIP
    assert classify(reg, Evidence(None, None), higher_is_better=True) == SKIP
