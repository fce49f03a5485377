"""What a job asks a runner to run: the job spec (contracts §5)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from mallard_wire.fields import (
    INT32_MAX,
    BranchName,
    GitRef,
    InModel,
    Label,
    Name,
    Peer,
    RelativePath,
    RepoUrl,
    Threads,
    Variant,
    Warmup,
    Word,
    Workloads,
)


class SpecAllocator(InModel):
    label: Label
    name: Literal["mallard"] | Peer
    commit: GitRef | None = None
    variant: Variant | None = None


class JobSpec(InModel):
    """What a job asks a runner to run (contracts §5). The API validates it when a job is
    queued (by hand: POST /jobs, where repo_url is also checked against
    MALLARD_REPO_URL_ALLOW and suite/workloads against the suites; by a comparison or a
    push) and the runner again when it claims the job."""

    project: Name | None = None
    repo_url: RepoUrl
    allocator_dir: RelativePath = "allocator"
    suite: Word = "quick"
    workloads: Workloads | None = None
    threads: Threads | None = None
    trials: Annotated[int, Field(ge=1, le=1000)] | None = None
    warmup: Warmup | None = None
    branch: BranchName | None = None
    commit: GitRef | None = None
    allocators: Annotated[list[SpecAllocator], Field(min_length=1, max_length=20)]
    # set by the API for the jobs of a comparison (never by hand: POST /jobs refuses them)
    comparison_id: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
    round: Annotated[int, Field(ge=0, le=100)] | None = None
    # the bisection a comparison probes for (analysis/bisections.py)
    bisection_id: Annotated[int, Field(ge=1, le=INT32_MAX)] | None = None
