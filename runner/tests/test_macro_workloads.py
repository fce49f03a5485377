"""The macro workloads (runner/workloads/redis.py, python.py): real programs under the
allocator under test. Each starts, measures, prints a valid result line and stops with no
process left behind (checked by process group); a bad param is exit 2 with a clear
message and starts nothing; a failing client or a killed workload takes the server with
it; under libmallard.so the stats file is written by the measured process (the server,
not the driver); and both run through `mallard-runner bench` with mallard and glibc.

Params are small. Waits are bounded by generous deadlines and watch for events (a
server process appearing, a process group emptying); no timing decides a verdict.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mallard_runner.cli import app
from mallard_runner.settings import RUNNER_DIR
from mallard_runner.suites import expand, load_suite
from mallard_wire.results import ResultsIn
from typer.testing import CliRunner

from . import test_workloads
from .conftest import git, write_suite
from .test_workloads import _cmake_build

mallard_lib = test_workloads.mallard_lib  # the fixture: build/allocator/libmallard.so

REPO = Path(__file__).resolve().parents[2]
CONTRACT_KEYS = {"workload", "params", "operations", "seconds", "max_rss_bytes"}
REDIS_SMALL = ["--requests", "2000", "--clients", "10", "--pipeline", "8", "--keyspace", "1000",
               "--value_size", "64"]
PYTHON_SMALL = ["--ops", "120", "--live", "30"]
PEERS = {"jemalloc": "libjemalloc.so.2", "mimalloc": "libmimalloc.so.2",
         "tcmalloc": "libtcmalloc_minimal.so.4"}
DEADLINE = 120.0  # a bound for waits on a loaded machine, never a measured time


@pytest.fixture(scope="session")
def workloads() -> Path:
    """The workloads build (the macro scripts are copied next to the C programs)."""
    out = _cmake_build("release", "-DCMAKE_BUILD_TYPE=Release")
    for name in ("redis", "python", "macro_common.py"):
        assert (out / name).is_file(), f"the workloads build did not install {name}"
    return out


@pytest.fixture(scope="session")
def redis_bins() -> None:
    if not (shutil.which("redis-server") and shutil.which("redis-benchmark")):
        pytest.fail("redis-server/redis-benchmark are not installed (make deps)")


def peer_lib(name: str) -> Path:
    for d in ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"):
        if (p := Path(d) / PEERS[name]).is_file():
            return p
    pytest.skip(f"{PEERS[name]} is not installed (make deps)")


# -- processes ---------------------------------------------------------------------------


def proc_stat(pid: int) -> tuple[str, str, int, int] | None:
    """(comm, state, ppid, pgrp) of a process, or None when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    fields = text[text.rindex(")") + 2:].split()
    return comm, fields[0], int(fields[1]), int(fields[2])


def live_in_group(pgid: int) -> list[tuple[int, str]]:
    """Processes of a group that still run (a zombie has exited: it holds no memory)."""
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := proc_stat(int(d.name))) and st[3] == pgid \
                and st[1] != "Z":
            out.append((int(d.name), st[0]))
    return out


def wait_until(cond: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        if value := cond():
            return value
        time.sleep(0.05)
    pytest.fail(f"gave up waiting for {what}")


def clean_env(tmp: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k != "LD_PRELOAD" and not k.startswith("MALLARD_")}
    env["TMPDIR"] = str(tmp)  # the workload's private directory must be gone afterwards
    env.update(extra)
    return env


def start(argv: list[str], env: dict[str, str],
          cwd: Path | None = None) -> subprocess.Popen[str]:
    """In its own session, so its process group is known and nothing else is in it."""
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=cwd, start_new_session=True)


def run(argv: list[str], env: dict[str, str],
        cwd: Path | None = None) -> tuple[subprocess.Popen[str], str, str]:
    p = start(argv, env, cwd)
    out, err = p.communicate(timeout=600)
    wait_until(lambda: not live_in_group(p.pid), "the workload's process group to empty")
    return p, out, err


def result(out: str, err: str) -> dict[str, Any]:
    lines = out.strip().splitlines()
    assert lines, f"no stdout; stderr:\n{err}"
    data = json.loads(lines[-1])
    assert CONTRACT_KEYS <= set(data), data
    return data


def leftovers(tmp: Path) -> list[str]:
    return [p.name for p in tmp.iterdir() if p.name.startswith("mallard-redis-")]


# -- redis -------------------------------------------------------------------------------


