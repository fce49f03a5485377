"""The container end-to-end test's driver (run by scripts/e2e.sh with the stack up).

A self-hosted bare repository gets the allocator of this checkout and the API's
post-receive hook; commits pushed one at a time, one of them makes free() slower. Every
commit's job is its verdict (the commit against the last measured one, interleaved); the
slow commit's own verdict says REGRESSED (larson's `instructions`, counted by cachegrind
and judged by the deterministic rule), the API restarted in the middle of that job without
losing a result, one alert names the slow commit on the runner's arch (and no alert names
a later commit), a comparison of the two commits with more trials says ops_per_sec
REGRESSED, and the alert reached a real webhook receiver directly (the API's outbox) and
through Prometheus and Alertmanager.

Standard library only (the host's python3). Every check prints one line; the exit code
is the number of failed checks. Settings come from the environment scripts/e2e.sh sets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
API = os.environ.get("E2E_API", "http://127.0.0.1:18000")
WEBHOOK_LOG = os.environ.get("E2E_WEBHOOK_LOG", "http://127.0.0.1:18088")
PROMETHEUS = os.environ.get("E2E_PROMETHEUS", "http://127.0.0.1:19090")
GIT_DIR = Path(os.environ.get("MALLARD_GIT_DIR", "/tmp/mallard-e2e/git"))
WORK = Path(os.environ.get("E2E_WORK", "/tmp/mallard-e2e/work"))
RUNNER_NAME = os.environ.get("MALLARD_RUNNER_NAME", "compose-runner")
SUITE = os.environ.get("MALLARD_SUITE", "e2e")
TRIALS = int(os.environ.get("MALLARD_TRIALS", "3"))
WARMUP = int(os.environ.get("MALLARD_WARMUP", "1"))
COMPARISON_TRIALS = int(os.environ.get("E2E_COMPARISON_TRIALS", "8"))
JOB_TIMEOUT = float(os.environ.get("E2E_JOB_TIMEOUT", "600"))
ALERT_TIMEOUT = float(os.environ.get("E2E_ALERT_TIMEOUT", "300"))
PROJECT = "mallard"
SUITE_WORKLOADS = ["larson", "rpc"]  # tests/e2e/suites/e2e.yaml, threads [1]
DETERMINISTIC_WORKLOADS = ["larson"]  # its `deterministic` block: cachegrind runs a side
# the runner's cachegrind runs per cell (its default: MALLARD_RUNNER_DETERMINISTIC_RUNS)
DETERMINISTIC_RUNS = int(os.environ.get("MALLARD_RUNNER_DETERMINISTIC_RUNS", "2"))
SLOW_FREE_SPINS = int(os.environ.get("E2E_SLOW_FREE_SPINS", "1500"))
# commits before the slow one (SEGMENT) and after it (SEGMENT - 1): the slow commit is
# judged by its own job, so no history is needed for it; the later commits show that no
# alert moves onto them (and 3 + 3 points are too few for change detection's rank test)
SEGMENT = int(os.environ.get("E2E_SEGMENT", "3"))
GIT = ["git", "-c", "user.name=e2e", "-c", "user.email=e2e@mallard.invalid"]

T0 = time.monotonic()
results: list[tuple[str, bool, str]] = []


def log(msg: str) -> None:
    print(f"e2e [{time.monotonic() - T0:6.0f}s] {msg}", flush=True)


def check(name: str, ok: bool, detail: str = "") -> bool:
    results.append((name, ok, detail))
    log(f"{'PASS' if ok else 'FAIL'} {name}{': ' + detail if detail else ''}")
    return ok


class Failed(Exception):
    """A step that the later steps depend on failed."""


# -- tools ----------------------------------------------------------------------------------
def run(cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        check_rc: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    p = subprocess.run(cmd, cwd=cwd, env={**os.environ, **(env or {})}, capture_output=True,
                       text=True, timeout=timeout)
    if check_rc and p.returncode != 0:
        raise Failed(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p


def compose(*args: str, check_rc: bool = True, timeout: float = 300) -> str:
    return run(["docker", "compose", *args], cwd=REPO_ROOT, check_rc=check_rc,
               timeout=timeout).stdout


def http(method: str, url: str, body: Any = None, token: str | None = None,
         timeout: float = 30) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
        return 0, str(e)
    text = raw.decode("utf-8", "replace")
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


def wait_for(what: str, fn: Any, timeout: float, every: float = 2.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    raise Failed(f"timed out after {timeout:.0f}s waiting for {what} (last: {last!r})")


def sql(query: str) -> str:
    """One value from PostgreSQL (psql in the postgres container), for counting trials."""
    user = os.environ.get("POSTGRES_USER", "postgres")
    db = os.environ.get("POSTGRES_DB", "mallard")
    return compose("exec", "-T", "postgres", "psql", "-U", user, "-d", db, "-tAc", query).strip()


def cpus_of(cpuset: str) -> set[int]:
    out: set[int] = set()
    for part in filter(None, cpuset.split(",")):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def runner_connects(host: str, port: int) -> str:
    """'ok', or why the runner container cannot open a TCP connection to host:port."""
    code = ("import socket,sys\ntry:\n socket.create_connection((sys.argv[1], int(sys.argv[2])),"
            " timeout=5).close(); print('ok')\nexcept OSError as e: print(type(e).__name__)")
    return compose("exec", "-T", "runner", "python3", "-c", code, host, str(port),
                   check_rc=False).strip()


def isolation_checks() -> None:
    """The runner alone on its cores and its network; no superuser, no table for Grafana."""
    ids = {svc: compose("ps", "-q", svc).strip() for svc in
           ("postgres", "api", "runner", "prometheus", "alertmanager", "webhook-log")}
    sets = {svc: cpus_of(run(["docker", "inspect", "-f", "{{.HostConfig.CpusetCpus}}", cid]
                             ).stdout.strip()) for svc, cid in ids.items()}
    shared = [svc for svc, cpus in sets.items() if svc != "runner" and
              (not cpus or cpus & sets["runner"])]
    check("no other container may run on the runner's cores", not shared and bool(sets["runner"]),
          ", ".join(f"{k} {sorted(v) or 'any'}" for k, v in sets.items()))

    targets = (("api", 8000), ("postgres", 5432), ("prometheus", 9090), ("alertmanager", 9093),
               ("webhook-log", 8080), ("1.1.1.1", 443))
    with ThreadPoolExecutor(len(targets)) as pool:  # each refusal waits for DNS or a timeout
        answers = pool.map(lambda t: runner_connects(*t), targets)
        reach = {f"{h}:{p}": a for (h, p), a in zip(targets, answers, strict=True)}
    check("code under test reaches the API and nothing else",
          reach["api:8000"] == "ok" and all(v != "ok" for k, v in reach.items()
                                            if k != "api:8000"),
          ", ".join(f"{k} {v}" for k, v in reach.items()))

    api_user = sql("SELECT usename FROM pg_stat_activity WHERE datname = current_database() "
                   "AND application_name <> 'psql' AND usename IS NOT NULL LIMIT 1")
    supers = sql("SELECT string_agg(rolname, ',') FROM pg_roles WHERE rolsuper")
    owner = sql("SELECT pg_get_userbyid(datdba) FROM pg_database "
                "WHERE datname = current_database()")
    api_env = compose("exec", "-T", "api", "sh", "-c", 'echo "[$POSTGRES_PASSWORD]"').strip()
    check("the API connects as the database's owner, not a superuser",
          api_user == owner == os.environ.get("MALLARD_DB_USER", "mallard")
          and api_user not in supers.split(",") and api_env == "[]",
          f"API connects as {api_user!r}, owner {owner!r}, superusers {supers!r}, "
          f"superuser password in the API container: {api_env != '[]'}")

    reader = os.environ.get("MALLARD_READER_PASSWORD", "")
    db = os.environ.get("POSTGRES_DB", "mallard")

    def as_reader(query: str) -> subprocess.CompletedProcess[str]:
        return run(["docker", "exec", "-e", f"PGPASSWORD={reader}", ids["postgres"], "psql",
                    "-h", "127.0.0.1", "-U", "mallard_reader", "-d", db, "-tAc", query],
                   check_rc=False)
    views = as_reader("SELECT count(*) FROM v_jobs")
    table = as_reader("SELECT count(*) FROM projects")
    check("mallard_reader reads the views and no table",
          views.returncode == 0 and table.returncode != 0 and "permission denied" in table.stderr,
          f"v_jobs: {views.stdout.strip() or views.stderr.strip()}; projects: "
          f"{table.stderr.strip()[:120]}")

    status, _ = http("POST", f"{PROMETHEUS}/-/reload")
    check("Prometheus's lifecycle endpoint is off", status in (403, 404, 405), f"HTTP {status}")

    # the service as compose defines it, on the image the stack runs (offline: not pulled)
    image = run(["docker", "inspect", "-f", "{{.Config.Image}}", ids["postgres"]]).stdout.strip()
    bad = run(["docker", "compose", "run", "--rm", "--no-deps", "-T", "-e",
               "POSTGRES_PASSWORD=CHANGE-ME", "postgres"], cwd=REPO_ROOT, check_rc=False,
              env={"POSTGRES_IMAGE": image}, timeout=120)
    said = bad.stdout + bad.stderr
    check("a CHANGE-ME placeholder secret stops a container at start",
          bad.returncode != 0 and "POSTGRES_PASSWORD is the CHANGE-ME placeholder" in said,
          f"exit {bad.returncode}: {said.strip()[-160:]}")


# -- steps ----------------------------------------------------------------------------------
def make_token(role: str, runner: str | None = None) -> str:
    args = ["exec", "-T", "api", "mallard-api", "token", "create", "--role", role]
    if runner:
        args += ["--runner", runner]
    out = compose(*args)
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    if not lines:
        raise Failed("`mallard-api token create` printed nothing")
    return lines[-1]


def runner_registered(token: str) -> Any:
    status, body = http("GET", f"{API}/api/v1/runners", token=token)
    if status != 200:
        return None
    return next((r for r in body if r.get("name") == RUNNER_NAME), None)


def make_repo() -> tuple[Path, Path]:
    """A work tree holding a copy of allocator/ and a bare repository with the hook."""
    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    bare = GIT_DIR / "mallard.git"
    shutil.rmtree(bare, ignore_errors=True)
    GIT_DIR.mkdir(parents=True, exist_ok=True)
    run(["git", "init", "-q", "--bare", "-b", "main", str(bare)])
    shutil.copytree(REPO_ROOT / "allocator", WORK / "allocator",
                    ignore=shutil.ignore_patterns("build*", "__pycache__", ".cache"))
    run(["git", "init", "-q", "-b", "main"], cwd=WORK)
    run(["git", "remote", "add", "origin", str(bare)], cwd=WORK)
    run(["git", "add", "-A"], cwd=WORK)
    run([*GIT, "commit", "-q", "-m", "allocator as in this checkout"], cwd=WORK)
    return WORK, bare


def install_hook(bare: Path, token: str) -> None:
    hook = REPO_ROOT / "api" / "hooks" / "post-receive"
    if not hook.exists():
        raise Failed(f"{hook} is missing")
    dest = bare / "hooks" / "post-receive"
    shutil.copy(hook, dest)
    dest.chmod(0o755)
    # The hook's settings, as api/hooks/post-receive documents them: git config of the repo.
    for key, value in (("mallard.url", API), ("mallard.token", token),
                       ("mallard.project", PROJECT)):
        run(["git", "config", key, value], cwd=bare)


def push(work: Path) -> tuple[str, str]:
    sha = run(["git", "rev-parse", "HEAD"], cwd=work).stdout.strip()
    p = run(["git", "push", "-q", "origin", "main"], cwd=work)
    return sha, (p.stdout + p.stderr).strip()


def slow_down_free(work: Path) -> str:
    """Inject a busy loop at the top of the allocator's free path; returns the file changed."""
    spin = (f"{{ volatile unsigned mld_e2e_spin; for (mld_e2e_spin = 0; "
            f"mld_e2e_spin < {SLOW_FREE_SPINS}u; mld_e2e_spin++) {{ }} }} /* e2e: slow free */")
    patterns = [
        re.compile(r"(static\s+inline\s+void\s+mld_free_inline\s*\(\s*void\s*\*\s*\w+\s*\)\s*\{)"),
        re.compile(r"(void\s+free\s*\(\s*void\s*\*\s*\w+\s*\)\s*\{)"),
    ]
    for pattern in patterns:
        for path in sorted((work / "allocator").rglob("*.[ch]")):
            text = path.read_text()
            if pattern.search(text):
                path.write_text(pattern.sub(lambda m: m.group(1) + " " + spin, text, count=1))
                return str(path.relative_to(work))
    raise Failed("no free path found in allocator/ to slow down")


