"""Bisections as requested and answered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import Arch, InModel, Name, Sha, Word
from pydantic import BaseModel, Field

from mallard_api.models.records import BisectionStep


class BisectionIn(InModel):
    project: Name
    good: Sha
    bad: Sha
    workload: Word
    measure: Word
    threads: Annotated[int, Field(ge=1, le=4096)] | None = None
    arch: Arch | None = None


class BisectionOut(BaseModel):
    id: int
    project: str
    branch: str | None
    arch: str
    workload: str
    measure: str
    threads: int | None
    good: str
    bad: str
    commits: list[str]
    state: str  # running | done
    culprit: str | None
    culprit_candidates: list[str]
    culprit_line: str | None
    builds: int
    steps: list[BisectionStep]
    alert_id: int | None
    origin: str
    created_at: datetime
    finished_at: datetime | None
