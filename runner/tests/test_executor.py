"""The executor runs real programs: pinning, raw trials, interleaving, crashes, counters."""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from mallard_runner.build import Builder
from mallard_runner.cells import Cell, Target
from mallard_runner.commands import MINIMAL_ENV, padded_env
from mallard_runner.executor import Executor, round_order
from mallard_runner.measures import (
    derive_ratios,
    last_json_line,
    parse_cachegrind,
    parse_perf_stat,
    read_result,
)
from mallard_runner.settings import REPO_ROOT, RunnerSettings
from mallard_runner.suites import expand, load_suite
from mallard_runner.testbed import format_cpus, kernel_aslr, parse_cpus
from mallard_wire.results import AllocatorIn

from .conftest import MALLARD_RECIPE, first_cpu, last_cpu

GLIBC = Target("peer", AllocatorIn(name="glibc"))


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


def test_by_case_a_rounds_cells_of_one_case_run_together(make_settings, tiny_dir, tmp_path):
    """`by_case`: every cell once a round, a case's cells (one per allocator) one after
    another, the cases and the allocators within a case shuffled, the same for one seed."""
    other = Target("base", AllocatorIn(name="glibc"))
    cells = [cell(tiny_dir, target, ops=n) for n in (10000, 20000, 30000)
             for target in (GLIBC, other)]
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "a", use_perf=False)
    out = ex.run(cells, trials=4, warmup=1, seed=7, by_case=True)
    case_of = {c.key: c.case for c in cells}
    orders = [[k for rr, k in out.order if rr == r] for r in range(5)]
    for keys in orders:
        assert Counter(keys) == Counter(c.key for c in cells)
        cases = [case_of[k] for k in keys]
        assert cases == [c for i, c in enumerate(cases) if i % 2 == 0 for _ in (0, 1)]
    assert len({tuple(case_of[k] for k in o) for o in orders}) > 1  # the cases shuffled
    assert len({tuple(o) for o in orders}) > len({tuple(case_of[k] for k in o)
                                                   for o in orders})  # and within a case
    assert all(t.ok for t in out.trials)
    again = Executor(make_settings(), [first_cpu()], tmp_path / "b", use_perf=False).run(
        cells, trials=4, warmup=1, seed=7, by_case=True)
    assert again.order == out.order


def test_round_order_by_case_and_shuffled_are_both_permutations(tiny_dir):
    import random

    cells = [cell(tiny_dir, Target(f"t{i}", AllocatorIn(name="glibc")), ops=n)
             for n in (1, 2, 3, 4) for i in range(5)]
    for by_case in (False, True):
        rng = random.Random(3)
        rounds = [round_order(cells, rng, by_case) for _ in range(20)]
        for r in rounds:
            assert sorted(c.key for c in r) == sorted(c.key for c in cells)
        runs = [[c.case for c in r] for r in rounds]
        grouped = [all(run[i] == run[i - i % 5] for i in range(len(run))) for run in runs]
        assert all(grouped) if by_case else not any(grouped)
    # without blocks: the seeded shuffle of the whole list
    rng, ref = random.Random(3), list(cells)
    random.Random(3).shuffle(ref)
    assert round_order(cells, rng) == ref


def test_by_case_runs_a_cases_base_and_head_back_to_back_in_a_shuffled_order(tiny_dir):
    """A comparison's blocks: in every round each case's base and head run one right after
    the other (the pair the service judges), which of the two first varies with the seeded
    RNG, and the peers of the case run before or after the pair, never between."""
    import random

    targets = [Target(label, AllocatorIn(name="glibc")) for label in ("base", "head")]
    targets += [Target("peer", AllocatorIn(name=n)) for n in ("jemalloc", "tcmalloc")]
    cells = [cell(tiny_dir, t, ops=n) for n in (1, 2, 3) for t in targets]
    rng = random.Random(11)
    rounds = [round_order(cells, rng, by_case=True) for _ in range(40)]
    firsts: Counter[str] = Counter()
    positions: set[int] = set()
    for r in rounds:
        assert sorted(c.key for c in r) == sorted(c.key for c in cells)
        labels = [c.target.label for c in r]
        for i in range(0, len(r), 4):  # one block per case, four cells each
            block = labels[i:i + 4]
            assert len({c.case for c in r[i:i + 4]}) == 1
            j = next(k for k, lb in enumerate(block) if lb in ("base", "head"))
            assert {block[j], block[j + 1]} == {"base", "head"}
            firsts[block[j]] += 1
            positions.add(j)
    assert firsts["base"] > 20 and firsts["head"] > 20  # both orders, about as often
    assert positions == {0, 1, 2}  # the pair first, between the peers, or last
    again = random.Random(11)
    assert [round_order(cells, again, by_case=True) for _ in range(40)] == rounds