def job_for(token: str, sha: str, kind: str = "commit") -> Any:
    status, jobs = http("GET", f"{API}/api/v1/jobs", token=token)
    if status != 200 or not isinstance(jobs, list):
        return None
    for j in jobs:
        spec = j.get("spec") or {}
        commits = {spec.get("commit")} | {a.get("commit") for a in spec.get("allocators") or []}
        if j.get("kind") == kind and sha in commits:
            return j
    return None


def job(token: str, job_id: int) -> Any:
    status, body = http("GET", f"{API}/api/v1/jobs/{job_id}", token=token)
    return body if status == 200 else None


def wait_job_done(token: str, job_id: int, timeout: float = JOB_TIMEOUT) -> Any:
    def settled() -> Any:
        j = job(token, job_id)
        return j if j and j["state"] in ("done", "failed", "cancelled") else None
    j = wait_for(f"job {job_id} to finish", settled, timeout, every=3)
    if j["state"] != "done":
        raise Failed(f"job {job_id} ended {j['state']}: {json.dumps(j)[:3000]}")
    return j


def trial_count(job_id: int) -> tuple[int, int]:
    out = sql(f"SELECT count(*) || ' ' || count(DISTINCT uid) FROM trials WHERE job_id = {job_id}")
    n, distinct = out.split()
    return int(n), int(distinct)


