"""What trials record when a job asks (timelines.py): the RSS of a workload that grows then
frees, the latency histogram's percentiles against a known distribution, the shim in a
real trial, and that sampling off costs nothing (cachegrind instruction counts)."""

from __future__ import annotations

import json
import math
import random
import subprocess
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from mallard_runner.cells import Cell, Target
from mallard_runner.executor import Executor
from mallard_runner.settings import REPO_ROOT
from mallard_runner.timelines import Timeline, read_latency
from mallard_wire.results import AllocatorIn
from mallard_wire.timelines import bucket_bounds, bucket_of, percentile

from .conftest import C_DIR, first_cpu, reachable

WORKLOADS = REPO_ROOT / "runner" / "workloads"
GLIBC = Target("head", AllocatorIn(name="glibc"))
MIB = 1 << 20


def _cc(*args: str) -> None:
    subprocess.run(["cc", "-O2", "-Wall", *args], check=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """grow_free, latency_replay and the latency shim, built from this checkout."""
    d = reachable(tmp_path_factory.mktemp("timelines"))
    _cc("-o", str(d / "grow_free"), str(C_DIR / "grow_free.c"))
    _cc(f"-I{WORKLOADS}", "-o", str(d / "latency_replay"), str(C_DIR / "latency_replay.c"),
        str(WORKLOADS / "latency_hist.c"))
    _cc("-shared", "-fPIC", "-fno-builtin-malloc", "-fno-builtin-free", "-o",
        str(d / "libmallard_latency.so"), str(WORKLOADS / "latency.c"),
        str(WORKLOADS / "latency_hist.c"), "-ldl")
    return d


def test_the_rss_timeline_of_a_workload_that_grows_then_frees(make_settings, built, tmp_path):
    ex = Executor(make_settings(memory_interval_ms=5), [first_cpu()], tmp_path / "raw",
                  use_perf=False, record=frozenset({"memory"}))
    c = Cell(target=GLIBC, workload="grow_free", params={"threads": 1, "steps": 40},
             binary=built / "grow_free")
    t, _ = ex.run_trial(c, 0, False)
    assert t.ok, t.stderr_tail
    assert t.memory is not None and t.memory.interval_ms == 5
    rss = t.memory.rss_bytes
    peak = max(rss)
    top = rss.index(peak)
    assert peak - rss[0] >= 35 * MIB  # it grew by its 40 blocks of 1 MiB...
    assert rss[top // 4] < rss[top // 2] < peak  # ... steadily
    assert peak - rss[-1] >= 35 * MIB and len(rss) - top >= 10  # then freed them, and stayed
    assert t.measures["final_rss_bytes"] == rss[-1] < 10 * MIB
    area = t.measures["rss_area_byte_seconds"]
    assert area == pytest.approx(sum(rss) * 0.005)
    assert 40 * MIB * 0.15 < area < 48 * MIB * 0.6  # held ~40 MiB for 150-400 ms
    assert t.latency is None and "malloc_p50_ns" not in t.measures


def test_a_long_timeline_is_halved_and_keeps_its_area():
    series = Timeline(0.01, cap=8)
    for k in range(100):
        series.add(k)
    timeline = series.timeline()
    assert timeline is not None and len(timeline.rss_bytes) <= 8
    assert timeline.interval_ms == pytest.approx(10 * 16)  # 100 samples: halved four times
    assert series.measures() == {"final_rss_bytes": 99.0,
                                 "rss_area_byte_seconds": pytest.approx(sum(range(100)) / 100)}
    # the first 96 samples in 6 full points of 16 (their sum kept), the last 4 in a 7th
    assert len(timeline.rss_bytes) == 7
    kept = sum(timeline.rss_bytes[:-1]) * timeline.interval_ms / 1000
    assert kept == pytest.approx(sum(range(96)) / 100, abs=0.16 * 3)
    assert timeline.rss_bytes[-1] == round((96 + 97 + 98 + 99) / 4)


def _replay(built: Path, tmp_path: Path, values: list[int]) -> dict[str, list[list[int]]]:
    out = tmp_path / "latency-1.json"
    subprocess.run([str(built / "latency_replay"), str(out)], check=True,
                   input="\n".join(map(str, values)), text=True)
    data: dict[str, list[list[int]]] = json.loads(out.read_text())
    return data


def test_latency_percentiles_against_a_known_distribution(built, tmp_path):
    rng = random.Random(31)
    # 99% fast calls (~30 ns), 1% slow (~5 us): the tail p99.9 must find
    values = [round(rng.lognormvariate(math.log(30), 0.4)) if rng.random() < 0.99
              else round(rng.lognormvariate(math.log(5000), 0.3)) for _ in range(200_000)]
    data = _replay(built, tmp_path, values)
    # the C buckets are Python's: the same count in each
    assert Counter({b: n for b, n in data["malloc"]}) == Counter(map(bucket_of, values))
    hist = read_latency(tmp_path, 1)
    assert hist is not None and hist.free == []
    exact = np.quantile(np.array(values), [0.5, 0.99, 0.999], method="inverted_cdf")
    for q, want in zip((0.5, 0.99, 0.999), exact, strict=True):
        got = percentile(hist.malloc, q)
        assert got is not None
        low, high = bucket_bounds(bucket_of(int(want)))
        assert low <= got <= high  # in the exact value's bucket: within 1/8 of it
        assert abs(got - want) <= want / 8
    assert percentile(hist.malloc, 0.999) > 1000  # the slow 1% is the tail
    for ns in (0, 7, 8, 9, 15, 16, 1000, 123_456_789, 2**41, 2**60):
        low, high = bucket_bounds(bucket_of(ns))
        assert low <= ns < high or bucket_of(ns) == 319


def test_a_trial_asked_for_latency_records_sampled_malloc_and_free(make_settings, built,
                                                                   tiny_dir, tmp_path):
    settings = make_settings(latency_shim=built / "libmallard_latency.so", latency_every=16)
    ex = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False,
                  record=frozenset({"latency"}))
    c = Cell(target=GLIBC, workload="tiny", params={"threads": 1, "ops": 64_000},
             binary=tiny_dir / "tiny")
    t, _ = ex.run_trial(c, 0, False)
    assert t.ok, t.stderr_tail
    assert t.latency is not None and t.latency.sample_every == 16
    mallocs = sum(n for _, n in t.latency.malloc)
    frees = sum(n for _, n in t.latency.free)
    assert 64_000 // 16 <= mallocs <= 64_000 // 16 + 20  # the workload's, and libc's few
    assert 64_000 // 16 <= frees <= 64_000 // 16 + 20
    for call in ("malloc", "free"):
        p50, p99, p999 = (t.measures[f"{call}_{q}_ns"] for q in ("p50", "p99", "p999"))
        assert 0 <= p50 <= p99 <= p999
    command = (tmp_path / "raw" / c.slug / "trial-0" / "command").read_text()
    assert f"LD_PRELOAD={built / 'libmallard_latency.so'}" in command
    assert t.memory is None and "rss_area_byte_seconds" not in t.measures


def _instructions(cmd: list[str], env: dict[str, str], out: Path) -> int:
    subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no",
                    f"--cachegrind-out-file={out}", *cmd], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    summary = next(ln for ln in out.read_text().splitlines() if ln.startswith("summary:"))
    return int(summary.split()[1])


