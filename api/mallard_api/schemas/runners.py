"""Runners as answered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import InModel, JsonDict, Name
from pydantic import BaseModel, Field

# the projects a runner may post history without a job to: these, or every one
Scope = Annotated[list[Name], Field(max_length=1000)] | Literal["all"]


# --- runners (registration and heartbeat bodies: mallard_wire.runners) -----------------
class RunnerOut(BaseModel):
    id: int
    name: str
    arch: str
    cpus: str | None
    testbed: JsonDict | None
    testbed_fingerprint: str | None
    registered_at: datetime
    last_seen_at: datetime
    retired_at: datetime | None = None
    projects: Scope = []


class RunnerProjectsIn(InModel):
    """PUT /runners/{id}/projects: the projects the runner may post history without a job
    to (`[]`: none, the default; `"all"`: every project, present and future). A job's
    results always go to the job's own project, whatever this says."""

    projects: Scope