def test_allocator_that_crashes_is_a_failed_trial_not_a_crashed_runner(
        make_settings, tiny_dir, crash_lib, tmp_path):
    crashy = Target("head", AllocatorIn(name="crashy"), preload=crash_lib)
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
    info = AllocatorIn(name="mallard", commit=built.commit, variant="transfer=ring",
                         library_sha256=built.library_sha256)
    target = Target("head", info, preload=built.library_path, recipe=built.recipe)
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
        info = AllocatorIn(name="mallard", commit=real_mallard.commit, variant=variant,
                             library_sha256=real_mallard.library_sha256)
        target = Target("head", info, preload=real_mallard.library_path,
                        recipe=real_mallard.recipe)
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


def test_cachegrind_counts_at_the_small_params(make_settings, tiny_dir, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    head = Target("head", AllocatorIn(name="glibc"))
    c = Cell(target=head, workload="tiny", params={"threads": 1, "ops": 10**6},
             binary=tiny_dir / "tiny", deterministic_params={"threads": 1, "ops": 2000})
    t = ex.run_deterministic(c)
    assert t is not None and t.ok, t.stderr_tail if t else None
    assert t.workload.params == {"threads": 1, "ops": 2000}
    assert set(t.measures) == {"instructions", "d1_misses", "llc_misses"}
    assert t.measures["instructions"] > 2000 * 10
    assert 0 < t.measures["llc_misses"] <= t.measures["d1_misses"] < t.measures["instructions"]
    cmd = (tmp_path / "raw" / c.slug / "cachegrind" / "command").read_text()
    assert "--tool=cachegrind" in cmd and "--D1=32768,8,64" in cmd and " env -i " in cmd
    # a peer is reference only: no valgrind run for it; nor for a cell without small params
    assert ex.run_deterministic(Cell(target=GLIBC, workload="tiny", params=c.params,
                                     binary=c.binary, deterministic_params=c.params)) is None
    assert ex.run_deterministic(cell(tiny_dir, head)) is None


def test_a_deterministic_run_that_fails_is_a_failed_trial(make_settings, tiny_dir, tmp_path):
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    head = Target("head", AllocatorIn(name="glibc"))
    c = Cell(target=head, workload="tiny", params={"threads": 1, "ops": 10},
             binary=tiny_dir / "tiny", deterministic_params={"threads": 1, "ops": 10, "fail": 1})
    t = ex.run_deterministic(c)
    assert t is not None and not t.ok and t.exit_code == 3
    assert "tiny: asked to fail" in t.stderr_tail


def cachegrind_counts(ex: Executor, c: Cell, runs: int = 3) -> list[dict[str, float]]:
    out = []
    for _ in range(runs):
        t = ex.run_deterministic(c)
        assert t is not None and t.ok, t.stderr_tail if t else None
        out.append(t.measures)
    return out


@pytest.mark.parametrize("workload", ["larson", "rpc"])
def test_deterministic_counters_repeat_within_a_tenth_of_a_percent(
        make_settings, real_mallard, tmp_path, workload):
    """One thread, the quick suite's small params, glibc and mallard: three runs each give
    instructions within +-0.1% of their median, and D1 and LLC misses too (or within +-20
    counts, the API's absolute floor: a few thousand misses wobble by a few; mallard's rpc
    has ~6,000 LLC misses since it stopped loading libstdc++ and moved by up to 17)."""
    quick = load_suite("quick", RunnerSettings().suites_dir)
    (case,) = [c for c in expand(quick, [workload], [1])]
    assert case.deterministic_params is not None
    settings = make_settings(workloads_dir=REPO_ROOT / "build" / "workloads")
    binary = settings.workloads_dir / workload
    if not binary.exists():
        pytest.fail(f"{binary} is missing: run `make workloads`")
    ex = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False)
    mallard = Target("head", AllocatorIn(name="mallard", commit=real_mallard.commit,
                                           variant="transfer=ring"),
                     preload=real_mallard.library_path, recipe=real_mallard.recipe)
    for target in (Target("base", AllocatorIn(name="glibc")), mallard):
        c = Cell(target=target, workload=workload, params=case.params, binary=binary,
                 deterministic_params=case.deterministic_params)
        runs = cachegrind_counts(ex, c)
        for measure in ("instructions", "d1_misses", "llc_misses"):
            values = [r[measure] for r in runs]
            med = float(np.median(values))
            dev = max(abs(v / med - 1) for v in values)
            wobble = 0 if measure == "instructions" else 20
            assert dev <= 0.001 or max(abs(v - med) for v in values) <= wobble, (
                target.label, measure, values)


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
    target = Target("head", AllocatorIn(name="mallard", variant="transfer=ring"),
                    preload=tmp_path / "libmallard.so", recipe=MALLARD_RECIPE)
    c = cell(tiny_dir, target)
    for use_perf in (False, True):
        ex = Executor(make_settings(), [0, 1], tmp_path, use_perf=use_perf)
        cmd = ex.commands.trial(c, tmp_path / "t")
        i = cmd.index("taskset")
        assert cmd[i:i + 3] == ["taskset", "-c", "0,1"]
        if ex.commands.setarch:  # ASLR off for the workload
            assert cmd[i + 3:i + 6] == ["setarch", platform.machine(), "-R"]
        j = cmd.index("env")
        assert cmd[j + 1:j + 7] == ["-i", "PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C",
                                    f"LD_PRELOAD={tmp_path / 'libmallard.so'}",
                                    "MALLARD_TRANSFER=ring", "MALLARD_STATS_FILE=stats-%p.json"]
        assert cmd[j + 7].startswith("_PAD=")
        assert sum(len(a) + 1 for a in cmd[j + 2:j + 8]) % 512 == 0  # a fixed-size block
        assert cmd[j + 8:] == [str(tiny_dir / "tiny"), "--threads", "1", "--ops", "20000"]
        assert ("perf" in cmd[i:j]) is use_perf  # perf counts only the workload, inside taskset
    ex = Executor(make_settings(noise_control=False), [0], tmp_path, use_perf=False)
    cmd = ex.commands.trial(c, tmp_path / "t")
    assert "setarch" not in cmd and "-i" not in cmd
    j = cmd.index("env")
    assert cmd[j + 1].startswith("LD_PRELOAD=")


