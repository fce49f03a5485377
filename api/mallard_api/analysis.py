"""Analysis entry points called by the core (contracts §8). Owned by the analysis engineer."""

from __future__ import annotations

from sqlalchemy.orm import Session


def after_ingest(session: Session, *, job_id: int | None, trial_ids: list[int]) -> None:
    """Called by results ingest, in the ingest transaction, after the trials are stored:
    updates the comparison that owns the job and runs change detection on the touched
    series."""
