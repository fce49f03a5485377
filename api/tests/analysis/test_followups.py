"""Follow-ups sized to settle the unknown cells, closest first, within the time budget
(followups.py), and a comparison that stops when the budget is spent, its unknowns printed
with the MDE reached."""

import math

import numpy as np
import pytest
from comparison_data import SHA_BASE, SHA_HEAD, comparison_trials, post_results
from helpers import claim_job as claim
from helpers import patch_analysis_settings, run_analysis
from mallard_api.analysis import followups, modes, pairs
from mallard_api.analysis.cells import CellRow
from mallard_api.params import params_key
from mallard_api.sql.comparisons import TrialRow
from mallard_stats import power, stats
from mallard_stats.policy import DEFAULT_POLICY
from scipy.stats import norm as sps_norm

POLICY = DEFAULT_POLICY


def rows(n, cv_pct, *, workload="larson", threads=1, wall=0.5, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        for label in ("base", "head"):
            out.append(TrialRow(label, "mallard", "", workload, {"threads": threads}, threads,
                                "fp", None, {"ops_per_sec": 1e6 * (1 + cv_pct / 100 *
                                                                    rng.standard_normal()),
                                             "wall_seconds": wall}))
    return out


def unknown(workload="larson", threads=1, measure="ops_per_sec", mde=9.0, diff=0.0, hw=5.0):
    return CellRow(workload=workload, threads=threads, params={"threads": threads},
                   measure=measure, verdict="unknown", mde_pct=mde, n_base=5, n_head=5,
                   robust_base=5, robust_head=5, base_median=1.0, head_median=1.0, ratio=1.0,
                   diff_pct=diff, ci_low_pct=diff - hw, ci_high_pct=diff + hw, p_value=0.5,
                   line="")


def noise_of(trial_rows):
    """The noise the cell is judged with: rows without a round are two samples."""
    b = [r.measures["ops_per_sec"] for r in trial_rows if r.label == "base"]
    h = [r.measures["ops_per_sec"] for r in trial_rows if r.label == "head"]
    return stats.compare_samples(b, h).noise_pct


def test_plan_asks_for_the_fewest_trials_that_settle_the_cell():
    trial_rows = rows(5, 10.0)
    plan = followups.plan([unknown()], trial_rows, step=5, warmup=1, budget_left=1e6,
                          policy=POLICY)
    target = power.trials_for_mde(noise_of(trial_rows), policy=POLICY)
    assert target is not None and target > 10
    # rule 4 (interval +-5% down to +-3%, at least 10 trials) beats rule 2 (down to +-1%)
    # and the target MDE; times the safety factor
    settle = min(max(5 * (5 / 3) ** 2, POLICY.settle_trials), 5 * (5 / 1) ** 2, target)
    needed = math.ceil(settle * followups.SAFETY)
    assert [(g.workload, g.threads, g.trials) for g in plan.groups] == [("larson", 1, needed - 5)]
    assert plan.seconds == pytest.approx((needed - 5 + 1) * 2 * 0.5)
    assert plan.note is None


def test_a_calibrated_band_and_a_real_change_size_the_plan():
    trial_rows = rows(5, 10.0)
    key = ("larson", params_key({"threads": 1}), "ops_per_sec")
    wide = followups.plan([unknown()], trial_rows, step=5, warmup=0, budget_left=1e6,
                          policy=POLICY, bands={key: 4.0})
    # +-5% into a +-4% band: 5 x (5/4)^2 = 7.8 trials, x1.25 = 10, i.e. 5 more
    assert [g.trials for g in wide.groups] == [5]
    # a +2.5% change: the trials whose MDE is 2.5% (fewer than for the 2% target)
    moved = followups.plan([unknown(diff=2.5, hw=3.0)], trial_rows, step=5, warmup=0,
                           budget_left=1e6, policy=POLICY)
    sig = power.trials_for_mde(noise_of(trial_rows), 2.5, policy=POLICY)
    target = power.trials_for_mde(noise_of(trial_rows), policy=POLICY)
    assert sig is not None and target is not None and 5 < sig < target
    assert [g.trials for g in moved.groups] == [math.ceil(sig * followups.SAFETY) - 5]


def test_plan_takes_the_cells_closest_to_settling_first_or_stops(monkeypatch):
    monkeypatch.setattr(followups, "GROWTH", 10**6)  # each need in one round (the order)
    trial_rows = rows(10, 10.0) + rows(10, 10.0, workload="rpc", seed=2)
    near, far = unknown(hw=3.5), unknown("rpc", hw=9.0)
    full = followups.plan([far, near], trial_rows, step=5, warmup=1, budget_left=1e6,
                          policy=POLICY)
    assert [g.workload for g in full.groups] == ["larson", "rpc"] and full.note is None
    cheap = next(g for g in full.groups if g.workload == "larson")
    dear = next(g for g in full.groups if g.workload == "rpc")
    assert cheap.seconds < dear.seconds
    # each fits the budget alone, not both: the closest first, the other left for the note
    cut = followups.plan([far, near], trial_rows, step=5, warmup=1,
                         budget_left=dear.seconds + 0.1, policy=POLICY)
    assert [(g.workload, g.trials) for g in cut.groups] == [("larson", cheap.trials)]
    assert cut.note.startswith("follow-ups cut to the time budget") and not cut.hopeless
    # the dearer one out of reach of the whole budget: settled at once, not cut
    alone = followups.plan([far, near], trial_rows, step=5, warmup=1,
                           budget_left=cheap.seconds + 0.1, policy=POLICY)
    assert [g.workload for g in alone.groups] == ["larson"]
    assert [w.cell.workload for w in alone.hopeless] == ["rpc"]
    none = followups.plan([far, near], trial_rows, step=5, warmup=1, budget_left=3.0,
                          policy=POLICY)
    assert none.groups == [] and none.note.startswith("2 unknown cells settled at once")


def test_a_cell_at_the_edge_and_a_deterministic_cell_get_a_step():
    trial_rows = rows(40, 0.2)  # MDE far below the target already
    plan = followups.plan([unknown(), unknown(measure="instructions", threads=2)], trial_rows,
                          step=5, warmup=0, budget_left=1e6, policy=POLICY)
    assert [(g.threads, g.trials) for g in plan.groups] == [(1, 5), (2, 5)]


def test_mde_reached_names_the_range_and_the_target():
    assert followups.mde_reached([unknown(mde=2.44), unknown(mde=9.1)], 2.0) == (
        "2 unknown primary cells reached mde 2.4-9.1% (target 2.0%)")
    assert followups.mde_reached([unknown(mde=None)], 2.0) == (
        "1 unknown primary cell reached mde n/a (target 2.0%)")


@pytest.fixture
def no_budget(monkeypatch, settings):
    s = settings.model_copy(update={"stats_bootstrap_resamples": 2000,
                                    "comparison_follow_up_budget_seconds": 1.0})
    patch_analysis_settings(monkeypatch, s)
    return s


def test_comparison_stops_when_the_budget_is_spent(client, user_headers, make_project,
                                                   make_runner, no_budget):
    project = make_project()
    runner, rheaders = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": project["name"], "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "workloads": ["larson"], "threads": [1], "trials": 5, "arch": runner["arch"]})
    cid = r.json()["id"]
    job = claim(client, rheaders, runner)
    post_results(client, rheaders, runner, project["name"], job["id"],
                 comparison_trials(5, seed=3, shifts={1: 1.0}, noise=0.05))
    run_analysis(client.app)
    d = client.get(f"/api/v1/comparisons/{cid}", headers=user_headers).json()
    assert d["state"] == "done" and d["follow_ups"] == 0, d["report"]
    assert "1 unknown cell settled at once" in d["note"]
    assert "1 unknown primary cell reached mde" in d["note"] and "(target 2.0%)" in d["note"]
    line = next(c["line"] for c in d["cells"] if c["measure"] == "ops_per_sec")
    assert "UNKNOWN (would need " in line and "trials a side" in line and "mde " in line


