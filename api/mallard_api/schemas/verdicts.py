"""Wire models of commit verdicts, bisections and forge settings (issue 12). A verdict's
moved cells and a bisection's steps are answered as stored (`models.records`)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import Arch, InModel, Name, Sha, Word
from pydantic import BaseModel, Field, StringConstraints

from mallard_api.models.records import BisectionStep, MovedCell
from mallard_api.schemas.core import CommitOut


class CommitVerdictOut(BaseModel):
    arch: str
    branch: str
    base_sha: str
    state: str  # deferred (beyond a push's cap) | baseline (measured alone) | queued |
    #             running (its comparison's jobs run) | done | failed
    verdict: str | None  # regressed | improved | same | unknown (worst primary cell)
    moved: list[MovedCell]
    comparison_id: int | None
    report_url: str | None
    alert_id: int | None
    bisection_id: int | None


class CommitDetail(CommitOut):
    """GET /projects/{p}/commits/{sha}: the commit with its verdict per arch."""

    verdicts: list[CommitVerdictOut] = []
    unreachable_on: list[str] = Field(default=[], description="branches a force-push took "
                                      "it off (its results are kept)")


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


class ForgeIn(InModel):
    kind: Literal["github", "gitlab", "gitea"]
    base_url: Annotated[str, StringConstraints(min_length=8, max_length=500)]
    repo: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$",
                                           max_length=300)]
    token: Annotated[str, StringConstraints(min_length=1, max_length=500,
                                            pattern=r"^[\x21-\x7e]+$")]


class ForgeOut(BaseModel):
    """The forge without its token (never returned)."""

    kind: str
    base_url: str
    repo: str
    token_set: bool


class TriageOut(BaseModel):
    series_key: str
    project: str
    workload: str
    threads: int | None
    measure: str
    arch: str
    alerts: int
    true_positive: int
    false_positive: int


__all__ = ["BisectionIn", "BisectionOut", "BisectionStep", "CommitDetail", "CommitVerdictOut",
           "ForgeIn", "ForgeOut", "MovedCell", "TriageOut"]
