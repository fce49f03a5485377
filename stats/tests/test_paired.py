"""Paired by round: a drift common to both sides of a round cancels, and the cell is
judged by the same rule as an unpaired one."""

import math
from dataclasses import replace

import numpy as np
import pytest
from mallard_stats.paired import compare_paired, trimmed_mean
from mallard_stats.policy import Policy
from mallard_stats.stats import adjust_and_decide, compare_samples
from scipy import stats as sps  # type: ignore[import-untyped]
from scipy.stats import mstats  # type: ignore[import-untyped]
from scipy.stats import norm as sps_norm  # type: ignore[import-untyped]

POLICY = Policy(n_resamples=2000)


def drifting(rounds: int, effect: float, seed: int) -> tuple[list[float], list[float]]:
    """A machine whose speed wanders by ~6% from round to round, the head
    ``effect`` faster than the base in every round, with 0.3% noise of its own."""
    rng = np.random.default_rng(seed)
    level = 1000.0 * (1.0 + 0.06 * rng.standard_normal(rounds))
    base = level * (1.0 + 0.003 * rng.standard_normal(rounds))
    head = level * (1.0 + effect) * (1.0 + 0.003 * rng.standard_normal(rounds))
    return list(base), list(head)


def judged(cell):
    return adjust_and_decide([cell], POLICY)[0]


def test_drift_cancels_where_unpaired_cannot_tell():
    base, head = drifting(15, 0.02, seed=1)
    paired = judged(compare_paired(base, head, policy=POLICY))
    unpaired = judged(compare_samples(base, head, policy=POLICY))
    assert paired.verdict == "improved"
    assert paired.ratio == pytest.approx(1.02, abs=0.003)
    assert paired.ci_low_pct > 1.0 and paired.ci_high_pct < 3.0
    assert unpaired.verdict == "unknown"  # the drift swamps 2% without the pairing
    slower = judged(compare_paired(head, base, policy=POLICY))
    assert slower.verdict == "regressed"


def test_a_tie_under_drift_is_same():
    base, head = drifting(15, 0.0, seed=2)
    cell = judged(compare_paired(base, head, policy=POLICY))
    assert cell.verdict == "same"
    assert -1.0 < cell.ci_low_pct <= cell.ci_high_pct < 1.0
    assert cell.p_value is not None and cell.p_value > 0.05


def test_rounds_missing_a_side_are_left_out_and_outlier_rounds_marked():
    base, head = drifting(12, 0.02, seed=3)
    base[0] = None
    head[1] = math.nan
    head[2] = 0.0  # a failed trial's throughput
    head[3] = base[3] * 1.5  # one preempted base trial's round: its ratio is an outlier
    cell = compare_paired(base, head, policy=POLICY)
    assert (cell.n_base, cell.n_head) == (9, 9)
    assert cell.robust_base == cell.robust_head == 8
    assert cell.ratio == pytest.approx(1.02, abs=0.004)


def test_equal_rounds_and_too_few():
    same = compare_paired([5.0, 6.0, 7.0], [5.0, 6.0, 7.0], policy=POLICY)
    assert (same.ratio, same.ci_low_pct, same.ci_high_pct, same.p_value) == (1.0, 0.0, 0.0, 1.0)
    one = compare_paired([5.0], [6.0], policy=POLICY)
    assert one.ratio == pytest.approx(1.2) and one.ci_low_pct is None and one.p_value is None
    assert judged(one).verdict == "unknown"
    with pytest.raises(ValueError, match="differ in length"):
        compare_paired([1.0, 2.0], [1.0], policy=POLICY)


def test_lower_is_better_and_mde():
    base, head = drifting(15, -0.02, seed=4)  # head's times 2% lower: better
    cell = judged(compare_paired(base, head, higher_is_better=False, policy=POLICY))
    assert cell.verdict == "improved"
    # the MDE follows the rounds' ratio scatter (~0.4%), not the machine's 6% drift
    assert cell.mde_pct is not None and cell.mde_pct < 2.0


def walking(rounds: int, effect: float, cv: float, rng: np.random.Generator
            ) -> tuple[list[float], list[float]]:
    """A machine whose speed walks at random by ~6% a round (a drift that never comes
    back), each side with noise ``cv`` of its own, the head ``effect`` faster."""
    level = 1000.0 * np.exp(np.cumsum(0.06 * rng.standard_normal(rounds)))
    base = level * (1.0 + cv * rng.standard_normal(rounds))
    head = level * (1.0 + effect) * (1.0 + cv * rng.standard_normal(rounds))
    return list(base), list(head)