def test_every_trial_of_every_allocator_gets_the_same_environment_size(make_settings, tmp_path):
    script = tmp_path / "envdump"
    script.write_text('#!/bin/sh\nenv\necho \'{"operations": 1, "seconds": 1}\'\n')
    script.chmod(0o755)
    mallard = Target("head", AllocatorIn(name="mallard", variant="transfer=mutex"),
                     preload=tmp_path / "lib" / "libmallard.so", recipe=MALLARD_RECIPE)
    ex = Executor(make_settings(layouts="fixed"), [first_cpu()], tmp_path / "raw",
                  use_perf=False)
    sizes = set()
    for target in (GLIBC, mallard):
        c = Cell(target=target, workload="envdump", params={"threads": 1}, binary=script)
        ex.run([c], trials=2, warmup=0)
        for out in (tmp_path / "raw" / c.slug).rglob("stdout"):
            env = [ln for ln in out.read_text().splitlines() if "=" in ln and ln[0] != "{"]
            # sh adds PWD (and may add SHLVL, _): the workload's own block is the rest
            own = [e for e in env if e.split("=", 1)[0] not in ("PWD", "SHLVL", "_", "OLDPWD")]
            assert {e.split("=", 1)[0] for e in own} <= {
                "PATH", "LC_ALL", "LD_PRELOAD", "MALLARD_TRANSFER", "MALLARD_STATS_FILE", "_PAD"}
            sizes.add(sum(len(e) + 1 for e in own))
    assert sizes == {512}
    assert padded_env(["A=" + "x" * 600])[-1] == "_PAD=" + "x" * (1024 - 603 - 6)


