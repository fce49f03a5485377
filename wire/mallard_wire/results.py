"""What a runner posts back: POST /api/v1/results (contracts §5), the file `bench --json`
writes, and what the exporters read."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import (
    ConfigDict,
    Field,
    GetPydanticSchema,
    StringConstraints,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic_core import PydanticCustomError, core_schema

from mallard_wire.fields import (
    INT32_MAX,
    MAX_MEASURES,
    NO_NUL,
    Arch,
    Aslr,
    BranchName,
    FiniteFloat,
    InModel,
    Int32,
    JobId,
    JsonDocument,
    JsonObject,
    LogText,
    MeasureName,
    Name,
    RunnerId,
    Str200,
    Str500,
    Turbo,
)
from mallard_wire.profiles import ProfileIn
from mallard_wire.timelines import LatencyHistogram, MemoryTimeline


class TestbedFields(InModel):
    """The testbed as a runner measures it (contracts §5): the API fingerprints these
    fields. A runner's registration may give some of them (the API adds its arch and
    CPUs); a results post gives them all, `arch` at least (`TestbedIn`). Strict: a value
    of another JSON type (0 for false, "4096" for 4096) is a 422, as the schema says; text
    fields hold at most 500 characters."""

    model_config = ConfigDict(extra="forbid", strict=True)

    arch: Arch | None = None
    cpu_model: Str500 | None = None
    cpus: Str500 | None = None
    kernel: Str500 | None = None
    governor: Str500 | None = None
    smt: bool | None = None
    thp: Str500 | None = None
    compiler: Str500 | None = None
    libc: Str500 | None = None
    page_size: Annotated[int, Field(ge=0, le=2**40)] | None = None
    # noise controls the workloads ran under (runner/README.md)
    turbo: Turbo | None = None
    aslr: Aslr | None = None
    workload_env: Literal["minimal", "inherited"] | None = None
    isolated: bool | None = None
    # another architecture run under qemu-user on the node (runner/README.md): timings
    # shown, never judged; both are fingerprint fields when `emulated` is true
    emulated: bool | None = None
    emulator: Str500 | None = None


class TestbedIn(TestbedFields):
    arch: Arch


class AllocatorIn(InModel):
    """What was measured: mallard at a commit (built by the runner) or a peer found on
    the node. Its six fields are one key of the API's (one index entry: ~2,700 bytes at
    most), so each is bounded: together at most 2,428 characters."""

    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.+-]{1,100}$")]
    commit: Str200 | None = None
    variant: Str500 | None = None
    build_flags: Annotated[str, StringConstraints(max_length=1000, pattern=NO_NUL)] | None = None
    compiler: Str500 | None = None
    library_sha256: Annotated[str, StringConstraints(max_length=128,
                                                     pattern=NO_NUL)] | None = None


MAX_PARAMS = 64  # keys of a workload's params
MAX_COUNTERS = 256  # keys of a trial's counters (the allocator's: ~50)


def _bounded(keys: int) -> WithJsonSchema:
    return WithJsonSchema({"type": "object", "additionalProperties": True,
                           "maxProperties": keys})


class WorkloadIn(InModel):
    name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,100}$")]
    params: Annotated[JsonObject, Field(max_length=MAX_PARAMS), _bounded(MAX_PARAMS)] = {}


MAX_ENV_PAD = 1 << 16  # bytes of environment padding a layout may name


class TrialLayout(InModel):
    """The process layout a trial ran in (runner setting `layouts`, runner/README.md):
    `aslr` whether the kernel randomised its addresses (each run draws its own), `env_pad`
    the bytes of environment padding, drawn per trial, that moved its stack (its start lies
    that much lower). A trial without one (older runners, cachegrind runs, `layouts=fixed`)
    ran in the fixed layout: ASLR off, the environment padded to a fixed size."""

    model_config = ConfigDict(extra="forbid", strict=True)

    aslr: bool
    env_pad: Annotated[int, Field(ge=0, le=MAX_ENV_PAD)]


# Numbers and booleans of a trial as the schema says: never a boolean for a number nor a
# number or text for a boolean (pydantic's lax mode would take `"signal": false`), and a
# time as RFC 3339 text (or a datetime in Python), never a number; checked in Rust.
Strict = Field(strict=True)
Timestamp = Annotated[datetime, GetPydanticSchema(lambda _tp, _handler: core_schema.union_schema(
    [core_schema.datetime_schema(strict=True),
     core_schema.chain_schema([core_schema.str_schema(strict=True),
                               core_schema.datetime_schema()])],
    custom_error_type="datetime_text",
    custom_error_message="must be a date and time as RFC 3339 text")),
    WithJsonSchema({"type": "string", "format": "date-time"})]


class TrialIn(InModel):
    """One run of one workload, kept raw (contracts §5 `trials[]`)."""

    uid: Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=NO_NUL)]
    label: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,40}$")] = "head"
    allocator: AllocatorIn
    workload: WorkloadIn
    seq: Annotated[Int32, Strict] = 0
    warmup: Annotated[bool, Strict] = False
    started_at: Timestamp | None = None
    ok: Annotated[bool, Strict] = True
    exit_code: Annotated[Int32, Strict] | None = None
    signal: Annotated[Int32, Strict] | None = None
    stderr_tail: LogText | None = None
    measures: Annotated[dict[MeasureName, FiniteFloat], Field(max_length=MAX_MEASURES)] = {}
    counters: Annotated[JsonObject, Field(max_length=MAX_COUNTERS),
                        _bounded(MAX_COUNTERS)] | None = None
    # what the job asked to record besides the measures (mallard_wire/timelines.py)
    memory: MemoryTimeline | None = None
    latency: LatencyHistogram | None = None
    layout: TrialLayout | None = None


class ResultsIn(InModel):
    """Trials of a job (job_id and the attempt the runner holds), or history uploaded
    without a job (no job_id, no attempt)."""

    job_id: Annotated[JobId, Strict] | None = None
    attempt: Annotated[int, Field(ge=1, le=INT32_MAX), Strict] | None = Field(
        default=None, validate_default=True,
        description="the job's attempt as the runner claimed it; required with job_id")
    runner_id: Annotated[RunnerId, Strict] | None = None
    project: Name | None = None
    branch: BranchName | None = None
    testbed: TestbedIn
    trials: Annotated[list[TrialIn], Field(max_length=20000)]
    artifacts: JsonDocument | None = None
    # a profile job's differential profiles (its trials list is empty)
    profiles: Annotated[list[ProfileIn], Field(max_length=20)] | None = None

    @field_validator("attempt")
    @classmethod
    def _attempt_with_job(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is None and info.data.get("job_id") is not None:
            raise PydanticCustomError("missing", "required with job_id: the attempt of the "
                                      "job this runner holds (the job's `attempt`)")
        return value