@pytest.mark.parametrize(("rounds", "cv"), [(10, 0.01), (20, 0.02), (40, 0.01)])
def test_the_interval_covers_the_true_ratio_95_percent_under_drift(rounds, cv):
    """By simulation: the paired interval holds the true ratio (+3%) in about 95% of runs
    while the machine drifts (measured 92-94% at these sizes over 2,000 runs: the outlier
    rule's trimming of normal ratios narrows the t interval a little)."""
    rng = np.random.default_rng(rounds)
    sims = 400
    held = 0
    for _ in range(sims):
        base, head = walking(rounds, 0.03, cv, rng)
        c = compare_paired(base, head, policy=POLICY)
        assert c.ci_low_pct is not None and c.ci_high_pct is not None
        held += c.ci_low_pct <= 3.0 <= c.ci_high_pct
    assert 0.91 <= held / sims <= 0.98


def detected(rounds: int, cv: float, effect_pct: float, sims: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(sims):
        base, head = walking(rounds, effect_pct / 100.0, cv, rng)
        hits += judged(compare_paired(base, head, policy=POLICY)).verdict == "improved"
    return hits / sims


@pytest.mark.parametrize(("rounds", "cv"), [(10, 0.01), (20, 0.02)])
def test_the_paired_mde_is_within_20_percent_of_what_is_detected_80_percent(rounds, cv):
    """By simulation under drift: the MDE of rounds whose ratios scatter exactly as the
    simulated ones do (their normal quantiles, as test_power does for two samples) is
    within 20% of the effect the rule detects 80% of the time: 0.8 x MDE is detected less
    often than 80%, 1.2 x MDE more often; the drift does not enter it."""
    q = sps_norm.ppf((np.arange(rounds) + 0.5) / rounds)
    level = 1000.0 * np.exp(np.cumsum(0.06 * np.random.default_rng(1).standard_normal(rounds)))
    cell = compare_paired(list(level), list(level * (1.0 + math.sqrt(2.0) * cv * q)),
                          policy=POLICY)
    assert cell.noise_pct == pytest.approx(100 * cv, rel=0.1)  # the pairs', not the drift's
    mde = cell.mde_pct
    assert mde is not None
    below = detected(rounds, cv, 0.8 * mde, sims=300, seed=rounds)
    above = detected(rounds, cv, 1.2 * mde, sims=300, seed=rounds + 1)
    assert below < 0.8 < above, (mde, below, above)


def blocky(blocks: int, per: int, effect: float, between: float, within: float,
           rng: np.random.Generator) -> tuple[list[float], list[float], list[int]]:
    """Rounds in ``blocks`` blocks of ``per``: the head's ratio to the base is ``effect``
    moved by a block's own offset (scatter ``between``: a neighbour of that minute slows
    one side more) and each round's own noise (``within``)."""
    offsets = np.repeat(between * rng.standard_normal(blocks), per)
    n = blocks * per
    level = 1000.0 * (1.0 + 0.05 * rng.standard_normal(n))
    base = level
    head = level * (1.0 + effect) * np.exp(offsets + within * rng.standard_normal(n))
    return list(base), list(head), list(np.repeat(np.arange(blocks), per))


@pytest.mark.parametrize(("blocks", "per"), [(4, 5), (8, 5)])
def test_blocks_that_differ_widen_the_interval_to_cover_the_true_ratio(blocks, per):
    """By simulation: when the ratio itself moves from block to block (offsets of 1%, a
    round's own noise 0.5%), the pairs alone cover the true ratio in under 80% of runs
    (measured 68-73%); counted with their blocks, in 89% (short of 95%: the design effect
    is estimated from 4-8 blocks)."""
    rng = np.random.default_rng(blocks)
    sims, plain, counted = 300, 0, 0
    for _ in range(sims):
        base, head, labels = blocky(blocks, per, 0.03, 0.01, 0.005, rng)
        for use, hit in ((None, "plain"), (labels, "counted")):
            c = compare_paired(base, head, policy=POLICY, blocks=use)
            assert c.ci_low_pct is not None and c.ci_high_pct is not None
            held = c.ci_low_pct <= 3.0 <= c.ci_high_pct
            plain += held and hit == "plain"
            counted += held and hit == "counted"
    assert plain / sims < 0.80, plain / sims
    assert counted / sims >= 0.86, counted / sims


def test_blocks_that_agree_cost_little():
    """Steady pairs in blocks: the F-test rarely sees blocks (measured: 10% of cells get
    a design effect above 1), and the interval's coverage stays about 95% (93%)."""
    rng = np.random.default_rng(7)
    sims, widened, held = 300, 0, 0
    for _ in range(sims):
        base, head, labels = blocky(6, 5, 0.03, 0.0, 0.01, rng)
        c = compare_paired(base, head, policy=POLICY, blocks=labels)
        assert c.ci_low_pct is not None and c.ci_high_pct is not None
        widened += c.block_effect > 1.0
        held += c.ci_low_pct <= 3.0 <= c.ci_high_pct
    assert widened / sims <= 0.15, widened / sims
    assert held / sims >= 0.92, held / sims


def test_one_block_or_none_is_the_plain_pairs():
    base, head = drifting(12, 0.02, seed=3)
    plain = compare_paired(base, head, policy=POLICY)
    one = compare_paired(base, head, policy=POLICY, blocks=[0] * 12)
    assert one.block_effect == plain.block_effect == 1.0
    assert (one.ci_low_pct, one.ci_high_pct, one.p_value) == (
        plain.ci_low_pct, plain.ci_high_pct, plain.p_value)


def test_the_trimmed_mean_is_yuens():
    """10% trimmed from each end, Yuen's standard error from the winsorized values; under
    10 values nothing is trimmed and the test is the plain one-sample t-test."""
    x = np.random.default_rng(5).standard_t(3, 37)
    t = trimmed_mean(x)
    assert t.mean == pytest.approx(float(sps.trim_mean(x, 0.1)))
    w = np.asarray(mstats.winsorize(x, limits=(3 / 37, 3 / 37)))  # g = 3 of 37
    assert t.se == pytest.approx(float(np.std(w, ddof=1)) * math.sqrt(36 / (31 * 30)))
    assert t.df == 30
    few = x[:9]
    plain = trimmed_mean(few)
    assert plain.mean == pytest.approx(float(np.mean(few)))
    assert plain.p_value() == pytest.approx(float(sps.ttest_1samp(few, 0.0).pvalue))
    wider = trimmed_mean(x, effect=2.0)
    assert wider.se == pytest.approx(t.se * math.sqrt(2.0)) and wider.df == 31 / 2 - 1


def spread_of(draw, sims: int = 400, rounds: int = 40) -> tuple[float, float, float]:
    """How far the paired change (percent) scatters over ``sims`` cells of ``rounds``
    log ratios drawn by ``draw``, beside the median's and the plain mean's."""
    rng = np.random.default_rng(11)
    ours, medians, means = [], [], []
    for _ in range(sims):
        logs = draw(rng, rounds)
        c = compare_paired([1000.0] * rounds, list(1000.0 * np.exp(logs)), policy=POLICY)
        assert c.diff_pct is not None
        ours.append(c.diff_pct)
        medians.append(100 * float(np.median(logs)))
        means.append(100 * float(np.mean(logs)))
    return float(np.std(ours)), float(np.std(medians)), float(np.std(means))


@pytest.mark.parametrize("shape", ["flat", "heavy"])
def test_the_change_scatters_as_little_as_the_better_of_median_and_mean(shape):
    """By simulation: broad, flat ratios (uniform +-10%, as fragmentation's) make the
    median wander, heavy tails (t with 3 degrees of freedom) the mean; the trimmed mean of
    the robust ratios scatters less than the worse of the two and at most 25% more than
    the better (measured: flat 1.16x the mean's and 0.69x the median's, heavy 0.75x the
    mean's and 0.97x the median's)."""
    def flat(rng, n):
        return rng.uniform(-0.1, 0.1, n)

    def heavy(rng, n):
        return 0.01 * rng.standard_t(3, n)

    ours, median, mean = spread_of(flat if shape == "flat" else heavy)
    assert ours < max(median, mean) and ours <= 1.25 * min(median, mean), (ours, median, mean)


def same_share(true_pct: float, sims: int = 300) -> float:
    """The share of paired cells (200 rounds, log ratios scattered by 6%, as
    fragmentation's at one thread) that the rule calls same at a true change."""
    policy = replace(POLICY, alpha=0.0072, n_resamples=200)  # the level of a late look
    rng = np.random.default_rng(17)
    same = 0
    for _ in range(sims):
        logs = math.log1p(true_pct / 100.0) + 0.06 * rng.standard_normal(200)
        c = compare_paired([1000.0] * 200, list(1000.0 * np.exp(logs)), policy=policy)
        same += adjust_and_decide([c], policy)[0].verdict == "same"
    return same / sims


def test_a_change_as_big_as_the_band_is_rarely_called_same():
    """Rule 4's standard error on top of the change: a true -1% against the +-1% band is
    called same in about one run in six (measured 16%; under ``|diff| < m`` it was 37%,
    and flipped against its 35% of regressed runs), a true 0 still in four of five (81%)."""
    assert same_share(-1.0) <= 0.22
    assert same_share(0.0) >= 0.75
