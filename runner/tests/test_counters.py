"""The counters readers (counters.py) on real reports. The samples in data/counters/ were
captured on this machine from data/counters/work.c (100 x 1000 malloc/free pairs) run with
the allocators built from ../shared/allocators: mimalloc v2.0.9 and v2.1.7 (cmake, Release)
with MIMALLOC_SHOW_STATS=1, jemalloc 5.3.0 (autogen.sh, make) with
MALLOC_CONF=stats_print:true; each file is the program's whole stderr."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mallard_runner.counters import read_counters, read_jemalloc, read_mimalloc
from mallard_wire.recipes import StatsHook

DATA = Path(__file__).resolve().parent / "data" / "counters"


@pytest.mark.parametrize("version", ["v2.0.9", "v2.1.7"])
def test_mimalloc_tables_of_both_layouts(version):
    (table,) = read_mimalloc((DATA / f"mimalloc-{version}.stderr").read_text())
    reserved = 32 * 1024**2 if version == "v2.0.9" else 1024**3
    assert table["reserved"] == table["reserved_peak"] == reserved
    assert table["committed_current"] == reserved and table["reset"] == 0
    assert table["segments"] == 1 and table["segments_abandoned"] == 0
    assert table["pages_freed"] == pytest.approx(6.2 * 1024)  # "6.2 Ki"
    assert table["mmaps"] == 0 and table["threads"] == 0 and table["numa_nodes"] == 1
    assert table["process_rss"] == pytest.approx(4.7 * 1024**2)
    assert table["elapsed_seconds"] == pytest.approx(0.003)
    if version == "v2.1.7":
        assert table["purged"] == 0 and table["arenas"] == 1


def test_jemalloc_allocated_line():
    (stats,) = read_jemalloc((DATA / "jemalloc-5.3.0.stderr").read_text())
    assert stats == {"allocated": 1028832, "active": 1261568, "metadata": 2820592, "n_thp": 0,
                     "resident": 9089024, "mapped": 12648448, "retained": 1507328}


def test_read_counters_by_hook_from_stderr_or_files(tmp_path):
    trial = tmp_path / "t"
    trial.mkdir()
    # stderr with the workload's own lines around the report; the JSON line is on stdout
    text = "workload says hi\n" + (DATA / "mimalloc-v2.1.7.stderr").read_text() + "bye\n"
    (trial / "stderr").write_text(text)
    got = read_counters(StatsHook(parser="mimalloc", options="show_stats=1"), trial)
    assert got is not None and got["reserved"] == 1024**3
    assert read_counters(StatsHook(parser="jemalloc"), trial) is None
    shutil.copy(DATA / "jemalloc-5.3.0.stderr", trial / "stderr")
    got = read_counters(StatsHook(parser="jemalloc", options="stats_print=true"), trial)
    assert got is not None and got["retained"] == 1507328
    # mallard's: the JSON files of MALLARD_STATS_FILE (%p), the largest of them
    (trial / "stats-1.json").write_text(json.dumps({"allocs": 5, "frees": 5}))
    (trial / "stats-2.json").write_text(json.dumps({"allocs": 50, "frees": 49}))
    (trial / "stats-3.json").write_text("{not json")
    hook = StatsHook(parser="mallard", file_env="MALLARD_STATS_FILE")
    assert read_counters(hook, trial) == {"allocs": 50, "frees": 49}
    assert read_counters(hook, tmp_path) is None
