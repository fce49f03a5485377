"""The comparison page's cells: what a cell shows, MDE when it has one, primary or not."""

from __future__ import annotations

from fastapi.testclient import TestClient
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


def _cell(threads: int, base: float, head: float, verdict: str, measure: str = "ops_per_sec"
          ) -> CellRow:
    return CellRow(
        workload="transfer", params={"threads": threads, "size": 1024}, threads=threads,
        measure=measure, higher_is_better=measure == "ops_per_sec", base_median=base,
        head_median=head, ratio=head / base, diff_pct=(head / base - 1) * 100,
        ci_low_pct=-1.0, ci_high_pct=1.0, p_value=0.01, p_adjusted=0.01, n_base=5, n_head=5,
        robust_base=5, robust_head=5, verdict=verdict, line="...")


def test_scaling_curves_are_drawn_as_two_lines_against_threads():
    cells = [_cell(1, 30e6, 30e6, "same"), _cell(2, 18e6, 18e6, "same"),
             _cell(32, 10e6, 4e6, "regressed"), _cell(2, 1e6, 1e6, "same", "max_rss_bytes")]
    [view] = comparison.curve_views(cells, "0,1")
    assert view.summary.startswith("scaling transfer ops_per_sec: REGRESSED; moved at threads 32;")
    assert view.oversubscribed == [32]
    svg = str(view.plot)
    assert svg.count("<polyline") == 2 and 'class="trend s0"' in svg and "s1" in svg
    assert ">32</text>" in svg and "head, 32 threads" in svg
    assert comparison.curve_views(cells[:1], "0,1") == []  # one thread count: no curve


def test_the_page_shows_the_speed_x_memory_label_and_the_curve(app, pages_data):
    r = TestClient(app).get(f"/ui/comparisons/{pages_data['comparison']}",
                headers={"Authorization": f"Bearer {pages_data['user_token']}"})
    assert r.status_code == 200
    assert "speed x memory: slower (worse)" in r.text
    assert "Thread scaling" in r.text and "scaling larson ops_per_sec: REGRESSED" in r.text