ADDR_NO_RANDOMIZE = 0x0040000  # personality(2): ASLR off (setarch -R)


def test_a_sampled_layout_is_recorded_and_each_trial_draws_its_own(make_settings, tmp_path):
    """Through the executor, a real program reports the environment and personality it ran
    with: under `layouts=sampled` (the default) ASLR is on and the stack offset (`_PAD`'s
    extra length) is the one its trial records; every trial draws its own. `fixed` runs
    every trial with ASLR off, in the one environment size, and records no layout."""
    script = tmp_path / "layout"
    script.write_text('#!/bin/sh\nprintf "pad=%s\\n" "${#_PAD}"\n'
                      'cat /proc/self/personality\necho \'{"operations": 1, "seconds": 1}\'\n')
    script.chmod(0o755)
    c = Cell(target=GLIBC, workload="layout", params={"threads": 1}, binary=script)
    ex = Executor(make_settings(), [first_cpu()], tmp_path / "raw", use_perf=False)
    trials = [t for t in ex.run([c], trials=6, warmup=0).trials]
    layouts = [t.layout for t in trials]
    assert all(t.ok for t in trials) and all(lay is not None for lay in layouts)
    assert len({lay.env_pad for lay in layouts if lay is not None}) > 1
    base = len(padded_env(list(MINIMAL_ENV))[-1]) - len("_PAD=")
    for t in trials:
        out = (tmp_path / "raw" / c.slug / f"trial-{t.seq}" / "stdout").read_text().split()
        pad, personality = int(out[0].removeprefix("pad=")), int(out[1], 16)
        assert t.layout is not None and pad == base + t.layout.env_pad
        assert t.layout.aslr == kernel_aslr() and not personality & ADDR_NO_RANDOMIZE
        record = json.loads((tmp_path / "raw" / c.slug / f"trial-{t.seq}" / "trial.json")
                            .read_text())
        assert record["layout"] == t.layout.model_dump()  # the trial's record shows it
    fixed = Executor(make_settings(layouts="fixed"), [first_cpu()], tmp_path / "fixed",
                     use_perf=False)
    ft = fixed.run([c], trials=2, warmup=0).trials
    assert [t.layout for t in ft] == [None, None]
    for t in ft:
        out = (tmp_path / "fixed" / c.slug / f"trial-{t.seq}" / "stdout").read_text().split()
        assert int(out[0].removeprefix("pad=")) == base
        if fixed.commands.setarch:
            assert int(out[1], 16) & ADDR_NO_RANDOMIZE


# cachegrind 3.19's output file: `events:` names the columns of the `summary:` line
CACHEGRIND_OUT = """desc: I1 cache:         32768 B, 64 B, 8-way associative
desc: D1 cache:         32768 B, 64 B, 8-way associative
desc: LL cache:         8388608 B, 64 B, 16-way associative
cmd: /work/build/workloads/larson --threads 1 --ops 20000 --blocks 500
events: Ir I1mr ILmr Dr D1mr DLmr Dw D1mw DLmw
fl=???
fn=0x0000000000001100
0 3 1 1
summary: 8680858 1979 1788 2043271 99005 2070 1196409 16294 8271
"""

