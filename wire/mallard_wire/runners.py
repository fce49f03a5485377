"""What a runner tells the API about itself (contracts §5): registration and heartbeat."""

from __future__ import annotations

from mallard_wire.fields import Arch, InModel, Name, Str200
from mallard_wire.results import TestbedFields


class RunnerRegister(InModel):
    name: Name
    arch: Arch
    cpus: Str200 | None = None
    testbed: TestbedFields | None = None


class Heartbeat(InModel):
    testbed: TestbedFields | None = None