def spooled(job_id: int) -> bool:
    out = compose("exec", "-T", "runner", "sh", "-c",
                  "ls \"${MALLARD_RUNNER_STATE_DIR:-/var/lib/mallard-runner}/spool\" 2>/dev/null",
                  check_rc=False)
    # spool files are named <time>-results-<job id>-<uid>.json
    return any(f"results-{job_id}-" in name for name in out.split())


def api_healthy() -> bool:
    status, _ = http("GET", f"{API}/api/v1/health", timeout=5)
    return status == 200


def received(path: str) -> list[dict[str, Any]]:
    status, body = http("GET", f"{WEBHOOK_LOG}/received?path={path}")
    return body if status == 200 and isinstance(body, list) else []


# -- the scenario ----------------------------------------------------------------------------
def commit_noop(work: Path, i: int, tag: str) -> None:
    """A commit that changes no code: one more line in a notes file of the allocator."""
    notes = work / "allocator" / "E2E-NOTES.txt"
    with notes.open("a") as f:
        f.write(f"{tag} {i}\n")
    run(["git", "add", "-A"], cwd=work)
    run([*GIT, "commit", "-q", "-m", f"e2e: {tag} {i} (no code change)"], cwd=work)


def push_and_queue(work: Path, admin: str, label: str) -> tuple[str, dict[str, Any]]:
    sha, out = push(work)
    j = wait_for(f"a job for {sha[:12]}", lambda: job_for(admin, sha), 60)
    log(f"pushed {label} {sha[:12]} -> job {j['id']}" + (f" (hook: {out[-200:]!r})" if out else ""))
    return sha, j


