"""A project's forge settings as set and answered."""

from __future__ import annotations

from typing import Annotated, Literal

from mallard_wire.fields import InModel
from pydantic import BaseModel, StringConstraints


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