def paired_rows(ratios, *, drift=0.1, wall=0.5, job=7, seed=1):
    """A runner's blocks: round i's base and head share (job, seq), the machine drifting
    by ``drift`` between rounds (cancelled in the pair), head/base = ``ratios[i]``."""
    rng = np.random.default_rng(seed)
    out = []
    for i, ratio in enumerate(ratios):
        level = 1e6 * (1 + drift * rng.standard_normal())
        for label, v in (("base", level), ("head", level * ratio)):
            out.append(TrialRow(label, "mallard", "", "larson", {"threads": 1}, 1, "fp", None,
                                {"ops_per_sec": v, "wall_seconds": wall}, job_id=job, seq=i))
    return out


def scattered(n, change_pct, cv_pct, seed=0):
    """n ratios around 1 + change whose scatter is exactly cv (normal quantiles, shuffled)."""
    q = sps_norm.ppf((np.arange(n) + 0.5) / n)
    np.random.default_rng(seed).shuffle(q)
    return list((1 + change_pct / 100) * (1 + cv_pct / 100 * q))


def judged_cell(trial_rows):
    """The cell as the comparison judges it (pairs.judge, the verdict rule)."""
    sides = pairs.by_round(trial_rows)[("larson", params_key({"threads": 1}), "ops_per_sec")]
    s = stats.adjust_and_decide([pairs.judge(sides, higher_is_better=True,
                                             deterministic=False, primary=True,
                                             policy=POLICY)], POLICY)[0]
    return CellRow.of(s, workload="larson", params={"threads": 1}, threads=1,
                      measure="ops_per_sec", line=""), s


