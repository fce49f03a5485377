"""Jobs and their attempts as posted and answered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import Arch, InModel, JsonDict, Name
from mallard_wire.jobs import JobSpec
from pydantic import BaseModel, Field

# --- jobs ---------------------------------------------------------------------------------
JobState = Literal["queued", "running", "done", "failed", "cancelled"]


JobKind = Literal["commit", "comparison", "calibrate"]


class JobIn(InModel):
    kind: JobKind
    arch: Arch
    spec: JobSpec
    project: Name | None = None
    max_attempts: Annotated[int, Field(ge=1, le=100)] = 3


# claim, lease and fail bodies: mallard_wire.jobs (what a runner sends)
class JobOut(BaseModel):
    id: int
    kind: str
    state: str
    attempt: int
    max_attempts: int
    arch: str
    lease_expires_at: datetime | None
    spec: JsonDict
    project_id: int | None
    runner_id: int | None
    created_at: datetime
    claimed_at: datetime | None
    finished_at: datetime | None


class AttemptOut(BaseModel):
    attempt: int
    runner_id: int | None
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    log: str | None


class JobDetail(JobOut):
    attempts: list[AttemptOut]
