"""Jobs between the API and a runner (contracts §5): what a job asks a runner to run (the
job spec), the job as a runner claims it, and what a runner posts about a job it holds
(claim, lease renewal, failure)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

from mallard_wire.fields import (
    INT32_MAX,
    AllocatorName,
    Arch,
    BranchName,
    GitRef,
    InModel,
    JobId,
    Label,
    LeaseSeconds,
    LogText,
    Name,
    RepoUrl,
    RunnerId,
    Threads,
    Warmup,
    Word,
    Workloads,
)
from mallard_wire.profiles import ProfileCase
from mallard_wire.recipes import Recipe, Variant, variant_env
from mallard_wire.timelines import Record


class AllocatorBuild(InModel):
    """Where a built allocator comes from: a repository and the recipe it builds by (the
    project's registered one; a `.mallard.toml` at the commit wins on the runner)."""

    repo_url: RepoUrl
    recipe: Recipe


class SpecAllocator(InModel):
    """One side of a job: a project at a commit with a variant, built by its recipe
    (`build`), or a system allocator from the node's catalogue (no `build`: no commit,
    no variant). `name` is the project's name or the catalogue entry's."""

    label: Label
    name: AllocatorName
    commit: GitRef | None = None
    variant: Variant | None = None
    build: AllocatorBuild | None = None

    @model_validator(mode="after")
    def _built_or_catalogue(self) -> SpecAllocator:
        if self.build is None:
            if self.commit is not None or self.variant:
                raise ValueError(f"{self.name} has no build: a system allocator from the "
                                 f"node's catalogue takes no commit or variant")
            return self
        variant_env(self.build.recipe.options, self.variant)  # its keys are the recipe's
        return self


class JobSpec(InModel):
    """What a job asks a runner to run (contracts §5). The API validates it when a job is
    queued (by hand: POST /jobs, where repo_url is also checked against
    MALLARD_REPO_URL_ALLOW and suite/workloads against the suites; by a comparison or a
    push) and the runner again when it claims the job."""

    project: Name | None = None
    repo_url: RepoUrl
    suite: Word = "quick"
    workloads: Workloads | None = None
    threads: Threads | None = None
    trials: Annotated[int, Field(ge=1, le=1000)] | None = None
    warmup: Warmup | None = None
    record: Record | None = None  # memory timelines, latency histograms (None: the suite's)
    branch: BranchName | None = None
    commit: GitRef | None = None
    allocators: Annotated[list[SpecAllocator], Field(min_length=1, max_length=20)]
    # set by the API for the jobs of a comparison (never by hand: POST /jobs refuses them)
    comparison_id: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    round: Annotated[int, Field(ge=0, le=100)] | None = None
    # the bisection a comparison probes for (analysis/bisections.py)
    bisection_id: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    # a profile job (kind `profile`): callgrind of base and head at each case, no trials
    profile: Annotated[list[ProfileCase], Field(min_length=1, max_length=20)] | None = None


class ClaimedJob(BaseModel):
    """A job as a runner reads it from POST /jobs/claim (the API's `JobOut`; the fields a
    runner needs, others ignored). Its spec is validated by `JobSpec`, so a spec the API
    would refuse is refused on claim too, before anything runs."""

    model_config = ConfigDict(extra="ignore")

    id: JobId
    kind: str = "commit"
    state: str | None = None
    attempt: Annotated[int, Field(ge=1, le=INT32_MAX)]
    max_attempts: int | None = None
    arch: Arch | None = None
    lease_expires_at: datetime | None = None
    spec: JobSpec


class ClaimIn(InModel):
    runner_id: RunnerId
    lease_seconds: LeaseSeconds = 900


# the attempt a runner claimed: a lease renewal or failure report of an older attempt
# (the lease expired and the job was claimed again) is refused, so it never touches the
# attempt that runs now
Attempt = Annotated[int, Field(ge=1, le=INT32_MAX,
                               description="the job's attempt as the runner claimed it")]


class LeaseIn(InModel):
    runner_id: RunnerId
    attempt: Attempt
    lease_seconds: LeaseSeconds = 900


class FailIn(InModel):
    """A job its runner could not finish: the log and whether another attempt may help."""

    runner_id: RunnerId
    attempt: Attempt
    log: LogText = ""
    retryable: bool = True