def own_verdict(admin: str, runner: dict[str, Any], slow: str, base: str) -> None:
    """The slow commit's verdict, from its own commit job: REGRESSED against `base`."""
    arch = runner.get("arch") or "x86_64"

    def settled() -> Any:
        s, body = http("GET", f"{API}/api/v1/projects/{PROJECT}/commits/{slow}", token=admin)
        if s != 200 or not isinstance(body, dict):
            return None
        mine = [v for v in body.get("verdicts", []) if v.get("arch") == arch]
        return mine[0] if mine and mine[0].get("state") in ("done", "failed") else None
    v = wait_for(f"the slow commit's verdict on {arch}", settled, ALERT_TIMEOUT, every=3)
    moved = [f"{m.get('workload')} {m.get('measure')} {m.get('diff_pct') or 0:+.1f}% "
             f"{m.get('verdict')}" for m in v.get("moved", [])]
    check(f"the slow commit's own verdict on {arch} is REGRESSED (against the commit "
          "before it)", v.get("verdict") == "regressed" and v.get("base_sha") == base
          and bool(v.get("alert_id")),
          f"{v.get('state')} {v.get('verdict')} vs {str(v.get('base_sha'))[:7]}, alert "
          f"{v.get('alert_id')}, moved: {', '.join(moved) or 'none'}; {v.get('report_url')}")


