"""What the core calls when results arrive or jobs change (contracts §8): in the caller's
transaction, queue the analysis (`after_ingest`, `jobs_changed`); the analysis worker
(`worker.py`) later settles the comparison that owns the job (`settle.py`) and searches
the touched branch series for change points (`alerts.py`). Nothing here runs
the analysis itself, and nothing here runs inside a read.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from mallard_api.sql import analysis_queue as queue_sql
from mallard_api.sql import comparisons as sql
from mallard_api.sql import jobs as job_sql


def queues_changes(job: job_sql.Holding | None) -> bool:
    """Whether a post's new trials get change detection: those of a commit job or of
    results without a job (not a comparison's). The trials' insert queues it
    (sql/results.py), in the same statement."""
    return job is None or job.kind == "commit"


def after_ingest(session: Session, *, job_id: int | None, stored: int,
                 job_completed: bool = False, job: job_sql.Holding | None = None) -> bool:
    """Called by results ingest after `stored` new trials are stored (change detection
    for them is already queued, see `queues_changes`): queue the comparison that owns the
    job. A re-post that stored nothing queues nothing. True when a comparison was
    queued: the caller wakes the worker for it. Change detection waits for the worker's
    next poll (MALLARD_ANALYSIS_POLL_SECONDS), which takes every queued batch in one run:
    one pass per touched series per poll, not per post (api/README.md, "Benchmark").
    `job`: the job as ingest read it (kind, comparison), saving a query."""
    comparison_id = None
    if job is not None:
        comparison_id = job.comparison_id
    elif job_id is not None:
        _, comparison_id = sql.job_kind_and_comparison(session, job_id)
    if comparison_id is not None and (stored or job_completed):
        queue_sql.enqueue_comparison(session, comparison_id)
        return True
    return False


def jobs_changed(session: Session, job_ids: list[int]) -> bool:
    """Jobs that ended (results, failure, expired lease): queue their comparisons."""
    comparisons = sql.comparisons_of_jobs(session, job_ids) if job_ids else []
    for comparison_id in comparisons:
        queue_sql.enqueue_comparison(session, comparison_id)
    return bool(comparisons)
