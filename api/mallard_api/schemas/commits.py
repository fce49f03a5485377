"""Commits as answered, and the push bodies that bring them."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import FullSha, GitRef, InModel, Name, Sha, Str500, Text
from pydantic import BaseModel, Field

from mallard_api.schemas.projects import Membership
from mallard_api.schemas.verdicts import CommitVerdictOut


class CommitOut(BaseModel):
    sha: str
    parent_sha: str | None
    message: str | None
    author: str | None
    committed_at: datetime | None
    branches: list[Membership]


class CommitDetail(CommitOut):
    """GET /projects/{p}/commits/{sha}: the commit with its verdict per arch."""

    verdicts: list[CommitVerdictOut] = []
    unreachable_on: list[str] = Field(default=[], description="branches a force-push took "
                                      "it off (its results are kept)")


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
