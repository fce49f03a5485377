"""A cell's trials by round: pairs, their blocks of rounds and the cell's look
(pairs.py)."""

from mallard_api.analysis import pairs
from mallard_api.params import params_key
from mallard_api.sql.comparisons import TrialRow

KEY = ("larson", params_key({"threads": 1}), "ops_per_sec")


def row(label, job, seq, look, value=1e6):
    return TrialRow(label, "mallard", "", "larson", {"threads": 1}, 1, "fp", None,
                    {"ops_per_sec": value}, job_id=job, seq=seq, look=look)


def test_blocks_are_runs_of_five_rounds_of_one_job_and_looks_count_the_rounds_that_added():
    trial_rows = [row(label, 7, seq, 0) for seq in range(7) for label in ("base", "head")]
    trial_rows += [row(label, 9, seq, 2) for seq in range(3) for label in ("base", "head")]
    sides = pairs.by_round(trial_rows)[KEY]
    assert sides.blocks() == [0] * 5 + [1] * 2 + [2] * 3
    assert sides.look() == 1  # the first job and one follow-up (round 2) added to it
    only_first = pairs.by_round(trial_rows[:14])[KEY]
    assert only_first.look() == 0


def test_a_round_that_lost_a_side_is_in_no_block():
    trial_rows = [row(label, 7, seq, 0) for seq in range(6) for label in ("base", "head")]
    trial_rows = [r for r in trial_rows if not (r.seq == 2 and r.label == "head")]
    sides = pairs.by_round(trial_rows)[KEY]
    assert len(sides.pairs()[0]) == len(sides.blocks()) == 5
    assert sides.blocks() == [0, 0, 0, 0, 1]
