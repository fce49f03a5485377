#!/usr/bin/python3 -I
"""redis: Debian's redis-server under the allocator under test, driven by redis-benchmark.

The server inherits the trial's LD_PRELOAD and MALLARD_* settings; the driver (this
script) and the client run without them. The server listens on a private unix socket
(no TCP port), with persistence off, pinned to the trial's CPUs; redis-benchmark runs a
fixed number of requests per command, pinned apart from the server when a CPU is free.
The run is valid when the client finished every test and the server's command counters
show exactly the requests sent. `max_rss_bytes` is the server's peak RSS (VmHWM).
"""

from __future__ import annotations

import csv
import io
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

sys.dont_write_bytecode = True  # no __pycache__ beside the installed scripts
sys.path.insert(0, os.path.dirname(os.path.realpath(__file__)))
import macro_common as mc  # noqa: E402

ABOUT = ("redis-server (Debian) under the allocator under test, loaded by redis-benchmark "
         "without it: fixed requests, several clients, pipelining.")

# redis-benchmark test -> the server command it sends once per request (checked in the
# server's INFO commandstats). Tests that send other commands too are not offered.
TESTS = {"set": "set", "get": "get", "incr": "incr", "lpush": "lpush", "rpush": "rpush",
         "lpop": "lpop", "rpop": "rpop", "sadd": "sadd", "hset": "hset", "spop": "spop",
         "zadd": "zadd", "zpopmin": "zpopmin", "mset": "mset"}


def _check_commands(text: str) -> str | None:
    names = text.split(",")
    unknown = [n for n in names if n not in TESTS]
    if unknown or not names:
        return f"names unknown tests {unknown}: choose from {','.join(TESTS)}"
    if len(set(names)) != len(names) or len(names) > 6:
        return "must name 1 to 6 different tests"
    return None


def _check_client_cpus(text: str) -> str | None:
    if text in ("auto", "same"):
        return None
    try:
        mc.parse_cpu_list(text)
    except ValueError:
        return "is not 'auto', 'same' or a CPU list like 0 or 2-3"
    return None


PARAMS = [
    mc.Param("threads", 1, "server threads: redis io-threads (1 = the main thread only)", 1, 16),
    mc.Param("clients", 50, "parallel client connections (redis-benchmark -c)", 1, 10000),
    mc.Param("pipeline", 16, "requests per pipeline (redis-benchmark -P)", 1, 1000),
    mc.Param("requests", 50000, "requests per test, a multiple of pipeline (-n)", 1, 10**9),
    mc.Param("commands", "set,get,lpush,lpop", "redis-benchmark tests, in order (-t)",
             check=_check_commands),
    mc.Param("value_size", 128, "value bytes of SET/GET/LPUSH... (-d)", 1, 1 << 20),
    mc.Param("keyspace", 100000, "random keys drawn from this many (-r)", 1, 10**9),
    mc.Param("client_cpus", "auto", "client CPUs: auto (a CPU apart from the server's if "
             "one is free), same, or a CPU list", check=_check_client_cpus),
]

READY_SECONDS = 60.0  # a loaded machine can be slow to start a server; a bound, not a timing


def placement(choice: str, trial: list[int], threads: int = 1) -> tuple[list[int], list[int], str]:
    """(server CPUs, client CPUs, how) from the param and the CPUs the trial pinned us to.
    `auto` without a free CPU: the client on the trial's last CPU and the server on the
    others (`split`) while they hold a CPU per server thread; else (`threads`: io threads
    with fewer CPUs than threads + client) the server on all of them, its threads pinned one
    by one (:func:`pin_threads`), the client beside the main thread."""
    if choice == "same":
        return trial, trial, "shared"
    if choice != "auto":
        want = mc.parse_cpu_list(choice)
        if not mc.cpus_usable(want):
            print(f"{mc.NAME}: --client_cpus: CPUs {choice} are not available here "
                  f"(allowed: {mc.cpu_list_text(mc.allowed_cpus())})", file=sys.stderr)
            sys.exit(2)
        return trial, want, "apart" if not set(want) & set(trial) else "overlapping"
    for cpu in (c for c in mc.allowed_cpus() if c not in trial):
        if mc.cpus_usable([cpu]):
            return trial, [cpu], "apart"
    if len(trial) >= 2 and threads <= len(trial) - 1:
        return trial[:-1], trial[-1:], "split"
    if len(trial) >= 2:
        return trial, trial[:1], "threads"
    return trial, trial, "shared"


