"""The executor runs real programs: pinning, raw trials, interleaving, crashes, counters."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest
from mallard_runner.build import Builder
from mallard_runner.executor import (
    Cell,
    Executor,
    Target,
    derive_ratios,
    last_json_line,
    parse_callgrind_totals,
    parse_perf_instructions,
)
from mallard_runner.models import AllocatorInfo
from mallard_runner.testbed import format_cpus, parse_cpus

from .conftest import first_cpu, last_cpu

GLIBC = Target("peer", AllocatorInfo(name="glibc"))


def cell(tiny_dir: Path, target: Target = GLIBC, **params: object) -> Cell:
    return Cell(target=target, workload="tiny", params={"threads": 1, "ops": 20000, **params},
                binary=tiny_dir / "tiny")


def test_child_runs_pinned_to_the_configured_cpus(make_settings, tiny_dir, tmp_path):
    settings = make_settings()
    for cpus in ([last_cpu()], sorted(os.sched_getaffinity(0))):
        raw = tmp_path / f"raw-{format_cpus(cpus)}"
        ex = Executor(settings, cpus, raw, use_perf=False)
        out = ex.run([cell(tiny_dir)], trials=1, warmup=0)
        assert out.trials[0].ok, out.trials[0].stderr_tail
        stdout = next(raw.rglob("stdout")).read_text()
        line = next(ln for ln in stdout.splitlines() if ln.startswith("Cpus_allowed_list"))
        assert parse_cpus(line.split(":", 1)[1].strip()) == cpus


def test_every_trial_and_its_hyperfine_json_are_kept(make_settings, tiny_dir, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    cells = [cell(tiny_dir), cell(tiny_dir, threads=2)]
    out = ex.run(cells, trials=3, warmup=1)
    assert len(out.trials) == 2 * 4
    assert sum(t.warmup for t in out.trials) == 2
    assert len({t.uid for t in out.trials}) == 8
    for c in cells:
        runs = out.hyperfine[c.key]["runs"]
        assert [r["seq"] for r in runs if not r["warmup"]] == [0, 1, 2]
        for r in runs:
            assert r["json"]["results"][0]["exit_codes"] == [0]
    files = sorted((tmp_path / "raw").rglob("hyperfine.json"))
    assert len(files) == 8
    for t in out.trials:
        assert t.ok, t.stderr_tail
        m = t.measures
        assert m["wall_seconds"] > 0 and m["ops_per_sec"] > 0 and m["max_rss_bytes"] > 0
        assert {"user_seconds", "sys_seconds"} <= set(m)
        assert t.counters is None  # a peer has no counters
    saved = json.loads(next((tmp_path / "raw").rglob("trial.json")).read_text())
    assert saved["uid"] in {t.uid for t in out.trials}


def test_cells_are_interleaved_round_robin_in_a_seeded_order(make_settings, tiny_dir, tmp_path):
    cells = [cell(tiny_dir, ops=n) for n in (10000, 20000, 30000)]
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "a", use_perf=False)
    out = ex.run(cells, trials=4, warmup=1, seed=7)
    rounds = [r for r, _ in out.order]
    assert rounds == sorted(rounds)  # no trial of round i+1 before all of round i
    for r in range(5):
        assert Counter(k for rr, k in out.order if rr == r) == Counter(c.key for c in cells)
    # the trials' own clocks agree with the recorded order
    started = [t.started_at for t in out.trials]
    assert started == sorted(started)
    orders = [tuple(k for rr, k in out.order if rr == r) for r in range(5)]
    assert len(set(orders)) > 1  # shuffled within rounds
    again = Executor(make_settings(), [first_cpu()], tmp_path / "b", use_perf=False).run(
        cells, trials=4, warmup=1, seed=7)
    assert again.order == out.order  # the same seed gives the same order


def test_allocator_that_crashes_is_a_failed_trial_not_a_crashed_runner(
        make_settings, tiny_dir, crash_lib, tmp_path):
    crashy = Target("head", AllocatorInfo(name="crashy"), preload=crash_lib)
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    out = ex.run([cell(tiny_dir, crashy), cell(tiny_dir)], trials=2, warmup=0)
    bad = [t for t in out.trials if t.allocator.name == "crashy"]
    good = [t for t in out.trials if t.allocator.name == "glibc"]
    assert len(bad) == 2 and len(good) == 2
    for t in bad:
        assert not t.ok
        assert t.signal == 11 and t.exit_code is None
        assert "crash_lib: raising SIGSEGV" in t.stderr_tail
        assert "ops_per_sec" not in t.measures
    assert all(t.ok for t in good)


def test_workload_exiting_non_zero_is_a_failed_trial_with_its_stderr(
        make_settings, tiny_dir, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    (t,) = ex.run([cell(tiny_dir, fail=1)], trials=1, warmup=0).trials
    assert not t.ok and t.exit_code == 3 and t.signal is None
    assert "tiny: asked to fail" in t.stderr_tail


def test_missing_program_is_a_failed_trial(make_settings, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    c = Cell(target=GLIBC, workload="nope", params={"threads": 1}, binary=tmp_path / "nope")
    (t,) = ex.run([c], trials=1, warmup=0).trials
    assert not t.ok and t.exit_code == 127  # env: not found


def test_mallard_variant_env_and_counters_file(make_settings, tiny_dir, toy_repo, tmp_path):
    settings = make_settings()
    built = Builder(settings.cache()).build(str(toy_repo), "main")
    info = AllocatorInfo(name="mallard", commit=built.commit, variant="transfer=ring",
                         library_sha256=built.library_sha256)
    target = Target("head", info, preload=built.library_path)
    ex = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False)
    (t,) = ex.run([cell(tiny_dir, target)], trials=1, warmup=0).trials
    assert t.ok, t.stderr_tail
    assert t.counters is not None
    assert t.counters["version"] == 1
    assert t.counters["transfer"] == "ring"  # MALLARD_TRANSFER reached the allocator
    assert t.counters["allocs"] >= 20000  # the workload's mallocs went through the preload
    assert t.counters["pid"] > 0


def test_real_mallard_counters_and_transfer_ratios(make_settings, tiny_dir, real_mallard,
                                                   tmp_path):
    cells = []
    for variant in ("transfer=mutex", "transfer=ring"):
        info = AllocatorInfo(name="mallard", commit=real_mallard.commit, variant=variant,
                             library_sha256=real_mallard.library_sha256)
        target = Target("head", info, preload=real_mallard.library_path)
        cells.append(cell(tiny_dir, target, threads=2, ops=200000))
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    out = ex.run(cells, trials=1, warmup=0)
    for t in out.trials:
        assert t.ok, t.stderr_tail
        assert t.counters is not None and t.counters["version"] == 1
        assert t.counters["transfer"] == t.allocator.variant.split("=")[1]
        assert t.counters["allocs"] >= 200000
        for kind in ("insert", "remove"):
            hits = t.counters[f"transfer_{kind}_hits"]
            total = hits + t.counters[f"transfer_{kind}_misses"]
            if total:
                assert t.measures[f"transfer_{kind}_hit_ratio"] == pytest.approx(hits / total)


def test_callgrind_counts_instructions_at_the_small_ops_count(make_settings, tiny_dir, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    c = Cell(target=GLIBC, workload="tiny", params={"threads": 1, "ops": 10**6},
             binary=tiny_dir / "tiny", instructions_ops=2000)
    t = ex.run_instructions(c)
    assert t is not None and t.ok, t.stderr_tail if t else None
    assert t.workload.params["ops"] == 2000
    assert set(t.measures) == {"instructions"}
    assert t.measures["instructions"] > 2000 * 10


def test_workloads_never_see_the_runner_token(make_settings, tmp_path, monkeypatch):
    monkeypatch.setenv("MALLARD_RUNNER_TOKEN", "secret-token-123")
    monkeypatch.setenv("MALLARD_TRANSFER", "ring")  # variants are set per trial, not inherited
    monkeypatch.setenv("LD_PRELOAD", "")
    script = tmp_path / "envdump"
    script.write_text('#!/bin/sh\nenv\necho \'{"operations": 1, "seconds": 1}\'\n')
    script.chmod(0o755)
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    c = Cell(target=GLIBC, workload="envdump", params={"threads": 1}, binary=script)
    (t,) = ex.run([c], trials=1, warmup=0).trials
    assert t.ok, t.stderr_tail
    out = next((tmp_path / "raw").rglob("stdout")).read_text()
    assert "PATH=" in out
    assert "secret-token-123" not in out and "MALLARD_" not in out and "LD_PRELOAD" not in out


def test_a_trial_that_hangs_is_killed_and_failed(make_settings, tmp_path):
    script = tmp_path / "hang"
    script.write_text("#!/bin/sh\necho started >&2\nexec sleep 60\n")
    script.chmod(0o755)
    ex = Executor(make_settings(trial_timeout_seconds=1), [first_cpu()], tmp_path / "raw",
                  use_perf=False)
    c = Cell(target=GLIBC, workload="hang", params={"threads": 1}, binary=script)
    (t,) = ex.run([c], trials=1, warmup=0).trials
    assert not t.ok and t.signal == 9
    assert "timed out after 1s" in t.stderr_tail and "started" in t.stderr_tail


def test_trial_command_shape(make_settings, tiny_dir, tmp_path):
    target = Target("head", AllocatorInfo(name="mallard", variant="transfer=ring"),
                    preload=tmp_path / "libmallard.so")
    c = cell(tiny_dir, target)
    for use_perf in (False, True):
        ex = Executor(make_settings(), [0, 1], tmp_path, use_perf=use_perf)
        cmd = ex.trial_command(c, tmp_path / "t")
        i = cmd.index("taskset")
        assert cmd[i:i + 3] == ["taskset", "-c", "0,1"]
        j = cmd.index("env")
        assert cmd[j + 1:j + 4] == [f"LD_PRELOAD={tmp_path / 'libmallard.so'}",
                                    "MALLARD_TRANSFER=ring",
                                    f"MALLARD_STATS_FILE={tmp_path / 't' / 'stats-%p.json'}"]
        assert cmd[j + 4:] == [str(tiny_dir / "tiny"), "--threads", "1", "--ops", "20000"]
        assert ("perf" in cmd[i:j]) is use_perf  # perf counts only the workload, inside taskset


def test_parsers():
    assert last_json_line('noise\n{"operations": 5, "seconds": 1}\n\n') == {
        "operations": 5, "seconds": 1}
    assert last_json_line("no json here") is None
    assert derive_ratios({"transfer_insert_hits": 3, "transfer_insert_misses": 1,
                          "transfer_remove_hits": 0, "transfer_remove_misses": 0}) == {
        "transfer_insert_hit_ratio": 0.75}
    assert parse_callgrind_totals("events: Ir\nfn=main\n1 2\ntotals: 123456\n") == 123456
    assert parse_callgrind_totals("summary: 42\n") == 42
    assert parse_callgrind_totals("events: Ir\n") is None
    assert parse_perf_instructions("12345,,instructions:u,100,100.00,,\n") == 12345
    assert parse_perf_instructions("<not supported>,,instructions:u,0,100.00,,\n") is None


@pytest.mark.parametrize("text,cpus", [("1", [1]), ("2,3", [2, 3]), ("0-2,5", [0, 1, 2, 5])])
def test_parse_cpus(text, cpus):
    assert parse_cpus(text) == cpus