def expected_trials(j: dict[str, Any]) -> int:
    """No peers: the first commit's job measures the head alone; every later commit's
    job is its verdict, the commit and the last measured one interleaved (2 sides).
    Each side also gets DETERMINISTIC_RUNS cachegrind runs per workload with a
    deterministic block."""
    sides = len([a for a in j["spec"]["allocators"] if a.get("label") != "peer"])
    return (len(SUITE_WORKLOADS) * len(j["spec"]["allocators"]) * (TRIALS + WARMUP)
            + len(DETERMINISTIC_WORKLOADS) * sides * DETERMINISTIC_RUNS)


def mallard_recipe() -> Any:
    """The repository's own recipe (.mallard.toml's [allocator] table), as JSON."""
    return tomllib.loads((REPO_ROOT / ".mallard.toml").read_text())["allocator"]


def scenario() -> None:
    admin = make_token("admin")
    check("admin token from `mallard-api token create` in the api container", bool(admin))
    runner = containers(admin)
    status, proj = http("PUT", f"{API}/api/v1/projects/{PROJECT}",
                        {"repo_url": "/srv/git/mallard.git", "default_branch": "main",
                         "recipe": mallard_recipe()}, token=admin)
    if not check("project created (PUT /projects/mallard)", status in (200, 201),
                 f"HTTP {status} {proj if status not in (200, 201) else ''}"):
        raise Failed("no project")

    work, bare = make_repo()
    install_hook(bare, make_token("user"))  # the hook posts with a user token
    c1, jobs = push_before(work, admin)
    slow, base = push_slow_across_restart(work, admin, c1, jobs)
    own_verdict(admin, runner, slow, base)
    later = push_after(work, admin, jobs)
    arch = runner.get("arch") or "x86_64"
    compare(admin, arch, base, slow)
    # alerts: the API's change detection, its webhook (outbox), and Prometheus/Alertmanager
    ref = alert_names_the_slow_commit(admin, arch, slow, base, later)
    hooked = wait_for("the API's webhook notification", lambda: [
        m for m in received("/api") if slow[:7] in json.dumps(m["body"])], ALERT_TIMEOUT, every=5)
    check("API webhook (outbox) reached the receiver", True,
          f"{len(hooked)} message(s), event {hooked[0]['body'].get('event')}"
          if isinstance(hooked[0]["body"], dict) else str(hooked[0]["body"])[:200])
    alertmanager_delivered(arch, ref)


def containers(admin: str) -> dict[str, Any]:
    """The runner registered; the api and runner containers unprivileged, the runner
    pinned; the isolation checks. Returns the runner."""
    runner: dict[str, Any] = wait_for("the runner to register",
                                      lambda: runner_registered(admin), 180)
    check("runner registered through the API", True,
          f"{runner['name']} arch={runner.get('arch')} cpus={runner.get('cpus')}")

    users = {svc: compose("exec", "-T", svc, "id", "-u").strip() for svc in ("api", "runner")}
    cid = compose("ps", "-q", "runner").strip()
    caps = json.loads(run(["docker", "inspect", "-f",
                           '{"add": {{json .HostConfig.CapAdd}}, '
                           '"drop": {{json .HostConfig.CapDrop}}}', cid]).stdout)
    added = sorted(c.removeprefix("CAP_") for c in caps["add"] or [])
    dropped = [c.removeprefix("CAP_") for c in caps["drop"] or []]
    sandboxed = "builds and workloads run as mallard-work" in " ".join(
        compose("logs", "--no-color", "runner").split())
    # the runner's agent is root only to run the code under test as mallard-work
    check("api runs as non-root; the runner's agent as root with CHOWN, KILL, SETGID, SETUID "
          "only, its builds and workloads as mallard-work",
          users["api"] not in ("", "0") and users["runner"] == "0" and sandboxed
          and added == ["CHOWN", "KILL", "SETGID", "SETUID"] and dropped == ["ALL"],
          f"api uid {users['api']}, runner uid {users['runner']}, capabilities +{added} "
          f"-{dropped}, work user {'named' if sandboxed else 'not named'} in its log")

    cpuset, privileged = run(["docker", "inspect", "-f",
                              "{{.HostConfig.CpusetCpus}} {{.HostConfig.Privileged}}",
                              cid]).stdout.split()
    check("runner pinned with cpuset, not privileged",
          cpuset == os.environ["RUNNER_CPUSET"] and privileged == "false",
          f"cpuset {cpuset!r}, privileged {privileged}")
    isolation_checks()
    return runner


