"""Request and response bodies of projects and their branches."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import NO_NUL, BranchName, InModel, RelativePath, RepoUrl
from pydantic import BaseModel, Field, StringConstraints, field_validator

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