def test_sampling_off_costs_nothing_and_on_costs_a_few_instructions_a_call(
        make_settings, built, tiny_dir, tmp_path):
    # off: a trial's command is the one it ran before, without the shim or its variables
    c = Cell(target=GLIBC, workload="tiny", params={"threads": 1, "ops": 20_000},
             binary=tiny_dir / "tiny", deterministic_params={"threads": 1, "ops": 20_000})
    settings = make_settings(latency_shim=built / "libmallard_latency.so")
    off = Executor(settings, [first_cpu()], tmp_path / "off", use_perf=False)
    on = Executor(settings, [first_cpu()], tmp_path / "on", use_perf=False,
                  record=frozenset({"latency"}))
    trial_dir = tmp_path / "t"
    assert "MALLARD_LATENCY" not in " ".join(off.commands.trial(c, trial_dir))
    assert "libmallard_latency" not in " ".join(off.commands.trial(c, trial_dir))
    # the cachegrind runs never load it: a job that asks counts the same instructions
    assert on.commands.deterministic(c) == off.commands.deterministic(c)
    counts = [ex.run_deterministic(c) for ex in (off, on)]
    assert counts[0] is not None and counts[1] is not None
    # (the same up to a few: tiny parses /proc/self/status, whose pids vary in length)
    assert abs(counts[0].measures["instructions"] - counts[1].measures["instructions"]) <= 64
    # on, counted by cachegrind: 2 x 20,000 calls at two sizes of the run
    env = {"PATH": "/usr/bin:/bin", "MALLARD_LATENCY_FILE": str(tmp_path / "lat-%p.json")}
    shim = {**env, "LD_PRELOAD": str(built / "libmallard_latency.so")}
    cost = {}
    for ops in (20_000, 200_000):
        cmd = [str(tiny_dir / "tiny"), "--threads", "1", "--ops", str(ops)]
        cost[ops] = (_instructions(cmd, shim, tmp_path / "on.out")
                     - _instructions(cmd, env, tmp_path / "off.out"))
    per_call = (cost[200_000] - cost[20_000]) / (2 * 180_000)
    print(f"latency shim: {per_call:.1f} instructions per malloc/free, "
          f"{cost[20_000] - 40_000 * per_call:.0f} at start")
    assert 0 < per_call < 25
