"""The runner's data shapes: what it sends to the API (contracts §5) and reads from jobs
(the job spec is `mallard_wire.jobs.JobSpec`, shared with the API).

One result type, `ResultsIn`, is what `bench` exports and what the agent posts;
the exporters (JSON, markdown, CSV) all read it. Field names follow
docs/contracts.md exactly.
"""

from __future__ import annotations

from typing import Any

from mallard_wire.jobs import JobSpec
from pydantic import BaseModel, ConfigDict, Field


class Testbed(BaseModel):
    """The node as measured; the API fingerprints exactly these fields."""

    arch: str
    cpu_model: str
    cpus: str
    kernel: str
    governor: str
    smt: bool
    thp: str
    compiler: str
    libc: str
    page_size: int
    # noise controls (runner/README.md): the state the workloads ran in
    turbo: str = "unknown"  # on | off | unknown
    aslr: str = "on"  # off when workloads run under setarch -R
    workload_env: str = "inherited"  # minimal: a fixed environment of fixed size
    isolated: bool | None = None  # no other process may run on the pinned CPUs
    # another architecture run under qemu-user on this host (arch.py): its timings are
    # shown, never judged; `emulator` is `qemu-aarch64 7.2.22`
    emulated: bool = False
    emulator: str | None = None


class AllocatorInfo(BaseModel):
    """What was measured: mallard at a commit (built here) or a peer found on the node."""

    name: str
    commit: str | None = None
    variant: str | None = None
    build_flags: str | None = None
    compiler: str | None = None
    library_sha256: str | None = None


class WorkloadRef(BaseModel):
    name: str
    params: dict[str, Any]


class Trial(BaseModel):
    """One run of one workload, kept raw (contracts §5 `trials[]`)."""

    uid: str
    label: str
    allocator: AllocatorInfo
    workload: WorkloadRef
    seq: int
    warmup: bool
    started_at: str
    ok: bool
    exit_code: int | None
    signal: int | None
    stderr_tail: str
    measures: dict[str, float]
    counters: dict[str, Any] | None


class ResultsIn(BaseModel):
    """The body of POST /api/v1/results, and the JSON file `bench --json` writes."""

    job_id: int | None = None
    runner_id: int | None = None
    attempt: int | None = None  # the claimed job's attempt, whenever job_id is set
    project: str = "mallard"
    branch: str | None = None
    testbed: Testbed
    trials: list[Trial]
    artifacts: dict[str, Any] = Field(default_factory=dict)


class Job(BaseModel):
    """A claimed job as the API answers it; its spec is validated by the one wire model
    (`mallard_wire.jobs.JobSpec`, the API's own), so a spec the API would refuse is
    refused here too, before anything runs."""

    model_config = ConfigDict(extra="allow")

    id: int
    kind: str = "commit"
    state: str | None = None
    attempt: int | None = None
    max_attempts: int | None = None
    arch: str | None = None
    lease_expires_at: str | None = None
    spec: JobSpec
