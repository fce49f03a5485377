"""Results as stored: allocators, workloads, measures, and one row per trial."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from mallard_wire.results import TrialLayout
from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Integer,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import JSONB, ExcludeConstraint
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import Record


class Allocator(Base):
    __tablename__ = "allocators"
    __table_args__ = (
        UniqueConstraint("name", "commit_sha", "variant", "build_flags", "compiler",
                         "library_sha256"),
    )
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    commit_sha: Mapped[str] = mapped_column(Text, server_default="")
    variant: Mapped[str] = mapped_column(Text, server_default="")
    build_flags: Mapped[str] = mapped_column(Text, server_default="")
    compiler: Mapped[str] = mapped_column(Text, server_default="")
    library_sha256: Mapped[str] = mapped_column(Text, server_default="")


class Workload(Base):
    __tablename__ = "workloads"
    __table_args__ = (UniqueConstraint("name", "params_sha256"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text)
    params: Mapped[JsonDict] = mapped_column(JSONB)
    params_sha256: Mapped[str] = mapped_column(String(64))
    threads: Mapped[int | None] = mapped_column(Integer)


class Measure(Base):
    """A measure name; `project_id` and `added_at`: the project whose post first named
    it, and when (None: seeded by a migration). Ids are bigint (migration 0021)."""

    __tablename__ = "measures"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    unit: Mapped[str] = mapped_column(Text, server_default="")
    higher_is_better: Mapped[bool | None] = mapped_column(Boolean)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id",
                                                              ondelete="SET NULL"))
    added_at: Mapped[datetime | None] = mapped_column(TS)


class Trial(Base):
    __tablename__ = "trials"
    # uid unique through a hash index (migration 0017)
    __table_args__ = (ExcludeConstraint(("uid", "="), name="trials_uid_excl", using="hash"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    uid: Mapped[str] = mapped_column(Text)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    branch_id: Mapped[int | None] = mapped_column(ForeignKey("branches.id", ondelete="SET NULL"))
    commit_id: Mapped[int | None] = mapped_column(ForeignKey("commits.id", ondelete="SET NULL"))
    testbed_id: Mapped[int] = mapped_column(ForeignKey("testbeds.id"))
    allocator_id: Mapped[int] = mapped_column(ForeignKey("allocators.id"))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"))
    label: Mapped[str] = mapped_column(Text)
    seq: Mapped[int] = mapped_column(Integer, server_default="0")
    warmup: Mapped[bool] = mapped_column(Boolean, server_default="false")
    ok: Mapped[bool] = mapped_column(Boolean, server_default="true")
    exit_code: Mapped[int | None] = mapped_column(Integer)
    signal: Mapped[int | None] = mapped_column(Integer)
    stderr_tail: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(TS)
    ingested_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    measures: Mapped[dict[str, float]] = mapped_column(JSONB, server_default="{}")
    counters: Mapped[JsonDict | None] = mapped_column(JSONB)
    # what the job asked to record (mallard_wire/timelines.py; migration 0027)
    memory: Mapped[JsonDict | None] = mapped_column(JSONB)
    latency: Mapped[JsonDict | None] = mapped_column(JSONB)
    # the trial's process layout when the runner sampled one (wire TrialLayout:
    # {"aslr": true, "env_pad": 1232}); NULL: the fixed layout (ASLR off, migration 0028)
    layout: Mapped[TrialLayout | None] = mapped_column(Record(TrialLayout))


class ResultArtifacts(Base):
    """What a results post carries besides trials (hyperfine exports...), as posted."""

    __tablename__ = "result_artifacts"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    received_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    artifacts: Mapped[JsonDict] = mapped_column(JSONB)
