"""The node agent: register, heartbeat, claim a job with a lease, run it, post the results.

Loop: flush the spool -> claim (204: nothing, wait) -> check the job's spec
(guard.py: refs, repository, folder, suite name) -> run the job while a thread
renews its lease (409: lease lost, the run is cancelled and nothing is posted)
-> write the results to the spool -> post them (with job_id and the claimed
attempt, which complete the job). A failure (a refused spec, build error,
missing workload, crash of the runner's own code) is reported with its log
through POST /jobs/{id}/fail, also via the spool. Results the API answers with
409 lease_lost are dropped; results it will never accept are kept in
spool/rejected/ and the job is reported failed with the reason. SIGTERM stops
after the current trial: the job is reported as a retryable failure ("runner
shutting down") and pending posts stay in the spool for the next start.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.markup import escape

from .build import BuildError
from .client import ApiClient, ApiError, BadJob, LeaseLost
from .executor import Cancelled, Cell
from .guard import check_ref, check_relative_dir, check_repo
from .models import Job, ResultsIn, Trial
from .runs import RunRequest, execute, prepare
from .settings import REPO_ROOT, RunnerSettings
from .spool import Pending, Spool
from .suites import SuiteError, load_suite
from .testbed import collect, format_cpus
from .variants import AllocatorSelector, normalize_variant


@dataclass
class _Lease:
    """A running job's lease: `cancel` stops the run, `lost` says why, `done` stops the
    renewals."""

    cancel: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


class _Progress:
    """Per-trial callback: failed trials logged, progress at every quarter."""

    def __init__(self, log: Callable[[str], None], job_id: int) -> None:
        self.log, self.job_id = log, job_id
        self.count = self.total = 0

    def __call__(self, t: Trial, cell: Cell) -> None:
        self.count += 1
        if not t.ok:
            self.log(escape(f"trial failed: {cell.key} seq {t.seq}: signal {t.signal} "
                            f"exit {t.exit_code}: {t.stderr_tail.strip()[-200:]!r}"))
        n, c = self.total, self.count
        if n and c * 4 // n != (c - 1) * 4 // n:  # at every quarter
            self.log(f"job {self.job_id}: {c}/{n} trials")


class Agent:
    def __init__(self, settings: RunnerSettings, *, api: str, token: str, name: str,
                 cpus: list[int], console: Console | None = None):
        self.settings = settings
        self.api = api
        self.token = token
        self.name = name
        self.cpus = cpus
        self.console = console or Console(stderr=True)
        self.spool = Spool(settings.spool(), max_attempts=settings.post_max_attempts,
                           backoff_max=settings.retry_max_seconds)
        self._stop = threading.Event()
        self._current_cancel: threading.Event | None = None
        self.runner_id: int | None = None
        self.target = settings.platform()  # the arch it registers with: native or emulated
        self.testbed = collect(cpus, target=self.target)

    # -- plumbing -------------------------------------------------------------------
    def log(self, msg: str) -> None:
        stamp = datetime.now(UTC).strftime("%H:%M:%S")
        self.console.print(f"[dim]{stamp}[/] agent {self.name}: {msg}", highlight=False)

    def client(self) -> ApiClient:
        return ApiClient(self.api, self.token, self.settings.http_timeout_seconds)

    def stop(self) -> None:
        """SIGTERM/SIGINT: finish the current trial, then report the job and exit."""
        self._stop.set()
        if self._current_cancel is not None:
            self._current_cancel.set()
        self.log("stopping: after the current trial")

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _send(self, client: ApiClient) -> Any:
        return lambda url, body: client.post(url, body)

    def flush(self, client: ApiClient, force: bool = False) -> int:
        return self.spool.flush(self._send(client), self._delivered, on_dropped=self._dropped,
                                on_rejected=self._rejected, force=force)

    def _dropped(self, item: Pending, r: httpx.Response) -> None:
        self.log(f"[yellow]dropped {item.path.name}[/] ({item.url}, job {item.body.get('job_id')}"
                 f" attempt {item.body.get('attempt')}): the API says this runner no longer "
                 "holds the job's lease; not retried")

    def _rejected(self, item: Pending, r: httpx.Response) -> None:
        """The API will never accept this post: keep it, and fail its job with the reason."""
        why = (f"HTTP {r.status_code} after {item.server_errors} server errors"
               if r.status_code >= 500 else f"HTTP {r.status_code}")
        self.log(f"[red]rejected {item.url}[/] ({why}); kept as {item.path}")
        job_id = item.job_id
        if job_id is None:
            return
        log = (f"the API did not accept this job's results ({why}); the runner gave up and "
               f"kept them in {item.path} on {self.name}\n{(item.last_error or '')[:4000]}")
        self.spool.put(f"/jobs/{job_id}/fail", {"runner_id": item.body.get("runner_id"),
                                                "log": log, "retryable": r.status_code >= 500},
                       f"fail-{job_id}")

    def _delivered(self, item: Pending, r: httpx.Response) -> None:
        what = item.url
        try:
            body = r.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and "stored" in body:
            what += f": stored {body.get('stored')}, duplicates {body.get('duplicates')}"
        self.log(f"delivered {item.path.name} ({what}) after {item.attempts + 1} attempt(s)")

    # -- registration and heartbeat ---------------------------------------------------
    def register(self, client: ApiClient) -> int:
        delay = 1.0
        while not self.stopping:
            try:
                runner = client.register(self.name, self.target.arch, format_cpus(self.cpus),
                                         self.testbed)
                how = (f", emulated by {self.testbed.emulator} on {self.target.host}"
                       if self.target.emulated else "")
                self.log(f"registered as runner {runner['id']} ({self.target.arch}{how}, "
                         f"CPUs {format_cpus(self.cpus)})")
                return int(runner["id"])
            except ApiError as e:
                if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
                    raise  # a bad token or a name the API refuses: retrying will not help
                self.log(f"register failed ({e}); retrying in {delay:.0f}s")
            except httpx.HTTPError as e:
                self.log(f"API unreachable ({type(e).__name__}); retrying in {delay:.0f}s")
            self._stop.wait(delay)
            delay = min(delay * 2, self.settings.retry_max_seconds)
        raise Cancelled("stopped before registering")

    def _heartbeat_loop(self) -> None:
        client = self.client()
        try:
            while not self._stop.wait(self.settings.heartbeat_seconds):
                if self.runner_id is None:
                    continue
                try:
                    client.heartbeat(self.runner_id)
                except (ApiError, httpx.HTTPError) as e:
                    self.log(f"heartbeat failed: {e}")
        finally:
            client.close()

    # -- the loop -------------------------------------------------------------------
    def run(self, once: bool = False, max_idle: float | None = None) -> int:
        client = self.client()
        try:
            try:
                self.runner_id = self.register(client)
            except ApiError as e:
                self.log(f"[red]cannot register:[/] {e}")
                return 2
            except Cancelled:
                return 0
            threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True).start()
            idle_since = time.monotonic()
            delay = self.settings.poll_seconds
            idle_exit = False
            first = True  # at start, try every spooled post whatever its backoff
            while not self.stopping:
                self.flush(client, force=first)
                first = False
                try:
                    job = client.claim(self.runner_id, self.settings.lease_seconds)
                    delay = self.settings.poll_seconds
                except BadJob as e:
                    self.fail_malformed(e)
                    continue
                except (ApiError, httpx.HTTPError) as e:
                    self.log(f"claim failed ({e}); retrying in {delay:.0f}s")
                    if isinstance(e, ApiError) and e.status in (404, 422):
                        # the API does not know this runner (a new database): register again
                        try:
                            self.runner_id = self.register(client)
                            continue
                        except (ApiError, Cancelled):
                            pass
                    self._stop.wait(delay)
                    delay = min(delay * 2, self.settings.retry_max_seconds)
                    continue
                if job is None:
                    if once and max_idle is not None and time.monotonic() - idle_since > max_idle:
                        self.log(f"no job in {max_idle:g}s; exiting")
                        idle_exit = True
                        break
                    self._stop.wait(self.settings.poll_seconds)
                    continue
                self.handle(job, client)
                idle_since = time.monotonic()
                if once:
                    break
            code = self.finish(client)
            return code or (3 if idle_exit else 0)
        finally:
            client.close()

    def finish(self, client: ApiClient) -> int:
        """Deliver what is pending (with backoff) before exiting; keep the rest spooled."""
        budget = 5.0 if self.stopping else self.settings.flush_timeout_seconds
        left = self.spool.drain(
            self._send(client), self._stop, budget, self._delivered,
            lambda n, d: self.log(f"{n} post(s) pending; retrying in {d:.1f}s"),
            on_dropped=self._dropped, on_rejected=self._rejected)
        if left:
            self.log(f"[yellow]{left} post(s) left in the spool {self.spool.dir}[/]")
            return 1
        return 0

    # -- one job ----------------------------------------------------------------------
    def request_for(self, job: Job) -> RunRequest:
        """The run a job asks for, every value of its spec checked first (guard.py)."""
        spec = job.spec
        suite = load_suite(spec.suite, self.settings.suites_dir)  # a name, never a path
        for a in spec.allocators:
            if a.commit is not None:
                check_ref(a.commit)
        check_relative_dir(spec.allocator_dir)
        if spec.repo_url is not None:
            check_repo(spec.repo_url, self.settings.repo_rules())
        selectors = [AllocatorSelector(name=a.name, commit=a.commit,
                                       variant=normalize_variant(a.variant), label=a.label)
                     for a in spec.allocators]
        if not selectors:
            raise SuiteError("the job names no allocators")
        # no repo_url: the runner's own checkout (its operator's choice, not the job's)
        source = spec.repo_url or (str(REPO_ROOT) if (REPO_ROOT / ".git").exists() else None)
        raw = self.settings.raw() / f"job-{job.id}-attempt-{job.attempt or 1}"
        return RunRequest(suite=suite, selectors=selectors, cpus=self.cpus, raw_dir=Path(raw),
                          source=source, ref=None, allocator_dir=spec.allocator_dir,
                          trials=spec.trials, warmup=spec.warmup, workloads=spec.workloads,
                          threads=spec.threads, project=spec.project or "mallard",
                          branch=spec.branch,
                          job_id=job.id, runner_id=self.runner_id)

    def handle(self, job: Job, client: ApiClient) -> None:
        """Run a claimed job under its lease, then spool and post its results (or report
        why it could not run)."""
        assert self.runner_id is not None
        allocators = ", ".join(a.label + "=" + a.name for a in job.spec.allocators)
        self.log(escape(f"claimed job {job.id} ({job.kind}, attempt {job.attempt}): suite "
                        f"{job.spec.suite}, allocators {allocators}"[:1000]))
        lease = self.keep_lease(job)
        progress = _Progress(self.log, job.id)
        try:
            results = self.run_job(job, lease.cancel, progress)
        except Exception as e:  # noqa: BLE001 - reported, never a crashed agent
            lease.done.set()
            self.report_error(job, client, e, lease.lost.is_set(), progress.count)
            return
        lease.done.set()
        if lease.lost.is_set():
            self.log(f"job {job.id} finished after its lease was lost; results not posted")
            return
        n_ok = sum(1 for t in results.trials if t.ok)
        results.attempt = job.attempt  # the API takes results only from the lease's holder
        path = self.spool.put("/results", results.model_dump(mode="json"), f"results-{job.id}")
        self.log(f"job {job.id}: {len(results.trials)} trials ({n_ok} ok) spooled as {path.name}")
        self.flush(client)

    def keep_lease(self, job: Job) -> _Lease:
        """Renew the job's lease in a thread until `done`; a lost lease cancels the run."""
        lease = _Lease()

        def renew() -> None:
            c = self.client()
            period = max(1.0, self.settings.lease_seconds / 3)
            try:
                while not lease.done.wait(period):
                    try:
                        c.renew(job.id, self.runner_id or 0, self.settings.lease_seconds)
                    except LeaseLost:
                        lease.lost.set()
                        lease.cancel.set()
                        self.log(f"[red]lease on job {job.id} lost[/]: cancelling the run")
                        return
                    except (ApiError, httpx.HTTPError) as e:
                        self.log(f"lease renewal failed ({e}); will retry")
            finally:
                c.close()

        self._current_cancel = lease.cancel
        if self.stopping:
            lease.cancel.set()
        threading.Thread(target=renew, name=f"lease-{job.id}", daemon=True).start()
        return lease

    def run_job(self, job: Job, cancel: threading.Event, progress: _Progress) -> ResultsIn:
        """Build what the job names and run its cells, interleaved."""
        prep = prepare(self.settings, self.request_for(job), on_trial=progress, cancel=cancel)
        progress.total = prep.total
        for note in prep.notes:
            self.log(note)
        built = ", ".join(f"{b.commit[:12]} ({'cached' if b.cached else 'built'})"
                          for b in prep.resolved.builds.values())
        self.log(f"job {job.id}: {len(prep.cells)} cells, {prep.total} trials, interleaved"
                 + (f"; mallard {built}" if built else ""))
        return execute(prep)

    def report_error(self, job: Job, client: ApiClient, e: Exception, lease_lost: bool,
                     trials_run: int) -> None:
        """Why the job did not finish, told to the API (retryable or not)."""
        if isinstance(e, Cancelled):
            if lease_lost:
                self.log(f"job {job.id} abandoned (lease lost); results not posted")
            else:
                self.report_failure(job, client, "runner shutting down (SIGTERM) before the "
                                    f"job finished; {trials_run} trials were run",
                                    retryable=True)
        elif isinstance(e, BuildError):
            self.report_failure(job, client, f"build failed: {e.args[0]}\n{e.log}",
                                retryable=False)
        elif isinstance(e, SuiteError | FileNotFoundError | ValueError):
            self.report_failure(job, client, f"cannot run the job: {e}", retryable=False)
        else:
            self.report_failure(job, client, "runner error:\n" + "".join(
                traceback.format_exception(e)), retryable=True)

    def fail_malformed(self, e: BadJob) -> None:
        """A job the runner cannot even read: fail it (not retryable) so it is not re-claimed."""
        self.log(escape(str(e))[:2000])
        if e.job_id is not None:
            self.spool.put(f"/jobs/{e.job_id}/fail", {"runner_id": self.runner_id,
                                                      "log": str(e)[-60000:], "retryable": False},
                           f"fail-{e.job_id}")

    def report_failure(self, job: Job, client: ApiClient, log: str, retryable: bool) -> None:
        first = escape(log.splitlines()[0][:500]) if log else ""
        self.log(f"[red]job {job.id} failed[/]: {first}")
        self.spool.put(f"/jobs/{job.id}/fail", {"runner_id": self.runner_id, "log": log[-60000:],
                                                "retryable": retryable}, f"fail-{job.id}")
        self.flush(client)
