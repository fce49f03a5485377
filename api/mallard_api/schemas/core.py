"""Request and response bodies of the core REST API (projects, runners, jobs, results,
series, pushes); the field types they share are in `base`."""


from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import (
    NO_NUL,
    Arch,
    BranchName,
    FullSha,
    GitRef,
    InModel,
    JsonDict,
    Name,
    RelativePath,
    RepoUrl,
    Sha,
    Str500,
    Text,
)
from mallard_wire.jobs import JobSpec
from pydantic import (
    BaseModel,
    Field,
    StringConstraints,
    field_validator,
)

from mallard_api.config import check_secret


# --- projects, branches, commits -------------------------------------------------------
class ProjectIn(InModel):
    # checked against MALLARD_REPO_URL_ALLOW by the route (urls.py)
    repo_url: RepoUrl
    allocator_dir: RelativePath = "allocator"
    default_branch: BranchName = "main"
    tracked_branches: Annotated[list[BranchName], Field(max_length=100)] = []
    webhook_secret: Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)] \
        | None = None

    @field_validator("webhook_secret")
    @classmethod
    def _real_secret(cls, value: str | None) -> str | None:
        if value is not None and not value:
            raise ValueError("must not be empty (leave it out to keep the current one)")
        return check_secret("webhook_secret", value)


class ProjectOut(BaseModel):
    id: int
    name: str
    repo_url: str
    allocator_dir: str
    default_branch: str
    tracked_branches: list[str]
    has_webhook_secret: bool
    created_at: datetime


class BranchOut(BaseModel):
    id: int
    project: str
    name: str
    head_sha: str | None
    updated_at: datetime


class Membership(BaseModel):
    branch: str
    position: int


class CommitOut(BaseModel):
    sha: str
    parent_sha: str | None
    message: str | None
    author: str | None
    committed_at: datetime | None
    branches: list[Membership]


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


# --- results ------------------------------------------------------------------------------
class ResultsOut(BaseModel):
    stored: int
    duplicates: int
    job_id: int | None


# --- series -------------------------------------------------------------------------------
class SeriesPoint(BaseModel):
    commit_sha: str
    commit_short: str
    position: int
    commit_time: datetime | None
    params: JsonDict
    threads: int | None
    arch: str
    testbed_fingerprint: str
    median: float
    p25: float
    p75: float
    n: int
    values: list[float]


class SeriesOut(BaseModel):
    project: str
    branch: str
    workload: str
    measure: str
    unit: str
    higher_is_better: bool | None
    allocator: str
    variant: str
    points: list[SeriesPoint]


# --- webhooks -----------------------------------------------------------------------------
class PushCommit(InModel):
    sha: Sha
    parent: Sha | None = None
    message: Text | None = None
    author: Str500 | None = None
    time: datetime | None = None


class PlainPush(InModel):
    project: Name
    ref: GitRef
    before: FullSha | None = None
    after: FullSha
    commits: Annotated[list[PushCommit], Field(max_length=100_000)] = []


class PushOut(BaseModel):
    project: str | None
    branch: str | None
    commits: int = Field(description="commits recorded that were new on the branch")
    queued: int = Field(default=0, description="commits that got commit jobs (at most "
                                       "MALLARD_PUSH_MAX_QUEUED, the newest ones)")
    jobs: list[int]
    ignored: str | None = None
    deferred: int = Field(default=0, description="new commits beyond the cap: measured "
                                        "later, newest first, when runners are idle")
    unreachable: int = Field(default=0, description="commits a force-push took off the "
                                           "branch (their results are kept)")
    note: str | None = None
