"""The standard suite (runner/suites/standard.yaml): mimalloc-bench's programs built from
its repository (the bundle in ../shared/benchmarks/, cloned by the runner like any benchmark
project) and run through the runner at tiny work, each read by its parser; skipped when
the bundle is absent."""

from __future__ import annotations

import shutil

import pytest
from mallard_runner.cells import Target
from mallard_runner.executor import Executor
from mallard_runner.program_builds import ProgramBuilder, program_bins
from mallard_runner.settings import REPO_ROOT, RUNNER_DIR
from mallard_runner.suites import expand
from mallard_runner.targets import make_cells
from mallard_wire.results import AllocatorIn

from .conftest import first_cpu
from .test_bench_scripts import load

allocators = load(REPO_ROOT / "runner" / "bench" / "allocators.py")
BUNDLE = allocators.standard_bundle()
GLIBC = Target("peer", AllocatorIn(name="glibc"))


def test_the_suite_names_every_program_of_bench_sh_it_can_build():
    suite = allocators.standard_suite(RUNNER_DIR / "suites", "https://example.org/mb", 5)
    assert set(suite.workloads) == {
        "cfrac", "espresso", "barnes", "larson", "larson-sized", "mstress", "rptest",
        "alloc-test", "xmalloc-test", "cache-scratch", "cache-thrash", "glibc-simple",
        "glibc-thread", "malloc-large", "mleak"}
    cases = expand(suite)
    larson = next(c for c in cases if c.workload == "larson" and c.params["threads"] == 2)
    assert larson.program is not None and larson.program.repo == "https://example.org/mb"
    # bench.sh: ./larson 5 8 1000 5000 100 4141 $procs
    assert larson.program.render(larson.params, REPO_ROOT)[1:] == [
        "5", "8", "1000", "5000", "100", "4141", "2"]
    assert {c.params["threads"] for c in cases if c.workload == "xmalloc-test"} == {1, 2}
    assert {c.params["n"] for c in cases if c.workload == "mleak"} == {5, 50}


@pytest.mark.skipif(not BUNDLE.exists(), reason=f"mimalloc-bench's bundle is not at {BUNDLE}")
@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("c++") is None,
                    reason="cmake and a C++ compiler build mimalloc-bench")
def test_every_standard_program_builds_and_runs_through_the_runner(make_settings, tmp_path):
    settings = make_settings()
    suite = allocators.standard_suite(RUNNER_DIR / "suites", str(BUNDLE), 1, quick=True)
    cases = expand(suite, threads=[1])
    builder = ProgramBuilder(settings.cache(), settings.sandbox())
    bins = program_bins(cases, builder, settings.workloads_dir, None, None)
    assert len(set(bins.values())) == 1  # one build of bench/ serves every program
    cells = make_cells([GLIBC], cases, settings.workloads_dir, bins)
    out = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
        cells, trials=1, warmup=0)
    assert len(out.trials) == len(cases) == 15
    for t in out.trials:
        name = t.workload.name
        assert t.ok, f"{name}: {t.stderr_tail}"
        assert t.measures["max_rss_bytes"] > 2**20 and t.measures["cpu_seconds"] > 0, name
    by = {t.workload.name: t.measures for t in out.trials}
    assert by["larson"]["ops_per_sec"] > 1e5 and by["xmalloc-test"]["ops_per_sec"] > 1e5
    assert by["glibc-thread"]["ops_per_sec"] > 1e5 and by["rptest"]["ops_per_cpu_sec"] > 1e5
    for name in ("cfrac", "espresso", "barnes", "malloc-large", "alloc-test", "mstress"):
        assert by[name]["run_seconds"] == by[name]["wall_seconds"] > 0, name
    assert by["malloc-large"]["max_rss_bytes"] > 100 * 2**20  # its blocks of up to 20 MiB
