"""Jobs and their attempts as posted and answered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import Arch, InModel, JsonDict, Name
from mallard_wire.jobs import JobSpec, SpecAllocator
from pydantic import BaseModel, Field, model_validator

# --- jobs ---------------------------------------------------------------------------------
JobState = Literal["queued", "running", "done", "failed", "cancelled"]


JobKind = Literal["commit", "comparison", "calibrate"]


class AllocatorIn(SpecAllocator):
    """A side of a job queued by hand. A side with a commit is a registered project's
    build: the route fills its `build` (repository and recipe) from the project named
    `name`; a hand-written `build` is for admins only. Checked as a `SpecAllocator` once
    its build is filled (routes/jobs.py)."""

    @model_validator(mode="after")
    def _built_or_catalogue(self) -> AllocatorIn:
        return self


class JobSpecIn(JobSpec):
    allocators: Annotated[list[AllocatorIn],  # type: ignore[assignment]
                          Field(min_length=1, max_length=20)]


class JobIn(InModel):
    kind: JobKind
    arch: Arch
    spec: JobSpecIn
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