def test_a_hopeless_cell_is_settled_at_once_with_what_it_would_take():
    """Pairs that scatter by 12% around no change at 10 rounds: SAME or the 2% target need
    hundreds of pairs, more than a 60 s budget buys at 1 s a pair: no trials at all, the
    cell's need named."""
    trial_rows = paired_rows(scattered(10, 0.0, 12.0))
    cell, _ = judged_cell(trial_rows)
    assert cell.paired and cell.verdict == "unknown"
    plan = followups.plan([cell], trial_rows, step=5, warmup=1, budget_left=60.0,
                          policy=POLICY)
    assert plan.groups == [] and [w.cell for w in plan.hopeless] == [cell]
    [need] = plan.hopeless
    assert need.trials > 60 and need.seconds > 60.0
    assert need.text().startswith("would need mde 2.0%: about ")
    assert plan.note.startswith("1 unknown cell settled at once, out of reach of the budget "
                                "(60 s left) or of the trial cap: larson threads=1 "
                                "ops_per_sec would need mde 2.0%")
    # with the budget it needs, the same cell gets its trials, at most 4x what it has in a
    # round (its need is an estimate from 10 pairs): 30 more now, the rest planned again
    rich = followups.plan([cell], trial_rows, step=5, warmup=1,
                          budget_left=need.seconds + 10, policy=POLICY)
    assert not rich.hopeless and need.extra > 30 and rich.groups[0].trials == 30


def test_a_cell_near_its_target_gets_the_pairs_it_needs():
    """A +1.5% change in pairs scattered by 2.8% (noise 2%) at 10 rounds, the drift of 10%
    between rounds cancelled: unknown; the plan asks for the pairs the paired MDE needs
    (the 2% target, fewer than an MDE of 1.5%), times the safety factor, at the measured
    cost of a pair."""
    trial_rows = paired_rows(scattered(10, 1.5, 2.83), wall=0.8)
    cell, s = judged_cell(trial_rows)
    assert cell.paired and cell.verdict == "unknown" and cell.mde_pct > 2.0
    assert s.noise_pct == pytest.approx(2.0, rel=0.15)
    target = power.trials_for_mde(s.noise_pct, policy=POLICY, paired=True)
    sig = power.trials_for_mde(s.noise_pct, abs(cell.diff_pct), policy=POLICY, paired=True)
    assert target is not None and sig is not None and 10 < target < sig
    plan = followups.plan([cell], trial_rows, step=5, warmup=1, budget_left=1e4,
                          policy=POLICY)
    assert not plan.hopeless and plan.note is None
    [g] = plan.groups
    assert g.trials == math.ceil(target * followups.SAFETY) - 10
    assert g.seconds == pytest.approx((g.trials + 1) * 2 * 0.8)


def test_a_noise_that_grows_with_the_rounds_slows_the_fall_of_the_mde(monkeypatch):
    """Rounds whose first half scattered a quarter as much as the second (a drift the
    pairs do not cancel): the halves say the MDE falls slower than 1/sqrt(n), and the plan
    asks for more pairs than the 1/sqrt(n) estimate; a steady scatter gives none of it."""
    steady = paired_rows(scattered(24, 0.0, 8.0))
    calm = [1 + (r - 1) * 0.4 for r in scattered(12, 0.0, 16.0, seed=1)]
    growing = paired_rows(calm + [1 + (r - 1) * 1.6 for r in scattered(12, 0.0, 16.0, seed=2)])
    key = ("larson", params_key({"threads": 1}), "ops_per_sec")
    betas = [followups.falling(pairs.by_round(r)[key], judged_cell(r)[1], POLICY)
             for r in (steady, growing)]
    assert betas[0] < 0.1 and betas[1] > 0.3

    def planned(r):
        return followups.plan([judged_cell(r)[0]], r, step=5, warmup=0, budget_left=1e6,
                              policy=POLICY)

    # the steady cell gets its pairs; the growing one would need more than the trial cap:
    # settled at once (the case of a cell that took 103 trials and never fell)
    steady_plan, growing_plan = planned(steady), planned(growing)
    assert steady_plan.groups[0].trials > 5 and not steady_plan.hopeless
    assert growing_plan.groups == [] and growing_plan.hopeless[0].trials > POLICY.max_trials
    monkeypatch.setattr(followups, "FALL_MIN", 10**6)  # every cell 1/sqrt(n)
    assert planned(steady).groups == steady_plan.groups
    assert 5 < planned(growing).groups[0].trials < POLICY.max_trials