def pin_threads(pid: int, cpus: list[int]) -> dict[str, int]:
    """Pin redis's io threads one to a CPU of cpus[1:] (round robin) and every other thread
    (main, bio) to cpus[0]: {thread name: CPU}. Its io threads and main thread busy-wait for
    each other (networking.c's IOThreadMain and the main thread's wait for pending io):
    two of them on one CPU wait out each other's time slices (~50,000 requests/s at 2
    threads on 2 CPUs, whatever the allocator); the main thread blocks in epoll between
    batches, when the client, beside it, runs."""
    pinned: dict[str, int] = {}
    io = 0
    for tid in sorted(int(t) for t in os.listdir(f"/proc/{pid}/task")):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                name = f.read().strip()
        except OSError:
            continue  # a thread that ended
        if name.startswith("io_thd_"):
            cpu = cpus[1 + io % (len(cpus) - 1)]
            io += 1
        else:
            cpu = cpus[0]
        os.sched_setaffinity(tid, {cpu})
        pinned[f"{name}:{tid}"] = cpu
    return pinned


def resp_command(path: str, *args: str, timeout: float = 30.0) -> str:
    """One command over the unix socket; the reply's text (simple or bulk string)."""
    payload = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(path)
        s.sendall(payload.encode())
        buf = b""
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            buf += chunk
        head, _, rest = buf.partition(b"\r\n")
        if head.startswith(b"-"):
            raise ConnectionError(head[1:].decode(errors="replace"))
        if head.startswith(b"$"):
            size = int(head[1:])
            while len(rest) < size + 2:
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("connection closed")
                rest += chunk
            return rest[:size].decode(errors="replace")
        return head[1:].decode(errors="replace")


def malloc_binding(program: str, env: dict[str, str]) -> str:
    """The library `program`'s malloc binds to with `env` (the dynamic linker's answer)."""
    probe_env = {k: v for k, v in env.items() if k != "MALLARD_STATS_FILE"}
    probe_env["LD_DEBUG"] = "bindings"
    out = subprocess.run([program, "--version"], env=probe_env, capture_output=True,
                         text=True, timeout=60)
    if out.returncode != 0:
        own = [ln for ln in out.stderr.splitlines() if not re.match(r"\s*\d+:\s", ln)]
        mc.fail(f"{program} --version {mc.exit_text(out.returncode)} with "
                f"LD_PRELOAD={env.get('LD_PRELOAD', '')}" + "".join(f"\n{ln}" for ln in own[-5:]))
    m = re.search(r"binding file \S+ \[\d+\] to (\S+) \[\d+\]: normal symbol `malloc'",
                  out.stderr)
    return os.path.basename(m.group(1)) if m else "unknown"


def log_tail(path: str, lines: int = 10) -> str:
    """The end of the server's log; for a crash, its report's first lines instead."""
    try:
        with open(path, errors="replace") as f:
            text = f.readlines()
    except OSError:
        return "(no log)"
    crash = next((i for i, ln in enumerate(text) if "crashed by signal" in ln), None)
    keep = text[crash:crash + lines] if crash is not None else text[-lines:]
    return "".join(keep).rstrip()


def server_gone(server: subprocess.Popen[bytes], log: str, when: str) -> None:
    """Fail with the server's end when it has exited on its own."""
    if server.poll() is not None:
        mc.fail(f"redis-server {mc.exit_text(server.returncode)} {when}:\n" + log_tail(log))


def parse_benchmark_csv(text: str, tests: list[str]) -> dict[str, float]:
    """redis-benchmark --csv -> {test: requests per second}; only the tests asked for."""
    rps: dict[str, float] = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) < 2 or row[0] == "test":
            continue
        name = row[0].split(" ")[0].lower()  # "MSET (10 keys)" -> mset
        if name in tests:
            rps[name] = float(row[1])
    return rps


def command_calls(info: str) -> dict[str, int]:
    """INFO commandstats -> {command: calls}."""
    calls: dict[str, int] = {}
    for m in re.finditer(r"^cmdstat_([a-z|]+):calls=(\d+)", info, re.M):
        calls[m.group(1)] = int(m.group(2))
    return calls


