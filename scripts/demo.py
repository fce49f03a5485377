"""`make demo`: the whole Mallard pipeline on this machine, without Docker.

Starts the API (which starts a real embedded PostgreSQL and migrates it), one
runner agent pinned to one core, posts a comparison of the allocator's two
transfer-cache variants on the quick suite (peers as references) through the
REST API, follows it to the end and prints the report. Logs go to .mallard/.
With --keep the stack stays up; otherwise it is shut down cleanly.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
from mallard_api.harness import ApiProcess
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".mallard"
VENV_BIN = ROOT / ".venv" / "bin"
PEERS = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]
console = Console()


def step(msg: str) -> None:
    console.print(f"[bold cyan]demo:[/] {msg}")


def run(cmd: list[str], env: dict[str, str]) -> str:
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"demo: {' '.join(cmd)} failed:\n{out.stderr.strip()}")
    return out.stdout.strip()


def start(name: str, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = open(STATE / f"{name}.log", "wb")  # noqa: SIM115 - lives as long as the process
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def stop(proc: subprocess.Popen[bytes] | None, name: str) -> None:
    if proc is None or proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    step(f"stopped {name}")


def pinned_cpu() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1])  # the last core: the first one keeps the API and PostgreSQL


def follow(client: httpx.Client, cid: int, runner: subprocess.Popen[bytes]) -> dict:
    """Poll the comparison until it settles, showing the jobs' progress."""
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
                  TextColumn("{task.completed}/{task.total} jobs"), TimeElapsedColumn(),
                  console=console) as progress:
        task = progress.add_task("comparison queued", total=1)
        while True:
            if runner.poll() is not None:
                raise SystemExit("demo: the runner agent exited; see .mallard/runner.log")
            comp = client.get(f"/api/v1/comparisons/{cid}").raise_for_status().json()
            jobs = comp.get("jobs") or []
            done = sum(1 for j in jobs if j.get("state") in ("done", "failed"))
            running = [j for j in jobs if j.get("state") == "running"]
            desc = f"comparison {cid}: {comp['state']}"
            if running:
                job = running[0]
                desc += (f" (job {job['job_id']}, round {job['round']}, "
                         f"{job['trials']} trials, running)")
            progress.update(task, description=desc, total=max(len(jobs), 1), completed=done)
            if comp["state"] in ("done", "failed"):
                return comp
            time.sleep(2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--port", type=int, default=8321)
    parser.add_argument("--trials", type=int, default=5)
    args = parser.parse_args()

    STATE.mkdir(exist_ok=True)
    commit = run(["git", "rev-parse", "HEAD"], dict(os.environ))
    dirty = run(["git", "status", "--porcelain", "--", "allocator"], dict(os.environ))
    if dirty:
        step("[yellow]note:[/] allocator/ has uncommitted changes; "
             "the demo measures the committed HEAD")
    api_server = ApiProcess({}, log=STATE / "api.log", port=args.port, cwd=ROOT)
    api = api_server.url
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # embedded PostgreSQL, the default way
    env.update({"MALLARD_DATA_DIR": str(STATE / "pgdata"), "PATH": f"{VENV_BIN}:{env['PATH']}",
                # the runner fetches this checkout, and the API lets projects name it
                "MALLARD_RUNNER_REPO_ALLOW": f"file://{ROOT}",
                "MALLARD_REPO_URL_ALLOW": f"file://{ROOT}",
                "MALLARD_PUBLIC_URL": api})

    api_server.env = env
    keep_api = False
    runner_proc = None
    try:
        step(f"starting the API on {api} (log: .mallard/api.log)")
        with console.status("waiting for the API (embedded PostgreSQL starts and migrates first)"):
            try:
                api_server.start(timeout=180)
            except RuntimeError as exc:
                raise SystemExit(f"demo: {str(exc).splitlines()[0]}; see .mallard/api.log") \
                    from exc
        node = f"demo-{platform.node() or 'node'}"
        step("creating tokens with the admin CLI (stored hashed)")
        runner_token = api_server.token("runner", node)
        user_token = api_server.token("user")
        client = httpx.Client(base_url=api, timeout=30,
                              headers={"Authorization": f"Bearer {user_token}"})
        client.put("/api/v1/projects/mallard", json={
            "repo_url": str(ROOT), "allocator_dir": "allocator", "default_branch": "main",
        }).raise_for_status()

        cpu = pinned_cpu()
        step(f"starting runner agent {node} pinned to CPU {cpu} (log: .mallard/runner.log)")
        runner_proc = start("runner", [str(VENV_BIN / "mallard-runner"), "agent", "--api", api,
                                       "--token", runner_token, "--cpus", cpu, "--name", node,
                                       "--spool", str(STATE / "spool")], env)

        step(f"posting a comparison: mallard@{commit[:7]} transfer=mutex vs transfer=ring, "
             f"quick suite, peers {', '.join(PEERS)}")
        comp = client.post("/api/v1/comparisons", json={
            "project": "mallard", "arch": platform.machine(), "suite": "quick",
            "trials": args.trials, "peers": PEERS,
            "base": {"commit": commit, "variant": "transfer=mutex"},
            "head": {"commit": commit, "variant": "transfer=ring"},
        }).raise_for_status().json()
        final = follow(client, comp["id"], runner_proc)
        report = client.get(f"/api/v1/comparisons/{comp['id']}/report").raise_for_status().text
        console.rule("comparison report")
        print(report)
        console.rule()
        step(f"API docs:   {api}/docs")
        step(f"the report: {api}/api/v1/comparisons/{comp['id']}/report")
        step(f"the page:   {api}/ui/comparisons/{comp['id']} (sign in with {user_token})")
        if args.keep:
            assert api_server.proc is not None
            api_pid = api_server.proc.pid
            step(f"--keep: API (pid {api_pid}) and runner (pid {runner_proc.pid}) keep "
                 f"running; stop them with: kill -TERM -{api_pid} -{runner_proc.pid}")
            keep_api, runner_proc = True, None
        return 0 if final["state"] == "done" else 1
    finally:
        stop(runner_proc, "runner agent")
        if not keep_api and api_server.proc is not None and api_server.proc.poll() is None:
            api_server.stop(30)
            step("stopped API and embedded PostgreSQL")


if __name__ == "__main__":
    sys.exit(main())