def push_before(work: Path, admin: str) -> tuple[str, list[dict[str, Any]]]:
    """Commit 1 (the allocator as it is, benchmarked), then the others before the slow one,
    each pushed alone. Returns commit 1's sha and the jobs."""
    # push 1: the allocator as it is; the runner benchmarks it
    c1, j1 = push_and_queue(work, admin, "commit 1")
    check("post-receive hook queued a commit job", True, f"job {j1['id']}")
    t = time.monotonic()
    j1 = wait_job_done(admin, j1["id"])
    n1, d1 = trial_count(j1["id"])
    check("runner benchmarked commit 1", n1 == expected_trials(j1) and d1 == n1,
          f"job {j1['id']} done in {time.monotonic() - t:.0f}s, {n1} trials stored "
          f"(expected {expected_trials(j1)})")

    # an alert needs SEGMENT commits on each side of the change (change detection's
    # min_segment and its rank test): more commits before the slow one, each pushed alone
    jobs = [j1]
    for i in range(2, SEGMENT + 1):
        commit_noop(work, i, "before")
        jobs.append(push_and_queue(work, admin, f"commit {i}")[1])
    return c1, jobs


def push_slow_across_restart(work: Path, admin: str, c1: str,
                             jobs: list[dict[str, Any]]) -> tuple[str, str]:
    """The slow commit, the API restarted in the middle of its job; no result lost.
    Returns (the slow commit, the last commit before it)."""
    changed = slow_down_free(work)
    run([*GIT, "commit", "-q", "-am", f"e2e: slow free path ({SLOW_FREE_SPINS} spins)"],
        cwd=work)
    slow, js = push_and_queue(work, admin, f"slow commit (free slowed in {changed})")
    base = c1
    for j in jobs[1:]:  # the base of the comparison: the last commit before the slow one
        base = j["spec"].get("commit") or base
    wait_for(f"job {js['id']} to be claimed",
             lambda: (job(admin, js["id"]) or {}).get("state") == "running", JOB_TIMEOUT,
             every=0.5)  # the API must stop before the job ends
    log(f"job {js['id']} is running: stopping the API")
    t = time.monotonic()
    compose("stop", "-t", "10", "api")
    wait_for(f"the runner to spool job {js['id']}'s results while the API is down",
             lambda: spooled(js["id"]), JOB_TIMEOUT, every=3)
    check("runner kept its results in the spool while the API was down", True,
          f"API down {time.monotonic() - t:.0f}s")
    compose("start", "api")
    wait_for("the API to be healthy again", api_healthy, 180)
    js = wait_job_done(admin, js["id"])
    n2, d2 = trial_count(js["id"])
    check("no result lost across the API restart", n2 == expected_trials(js) and d2 == n2
          and js.get("attempt") == 1,
          f"job {js['id']} done (attempt {js.get('attempt')}), {n2} trials stored, "
          f"{d2} distinct uids (expected {expected_trials(js)})")
    wait_for("the spool to drain", lambda: not spooled(js["id"]), 120)
    return slow, base


def push_after(work: Path, admin: str, jobs: list[dict[str, Any]]) -> list[str]:
    """The commits after the slow one, each pushed alone; every commit job done. Returns
    the later commits."""
    later: list[str] = []
    for i in range(2, SEGMENT + 1):
        commit_noop(work, i, "after")
        sha, j = push_and_queue(work, admin, f"slow commit + {i - 1}")
        later.append(sha)
        jobs.append(j)
    t = time.monotonic()
    for j in jobs:
        wait_job_done(admin, j["id"])
    check(f"all {2 * SEGMENT} commit jobs done", True,
          f"the last {len(jobs) - 1} in {time.monotonic() - t:.0f}s after the restart check")
    return later


def compare(admin: str, arch: str, base: str, slow: str) -> None:
    """The comparison of the last good commit and the slow one says REGRESSED."""
    status, comp = http("POST", f"{API}/api/v1/comparisons", {
        "project": PROJECT, "base": {"commit": base}, "head": {"commit": slow},
        "workloads": SUITE_WORKLOADS, "threads": [1], "trials": COMPARISON_TRIALS,
        "arch": arch, "peers": [], "suite": SUITE,
        "hypothesis": "-10%", "warmup": 1}, token=admin)
    if not check("comparison created (POST /comparisons)", status == 201,
                 f"HTTP {status} {comp if status != 201 else 'id ' + str(comp.get('id'))}"):
        raise Failed("no comparison")
    cid = comp["id"]
    t = time.monotonic()

    def comparison_settled() -> Any:
        s, c = http("GET", f"{API}/api/v1/comparisons/{cid}", token=admin)
        return c if s == 200 and c.get("state") in ("done", "failed") else None
    comp = wait_for(f"comparison {cid}", comparison_settled, JOB_TIMEOUT, every=3)
    status, report = http("GET", f"{API}/api/v1/comparisons/{cid}/report", token=admin)
    report = report if isinstance(report, str) else json.dumps(report)
    log(f"comparison {cid} report:\n{report}")
    regressed = [ln for ln in report.splitlines()
                 if ln.startswith("larson") and "ops_per_sec" in ln and "REGRESSED" in ln]
    check("comparison (last good vs slow commit) says REGRESSED", bool(regressed),
          f"in {time.monotonic() - t:.0f}s: {regressed[0] if regressed else comp.get('state')}")


