"""Per-token quotas on queued work: the jobs and comparisons a token asked for (POST
/jobs, /comparisons, /calibrations) that are still queued or running, and the trials
those jobs ask for (timed trials per cell x cells x allocators, `Catalog.trials_requested`).

A request that queues work does it, then `charge`s it to its token in the same
transaction: the new jobs and comparisons are marked with the token, the token's queued
work is counted under a lock on its row (so two requests at once cannot both pass), and
past a quota the request is answered 429 with `Retry-After` and a body naming the quota;
the transaction is rolled back, so nothing of it is stored. Admin tokens (and the
bootstrap admin token) are exempt; a quota of 0 is none. A profile asked for over REST
(POST /comparisons/{id}/profiles) is charged the same.

Work the API queues itself for what a token asked for, a comparison's follow-up rounds
and the profiles of its moved cases, counts against that token (`count_for`): never
refused when it is queued (the analysis worker has no one to answer), it keeps the
token's next requests out while it runs. A push posted with a token (POST
/webhooks/push) is charged its commit jobs and their comparisons (`charge_jobs`); past a
quota it queues none of them: its commits are recorded and deferred (backfilled only
when runners are idle, so it cannot fill the queue), and its answer names the quota.
Other work the API queues itself (a bisection's steps, a calibration's canaries, the
commit jobs of a forge's signed push, which carries no token) is bounded by its own
settings (MALLARD_PUSH_MAX_QUEUED for pushes) and counts against no token.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path

from fastapi import HTTPException
from mallard_wire.fields import JsonDict
from mallard_wire.jobs import JobSpec
from sqlalchemy.orm import Session

from mallard_api.auth import Principal, field_error
from mallard_api.config import Settings
from mallard_api.known import Catalog
from mallard_api.sql import tokens as sql


def trials_of(spec: JobSpec | JsonDict, catalog: Catalog) -> int:
    """The timed trials a job spec asks for."""
    s = spec if isinstance(spec, JobSpec) else JobSpec.model_validate(spec)
    return catalog.trials_requested(s.suite, s.workloads, s.threads, s.trials,
                                    len(s.allocators))


@lru_cache(maxsize=4)
def _catalog(folder: Path) -> Catalog:
    """The suites of the process that has no app's catalog (the analysis worker)."""
    return Catalog.load(folder)


def count_for(session: Session, settings: Settings, token_id: int | None,
              jobs: Sequence[tuple[int, JobSpec | JsonDict]]) -> None:
    """Jobs the API queued for what token `token_id` asked for (None: no token, or an
    admin's): counted against it, never refused (module doc)."""
    if token_id is None or not jobs:
        return
    catalog = _catalog(Path(settings.suites_dir))
    sql.charge(session, token_id, jobs={job_id: trials_of(spec, catalog)
                                        for job_id, spec in jobs}, comparisons=[])


def exceeded(settings: Settings, name: str, limit: int, have: int, asked: int,
             what: str) -> HTTPException:
    exc = field_error(429, ["quota", name], (
        f"quota exceeded: this token has {have} {what} queued or running and asked for "
        f"{asked} more; at most {limit} (MALLARD_QUOTA_{name.upper()}): retry when some "
        "have finished"), "quota_exceeded")
    exc.headers = {"Retry-After": str(settings.quota_retry_after_seconds)}
    return exc


def charge(session: Session, settings: Settings, catalog: Catalog, p: Principal, *,
           jobs: Sequence[tuple[int, JobSpec | JsonDict]] = (),
           comparisons: Sequence[int] = ()) -> None:
    """Charge the work this request queued (jobs with their specs; comparisons, whose
    jobs are charged with them) to the token; 429 past a quota (module doc)."""
    if p.role == "admin" or p.token_id is None:
        return
    specs = [*jobs, *sql.comparison_jobs(session, list(comparisons))] if comparisons \
        else list(jobs)
    trials = {job_id: trials_of(spec, catalog) for job_id, spec in specs}
    sql.lock_quota(session, p.token_id)
    sql.charge(session, p.token_id, jobs=trials, comparisons=list(comparisons))
    now = sql.queued(session, p.token_id)
    for name, limit, total, asked, what in (
            ("queued_comparisons", settings.quota_queued_comparisons, now.comparisons,
             len(comparisons), "comparisons"),
            ("queued_jobs", settings.quota_queued_jobs, now.jobs, len(trials), "jobs"),
            ("queued_trials", settings.quota_queued_trials, now.trials,
             sum(trials.values()), "trials")):
        if limit and asked and total > limit:  # the request's session is rolled back
            raise exceeded(settings, name, limit, total - asked, asked, what)


def charge_jobs(session: Session, settings: Settings, catalog: Catalog, p: Principal,
                job_ids: Sequence[int]) -> None:
    """Charge jobs the request queued, by id, with the comparisons they belong to."""
    jobs, comparisons = sql.jobs_with_comparisons(session, list(job_ids))
    charge(session, settings, catalog, p, jobs=jobs, comparisons=comparisons)
