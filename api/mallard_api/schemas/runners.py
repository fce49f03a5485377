"""Runners as answered."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from pydantic import BaseModel


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
