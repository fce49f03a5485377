"""The answer to a results post."""

from __future__ import annotations

from pydantic import BaseModel


# --- results ------------------------------------------------------------------------------
class ResultsOut(BaseModel):
    stored: int
    duplicates: int
    job_id: int | None
