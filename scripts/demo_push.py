"""`make demo SCENARIO=push`: from a push to the culprit commit, on this machine.

Starts the API (embedded PostgreSQL), one pinned runner agent and a local forge receiver
(Gitea-shaped commit-status endpoint); makes a bare git repository from this checkout
with Mallard's post-receive hook; pushes one commit to start the branch's history, then
8 commits at once, one of which (in the middle) adds work to the allocator's `free`.
Every commit is judged against the branch's last measured commit (MALLARD_PUSH_MAX_QUEUED
is 1 here, so only the newest is measured at first); its regression spans 8 commits, so
the API bisects it. Prints `injected: <sha7>` before pushing, each commit status the
receiver gets, and ends with the bisection's `culprit: ...` line, once it carries its
`why:` (the differential profile of the culprit's comparison: the function that moved most,
`free`, where the injected loop sits).

The bisection follows larson threads=1 `instructions` (cachegrind, deterministic): on
this shared 2-core VM timed measures move by 17-36% run to run, instruction counts repeat.
The culprit line quotes the slowdown itself, larson's ops_per_sec, from the narrowest
comparison across the culprit that judged it REGRESSED (instructions only when none did):
the injected loop (SLOW_SPINS per `free`) makes larson several times slower, and 6
interleaved trials a side are enough for the rank test to decide such a change.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from demo import (  # noqa: E402
    ROOT,
    STATE,
    VENV_BIN,
    pinned_cpu,
    register_mallard,
    run,
    start,
    start_runner,
    step,
    stop,
    token_file,
)
from mallard_api.harness import ApiProcess  # noqa: E402

WORK = STATE / "push"
FORGE_TOKEN = "demo-forge-token"  # a throwaway: the receiver is local
SLOW_SPINS = 300  # a busy loop per free(): larson at 1 thread runs several times slower
SLOW_FREE = (
    "MLD_EXPORT void free(void* p) { mld_free_inline(p); }",
    "MLD_EXPORT void free(void* p) {\n"
    f"  for (volatile unsigned mld_spin = 0; mld_spin < {SLOW_SPINS}; mld_spin++) {{}}\n"
    "  mld_free_inline(p);\n}",
)


class Receiver:
    """A local forge: prints `status <sha7> <arch> <state> <description>` per status."""

    def __init__(self) -> None:
        self.statuses: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                size = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
                body = json.loads(self.rfile.read(size) or b"{}")
                ok = self.headers.get("Authorization") == f"token {FORGE_TOKEN}"
                if ok and "/statuses/" in self.path:
                    sha = self.path.rsplit("/", 1)[-1]
                    arch = str(body.get("context", "")).split("/")[1:2] or ["?"]
                    print(
                        f"status {sha[:7]} {arch[0]} {body.get('state')} "
                        f"{body.get('description', '')}",
                        flush=True,
                    )
                    outer.statuses.append(body)
                self.send_response(201 if ok else 401)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    out = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, env=env or dict(os.environ)
    )
    if out.returncode != 0:
        raise SystemExit(f"demo: git {' '.join(args)} failed:\n{out.stderr.strip()}")
    return out.stdout.strip()


def commit(work: Path, message: str, edit: Any) -> str:
    edit(work)
    git(work, "add", "-A")
    git(
        work,
        "-c",
        "user.name=Demo",
        "-c",
        "user.email=demo@example.invalid",
        "commit",
        "-q",
        "-m",
        message,
    )
    return git(work, "rev-parse", "HEAD")


def note(n: int) -> Any:
    def edit(work: Path) -> None:
        path = work / "allocator" / "CHANGES.demo"
        with path.open("a") as f:
            f.write(f"change {n}\n")

    return edit


def slow_free(work: Path) -> None:
    path = work / "allocator" / "src" / "override.c"
    text = path.read_text()
    if SLOW_FREE[0] not in text:
        raise SystemExit("demo: allocator/src/override.c has no `free` to slow down")
    path.write_text(text.replace(SLOW_FREE[0], SLOW_FREE[1]))


def wait_jobs_idle(client: httpx.Client, deadline: float, what: str) -> None:
    while time.monotonic() < deadline:
        jobs = client.get("/api/v1/jobs", params={"limit": 500}).raise_for_status().json()
        if jobs and all(j["state"] in ("done", "failed") for j in jobs):
            return
        time.sleep(2)
    raise SystemExit(f"demo: {what} in time")


def wait_runners(client: httpx.Client, archs: set[str], deadline: float) -> None:
    """Until a runner of every arch has registered: a push queues jobs for live arches only."""
    while time.monotonic() < deadline:
        seen = {r["arch"] for r in client.get("/api/v1/runners").raise_for_status().json()}
        if archs <= seen:
            return
        time.sleep(1)
    raise SystemExit(f"demo: no runner registered for {sorted(archs - seen)}")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--port", type=int, default=8331)
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--arm64",
        action="store_true",
        help="an arm64 runner under qemu-aarch64 beside the x86-64 one: each "
        "pushed commit measured on both (emulated timings never judged)",
    )
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    t0 = time.monotonic()
    deadline = t0 + args.timeout
    bare, work = make_repositories()
    receiver = Receiver()
    api_server = ApiProcess({}, log=STATE / "push-api.log", port=args.port, cwd=ROOT)
    api = api_server.url
    env = api_env(api, bare, receiver.url)
    api_server.env = env
    runner_proc = arm_proc = None
    keep_api = False
    try:
        start_api(api_server)
        node = f"demo-push-{platform.node() or 'node'}"
        runner_token = api_server.token("runner", node)
        user_token = api_server.token("user")
        client = register_project(api_server, user_token, bare, receiver.url)
        runner_proc = start_push_runner(api, env, node, runner_token)
        if args.arm64:
            other = str(sorted(os.sched_getaffinity(0))[0])  # not the native runner's core
            arm_proc = start_runner(api, env, f"{node}-arm64", other, arch="aarch64")
        install_hook(bare, api, user_token)
        wait_runners(client, {platform.machine()} | ({"aarch64"} if args.arm64 else set()),
                     deadline)
        injected = push_commits(client, work, deadline)
        b = wait_bisection(client, runner_proc, deadline, args)
        b = wait_why(client, b, deadline)
        step(
            f"bisection #{b['id']}: {len(b['steps']) - 1} rounds, "
            f"{time.monotonic() - t0:.0f} s since the start; "
            f"its page: {api}/ui/bisections/{b['id']}"
        )
        print(b["culprit_line"] or f"culprit: one of {b['culprit_candidates']}", flush=True)
        ok = b["culprit"] == injected
        if args.keep and api_server.proc is not None:
            step(f"--keep: API (pid {api_server.proc.pid}), runner (pid {runner_proc.pid})")
            keep_api, runner_proc, arm_proc = True, None, None
        return 0 if ok else 1
    finally:
        stop(arm_proc, "arm64 runner agent")
        stop(runner_proc, "runner agent")
        if not keep_api and api_server.proc is not None and api_server.proc.poll() is None:
            api_server.stop(30)
            step("stopped API and embedded PostgreSQL")
        receiver.server.shutdown()


def make_repositories() -> tuple[Path, Path]:
    """A bare repository of this checkout's HEAD as `main`, and a clone of it to commit in."""
    if WORK.exists():
        shutil.rmtree(WORK)
    WORK.mkdir(parents=True)
    bare, work = WORK / "mallard.git", WORK / "work"
    head = run(["git", "rev-parse", "HEAD"], dict(os.environ))
    git(WORK, "clone", "-q", "--bare", "--no-local", str(ROOT), str(bare))
    git(bare, "branch", "-f", "main", head)
    git(WORK, "clone", "-q", "-b", "main", str(bare), str(work))
    return bare, work


