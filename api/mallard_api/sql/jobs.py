"""The job queue: enqueue, claim (FOR UPDATE SKIP LOCKED), leases, failures, attempts.

States: queued -> running -> done | failed (| cancelled). Every claim opens a row in
job_attempts that ends as done, failed (with the runner's log) or expired (the lease
ran out: the runner died). A job whose attempts reach max_attempts ends `failed`.
"""

from __future__ import annotations

from dataclasses import dataclass

from mallard_wire.jobs import JobSpec
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from mallard_api.models.jobs import Job, JobAttempt

JOB_COLUMNS = ("id, kind, state, attempt, max_attempts, arch, lease_expires_at, spec, "
               "project_id, runner_id, created_at, claimed_at, finished_at")
_CLOSE_ATTEMPT = text(
    "UPDATE job_attempts SET ended_at = now(), outcome = :outcome, log = :log "
    "WHERE job_id = :job_id AND attempt = :attempt AND ended_at IS NULL")


def enqueue(session: Session, *, kind: str, arch: str, spec: JobSpec,
            project_id: int | None = None, max_attempts: int = 3) -> Job:
    """Queue a job (contracts §8); `spec` is validated, like every spec, by its model.
    The caller commits."""
    row = session.execute(text(
        "INSERT INTO jobs (kind, arch, spec, project_id, max_attempts, state, attempt) "
        "VALUES (:kind, :arch, CAST(:spec AS jsonb), :project, :max, 'queued', 0) "
        "RETURNING " + JOB_COLUMNS),
        {"kind": kind, "arch": arch, "spec": spec.model_dump_json(), "project": project_id,
         "max": max_attempts}).one()
    return row  # type: ignore[return-value]  # a Row with the Job's columns


def get(session: Session, job_id: int, *, fresh: bool = False) -> Job | None:
    """The job; `fresh`: read again from the database (not the session's copy)."""
    return session.get(Job, job_id, populate_existing=fresh)


def list_jobs(session: Session, *, state: str | None, arch: str | None, kind: str | None,
              limit: int, offset: int) -> list[Job]:
    q = select(Job)
    if state:
        q = q.where(Job.state == state)
    if arch:
        q = q.where(Job.arch == arch)
    if kind:
        q = q.where(Job.kind == kind)
    return list(session.scalars(q.order_by(Job.id.desc()).limit(limit).offset(offset)))


def attempts(session: Session, job_id: int) -> list[JobAttempt]:
    return list(session.scalars(
        select(JobAttempt).where(JobAttempt.job_id == job_id).order_by(JobAttempt.attempt)))


_READERS = text(
    "SELECT (SELECT p.name FROM projects p WHERE p.id = j.project_id) AS project, "
    "ARRAY(SELECT r.name FROM runners r WHERE r.id = j.runner_id OR r.id IN "
    "(SELECT a.runner_id FROM job_attempts a WHERE a.job_id = j.id)) AS runners "
    "FROM jobs j WHERE j.id = :j")


def readers(session: Session, job_id: int) -> tuple[str | None, set[str]]:
    """What decides who may read a job's attempts and logs (auth.may_read_job): the name of
    its project (None: none) and the names of the runners that held it."""
    row = session.execute(_READERS, {"j": job_id}).first()
    if row is None:
        return None, set()
    return row.project, set(row.runners or ())


def requeue_expired(session: Session, arch: str | None = None) -> list[int]:
    """Re-queue running jobs whose lease expired (or fail them at the attempt cap).

    Rows another transaction holds are skipped, so concurrent sweeps never block.
    """
    rows = session.execute(text(
        "SELECT id, attempt, max_attempts FROM jobs WHERE state = 'running' "
        "AND lease_expires_at < now() AND (CAST(:arch AS text) IS NULL OR arch = :arch) "
        "ORDER BY id FOR UPDATE SKIP LOCKED"), {"arch": arch}).all()
    for job_id, attempt, max_attempts in rows:
        session.execute(_CLOSE_ATTEMPT, {"outcome": "expired", "job_id": job_id,
                                         "attempt": attempt,
                                         "log": "lease expired: the runner stopped renewing"})
        final = attempt >= max_attempts
        session.execute(text(
            "UPDATE jobs SET state = :state, runner_id = NULL, lease_expires_at = NULL, "
            "finished_at = CASE WHEN :final THEN now() END WHERE id = :id"),
            {"state": "failed" if final else "queued", "final": final, "id": job_id})
    return [int(r[0]) for r in rows]


def claim(session: Session, *, runner_id: int, arch: str, lease_seconds: int) -> Job | None:
    """Give the oldest queued job of `arch` to the runner, with a lease; None if none.
    (The caller re-queues expired leases of the arch first: `requeue_expired`.)"""
    job = session.execute(text(
        "WITH job AS ("
        "  UPDATE jobs SET state = 'running', runner_id = :runner, attempt = attempt + 1, "
        "  claimed_at = now(), lease_expires_at = now() + make_interval(secs => :secs) "
        "  WHERE id = (SELECT id FROM jobs WHERE state = 'queued' AND arch = :arch "
        "              ORDER BY created_at, id FOR UPDATE SKIP LOCKED LIMIT 1) "
        "  RETURNING " + JOB_COLUMNS + "), "
        "attempt AS (INSERT INTO job_attempts (job_id, attempt, runner_id) "
        "            SELECT id, attempt, :runner FROM job) "
        "SELECT * FROM job"),
        {"runner": runner_id, "arch": arch, "secs": lease_seconds}).first()
    return job  # type: ignore[return-value]  # a Row with the Job's columns, or None


