"""The analysis queue (migration 0005): durable work for the analysis worker.

Rows are taken with `FOR UPDATE SKIP LOCKED`, processed and deleted in one transaction,
so any number of API processes can run workers and a row's work is done once. Adding a
`comparison` row is skipped when an unlocked pending row for the same comparison exists
(it is locked until the adding transaction commits, so the worker that takes it sees the
new data); a row being processed does not count, so data that arrives during a run gets
a run of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import text
from sqlalchemy.orm import Session

# `changes` rows merged into one run (one pass per touched series): a results post does
# not wake the worker for them, so a poll finds every batch posted since the last one
COALESCE_CHANGES = 1000
# (a post's `changes` row is added by the statement that inserts its trials:
# sql/results.py)


def enqueue_comparison(session: Session, comparison_id: int) -> None:
    pending = session.execute(text(
        "SELECT id FROM analysis_queue WHERE comparison_id = :c AND failed_at IS NULL "
        "LIMIT 1 FOR UPDATE SKIP LOCKED"), {"c": comparison_id}).first()
    if pending is None:
        session.execute(text(
            "INSERT INTO analysis_queue (kind, comparison_id) VALUES ('comparison', :c)"),
            {"c": comparison_id})


@dataclass
class Task:
    ids: list[int]
    kind: str
    comparison_id: int | None = None
    trial_ids: list[int] = field(default_factory=list)


def take(session: Session, *, changes: bool = True) -> Task | None:
    """The oldest due row (locked), merged with other unlocked rows of the same work;
    `changes=False`: not change detection's."""
    row = session.execute(text(
        "SELECT id, kind, comparison_id, trial_ids FROM analysis_queue "
        "WHERE failed_at IS NULL AND not_before <= now() "
        "AND (CAST(:changes AS boolean) OR kind <> 'changes') "
        "ORDER BY not_before, id LIMIT 1 FOR UPDATE SKIP LOCKED"),
        {"changes": changes}).first()
    if row is None:
        return None
    task = Task([int(row.id)], str(row.kind), row.comparison_id, list(row.trial_ids or []))
    if task.kind == "comparison":
        same = session.execute(text(
            "SELECT id FROM analysis_queue WHERE comparison_id = :c AND id <> :id "
            "AND failed_at IS NULL FOR UPDATE SKIP LOCKED"),
            {"c": task.comparison_id, "id": task.ids[0]})
        task.ids += [int(r.id) for r in same]
    else:
        more = session.execute(text(
            "SELECT id, trial_ids FROM analysis_queue WHERE kind = 'changes' AND id <> :id "
            "AND failed_at IS NULL AND not_before <= now() ORDER BY id LIMIT :n "
            "FOR UPDATE SKIP LOCKED"), {"id": task.ids[0], "n": COALESCE_CHANGES})
        for r in more:
            task.ids.append(int(r.id))
            task.trial_ids += list(r.trial_ids or [])
    return task


def finish(session: Session, task: Task) -> None:
    session.execute(text("DELETE FROM analysis_queue WHERE id = ANY(:ids)"), {"ids": task.ids})


def record_failure(session: Session, task: Task, error: str, *, max_attempts: int,
                   delay_seconds: float) -> None:
    """Count a failed run (retried after `delay_seconds` times the attempts); after
    `max_attempts` the rows stay, marked failed, for a look."""
    session.execute(text(
        "UPDATE analysis_queue SET attempts = attempts + 1, last_error = :e, "
        "not_before = now() + make_interval(secs => :d * (attempts + 1)), "
        "failed_at = CASE WHEN attempts + 1 >= :m THEN now() END WHERE id = ANY(:ids)"),
        {"e": error[:2000], "d": delay_seconds, "m": max_attempts, "ids": task.ids})


def pending(session: Session) -> int:
    return int(session.scalar(text(
        "SELECT count(*) FROM analysis_queue WHERE failed_at IS NULL")) or 0)
