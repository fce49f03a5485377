"""A project's forge settings as set and answered."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from mallard_wire.fields import InModel
from pydantic import BaseModel, StringConstraints, ValidationInfo, field_validator

# One segment of a forge repository's path: a plain name of letters, digits, `_`, `.` and
# `-` that starts with a letter, digit or `_` (so never `.`, `..`, a hidden name or an
# option) and ends with a letter, digit, `_` or `-`; `.git` and `.atom` endings are
# refused (the forges strip or serve them as other paths).
_SEGMENT = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_.-]{0,98}[A-Za-z0-9_-])?")
_ENDINGS = (".git", ".atom")
# GitHub and Gitea: owner/name; GitLab: group[/subgroup...]/name
# When the one pull-request comment is written: on every result, only when a cell moved
# or the result differs from what the comment says, or never (the status is always sent;
# a `/mallard bench` command is always answered).
CommentMode = Literal["always", "on-change", "never"]
SEGMENTS = {"github": (2, 2), "gitea": (2, 2), "gitlab": (2, 20)}


def repo_reason(kind: str, repo: str) -> str | None:
    """Why `repo` is not a repository name of a `kind` forge, or None."""
    parts = repo.split("/")
    low, high = SEGMENTS.get(kind, (2, 2))
    shape = "owner/name" if high == 2 else "group/name or group/subgroup/.../name"
    if not low <= len(parts) <= high:
        return f"a {kind} repository is {shape}"
    for part in parts:
        if not _SEGMENT.fullmatch(part):
            return (f"each part of {shape} is a plain name (letters, digits, _ . -, not "
                    "starting with . or -, not ending with .)")
        if part.lower().endswith(_ENDINGS):
            return f"a part of {shape} may not end with .git or .atom"
    return None


class ForgeIn(InModel):
    kind: Literal["github", "gitlab", "gitea"]
    base_url: Annotated[str, StringConstraints(min_length=8, max_length=500)]
    repo: Annotated[str, StringConstraints(max_length=300)]
    token: Annotated[str, StringConstraints(min_length=1, max_length=500,
                                            pattern=r"^[\x21-\x7e]+$")]
    comment_mode: CommentMode = "always"

    @field_validator("repo")
    @classmethod
    def _repository_name(cls, value: str, info: ValidationInfo) -> str:
        reason = repo_reason(str(info.data.get("kind", "github")), value)
        if reason:
            raise ValueError(reason)
        return value


class ForgeOut(BaseModel):
    """The forge without its token (never returned)."""

    kind: str
    base_url: str
    repo: str
    token_set: bool
    comment_mode: CommentMode
