"""Retention: a project's old trials, counted (dry run) or deleted, by kind.

* short-lived: the trials of pull requests and calibrations, i.e. of a commit on no
  branch of the project (a request's head), without a commit, or of a calibration's job;
  older than `keep_pr_days`;
* raw: every other trial older than `keep_raw_days` (the default branch's included): its
  values are in `series_points` already (the trigger of migration 0012 adds a trial's
  values when it is inserted), and those rows are kept, so the history pages, change
  detection and verdicts, which read only them, do not change.

One statement per kind and project (a sequential scan of the project's trials: no index
on the age is kept, so ingest pays nothing for it).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from mallard_api.models.projects import Project

_SHORT_LIVED = """
    (t.commit_id IS NULL
     OR NOT EXISTS (SELECT 1 FROM branch_commits bc JOIN branches b ON b.id = bc.branch_id
                    WHERE bc.commit_id = t.commit_id AND b.project_id = t.project_id)
     OR EXISTS (SELECT 1 FROM comparison_jobs cj JOIN comparisons c ON c.id = cj.comparison_id
                WHERE cj.job_id = t.job_id AND c.calibration_id IS NOT NULL))"""
_KINDS = {
    "short": f"t.ingested_at < CAST(:now AS timestamptz) - make_interval(days => :days) "
             f"AND {_SHORT_LIVED}",
    "raw": "t.ingested_at < CAST(:now AS timestamptz) - make_interval(days => :days)",
}


@dataclass
class Counts:
    """What a run removes (or would) of one project, and what it keeps."""

    project: str
    short_lived: int = 0  # pull-request and calibration trials deleted
    raw: int = 0  # other raw trials deleted (their values stay in series_points)
    kept: int = 0  # trials left


def with_policy(session: Session) -> list[Project]:
    """The projects that delete anything (a policy set), by name."""
    return list(session.scalars(select(Project).where(
        (Project.keep_pr_days.is_not(None)) | (Project.keep_raw_days.is_not(None)))
        .order_by(Project.name)))


def apply(session: Session, project: Project, kind: str, days: int, now: datetime, *,
          dry_run: bool) -> int:
    """Delete (or, dry, count) the project's trials of `kind` older than `days` days."""
    where = f"FROM trials t WHERE t.project_id = :p AND {_KINDS[kind]}"
    sql = f"SELECT count(*) {where}" if dry_run else f"DELETE {where}"
    res = session.execute(text(sql), {"p": project.id, "days": days, "now": now})
    return int(res.scalar_one() if dry_run else res.rowcount)  # type: ignore[attr-defined]


def count_trials(session: Session, project: Project) -> int:
    return int(session.execute(text("SELECT count(*) FROM trials WHERE project_id = :p"),
                               {"p": project.id}).scalar_one())