def api_env(api: str, bare: Path, forge_url: str) -> dict[str, str]:
    """The API's (and the runners') environment: the push suite, 6 trials, one push
    measured at first, bisections by instructions, the local forge allowed."""
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)
    env.update(
        {
            "MALLARD_DATA_DIR": str(WORK / "pgdata"),
            "PATH": f"{VENV_BIN}:{env['PATH']}",
            "MALLARD_RUNNER_REPO_ALLOW": f"file://{bare}",
            "MALLARD_REPO_URL_ALLOW": f"file://{bare}",
            "MALLARD_PUBLIC_URL": api,
            "MALLARD_SUITE": "push",
            "MALLARD_PEERS": "",
            "MALLARD_TRIALS": "6",  # the fewest a rank test decides with an outlier
            "MALLARD_PUSH_MAX_QUEUED": "1",
            "MALLARD_PUSH_BACKFILL": "false",
            "MALLARD_COMPARISON_MAX_FOLLOW_UPS": "0",
            "MALLARD_BISECT_MEASURES": "instructions",
            "MALLARD_FORGE_URL_ALLOW": forge_url,
            "MALLARD_OUTBOX_POLL_SECONDS": "1",
        }
    )
    return env


def start_api(api_server: ApiProcess) -> None:
    step(f"starting the API on {api_server.url} (log: .mallard/push-api.log)")
    try:
        api_server.start(timeout=180)
    except RuntimeError as exc:
        raise SystemExit(
            f"demo: {str(exc).splitlines()[0]}; see .mallard/push-api.log"
        ) from exc


