"""Baselines and broken ranges of a branch, as sent and answered."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from mallard_wire.fields import InModel
from pydantic import BaseModel, StringConstraints

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{4,64}$")]
Why = Annotated[str, StringConstraints(max_length=4000, pattern=r"^[^\x00]*$")]


class BaselineIn(InModel):
    """Accept the change at `commit` as intended: the branch's series restart there."""

    commit: Sha
    note: Why = ""


class BrokenIn(InModel):
    """Leave commits `first`..`last` (both included) out of analysis."""

    first: Sha
    last: Sha
    reason: Why = ""


class MarkOut(BaseModel):
    kind: str  # baseline | broken
    first_sha: str
    last_sha: str
    note: str
    actor: str
    created_at: datetime
