"""The comparison page's cells: what a cell shows, MDE when it has one, primary or not."""

from __future__ import annotations

from mallard_api.analysis.cells import CellRow
from mallard_api.ui import comparison


def test_cells_show_their_mde_when_they_have_one():
    cell = CellRow(
        workload="larson", params={"threads": 2}, threads=2, measure="wall_seconds",
        higher_is_better=False, base_median=0.4, head_median=0.42, ratio=1.05, diff_pct=5.0,
        ci_low_pct=4.0, ci_high_pct=6.0, p_value=0.001, p_adjusted=0.002, n_base=10,
        n_head=10, robust_base=10, robust_head=9, verdict="diagnostic", line="...")
    view = comparison.cell_view(cell, "s", "w0-wall_seconds")
    assert view.mde is None and view.change == "+5.0%" and view.half_width == "±1.0%"
    assert (view.base, view.head, view.trials, view.robust) == ("400 ms", "420 ms", "10 / 10",
                                                                "10 / 9")
    assert not comparison.is_primary(cell)  # a diagnostic
    cell.mde_pct = 2.14  # a cell that carries its MDE (a primary one, with a verdict)
    cell.verdict = "regressed"
    assert comparison.cell_view(cell, "s", "a").mde == "2.1%"
    assert comparison.is_primary(cell)
