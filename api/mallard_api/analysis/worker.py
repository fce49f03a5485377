"""The analysis worker: takes work from the analysis queue (sql/analysis_queue.py) and
runs it outside any request.

- `comparison`: lock the comparison and settle it (settle.py): recompute its cells from
  all its trials, settle its state or queue a follow-up, and tell its listeners (commit
  verdicts, bisections, pull requests, calibrations).
- `changes`: change detection over every series the queued trials touched
  (alerts.detect_changes); alerts it opens queue their webhook events.

Once every MALLARD_RETENTION_INTERVAL_SECONDS the poll also applies the projects'
retention policies (mallard_api/retention.py), in a transaction of its own.

Each item is taken with SKIP LOCKED and done, and deleted, in one transaction; a failure
rolls back and counts an attempt (retried after `30 s * attempts`, kept as failed after
MALLARD_ANALYSIS_MAX_ATTEMPTS, with its error). A process runs it in a background loop
every MALLARD_ANALYSIS_POLL_SECONDS and when woken by its own ingest; tests call
`drain()` instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session

from mallard_api import retention
from mallard_api.analysis import alerts
from mallard_api.analysis.settle import settle
from mallard_api.background import BackgroundLoop
from mallard_api.config import Settings
from mallard_api.errors import unavailable
from mallard_api.sql import analysis_queue as queue
from mallard_api.sql import comparisons as comparison_sql

log = logging.getLogger("mallard_api.analysis")


class AnalysisWorker:
    def __init__(self, factory: Callable[[], Session], settings: Settings,
                 on_commit: Callable[[], None] | None = None) -> None:
        self.factory = factory
        self.settings = settings
        self.on_commit = on_commit  # e.g. wake the outbox after alerts were opened
        self.retained_at: float | None = None  # monotonic time of the last retention run

    def run(self, session: Session, task: queue.Task) -> None:
        if task.kind == "comparison":
            assert task.comparison_id is not None
            comp = comparison_sql.lock(session, task.comparison_id)
            if comp is not None:
                settle(session, self.settings, comp)
        else:
            alerts.detect_changes(session, sorted(set(task.trial_ids)), self.settings)

    def retain(self) -> None:
        """Apply the retention policies when the interval has passed since the last run."""
        every = self.settings.retention_interval_seconds
        now = time.monotonic()
        if every <= 0 or (self.retained_at is not None and now - self.retained_at < every):
            return
        self.retained_at = now
        with self.factory() as session:
            for c in retention.run(session, dry_run=False):
                if c.short_lived or c.raw:
                    log.info("retention %s: %d pull-request/calibration and %d raw trials "
                             "deleted, %d kept", c.project, c.short_lived, c.raw, c.kept)
            session.commit()

    def step(self) -> bool:
        """Take and run one item; False when none is due."""
        return self._step() is not None

    def poll(self) -> bool:
        """The background loop's step: every due item, but change detection once; what
        is queued for it meanwhile waits for the next poll, so results streaming in get
        one pass per touched series per poll, not passes back to back (api/README.md,
        "Benchmark"). False: nothing more to do before the next poll or wake-up."""
        self.retain()
        changes = True
        for _ in range(10_000):
            kind = self._step(changes=changes)
            if kind is None:
                return False
            changes = changes and kind != "changes"
        return True

    def _step(self, *, changes: bool = True) -> str | None:
        """Take and run one item (`changes=False`: not change detection); its kind, or
        None when none is due."""
        with self.factory() as session:
            task = queue.take(session, changes=changes)
            if task is None:
                session.rollback()
                return None
            try:
                self.run(session, task)
                queue.finish(session, task)
                session.commit()
            except Exception as exc:
                if unavailable(exc):
                    raise  # the loop backs off; the item stays queued
                session.rollback()
                log.exception("analysis of %s %s failed", task.kind,
                              task.comparison_id or f"({len(task.trial_ids)} trials)")
                with self.factory() as s:
                    queue.record_failure(s, task, f"{type(exc).__name__}: {exc}",
                                         max_attempts=self.settings.analysis_max_attempts,
                                         delay_seconds=30.0)
                    s.commit()
                return task.kind
        if self.on_commit is not None:
            self.on_commit()
        return task.kind

    def drain(self, limit: int = 10_000) -> int:
        """Run due items until none is left (or `limit`); returns how many ran."""
        done = 0
        while done < limit and self.step():
            done += 1
        return done


class AnalysisService:
    """The worker as an app runs it: a background loop when `poll_seconds` > 0, woken
    by this process's ingest; otherwise nothing runs until someone calls `drain()`."""

    def __init__(self, worker: AnalysisWorker, *, poll_seconds: float,
                 max_backoff: float) -> None:
        self.worker = worker
        self.poll_seconds = poll_seconds
        self.max_backoff = max_backoff
        self._loop: BackgroundLoop | None = None

    def start(self) -> None:
        if self.poll_seconds > 0 and (self._loop is None or not self._loop.alive):
            self._loop = BackgroundLoop("analysis", self.worker.poll,
                                        interval=self.poll_seconds,
                                        max_backoff=self.max_backoff).start()

    def stop(self) -> None:
        if self._loop is not None:
            self._loop.stop()

    def wake(self) -> None:
        if self._loop is not None:
            self._loop.wake()

    def drain(self) -> int:
        return self.worker.drain()