def test_a_steady_noise_is_rarely_taken_for_a_growing_one():
    """By simulation: pairs of one steady 2% scatter, 16-40 of them: the fall estimate
    stays at 1/sqrt(n) (beta 0) in at least 92% of cells."""
    rng = np.random.default_rng(5)
    key = ("larson", params_key({"threads": 1}), "ops_per_sec")
    flagged = 0
    sims = 200
    for i in range(sims):
        n = 16 + i % 25
        r = paired_rows(list(1 + 0.02 * rng.standard_normal(n)), seed=i)
        flagged += followups.falling(pairs.by_round(r)[key], judged_cell(r)[1], POLICY) > 0
    assert flagged / sims <= 0.08


def test_a_young_cell_gets_ten_pairs_before_it_is_judged_out_of_reach():
    """5 pairs scattered by 12%: out of reach of a 60 s budget on their noise, but a noise
    measured on 5 pairs is a guess: the cell first gets the pairs up to 10; when even those
    do not fit, it is settled at once as before."""
    trial_rows = paired_rows(scattered(5, 0.0, 12.0))
    cell, _ = judged_cell(trial_rows)
    assert cell.paired and cell.verdict == "unknown"
    plan = followups.plan([cell], trial_rows, step=5, warmup=1, budget_left=60.0,
                          policy=POLICY)
    assert not plan.hopeless and plan.note is None
    assert [(g.workload, g.trials) for g in plan.groups] == [
        ("larson", followups.MIN_PAIRS_HOPELESS - 5)]
    poor = followups.plan([cell], trial_rows, step=5, warmup=1, budget_left=5.0,
                          policy=POLICY)
    assert poor.groups == [] and [w.cell for w in poor.hopeless] == [cell]
    assert "would need interval" in poor.note or "would need mde" in poor.note
    # at 10 pairs the same scatter is judged on what it is
    grown = paired_rows(scattered(10, 0.0, 12.0))
    settled = followups.plan([judged_cell(grown)[0]], grown, step=5, warmup=1,
                             budget_left=60.0, policy=POLICY)
    assert settled.groups == [] and len(settled.hopeless) == 1


def two_mode_rows(n, crossed, *, change=0.008, cv=0.012, seed=3):
    """n rounds at 30M or 20M ops (both trials of a round in one mode, as a pair run a
    second apart is), but ``crossed`` rounds whose base and head fell into different modes
    (half each way, so the sides' mode shares stay equal); head = base x (1 + change)
    within a mode, scatter ``cv``."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        fast = i % 2 == 0
        head_fast = (not fast) if i < crossed else fast
        for label, is_fast in (("base", fast), ("head", head_fast)):
            level = (30e6 if is_fast else 20e6) * (1 + cv * rng.standard_normal())
            v = level * (1 + change) if label == "head" else level
            out.append(TrialRow(label, "mallard", "", "larson", {"threads": 1}, 1, "fp", None,
                                {"ops_per_sec": v, "wall_seconds": 0.2}, job_id=7, seq=i))
    return out


def test_a_two_mode_cell_is_planned_on_its_noise_within_the_modes():
    """20 rounds in two modes 30M and 20M, 12 with base and head in different modes (more
    than the outlier rule of the pairs can drop):
    across the modes the pairs scatter by tens of percent, within them by 1%. The plan
    sizes the cell as the comparison judges it (within the modes): a few pairs, not
    hopeless on the scatter the modes make."""
    trial_rows = two_mode_rows(20, 12)
    key = ("larson", params_key({"threads": 1}), "ops_per_sec")
    sides = pairs.by_round(trial_rows)[key]
    across = pairs.judge(sides, higher_is_better=True, deterministic=False, primary=True,
                         policy=POLICY)
    within = modes.within_modes(across, sides.values("base"), sides.values("head"),
                                sides.pairs(), POLICY, measure="ops_per_sec")
    assert within.modes is not None and not within.modes.moved
    assert across.noise_pct > 5 * within.cell.noise_pct
    s = stats.adjust_and_decide([within.cell], POLICY)[0]
    cell = CellRow.of(s, workload="larson", params={"threads": 1}, threads=1,
                      measure="ops_per_sec", line="")
    assert cell.verdict == "unknown"  # 8 same-mode pairs: not yet SAME
    plan = followups.plan([cell], trial_rows, step=5, warmup=1, budget_left=60.0,
                          policy=POLICY)
    assert not plan.hopeless and plan.note is None
    [g] = plan.groups
    needed = power.trials_for_mde(within.cell.noise_pct, policy=POLICY, paired=True)
    # 8 of the 20 rounds gave same-mode pairs: the rounds that give `needed` such pairs
    assert needed is not None and 20 + g.trials <= math.ceil(needed * followups.SAFETY * 20 / 8)
    assert g.seconds < 60.0