def run(p: dict[str, Any], allocator_env: dict[str, str]) -> None:
    if p["requests"] % p["pipeline"]:
        print(f"{mc.NAME}: --requests ({p['requests']}) must be a multiple of --pipeline "
              f"({p['pipeline']}): redis-benchmark sends whole pipelines", file=sys.stderr)
        sys.exit(2)
    tests: list[str] = p["commands"].split(",")
    server_bin, bench_bin = shutil.which("redis-server"), shutil.which("redis-benchmark")
    if not server_bin or not bench_bin:
        mc.fail("redis-server and redis-benchmark are needed: apt-get install redis-server "
                "redis-tools (scripts/install-deps.sh)")
    trial = sorted(os.sched_getaffinity(0))
    server_cpus, client_cpus, how = placement(p["client_cpus"], trial, p["threads"])
    client_env, server_env = environments(allocator_env)
    server_malloc, client_malloc = check_bindings(server_bin, bench_bin, server_env, client_env)

    tmp = tempfile.mkdtemp(prefix="mallard-redis-")
    sock, log = os.path.join(tmp, "redis.sock"), os.path.join(tmp, "server.log")
    started: list[subprocess.Popen[bytes]] = []  # stopped last-started first, whatever happens
    try:
        # its stderr is the workload's (the allocator's own messages reach the trial)
        server = mc.spawn(server_argv(server_bin, p, tmp, sock, log), server_env, server_cpus,
                          subprocess.DEVNULL, None)
        started.append(server)
        wait_ready(server, sock, log)
        redis_version = re.search(r"redis_version:(\S+)", resp_command(sock, "INFO", "server"))
        # its io threads start with the server, before it answers
        io_cpus = pin_io_threads(server, server_cpus, p["threads"]) if how == "threads" else ""
        code, bench_out, bench_err, client_hwm = benchmark(
            started, bench_argv(bench_bin, sock, p), client_env, client_cpus)
        server_gone(server, log, "during the benchmark")
        rps = checked_rates(p, tests, sock, code, bench_out, bench_err)
        server_hwm, server_ru = shut_down(server, sock, log)
    finally:
        mc.hold_signals()
        for proc in reversed(started):
            mc.stop(proc)
        shutil.rmtree(tmp, ignore_errors=True)

    seconds = sum(p["requests"] / rps[t] for t in tests)
    mc.print_result(
        "redis", p, p["requests"] * len(tests), seconds, server_hwm,
        client_max_rss_bytes=client_hwm,
        # the server is where the allocator under test works: its CPU time is the run's
        cpu_seconds=round(server_ru.ru_utime + server_ru.ru_stime, 6),
        **{f"{t}_ops_per_sec": rps[t] for t in tests},
        server_cpus=mc.cpu_list_text(server_cpus), client_cpus=mc.cpu_list_text(client_cpus),
        placement=how, **({"io_thread_cpus": io_cpus} if io_cpus else {}),
        server_malloc=server_malloc, client_malloc=client_malloc,
        server_pid=str(server.pid), redis_version=redis_version.group(1) if redis_version
        else "unknown")