def test_redis_help_lists_every_param(workloads: Path) -> None:
    out = subprocess.run([str(workloads / "redis"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in ("threads", "clients", "pipeline", "requests", "commands", "value_size",
                 "keyspace", "client_cpus"):
        assert f"--{name}" in out.stdout


def test_redis_measures_and_stops_cleanly(workloads: Path, redis_bins: None,
                                          tmp_path: Path) -> None:
    """No preload: the system allocator. Debian links redis with jemalloc, so the workload
    must put glibc's malloc first itself, and says so."""
    p, out, err = run([str(workloads / "redis"), *REDIS_SMALL], clean_env(tmp_path))
    assert p.returncode == 0, err
    d = result(out, err)
    assert d["workload"] == "redis"
    assert d["params"] == {"threads": 1, "clients": 10, "pipeline": 8, "requests": 2000,
                           "commands": "set,get,lpush,lpop", "value_size": 64,
                           "keyspace": 1000, "client_cpus": "auto"}
    assert d["operations"] == 4 * 2000 and d["seconds"] > 0
    for t in ("set", "get", "lpush", "lpop"):
        assert d[f"{t}_ops_per_sec"] > 0
    assert abs(d["seconds"] - sum(2000 / d[f"{t}_ops_per_sec"]
                                  for t in ("set", "get", "lpush", "lpop"))) < 1e-6
    # the client's peak is sampled every 20 ms while it runs: a client this short may be
    # seen only as it starts (a few hundred KiB), so only its presence is checked
    assert d["max_rss_bytes"] > 1 << 20 and d["client_max_rss_bytes"] > 0
    assert d["cpu_seconds"] > 0  # the server's
    assert d["server_malloc"] == "libc.so.6"
    assert d["client_malloc"] != "unknown"
    assert d["redis_version"][0].isdigit()
    server, client = set(d["server_cpus"].split(",")), set(d["client_cpus"].split(","))
    if d["placement"] == "shared":
        assert server == client
    else:
        assert d["placement"] in ("apart", "split") and not server & client
    assert proc_stat(int(d["server_pid"])) is None  # the server was reaped
    assert leftovers(tmp_path) == []


def test_redis_client_apart_from_a_pinned_server(workloads: Path, redis_bins: None,
                                                 tmp_path: Path) -> None:
    """Pinned to one CPU (as a trial is), the client goes to another CPU when there is one."""
    cpus = sorted(os.sched_getaffinity(0))
    p, out, err = run(["taskset", "-c", str(cpus[0]), str(workloads / "redis"), *REDIS_SMALL,
                       "--commands", "set,hset,mset"], clean_env(tmp_path))
    assert p.returncode == 0, err
    d = result(out, err)
    assert d["server_cpus"] == str(cpus[0])
    assert d["operations"] == 3 * 2000 and "mset_ops_per_sec" in d
    if len(cpus) > 1:
        assert d["placement"] == "apart" and d["client_cpus"] != d["server_cpus"]
    p, out, err = run(["taskset", "-c", str(cpus[0]), str(workloads / "redis"), *REDIS_SMALL,
                       "--client_cpus", "same"], clean_env(tmp_path))
    d = result(out, err)
    assert d["placement"] == "shared" and d["client_cpus"] == d["server_cpus"] == str(cpus[0])


def test_redis_io_threads_get_a_cpu_of_their_own(workloads: Path, redis_bins: None,
                                                 tmp_path: Path) -> None:
    """2 server threads on a trial of 2 CPUs and no CPU free apart (the CPUs allowed here
    are the trial's): the io thread is pinned to the second CPU, the main thread and the
    client to the first (placement `threads`); at 1 thread the server and client split."""
    cpus = sorted(os.sched_getaffinity(0))[:2]
    if len(cpus) < 2:
        pytest.skip("needs 2 CPUs")
    pin = ["taskset", "-c", ",".join(map(str, cpus)), str(workloads / "redis"), *REDIS_SMALL]
    p, out, err = run([*pin, "--threads", "2"], clean_env(tmp_path))
    assert p.returncode == 0, err
    d = result(out, err)
    if len(os.sched_getaffinity(0)) == 2:  # no CPU apart: the case the placement is for
        assert (d["placement"], d["server_cpus"], d["client_cpus"], d["io_thread_cpus"]) == \
            ("threads", f"{cpus[0]},{cpus[1]}", str(cpus[0]), str(cpus[1]))
    p, out, err = run([*pin, "--threads", "1"], clean_env(tmp_path))
    d = result(out, err)
    if len(os.sched_getaffinity(0)) == 2:
        assert (d["placement"], d["server_cpus"], d["client_cpus"]) == \
            ("split", str(cpus[0]), str(cpus[1])) and "io_thread_cpus" not in d
    assert leftovers(tmp_path) == []


def test_redis_server_writes_the_stats_file_under_mallard(workloads: Path, redis_bins: None,
                                                          mallard_lib: Path,
                                                          tmp_path: Path) -> None:
    """The path may be relative to the trial's directory (the runner's raw dir can be):
    the server changes directory at start, so the workload makes it absolute."""
    stats = tmp_path / "stats"
    stats.mkdir()
    env = clean_env(tmp_path, LD_PRELOAD=str(mallard_lib), MALLARD_TRANSFER="ring",
                    MALLARD_STATS_FILE="stats/stats-%p.json")
    p, out, err = run([str(workloads / "redis"), *REDIS_SMALL, "--threads", "2"], env,
                      cwd=tmp_path)
    assert p.returncode == 0, err
    d = result(out, err)
    assert d["server_malloc"] == "libmallard.so"
    assert d["client_malloc"] != "libmallard.so"  # the client runs without the allocator
    # one file, the server's: the driver and the client never ran under the allocator
    assert [f.name for f in stats.iterdir()] == [f"stats-{d['server_pid']}.json"]
    counters = json.loads((stats / f"stats-{d['server_pid']}.json").read_text())
    assert counters["transfer"] == "ring"
    assert counters["allocs"] >= d["operations"]  # every request allocates in the server


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_redis_under_each_peer(workloads: Path, redis_bins: None, tmp_path: Path,
                               peer: str) -> None:
    env = clean_env(tmp_path, LD_PRELOAD=str(peer_lib(peer)))
    p, out, err = run([str(workloads / "redis"), *REDIS_SMALL], env)
    assert p.returncode == 0, err
    assert result(out, err)["server_malloc"] == PEERS[peer]


@pytest.mark.parametrize("args, message", [
    (["--clients", "0"], "--clients must be >= 1"),
    (["--threads", "x"], "--threads: 'x' is not an integer"),
    (["--commands", "set,flushall"], "unknown tests ['flushall']"),
    (["--commands", "set,set"], "1 to 6 different tests"),
    (["--requests", "1001", "--pipeline", "8"], "must be a multiple of --pipeline"),
    (["--client_cpus", "4095"], "are not available here"),
    (["--client_cpus", "0;rm"], "is not 'auto', 'same' or a CPU list"),
    (["--bogus", "1"], "unknown parameter '--bogus'"),
    (["--requests"], "--requests needs a value"),
])
def test_redis_bad_param_is_exit_2_and_starts_nothing(workloads: Path, redis_bins: None,
                                                      tmp_path: Path, args: list[str],
                                                      message: str) -> None:
    p, out, err = run([str(workloads / "redis"), *args], clean_env(tmp_path))
    assert p.returncode == 2, (out, err)
    assert message in err and err.startswith("redis: ")
    assert out == ""
    assert leftovers(tmp_path) == []


def test_a_failing_client_stops_the_server(workloads: Path, redis_bins: None,
                                           mallard_lib: Path, tmp_path: Path) -> None:
    """redis-benchmark fails (a stand-in first on PATH): exit 1 with its message, the server
    shut down cleanly (so it still writes its stats), nothing left."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "redis-benchmark").write_text(
        '#!/bin/sh\n[ "$1" = --version ] && exit 0\necho "cannot reach the server" >&2\n'
        "exit 3\n")
    (fake / "redis-benchmark").chmod(0o755)
    stats = tmp_path / "stats"
    stats.mkdir()
    env = clean_env(tmp_path, LD_PRELOAD=str(mallard_lib),
                    MALLARD_STATS_FILE=str(stats / "stats-%p.json"))
    env["PATH"] = f"{fake}:{env['PATH']}"
    p, out, err = run([str(workloads / "redis"), *REDIS_SMALL], env)
    assert p.returncode == 1
    assert "redis-benchmark exited with 3: cannot reach the server" in err
    assert out == ""
    assert len(list(stats.glob("stats-*.json"))) == 1  # the server's, at its clean exit
    assert leftovers(tmp_path) == []


def test_a_crashing_server_is_a_failed_run(workloads: Path, redis_bins: None, crash_lib: Path,
                                          tmp_path: Path) -> None:
    """An allocator that crashes the server (SIGSEGV on its 200000th malloc; glibc's free
    after it, as redis links jemalloc): exit 1 naming the signal, redis's crash report and
    the allocator's own stderr in the message, nothing left."""
    env = clean_env(tmp_path, LD_PRELOAD=f"{crash_lib} libc.so.6", CRASH_AFTER_MALLOCS="200000")
    p, out, err = run([str(workloads / "redis"), "--requests", "40000", "--clients", "10",
                       "--pipeline", "8"], env)
    assert p.returncode == 1 and out == ""
    assert "redis: redis-server died by SIGSEGV" in err
    assert "crashed by signal: 11" in err  # the server's log
    assert "crash_lib: raising SIGSEGV" in err  # the server's stderr is the workload's
    assert leftovers(tmp_path) == []


def _children(workload: int, comm: str, marker: bytes) -> int | None:
    """A live child of the workload named `comm` whose command line has `marker`."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := proc_stat(int(d.name))) and st[2] == workload \
                and st[0] == comm and st[1] != "Z":
            try:
                if marker in (d / "cmdline").read_bytes():
                    return int(d.name)
            except OSError:
                continue
    return None


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_workload_takes_the_server_with_it(workloads: Path, redis_bins: None,
                                                    mallard_lib: Path, tmp_path: Path,
                                                    sig: signal.Signals) -> None:
    """Only the workload's pid is signalled (not its group): SIGTERM stops the server
    cleanly (stats written) and re-raises; SIGKILL leaves it to PR_SET_PDEATHSIG."""
    stats = tmp_path / "stats"
    stats.mkdir()
    env = clean_env(tmp_path, LD_PRELOAD=str(mallard_lib),
                    MALLARD_STATS_FILE=str(stats / "stats-%p.json"))
    p = start([str(workloads / "redis"), "--requests", "400000000", "--clients", "4"], env)
    # the client runs once the server answered PING (the server has its signal handlers)
    wait_until(lambda: _children(p.pid, "redis-benchmark", b"--csv"), "the client to start")
    server = _children(p.pid, "redis-server", b"unixsocket")
    assert server is not None
    os.kill(p.pid, sig)
    _, err = p.communicate(timeout=DEADLINE)
    assert p.returncode == -sig
    wait_until(lambda: not live_in_group(p.pid), "the server and client to die")
    assert proc_stat(server) is None or proc_stat(server)[1] == "Z"  # type: ignore[index]
    if sig == signal.SIGTERM:
        assert "stopped by SIGTERM" in err
        assert [f.name for f in stats.iterdir()] == [f"stats-{server}.json"]
        assert leftovers(tmp_path) == []


# -- python ------------------------------------------------------------------------------


def test_python_help_lists_every_param(workloads: Path) -> None:
    out = subprocess.run([str(workloads / "python"), "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    for name in ("threads", "ops", "live", "seed"):
        assert f"--{name}" in out.stdout


def test_python_is_fixed_work_whatever_the_threads(workloads: Path, tmp_path: Path) -> None:
    digests = set()
    for threads in (1, 3):
        p, out, err = run([str(workloads / "python"), *PYTHON_SMALL, "--threads", str(threads)],
                          clean_env(tmp_path))
        assert p.returncode == 0, err
        d = result(out, err)
        assert d["workload"] == "python" and d["operations"] == 120 and d["seconds"] > 0
        assert d["params"] == {"threads": threads, "ops": 120, "live": 30, "seed": 42}
        assert d["max_rss_bytes"] > 1 << 20
        digests.add(d["digest"])
    assert len(digests) == 1  # the same operations, whichever thread made or freed them
    p, out, err = run([str(workloads / "python"), *PYTHON_SMALL, "--seed", "7"],
                      clean_env(tmp_path))
    assert result(out, err)["digest"] not in digests


def test_python_objects_come_from_the_allocator_under_test(workloads: Path, mallard_lib: Path,
                                                           tmp_path: Path) -> None:
    """PYTHONMALLOC=malloc: every object is a malloc, so Mallard counts far more allocations
    than operations; the process re-execs itself once, so exactly one stats file."""
    stats = tmp_path / "stats"
    stats.mkdir()
    env = clean_env(tmp_path, LD_PRELOAD=str(mallard_lib), MALLARD_TRANSFER="mutex",
                    MALLARD_STATS_FILE=str(stats / "stats-%p.json"))
    p, out, err = run([str(workloads / "python"), *PYTHON_SMALL, "--threads", "2"], env)
    assert p.returncode == 0, err
    files = list(stats.iterdir())
    assert [f.name for f in files] == [f"stats-{p.pid}.json"]  # the measured process
    counters = json.loads(files[0].read_text())
    assert counters["transfer"] == "mutex"
    assert counters["allocs"] > 500 * 120
    assert counters["remote_frees"] > 0  # results are freed by the other thread


@pytest.mark.parametrize("args, message", [
    (["--threads", "0"], "--threads must be >= 1"),
    (["--ops", "many"], "--ops: 'many' is not an integer"),
    (["--live", "-1"], "--live must be >= 1"),
    (["--heap", "1"], "unknown parameter '--heap'"),
])
def test_python_bad_param_is_exit_2(workloads: Path, tmp_path: Path, args: list[str],
                                    message: str) -> None:
    p, out, err = run([str(workloads / "python"), *args], clean_env(tmp_path))
    assert p.returncode == 2 and message in err and out == ""


@pytest.mark.parametrize("peer", sorted(PEERS))
def test_python_under_each_peer(workloads: Path, tmp_path: Path, peer: str) -> None:
    env = clean_env(tmp_path, LD_PRELOAD=str(peer_lib(peer)))
    p, out, err = run([str(workloads / "python"), *PYTHON_SMALL, "--threads", "2"], env)
    assert p.returncode == 0, err
    assert result(out, err)["operations"] == 120


# -- the suite and the real runner -------------------------------------------------------


def test_macro_suite_names_the_macro_workloads() -> None:
    suite = load_suite("macro", RUNNER_DIR / "suites")
    assert set(suite.workloads) == {"redis", "python"}
    assert {"mallard:transfer=mutex", "mallard:transfer=ring", "glibc"} <= set(suite.allocators)
    for c in expand(suite):
        assert (RUNNER_DIR / "workloads" / f"{c.workload}.py").is_file()
        assert "threads" in c.params
        if c.workload == "redis":  # else every trial is exit 2
            assert int(c.params["requests"]) % int(c.params["pipeline"]) == 0


def test_through_mallard_runner_bench(workloads: Path, redis_bins: None, tmp_path: Path,
                                      make_settings: Any) -> None:
    """The real executor: mallard (built from this checkout) and glibc, one trial each;
    mallard's counters are the server's (the file redis-server wrote at its exit)."""
    settings = make_settings(workloads_dir=workloads)
    write_suite(settings, "m", {
        "trials": 1, "warmup": 0, "threads": [1],
        "allocators": ["mallard:transfer=ring", "glibc"],
        "workloads": {"redis": {"params": {"requests": 2000, "clients": 10, "pipeline": 8,
                                           "keyspace": 1000}},
                      "python": {"params": {"ops": 120, "live": 30}}}})
    env = {"MALLARD_RUNNER_WORKLOADS_DIR": str(workloads),
           "MALLARD_RUNNER_SUITES_DIR": str(settings.suites_dir),
           "MALLARD_RUNNER_STATE_DIR": str(settings.state_dir), "COLUMNS": "200"}
    out = tmp_path / "r.json"
    raw = tmp_path / "raw"
    r = CliRunner().invoke(app, ["bench", "--suite", "m", "--commit", git(REPO, "rev-parse",
                                                                          "HEAD"),
                                 "--cpus", str(sorted(os.sched_getaffinity(0))[0]),
                                 "--json", str(out), "--raw-dir", str(raw)], env=env)
    assert r.exit_code == 0, r.output
    res = ResultsIn.model_validate_json(out.read_text())
    assert len(res.trials) == 4
    for t in res.trials:
        assert t.ok, t.stderr_tail
        m = t.measures
        assert m["ops_per_sec"] > 0 and m["max_rss_bytes"] > 0
        if t.workload.name == "redis":
            assert m["client_max_rss_bytes"] > 0 and m["set_ops_per_sec"] > 0
        if t.allocator.name == "mallard":
            assert t.counters is not None and t.counters["transfer"] == "ring"
            assert t.counters["allocs"] >= 4 * 2000
        else:
            assert t.counters is None
    redis_mallard = next(t for t in res.trials
                         if t.workload.name == "redis" and t.allocator.name == "mallard")
    stdout = next(p for p in raw.rglob("stdout") if '"server_malloc": "libmallard.so"'
                  in p.read_text())
    server_pid = json.loads(stdout.read_text().strip().splitlines()[-1])["server_pid"]
    assert [f.name for f in stdout.parent.glob("stats-*.json")] == [f"stats-{server_pid}.json"]
    assert redis_mallard.counters is not None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))