def alert_names_the_slow_commit(admin: str, arch: str, slow: str, base: str,
                                later: list[str]) -> dict[str, Any]:
    """One open alert on the runner's arch names the slow commit, none a later one.
    Returns the alert the notifications are checked against."""
    every_alert: list[dict[str, Any]] = []

    def alert_open() -> list[dict[str, Any]]:
        s, alerts = http("GET", f"{API}/api/v1/alerts?project={PROJECT}", token=admin)
        every_alert[:] = alerts if s == 200 and isinstance(alerts, list) else []
        return [a for a in every_alert
                if str(a.get("first_bad_commit", "")).startswith(slow[:7])
                and a.get("state") == "open"]
    try:
        mine = wait_for("an open alert naming the slow commit", alert_open, 60, every=3)
    except Failed as e:
        seen = "; ".join(f"{a.get('workload')} {a.get('measure')} first bad "
                         f"{a.get('first_bad_commit')} {a.get('state')}" for a in every_alert)
        raise Failed(f"{e}; alerts: {seen or 'none'}") from e
    on_arch = [a for a in mine if a.get("arch") == arch]
    check(f"one alert for (slow commit, {arch}) names it, from its own verdict",
          len(on_arch) == 1 and on_arch[0].get("last_good_commit") == base,
          "; ".join(f"{a.get('arch')} first bad {str(a.get('first_bad_commit'))[:7]} last "
                    f"good {str(a.get('last_good_commit'))[:7]}: {str(a.get('text'))[:160]}"
                    for a in mine))
    moved = [a for a in every_alert if a.get("first_bad_commit") in later]
    check("no alert names a commit after the slow one", not moved,
          f"{len(every_alert)} alert(s) in all"
          + "".join(f"; {a.get('first_bad_commit', '')[:7]} {a.get('measure')}"
                    for a in moved))
    ref: dict[str, Any] = (on_arch or mine)[0]
    return ref


def alertmanager_delivered(arch: str, ref: dict[str, Any]) -> None:
    """Prometheus -> Alertmanager -> the webhook receiver: MallardRegressionOpen firing
    with the alert's arch, measure and workload."""
    def alertmanager_sent() -> list[dict[str, Any]]:
        return [m for m in received("/alertmanager") if isinstance(m["body"], dict)
                and any(a.get("labels", {}).get("alertname") == "MallardRegressionOpen"
                        and a.get("status") == "firing" for a in m["body"].get("alerts", []))]
    t = time.monotonic()
    routed = wait_for("Alertmanager's notification", alertmanager_sent, ALERT_TIMEOUT, every=5)
    labels = [a.get("labels", {}) for m in routed for a in m["body"].get("alerts", [])
              if a.get("labels", {}).get("alertname") == "MallardRegressionOpen"]
    ours = [lab for lab in labels if lab.get("arch") == arch
            and lab.get("measure") == ref.get("measure")
            and lab.get("workload") == ref.get("workload")]
    check("Prometheus -> Alertmanager -> webhook delivered MallardRegressionOpen for the "
          "slow commit's alert", bool(ours),
          f"after {time.monotonic() - t:.0f}s more, labels {ours[:1] or labels[:2]}")


def main() -> int:
    try:
        scenario()
    except Failed as e:
        check("scenario", False, str(e)[-4000:])
    except Exception as e:  # a bug here or an answer of a shape we did not expect
        check("scenario", False, f"{type(e).__name__}: {e}")
    failed = sum(1 for _, ok, _ in results if not ok)
    print(f"driver: {len(results) - failed} passed, {failed} failed", flush=True)
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main())
