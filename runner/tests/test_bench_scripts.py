"""The benchmark scripts' README writers touch only what is between their markers."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from mallard_runner.settings import REPO_ROOT


def load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench = load(REPO_ROOT / "allocator" / "bench" / "bench.py")
noise = load(REPO_ROOT / "runner" / "bench" / "noise.py")


def test_allocator_table_goes_at_the_end_of_the_performance_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A\n\nintro\n\n## Performance\n\nwords.\n\n## Design\n\nmore.\n")
    bench.write_readme("| table 1 |", readme)
    text = readme.read_text()
    assert text.startswith("# A\n\nintro\n\n## Performance\n\nwords.\n\n")
    assert text.index(bench.BEGIN) < text.index("| table 1 |") < text.index(bench.END) < \
        text.index("## Design\n\nmore.\n")
    bench.write_readme("| table 2 |", readme)  # again: replaced, not appended
    text2 = readme.read_text()
    assert "| table 1 |" not in text2 and text2.count(bench.BEGIN) == 1
    assert text2.replace("| table 2 |", "| table 1 |") == text


def test_allocator_table_without_a_performance_section(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# A\n\n## Design\n\nx\n")
    bench.write_readme("| t |", readme)
    text = readme.read_text()
    assert text.startswith("# A\n\n## Design\n\nx\n") and "## Performance" in text
    assert text.index("## Performance") < text.index(bench.BEGIN)


def test_noise_block_replaced_between_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"# R\n\n{noise.BEGIN}\nold\n{noise.END}\n\n## After\n")
    noise.write_block("new figures", readme)
    assert readme.read_text() == f"# R\n\n{noise.BEGIN}\nnew figures\n{noise.END}\n\n## After\n"


def test_allocator_bench_covers_full_transfer_and_redis_at_1_and_2_threads():
    from mallard_runner.settings import RunnerSettings
    from mallard_runner.suites import load_suite

    suites = RunnerSettings().suites_dir
    suite = bench.bench_suite(suites, trials=7)
    expected = set(load_suite("full", suites).workloads) | {"transfer", "redis"}
    assert set(suite.workloads) == expected
    for name, wl in suite.workloads.items():
        assert set(wl.threads or []) <= {1, 2}, name
    assert suite.workloads["redis"].threads == [1, 2]
    # a step of redis-benchmark's millisecond clock is at most 0.5% of a test at ~1 M requests/s
    redis = suite.workloads["redis"].params
    assert redis["requests"] == bench.REDIS_REQUESTS >= 200_000
    assert bench.REDIS_REQUESTS % int(redis["pipeline"]) == 0   # -n a multiple of -P
    assert suite.trials == 7 and "mallard" in suite.allocators


def test_allocator_gap_is_noise_only_within_the_variants_spread():
    assert bench.gap(100.0, 90.0, 1.05) == "-"                       # mallard ahead
    assert bench.gap(90.0, 100.0, 1.2) == "11% (noise)"              # 1.11x short, spread 1.2x
    assert bench.gap(50.0, 100.0, 1.2) == "100% (beyond the spread)"
    assert bench.gap(90.0, 100.0, None) == "11% (beyond the spread)"
