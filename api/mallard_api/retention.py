"""Retention (db/versions/0024): each project's policy run over its trials, by the
analysis worker once every MALLARD_RETENTION_INTERVAL_SECONDS, or by hand
(`mallard-api retention run --dry-run` first). A project's policy (`PUT
/api/v1/projects/{name}/retention`, admin): `keep_pr_days` for the trials of pull
requests and calibrations, `keep_raw_days` for every other raw trial, whose values stay
summarised per commit in `series_points` (sql/retention.py); unset: kept forever.
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy.orm import Session

from mallard_api.sql import retention as sql
from mallard_api.sql.retention import Counts


def run(session: Session, *, dry_run: bool, now: datetime | None = None) -> list[Counts]:
    """Apply every project's policy (dry: count only, and roll back nothing); the counts
    per project. The caller commits."""
    when = now or datetime.now(UTC)
    out = []
    for project in sql.with_policy(session):
        c = Counts(project=project.name)
        if project.keep_pr_days is not None:
            c.short_lived = sql.apply(session, project, "short", project.keep_pr_days, when,
                                      dry_run=dry_run)
        if project.keep_raw_days is not None:
            c.raw = sql.apply(session, project, "raw", project.keep_raw_days, when,
                              dry_run=dry_run)
            if dry_run and project.keep_pr_days is not None:  # counted in both
                c.raw -= min(c.raw, sql.apply(session, project, "short",
                                              max(project.keep_pr_days,
                                                  project.keep_raw_days), when,
                                              dry_run=True))
        c.kept = sql.count_trials(session, project) - (
            c.short_lived + c.raw if dry_run else 0)
        out.append(c)
    return out


def table(counts: list[Counts]) -> str:
    """The counts as the CLI prints them."""
    lines = [f"{'project':<30} {'pull-request/calibration':>24} {'raw':>10} {'kept':>10}"]
    lines += [f"{c.project:<30} {c.short_lived:>24} {c.raw:>10} {c.kept:>10}" for c in counts]
    return "\n".join(lines)