def register_project(api_server: ApiProcess, user_token: str, bare: Path,
                     forge_url: str) -> httpx.Client:
    """Project `mallard` on the bare repository, its forge the local receiver; a client
    with the user's token."""
    api = api_server.url
    admin_token = api_server.token("admin")
    client = httpx.Client(
        base_url=api, timeout=30, headers={"Authorization": f"Bearer {user_token}"}
    )
    register_mallard(api, admin_token, f"file://{bare}")
    httpx.put(
        f"{api}/api/v1/projects/mallard/forge",
        timeout=30,
        headers={"Authorization": f"Bearer {admin_token}"},
        json={
            "kind": "gitea",
            "base_url": forge_url,
            "repo": "demo/mallard",
            "token": FORGE_TOKEN,
        },
    ).raise_for_status()
    return client


def start_push_runner(api: str, env: dict[str, str], node: str,
                      runner_token: str) -> subprocess.Popen[bytes]:
    cpu = pinned_cpu()
    step(f"starting runner agent {node} pinned to CPU {cpu} (log: .mallard/push-runner.log)")
    return start(
        "push-runner",
        [
            str(VENV_BIN / "mallard-runner"),
            "agent",
            "--api",
            api,
            "--token-file",
            str(token_file(WORK / "runner.token", runner_token)),
            "--cpus",
            cpu,
            "--name",
            node,
            "--spool",
            str(WORK / "spool"),
        ],
        env,
    )


def install_hook(bare: Path, api: str, user_token: str, project: str = "mallard") -> None:
    """Mallard's post-receive hook in the bare repository, told where the API is and
    which project it is."""
    hook = bare / "hooks" / "post-receive"
    shutil.copy(ROOT / "api" / "hooks" / "post-receive", hook)
    hook.chmod(0o755)
    for key, value in (
        ("mallard.url", api),
        ("mallard.token", user_token),
        ("mallard.project", project),
    ):
        git(bare, "config", key, value)


def push_commits(client: httpx.Client, work: Path, deadline: float) -> str:
    """Pushes the branch's first commit and waits for it to be measured, then 8 commits at
    once, the 4th slowing `free` down; returns that one's sha."""
    step("pushing the first commit: the start of the branch's history")
    commit(work, "demo: start", note(0))
    git(work, "push", "-q", "origin", "main")
    wait_jobs_idle(client, deadline, "the first commit was not measured")

    shas = []
    injected = ""
    for n in range(1, 9):
        if n == 4:
            injected = commit(work, "allocator: free does some extra work", slow_free)
            shas.append(injected)
        else:
            shas.append(commit(work, f"demo: change {n}", note(n)))
    print(f"injected: {injected[:7]}", flush=True)
    step("pushing 8 commits at once")
    git(work, "push", "-q", "origin", "main")
    return injected


def wait_why(client: httpx.Client, b: dict[str, Any], deadline: float) -> dict[str, Any]:
    """Until the culprit line carries its `why:` (the differential profile of the culprit's
    comparison, a profile job queued after its verdict), or 5 minutes at most."""
    until = min(deadline, time.monotonic() + 300)
    while "; why: " not in (b.get("culprit_line") or "") and time.monotonic() < until:
        time.sleep(2)
        b = client.get(f"/api/v1/bisections/{b['id']}").raise_for_status().json()
    return b


def wait_bisection(client: httpx.Client, runner_proc: subprocess.Popen[bytes],
                   deadline: float, args: argparse.Namespace) -> dict[str, Any]:
    """Until a bisection is done (and, with --arm64, the other arch's verdict settled)."""
    while time.monotonic() < deadline:
        if runner_proc.poll() is not None:
            raise SystemExit("demo: the runner agent exited; see .mallard/push-runner.log")
        done = [
            b
            for b in client.get("/api/v1/bisections", params={"project": "mallard"})
            .raise_for_status()
            .json()
            if b["state"] == "done"
        ]
        if done:
            if args.arm64:  # the other arch's verdict, for its status line
                wait_jobs_idle(client, deadline, "the arm64 verdict did not settle")
            time.sleep(3)  # the culprit's status reaches the receiver
            b: dict[str, Any] = done[0]
            return b
        time.sleep(2)
    raise SystemExit(f"demo: no culprit within {args.timeout:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