def renew(session: Session, *, job_id: int, runner_id: int, attempt: int, lease_seconds: int
          ) -> Job | None:
    """Extend the lease of this attempt; None when it was lost (expired, re-queued, claimed
    again: another attempt, or someone else's)."""
    row = session.execute(text(
        "UPDATE jobs SET lease_expires_at = now() + make_interval(secs => :secs) "
        "WHERE id = :id AND state = 'running' AND runner_id = :runner "
        "AND attempt = :attempt AND lease_expires_at >= now() RETURNING id"),
        {"id": job_id, "runner": runner_id, "attempt": attempt,
         "secs": lease_seconds}).first()
    if row is None:
        return None
    return session.get(Job, job_id, populate_existing=True)


def fail(session: Session, *, job_id: int, runner_id: int, attempt: int, log: str,
         retryable: bool) -> Job | None:
    """Record a failed attempt with its log; re-queue while attempts remain, else `failed`.

    None when the job is not running this attempt for this runner (its lease was lost).
    """
    job = session.scalar(select(Job).where(Job.id == job_id).with_for_update()
                         .execution_options(populate_existing=True))
    if job is None or job.state != "running" or job.runner_id != runner_id \
            or job.attempt != attempt:
        return None
    session.execute(_CLOSE_ATTEMPT, {"outcome": "failed", "job_id": job_id,
                                     "attempt": job.attempt, "log": log})
    final = (not retryable) or job.attempt >= job.max_attempts
    session.execute(text(
        "UPDATE jobs SET state = :state, runner_id = CASE WHEN :final THEN runner_id END, "
        "lease_expires_at = NULL, finished_at = CASE WHEN :final THEN now() END "
        "WHERE id = :id"), {"state": "failed" if final else "queued", "final": final,
                            "id": job_id})
    return session.get(Job, job_id, populate_existing=True)


@dataclass(frozen=True)
class Holding:
    """A job as results see it, read with its row locked until the caller commits."""

    state: str
    runner_id: int | None
    attempt: int
    lease_live: bool
    kind: str
    comparison_id: int | None  # the comparison that owns the job, if any
    project_id: int | None  # the project its results go to (none: a job of no project)


def lock_for_results(session: Session, job_id: int) -> Holding | None:
    """The job's state and holder, locked (FOR UPDATE: the lease cannot expire, and no
    other post for the job can interleave, until the caller's transaction ends)."""
    row = session.execute(text(
        "SELECT j.state, j.runner_id, j.attempt, coalesce(j.lease_expires_at >= now(), false), "
        "j.kind, (SELECT cj.comparison_id FROM comparison_jobs cj WHERE cj.job_id = j.id "
        "LIMIT 1), j.project_id FROM jobs j WHERE j.id = :id FOR UPDATE OF j"),
        {"id": job_id}).first()
    if row is None:
        return None
    return Holding(str(row[0]), row[1], int(row[2]), bool(row[3]), str(row[4]), row[5],
                   row[6])


def stored_uids(session: Session, job_id: int, uids: list[str]) -> int:
    """How many of these trial uids are stored for this job."""
    return int(session.scalar(text(
        "SELECT count(*) FROM trials WHERE job_id = :j AND uid = ANY(:u)"),
        {"j": job_id, "u": uids}) or 0)


def complete(session: Session, *, job_id: int, runner_id: int | None) -> bool:
    """Mark the job done (results arrived), closing its open attempt; False when it was
    done (or cancelled) already."""
    done = session.scalar(text(
        "WITH done AS ("
        "  UPDATE jobs SET state = 'done', finished_at = now(), lease_expires_at = NULL, "
        "  runner_id = COALESCE(CAST(:runner AS integer), runner_id) "
        "  WHERE id = :id AND state NOT IN ('done', 'cancelled') RETURNING id, attempt), "
        "closed AS ("
        "  UPDATE job_attempts a SET ended_at = now(), outcome = 'done' FROM done "
        "  WHERE a.job_id = done.id AND a.attempt = done.attempt AND a.ended_at IS NULL) "
        "SELECT count(*) FROM done"), {"id": job_id, "runner": runner_id})
    return bool(done)


def active_commit_job(session: Session, *, project_id: int, sha: str, arch: str) -> int | None:
    """A queued/running/done commit job for this commit and arch (webhook re-deliveries)."""
    value = session.scalar(text(
        "SELECT id FROM jobs WHERE kind = 'commit' AND project_id = :p AND arch = :a "
        "AND spec ->> 'commit' = :sha AND state IN ('queued', 'running', 'done') LIMIT 1"),
        {"p": project_id, "a": arch, "sha": sha})
    return None if value is None else int(value)