def environments(allocator_env: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """The client's environment (the driver's: no LD_PRELOAD, no MALLARD_*) and the server's
    (the allocator under test's)."""
    base = dict(os.environ)
    client_env = base  # the driver's environment: no LD_PRELOAD, no MALLARD_*
    server_env = {**base, **allocator_env}
    if "MALLARD_STATS_FILE" in server_env:  # redis-server chdirs to its --dir at start
        server_env["MALLARD_STATS_FILE"] = os.path.abspath(server_env["MALLARD_STATS_FILE"])
    # No preload means the system allocator (glibc). Debian links redis with jemalloc, so
    # glibc's malloc is put first explicitly; a preload of libc changes nothing else.
    server_env.setdefault("LD_PRELOAD", "libc.so.6")
    return client_env, server_env


def check_bindings(server_bin: str, bench_bin: str, server_env: dict[str, str],
                   client_env: dict[str, str]) -> tuple[str, str]:
    """The libraries the server's and the client's malloc bind to; fails unless the server's
    is the preloaded one."""
    expected = os.path.basename(server_env["LD_PRELOAD"].replace(":", " ").split()[0])
    server_malloc = malloc_binding(server_bin, server_env)
    if server_malloc != expected:
        mc.fail(f"redis-server's malloc binds to {server_malloc}, not to {expected} "
                f"(LD_PRELOAD={server_env['LD_PRELOAD']})")
    return server_malloc, malloc_binding(bench_bin, client_env)


def server_argv(server_bin: str, p: dict[str, Any], tmp: str, sock: str, log: str) -> list[str]:
    """redis-server on a private unix socket, persistence off, `threads` io threads."""
    return [server_bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm",
            "700", "--save", "", "--appendonly", "no", "--daemonize", "no",
            "--dir", tmp, "--logfile", log, "--io-threads", str(p["threads"]),
            "--io-threads-do-reads", "yes" if p["threads"] > 1 else "no"]


def bench_argv(bench_bin: str, sock: str, p: dict[str, Any]) -> list[str]:
    return [bench_bin, "-s", sock, "-c", str(p["clients"]), "-n", str(p["requests"]),
            "-P", str(p["pipeline"]), "-d", str(p["value_size"]),
            "-r", str(p["keyspace"]), "-t", p["commands"], "--csv"]


def wait_ready(server: subprocess.Popen[bytes], sock: str, log: str) -> None:
    """Until the server answers PING; fails if it exits or is not ready in time."""
    deadline = time.monotonic() + READY_SECONDS
    while True:
        server_gone(server, log, "before it was ready")
        try:
            if resp_command(sock, "PING", timeout=5) == "PONG":
                break
        except OSError:
            pass
        if time.monotonic() > deadline:
            mc.fail(f"redis-server not ready after {READY_SECONDS:g}s:\n" + log_tail(log))
        time.sleep(0.02)


def pin_io_threads(server: subprocess.Popen[bytes], server_cpus: list[int],
                   threads: int) -> str:
    """Pins the server's io threads one per CPU; the CPUs they are on, as a list text."""
    pinned = pin_threads(server.pid, server_cpus)
    io = sorted({c for n, c in pinned.items() if n.startswith("io_thd_")})
    if len(io) != min(threads - 1, len(server_cpus) - 1):
        mc.fail(f"redis-server's io threads were not found to pin: {pinned}")
    return mc.cpu_list_text(io)


def benchmark(started: list[subprocess.Popen[bytes]], argv: list[str],
              client_env: dict[str, str], client_cpus: list[int]) -> tuple[int, str, str, int]:
    """Runs redis-benchmark (appended to `started`): its exit code, stdout, stderr and peak
    RSS, sampled while it runs."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        client = mc.spawn(argv, client_env, client_cpus, out, err)
        started.append(client)
        client_hwm = 0
        while client.poll() is None:  # the client's peak RSS, sampled while it runs
            client_hwm = max(client_hwm, mc.vm_hwm_bytes(client.pid) or 0)
            time.sleep(0.02)
        out.seek(0)
        err.seek(0)
        bench_out = out.read().decode(errors="replace")
        bench_err = err.read().decode(errors="replace")
    return client.returncode, bench_out, bench_err, client_hwm


def checked_rates(p: dict[str, Any], tests: list[str], sock: str, code: int, bench_out: str,
                  bench_err: str) -> dict[str, float]:
    """Requests per second by test; fails unless the client finished every test and the
    server counted exactly the requests sent."""
    if code != 0:
        mc.fail(f"redis-benchmark {mc.exit_text(code)}: "
                f"{(bench_err or bench_out).strip()[-2000:]}")
    rps = parse_benchmark_csv(bench_out, tests)
    missing = [t for t in tests if not rps.get(t)]
    if missing:
        mc.fail(f"redis-benchmark reported no rate for {missing}:\n{bench_out[-2000:]}")
    calls = command_calls(resp_command(sock, "INFO", "commandstats"))
    wrong = {t: calls.get(TESTS[t], 0) for t in tests if calls.get(TESTS[t]) != p["requests"]}
    if wrong:
        mc.fail(f"the server counted {wrong} calls, not {p['requests']} per test")
    return rps


def shut_down(server: subprocess.Popen[bytes], sock: str,
              log: str) -> tuple[int, resource.struct_rusage]:
    """The server's peak RSS, read before it stops, and its resource usage at exit."""
    server_hwm = mc.vm_hwm_bytes(server.pid)  # before shutdown: the run's peak
    if server_hwm is None:
        mc.fail("cannot read the server's peak RSS from /proc")
    try:
        resp_command(sock, "SHUTDOWN", "NOSAVE")
    except OSError:
        pass  # the server closes the connection as it exits
    waited = mc.wait_with_rusage(server, READY_SECONDS)
    if waited is None:
        mc.fail("redis-server did not exit after SHUTDOWN NOSAVE:\n" + log_tail(log))
    code, server_ru = waited
    if code != 0:
        mc.fail(f"redis-server {mc.exit_text(code)} at shutdown:\n" + log_tail(log))
    return server_hwm, server_ru


def main() -> None:
    allocator_env = mc.reexec_without_allocator()
    params = mc.parse_params(ABOUT, PARAMS, sys.argv[1:])
    mc.trap_signals()
    try:
        run(params, allocator_env)
    except mc.Interrupted as e:
        print(f"{mc.NAME}: stopped by {e}", file=sys.stderr, flush=True)
        mc.die_by(e.signum)


if __name__ == "__main__":
    main()
