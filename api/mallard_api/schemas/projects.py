"""Request and response bodies of projects and their branches."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import NO_NUL, BranchName, InModel, RepoUrl
from mallard_wire.recipes import Recipe
from pydantic import BaseModel, Field, StringConstraints, field_validator

from mallard_api.config import check_secret
from mallard_api.peers import Peer


# --- projects, branches, commits -------------------------------------------------------
class ProjectIn(InModel):
    # checked against MALLARD_REPO_URL_ALLOW by the route (urls.py)
    repo_url: RepoUrl
    # how its allocator builds (admins only; left out: the current one is kept)
    recipe: Recipe | None = None
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
    recipe: Recipe | None  # None: not set yet (no build can be queued)
    peers: list[str] | None  # None: MALLARD_PEERS
    default_branch: str
    tracked_branches: list[str]
    has_webhook_secret: bool
    public: bool  # its pages, badges and images are readable without a token
    created_at: datetime


class PublicIn(InModel):
    """PUT /projects/{name}/public (admins): whether its read-only pages, badges and images
    are served without a token."""

    public: bool


class RecipeIn(InModel):
    """PUT /projects/{name}/recipe: how the project's allocator builds (admins only)."""

    recipe: Recipe


class RecipeOut(BaseModel):
    project: str
    recipe: Recipe | None


class PeersIn(InModel):
    """PUT /projects/{name}/peers: catalogue names (`glibc`) or registered projects at a
    ref (`jemalloc@5.3.0`); null: MALLARD_PEERS."""

    peers: Annotated[list[Peer], Field(max_length=20)] | None


class PeersOut(BaseModel):
    project: str
    peers: list[str]  # what its jobs are compared beside (its own, else MALLARD_PEERS)
    default: bool  # True: MALLARD_PEERS (the project has none of its own)


class RetentionIn(InModel):
    """PUT /projects/{name}/retention (admins): days the trials of pull requests and
    calibrations are kept, and days every other raw trial is kept (its values stay in the
    series); null: kept forever."""

    keep_pr_days: Annotated[int, Field(ge=1, le=36_500)] | None = None
    keep_raw_days: Annotated[int, Field(ge=1, le=36_500)] | None = None


class RetentionOut(BaseModel):
    project: str
    keep_pr_days: int | None
    keep_raw_days: int | None


class BranchOut(BaseModel):
    id: int
    project: str
    name: str
    head_sha: str | None
    updated_at: datetime


class Membership(BaseModel):
    branch: str
    position: int
