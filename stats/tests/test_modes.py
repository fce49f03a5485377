"""Mode detection on synthetic mixtures: one mode, two modes, one of two modes shifted,
shares that moved."""

from __future__ import annotations

import numpy as np
import pytest
from mallard_stats.modes import MIN_N, compare_modes, find_modes, same_mode_rounds


def mixture(rng: np.random.Generator, n: int, share_fast: float, fast: float = 28.1e6,
            slow: float = 21.4e6, cv: float = 0.02) -> np.ndarray:
    k = round(n * share_fast)
    values = np.r_[fast * np.exp(rng.normal(0, cv, k)), slow * np.exp(rng.normal(0, cv, n - k))]
    rng.shuffle(values)
    return values


@pytest.mark.parametrize("seed", range(20))
def test_one_mode_is_one_mode(seed):
    rng = np.random.default_rng(seed)
    for cv in (0.01, 0.05, 0.15):
        m = find_modes(25e6 * np.exp(rng.normal(0, cv, 40)))
        assert not m.multimodal and m.modes[0].share == 1.0
        assert m.modes[0].location == pytest.approx(25e6, rel=3 * cv)


def test_a_heavy_tail_is_not_a_second_mode():
    rng = np.random.default_rng(5)
    values = 25e6 * np.exp(rng.standard_t(3, 60) * 0.03)
    assert not find_modes(values).multimodal


@pytest.mark.parametrize("seed", range(20))
def test_two_modes_are_found_with_their_shares_and_locations(seed):
    rng = np.random.default_rng(seed)
    m = find_modes(mixture(rng, 40, 0.62))
    assert m.multimodal and m.separation >= 2.5
    slow, fast = m.modes
    assert fast.share == pytest.approx(0.62, abs=0.03) and slow.n + fast.n == 40
    assert fast.location == pytest.approx(28.1e6, rel=0.02)
    assert slow.location == pytest.approx(21.4e6, rel=0.02)
    assert m.cut is not None and 21.4e6 < m.cut < 28.1e6
    assert m.text(lambda v: "x").startswith("62% at x, 38% at x")  # the larger share first


# larson's head side at 1 thread in a demo (ops per CPU second, millions): 29 trials at
# ~19M, 38 at ~30M; the sample's largest gap is the one above the two lowest values
LARSON_HEAD = [14.1, 15.0, 17.0, 17.5, 17.5, 17.6, 17.7, 17.7, 17.9, 18.0, 18.3, 18.5, 18.6,
               18.7, 18.7, 18.8, 18.9, 18.9, 18.9, 19.4, 19.6, 19.7, 19.8, 20.3, 20.5, 21.7,
               22.3, 23.8, 24.3, 26.3, 26.7, 27.1, 27.6, 27.6, 27.6, 28.2, 28.4, 28.7, 29.1,
               29.1, 29.3, 29.5, 30.0, 30.0, 30.0, 30.0, 30.1, 30.1, 30.6, 30.6, 30.6, 30.7,
               30.8, 30.8, 31.1, 31.1, 31.1, 31.1, 31.3, 31.5, 31.5, 31.6, 31.6, 31.8, 32.1,
               32.1, 32.3]


def test_two_modes_with_stragglers_below_are_two_modes():
    """EM started at the largest gap alone (two stragglers against the rest) folded both
    modes into one, and the cell read `modes moved (only base has two modes)`; started also
    at the largest gap that leaves a mode's minimum on each side, it finds both."""
    rng = np.random.default_rng(0)
    values = [v * 1e6 for v in LARSON_HEAD]
    rng.shuffle(values)
    m = find_modes(values)
    assert m.multimodal and [mode.n for mode in m.modes] == [29, 38]
    assert m.modes[1].location == pytest.approx(30.35e6, rel=0.01)


def test_too_few_values_or_too_small_a_minority_is_one_mode():
    rng = np.random.default_rng(1)
    assert not find_modes(mixture(rng, MIN_N - 1, 0.5)).multimodal
    assert not find_modes(mixture(rng, 40, 0.05)).multimodal  # 2 of 40: outliers, not a mode
    assert not find_modes(mixture(rng, 40, 0.5, fast=22e6, slow=21.4e6)).multimodal  # overlap


@pytest.mark.parametrize("seed", range(20))
def test_a_shift_of_one_mode_keeps_the_modes_shared_and_shows_in_the_pairs(seed):
    rng = np.random.default_rng(seed)
    base = mixture(rng, 40, 0.6)
    head = base * np.where(base > 25e6, 0.95, 1.0) * np.exp(rng.normal(0, 0.005, 40))
    cmp = compare_modes(base, head)
    assert cmp.multimodal and not cmp.moved
    assert cmp.head.modes[1].location / cmp.base.modes[1].location == pytest.approx(0.95,
                                                                                   abs=0.01)
    assert cmp.head.modes[0].location / cmp.base.modes[0].location == pytest.approx(1.0,
                                                                                   abs=0.01)
    # every round's two trials fell into the same mode
    assert len(same_mode_rounds(cmp, list(base), list(head))) == 40


@pytest.mark.parametrize("seed", range(10))
def test_shares_that_move_are_modes_moved(seed):
    rng = np.random.default_rng(seed)
    cmp = compare_modes(mixture(rng, 40, 0.7), mixture(rng, 40, 0.2))
    assert cmp.moved and "share" in cmp.why
    assert cmp.text().startswith("modes moved (upper-mode share 70% -> 20%")
    one_sided = compare_modes(25e6 * np.exp(rng.normal(0, 0.01, 40)), mixture(rng, 40, 0.5))
    assert one_sided.moved and one_sided.why == "only head has two modes"


def test_pairs_in_different_modes_are_left_out():
    rng = np.random.default_rng(3)
    base = mixture(rng, 40, 0.5)
    head = base.copy()
    head[:5] = np.where(base[:5] > 25e6, 21.4e6, 28.1e6)  # 5 rounds drew the other mode
    cmp = compare_modes(base, head)
    assert not cmp.moved
    assert same_mode_rounds(cmp, list(base), list(head)) == list(range(5, 40))
