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
from datetime import UTC, datetime

import httpx
from mallard_wire.jobs import ClaimedJob
from mallard_wire.results import ResultsIn
from rich.console import Console
from rich.markup import escape

from .client import ApiClient, ApiError, BadJob
from .delivery import Delivery
from .executor import Cancelled
from .jobs import Progress, failure, request_for
from .lease import Lease, keep_lease
from .profiles import run_profiles
from .runs import execute, prepare
from .sandbox import Sandbox
from .settings import RunnerSettings
from .spool import Spool
from .testbed import collect, format_cpus


class Agent:
    def __init__(self, settings: RunnerSettings, *, api: str, token: str, name: str,
                 cpus: list[int], console: Console | None = None,
                 sandbox: Sandbox | None = None):
        self.settings = settings
        self.sandbox = sandbox if sandbox is not None else settings.sandbox()
        self.api = api
        self.token = token
        self.name = name
        self.cpus = cpus
        self.console = console or Console(stderr=True)
        self.spool = Spool(settings.spool(), max_attempts=settings.post_max_attempts,
                           backoff_max=settings.retry_max_seconds)
        self.delivery = Delivery(self.spool, name, self.log, secrets=(token,))
        self._stop = threading.Event()
        self._current_cancel: threading.Event | None = None
        self.runner_id: int | None = None
        self.target = settings.platform()  # the arch it registers with: native or emulated
        self.testbed = collect(cpus, target=self.target, sampled=settings.sampled_layouts)

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

    # -- registration and heartbeat ---------------------------------------------------
    def register(self, client: ApiClient) -> int:
        delay = 1.0
        while not self.stopping:
            try:
                runner_id = client.register(self.name, self.target.arch,
                                            format_cpus(self.cpus), self.testbed)
                how = (f", emulated by {self.testbed.emulator} on {self.target.host}"
                       if self.target.emulated else "")
                self.log(f"registered as runner {runner_id} ({self.target.arch}{how}, "
                         f"CPUs {format_cpus(self.cpus)})")
                return runner_id
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
        self.log(self.sandbox.describe())
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
                self.delivery.flush(client, force=first)
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
        left = self.delivery.drain(client, self._stop, budget)
        if left:
            self.log(f"[yellow]{left} post(s) left in the spool {self.spool.dir}[/]")
            return 1
        return 0

    # -- one job ----------------------------------------------------------------------
    def handle(self, job: ClaimedJob, client: ApiClient) -> None:
        """Run a claimed job under its lease, then spool and post its results (or report
        why it could not run)."""
        assert self.runner_id is not None
        allocators = ", ".join(a.label + "=" + a.name for a in job.spec.allocators)
        self.log(escape(f"claimed job {job.id} ({job.kind}, attempt {job.attempt}): suite "
                        f"{job.spec.suite}, allocators {allocators}"[:1000]))
        lease = self.keep_lease(job)
        progress = Progress(self.log, job.id)
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
        self.post_results(job, results, client)

    def keep_lease(self, job: ClaimedJob) -> Lease:
        lease = keep_lease(job.id, job.attempt, self.runner_id or 0, self.settings.lease_seconds,
                           self.client, self.log)
        self._current_cancel = lease.cancel
        if self.stopping:
            lease.cancel.set()
        return lease

    def run_job(self, job: ClaimedJob, cancel: threading.Event, progress: Progress) -> ResultsIn:
        """Build what the job names and run its cells, interleaved."""
        request = request_for(job, self.settings, self.cpus, self.runner_id)
        prep = prepare(self.settings, request, on_trial=progress, cancel=cancel,
                       sandbox=self.sandbox)
        progress.total = 0 if job.spec.profile else prep.total
        for note in prep.notes:
            self.log(note)
        built = ", ".join(f"{b.commit[:12]} ({'cached' if b.cached else 'built'})"
                          for b in prep.resolved.builds.values())
        self.log(f"job {job.id}: {len(prep.cells)} cells, {progress.total} trials, interleaved"
                 + (f"; builds {built}" if built else ""))
        if job.spec.profile:  # a profile job: callgrind of base and head, no trials
            return run_profiles(prep, job.spec.profile)
        return execute(prep)

    def post_results(self, job: ClaimedJob, results: ResultsIn, client: ApiClient) -> None:
        n_ok = sum(1 for t in results.trials if t.ok)
        path = self.delivery.results(results)
        profiled = f", {len(results.profiles)} profiles" if results.profiles else ""
        self.log(f"job {job.id}: {len(results.trials)} trials ({n_ok} ok){profiled} spooled as "
                 f"{path.name}")
        self.delivery.flush(client)

    def report_error(self, job: ClaimedJob, client: ApiClient, e: Exception, lease_lost: bool,
                     trials_run: int) -> None:
        """Why the job did not finish, told to the API (retryable or not)."""
        if isinstance(e, Cancelled) and lease_lost:
            self.log(f"job {job.id} abandoned (lease lost); results not posted")
            return
        log, retryable = failure(e, trials_run)
        self.report_failure(job, client, log, retryable)

    def fail_malformed(self, e: BadJob) -> None:
        """A job the runner cannot even read: fail it (not retryable) so it is not re-claimed."""
        self.log(escape(str(e))[:2000])
        if e.job_id is not None and e.attempt is not None and self.runner_id is not None:
            self.delivery.fail(e.job_id, self.runner_id, e.attempt, str(e), retryable=False)

    def report_failure(self, job: ClaimedJob, client: ApiClient, log: str, retryable: bool) -> None:
        first = escape(log.splitlines()[0][:500]) if log else ""
        self.log(f"[red]job {job.id} failed[/]: {first}")
        assert self.runner_id is not None  # a job is claimed by a registered runner
        self.delivery.fail(job.id, self.runner_id, job.attempt, log, retryable)
        self.delivery.flush(client)
