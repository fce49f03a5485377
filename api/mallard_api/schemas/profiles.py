"""Differential profiles as asked for and answered."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from mallard_wire.profiles import ProfileCase, ProfileIn
from pydantic import BaseModel


class ProfileRequest(ProfileCase):
    """POST /comparisons/{id}/profiles: a case of the comparison (a workload it has a cell
    of, at a thread count it ran) and params overriding its deterministic ones."""


class ProfileOut(BaseModel):
    id: int
    comparison_id: int
    workload: str
    threads: int | None
    params: JsonDict
    state: str  # queued | running | done | failed
    requested: bool
    job_id: int | None
    created_at: datetime
    why: str | None  # the function that moved most (the culprit line's `why:`)
    summary: str | None
    profile: ProfileIn | None