# `perf stat -x, -o FILE`: this VM's real answer (no counters), then the documented layout
# (value,unit,event,run time,percent,metric,metric unit) as a node with counters writes it:
# a user-only event (`:u`), a metric column, and a hybrid CPU's two PMUs.
PERF_VM = """<not supported>,,instructions,0,100.00,,
<not supported>,,cycles,0,100.00,,
<not supported>,,cache-misses,0,100.00,,
"""
PERF_COUNTS = """# started on Sat Nov 22 01:02:03 2026

2043162812,,instructions:u,510296040,100.00,2.35,insn per cycle
869425126,,cycles:u,510296040,100.00,,
1294563,,cache-misses:u,510296040,100.00,,
"""
PERF_HYBRID = """1500000000,,cpu_core/instructions/u,300000000,100.00,,
20000000,,cpu_atom/instructions/u,4000000,1.33,,
700000000,,cpu_core/cycles/u,300000000,100.00,,
<not counted>,,cpu_atom/cycles/u,0,0.00,,
"""


def test_parsers():
    assert last_json_line('noise\n{"operations": 5, "seconds": 1}\n\n') == {
        "operations": 5, "seconds": 1}
    assert last_json_line("no json here") is None
    assert derive_ratios({"transfer_insert_hits": 3, "transfer_insert_misses": 1,
                          "transfer_remove_hits": 0, "transfer_remove_misses": 0}) == {
        "transfer_insert_hit_ratio": 0.75}
    # the raw counts that explain a moved ratio become measures; flags and text do not
    assert derive_ratios({"transfer_remove_inflight_misses": 12, "central_refills": 7,
                          "transfer_waits": True, "pages_reclaimed": "x", "allocs": 9}) == {
        "transfer_remove_inflight_misses": 12.0, "central_refills": 7.0}
    assert parse_cachegrind(CACHEGRIND_OUT) == {
        "instructions": 8680858, "d1_misses": 99005 + 16294, "llc_misses": 2070 + 8271}
    assert parse_cachegrind("events: Ir\nsummary: 42\n") == {"instructions": 42}
    assert parse_cachegrind("events: Ir\n") is None
    assert parse_perf_stat(PERF_VM) == {}
    assert parse_perf_stat(PERF_COUNTS) == {"hw_instructions": 2043162812,
                                            "hw_cycles": 869425126, "hw_llc_misses": 1294563}
    assert parse_perf_stat(PERF_HYBRID) == {"hw_instructions": 1520000000,
                                            "hw_cycles": 700000000}


def test_perf_counts_are_never_named_like_valgrind_counts():
    """Hardware counts are noisy: they must not take the deterministic measures' names."""
    for text in (PERF_COUNTS, PERF_HYBRID):
        assert set(parse_perf_stat(text)) <= {"hw_instructions", "hw_cycles", "hw_llc_misses"}
        assert not set(parse_perf_stat(text)) & {"instructions", "d1_misses", "llc_misses"}


@pytest.mark.parametrize("text,cpus", [("1", [1]), ("2,3", [2, 3]), ("0-2,5", [0, 1, 2, 5])])
def test_parse_cpus(text, cpus):
    assert parse_cpus(text) == cpus


def test_throughput_per_cpu_second_comes_from_the_workloads_cpu_time():
    """ops_per_sec is the workload's operations over its own wall clock; with its
    `cpu_seconds` (the process's CPU time over the same phase) also ops_per_cpu_sec, which
    other processes sharing the CPU do not slow down."""
    measures: dict[str, float] = {}
    ok, note = read_result({"operations": 1000, "seconds": 0.5, "cpu_seconds": 0.25,
                            "max_rss_bytes": 4096}, True, "", measures)
    assert ok and note == ""
    assert measures == {"ops_per_sec": 2000.0, "ops_per_cpu_sec": 4000.0,
                        "cpu_seconds": 0.25, "max_rss_bytes": 4096.0}
    for cpu in (0, -1.0, "0.2", True):  # none, or nonsense: no per-CPU throughput
        measures = {}
        ok, _ = read_result({"operations": 1000, "seconds": 0.5, "cpu_seconds": cpu},
                            True, "", measures)
        assert ok and measures["ops_per_sec"] == 2000.0 and "ops_per_cpu_sec" not in measures
