"""`make demo`: the whole Mallard pipeline on this machine, without Docker.

Starts the API (which starts a real embedded PostgreSQL and migrates it), one
runner agent pinned to one core, posts a comparison of the allocator's two
transfer-cache variants on the quick suite (peers as references) through the
REST API, follows it to the end and prints the report. Logs go to .mallard/.
With --keep the stack stays up; otherwise it is shut down cleanly.

With --arm64 a second runner agent measures arm64 beside it: the allocator and the
workloads cross-built and run under qemu-aarch64 (`start_runner(..., arch="aarch64")`,
an emulated testbed whose timings are shown, never judged), and the demo also posts the
comparison for arm64 on a small part of the suite.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
from mallard_api.harness import ApiProcess, mint_token
from mallard_wire.recipes import RECIPE_FILE, read_recipe_file
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

ROOT = Path(__file__).resolve().parent.parent
STATE = ROOT / ".mallard"
VENV_BIN = ROOT / ".venv" / "bin"
PEERS = ["glibc", "jemalloc", "mimalloc", "tcmalloc"]
console = Console()


def step(msg: str) -> None:
    console.print(f"[bold cyan]demo:[/] {msg}", soft_wrap=True)  # URLs stay on one line


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


def token_file(path: Path, token: str) -> Path:
    """The runner's token in a file only this user may read (the agent reads it from
    there, never from its environment or command line)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")
    return path


def start_runner(api: str, env: dict[str, str], name: str, cpu: str,
                 arch: str | None = None) -> subprocess.Popen[bytes]:
    """A runner agent with its own token, spool and log (.mallard/runner[-ARCH].log).
    `arch`: another architecture than the host's, cross-built and run under qemu-user
    (`aarch64` on an x86-64 host; runner/README.md); None: the host's own."""
    token = mint_token(env, "runner", name, ROOT)
    suffix = f"-{arch}" if arch else ""
    cmd = [str(VENV_BIN / "mallard-runner"), "agent", "--api", api, "--token-file",
           str(token_file(STATE / f"runner{suffix}.token", token)), "--cpus", cpu, "--name",
           name, "--spool", str(STATE / f"spool{suffix}")]
    step(f"starting runner agent {name}{' (' + arch + ', emulated)' if arch else ''} pinned "
         f"to CPU {cpu} (log: .mallard/runner{suffix}.log)")
    return start(f"runner{suffix}", cmd + (["--arch", arch] if arch else []), env)


def pinned_cpu() -> str:
    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1])  # the last core: the first one keeps the API and PostgreSQL


def register(api: str, admin_token: str, name: str, repo_url: str, recipe_file: Path,
             branch: str = "main") -> None:
    """Project `name` on `repo_url` with the recipe of `recipe_file` (a TOML file with an
    [allocator] table), as an admin registers it: the one thing a repository need not
    carry."""
    recipe = read_recipe_file(recipe_file.read_text())
    assert recipe is not None, f"{recipe_file} has no [allocator] table"
    with httpx.Client(base_url=api, timeout=30,
                      headers={"Authorization": f"Bearer {admin_token}"}) as admin:
        admin.put(f"/api/v1/projects/{name}", json={
            "repo_url": repo_url, "default_branch": branch,
            "recipe": recipe.model_dump(mode="json", exclude_defaults=True),
        }).raise_for_status()


def register_mallard(api: str, admin_token: str, repo_url: str) -> None:
    """Project `mallard`: Mallard's own allocator is one project like any other, with the
    recipe of this repository's .mallard.toml."""
    register(api, admin_token, "mallard", repo_url, ROOT / RECIPE_FILE)


@contextmanager
def keep_off(cpu: str) -> Iterator[None]:
    """What this process starts inside the block (the API and its embedded PostgreSQL)
    stays off the runner's CPU for good: the children keep the CPU set they were started
    with. The runner agent is started after the block, allowed on its CPU (it checks that
    it may pin there), and its workloads are what runs there. A machine with one CPU has
    nowhere else to go."""
    before = os.sched_getaffinity(0)
    others = set(before) - {int(cpu)}
    if others:
        os.sched_setaffinity(0, others)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


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
            time.sleep(1)


@dataclass
class Stack:
    """The running demo: the API (embedded PostgreSQL), one runner agent, a user client."""

    api: str = ""
    commit: str = ""
    user_token: str = ""
    client: httpx.Client | None = None
    api_server: ApiProcess | None = None
    runner_proc: subprocess.Popen[bytes] | None = None
    arm_proc: subprocess.Popen[bytes] | None = None  # the arm64 runner (--arm64)


def boot(st: Stack, preferred_port: int, arm64: bool = False,
         extra_env: dict[str, str] | None = None) -> None:
    """Start the API and a runner agent pinned to one core, create tokens and the project,
    filling in ``st`` as they start (so ``up`` stops whatever started, even on a failure).
    ``extra_env``: a scenario's own settings for the API and the runner."""
    STATE.mkdir(parents=True, exist_ok=True)
    cpu = pinned_cpu()
    st.commit = run(["git", "rev-parse", "HEAD"], dict(os.environ))
    dirty = run(["git", "status", "--porcelain", "--", "allocator"], dict(os.environ))
    if dirty:
        step("[yellow]note:[/] allocator/ has uncommitted changes; "
             "the demo measures the committed HEAD")
    st.api_server = ApiProcess({}, log=STATE / "api.log", port=preferred_port, cwd=ROOT)
    st.api = st.api_server.url
    env = dict(os.environ)
    env.pop("DATABASE_URL", None)  # embedded PostgreSQL, the default way
    env.update({"MALLARD_DATA_DIR": str(STATE / "pgdata"), "PATH": f"{VENV_BIN}:{env['PATH']}",
                # the runner fetches this checkout, and the API lets projects name it
                "MALLARD_RUNNER_REPO_ALLOW": f"file://{ROOT}",
                "MALLARD_REPO_URL_ALLOW": f"file://{ROOT}",
                "MALLARD_PUBLIC_URL": st.api,
                # claim the next round's jobs within a second of the analysis queuing them
                "MALLARD_RUNNER_POLL_SECONDS": "1", **(extra_env or {})})
    st.api_server.env = env
    step(f"starting the API on {st.api} (log: .mallard/api.log)")
    with console.status("waiting for the API (embedded PostgreSQL starts and migrates first)"), \
            keep_off(cpu):
        try:
            st.api_server.start(timeout=180)
        except RuntimeError as exc:
            raise SystemExit(f"demo: {str(exc).splitlines()[0]}; see .mallard/api.log") \
                from exc
    node = f"demo-{platform.node() or 'node'}"
    step("creating tokens with the admin CLI (stored hashed)")
    st.user_token = st.api_server.token("user")
    st.client = httpx.Client(base_url=st.api, timeout=30,
                             headers={"Authorization": f"Bearer {st.user_token}"})
    register_mallard(st.api, st.api_server.token("admin"), str(ROOT))

    st.runner_proc = start_runner(st.api, env, node, cpu)
    if arm64:
        other = str(sorted(os.sched_getaffinity(0))[0])  # not the native runner's core
        st.arm_proc = start_runner(st.api, env, f"{node}-arm64", other, arch="aarch64")


@contextmanager
def up(preferred_port: int, keep: bool, arm64: bool = False, env: dict[str, str] | None = None
       ) -> Iterator[tuple[Stack, httpx.Client, subprocess.Popen[bytes]]]:
    """The stack for one demo scenario: (stack, user client, runner agent). Stopped at the
    end, unless ``keep`` and the scenario ran to its end. ``arm64``: an arm64 runner under
    qemu-aarch64 too (``st.arm_proc``); ``env``: the scenario's own settings."""
    st = Stack()
    ok = False
    try:
        boot(st, preferred_port, arm64, env)
        assert st.client is not None and st.runner_proc is not None
        yield st, st.client, st.runner_proc
        ok = True
    finally:
        api_proc = st.api_server.proc if st.api_server is not None else None
        if keep and ok and api_proc is not None and st.runner_proc is not None:
            step(f"--keep: API (pid {api_proc.pid}) and runner (pid {st.runner_proc.pid}) "
                 f"keep running; stop them with: kill -TERM -{api_proc.pid} "
                 f"-{st.runner_proc.pid}")
        else:
            stop(st.arm_proc, "arm64 runner agent")
            stop(st.runner_proc, "runner agent")
            if api_proc is not None and api_proc.poll() is None:
                assert st.api_server is not None
                st.api_server.stop(30)
                step("stopped API and embedded PostgreSQL")


def demo_args(doc: str | None) -> argparse.Namespace:
    """The options every demo scenario takes: --keep, --port, --trials, --arm64."""
    parser = argparse.ArgumentParser(description=(doc or "").splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--port", type=int, default=8321)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--arm64", action="store_true",
                        help="also run an arm64 runner under qemu-aarch64 and compare there")
    return parser.parse_args()


def main() -> int:
    args = demo_args(__doc__)

    with up(args.port, args.keep, args.arm64) as (st, client, runner):
        step(f"posting a comparison: mallard@{st.commit[:7]} transfer=mutex vs transfer=ring, "
             f"quick suite, peers {', '.join(PEERS)}")
        comp = client.post("/api/v1/comparisons", json={
            "project": "mallard", "arch": platform.machine(), "suite": "quick",
            "trials": args.trials, "peers": PEERS,
            "base": {"commit": st.commit, "variant": "transfer=mutex"},
            "head": {"commit": st.commit, "variant": "transfer=ring"},
        }).raise_for_status().json()
        arm = None
        if st.arm_proc is not None:
            arm = client.post("/api/v1/comparisons", json={
                "project": "mallard", "arch": "aarch64", "suite": "quick",
                "workloads": ["larson"], "threads": [1], "trials": args.trials,
                "peers": ["glibc", "jemalloc"],
                "base": {"commit": st.commit, "variant": "transfer=mutex"},
                "head": {"commit": st.commit, "variant": "transfer=ring"},
            }).raise_for_status().json()
        final = follow(client, comp["id"], runner)
        report = client.get(f"/api/v1/comparisons/{comp['id']}/report").raise_for_status().text
        console.rule("comparison report")
        print(report)
        console.rule()
        if arm is not None and st.arm_proc is not None:
            follow(client, arm["id"], st.arm_proc)
            console.rule("arm64 (emulated) comparison report")
            print(client.get(f"/api/v1/comparisons/{arm['id']}/report").raise_for_status().text)
            console.rule()
        step(f"API docs:   {st.api}/docs")
        step(f"the report: {st.api}/api/v1/comparisons/{comp['id']}/report")
        step(f"the page:   {st.api}/ui/comparisons/{comp['id']} (sign in with {st.user_token})")
        return 0 if final["state"] == "done" else 1


if __name__ == "__main__":
    sys.exit(main())
