"""Core tables: projects, branches, commits, runners, tokens, jobs and their attempts,
and the normalised results (testbeds, allocators, workloads, measures, trials).

The schema is created only by `db/versions/0001_core.py`; these classes mirror it.
Per-trial measures are a jsonb object on the trial row (see api/README.md, storage).
"""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Integer,
    SmallInteger,
    String,
    Text,
    UniqueConstraint,
    func,
)
from sqlalchemy.dialects.postgresql import ARRAY, JSONB, ExcludeConstraint
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import Base
from mallard_api.models.records import FingerprintFields, Record

TS = DateTime(timezone=True)


class Project(Base):
    __tablename__ = "projects"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    repo_url: Mapped[str] = mapped_column(Text)
    allocator_dir: Mapped[str] = mapped_column(Text, server_default="allocator")
    default_branch: Mapped[str] = mapped_column(Text, server_default="main")
    tracked_branches: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default="{}")
    webhook_secret: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Branch(Base):
    __tablename__ = "branches"
    __table_args__ = (UniqueConstraint("project_id", "name"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(Text)
    head_sha: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Commit(Base):
    __tablename__ = "commits"
    __table_args__ = (UniqueConstraint("project_id", "sha"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    project_id: Mapped[int] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    sha: Mapped[str] = mapped_column(Text)
    parent_sha: Mapped[str | None] = mapped_column(Text)
    message: Mapped[str | None] = mapped_column(Text)
    author: Mapped[str | None] = mapped_column(Text)
    committed_at: Mapped[datetime | None] = mapped_column(TS)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class BranchCommit(Base):
    """Branch membership with the order along the branch (`position`, 1 = oldest known)."""

    __tablename__ = "branch_commits"
    branch_id: Mapped[int] = mapped_column(
        ForeignKey("branches.id", ondelete="CASCADE"), primary_key=True
    )
    commit_id: Mapped[int] = mapped_column(
        ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True
    )
    position: Mapped[int] = mapped_column(Integer)
    # db/versions/0008_verdicts.py: a force-push rewrote the branch past it (results kept)
    unreachable_at: Mapped[datetime | None] = mapped_column(TS)


class Testbed(Base):
    __tablename__ = "testbeds"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    fingerprint: Mapped[str] = mapped_column(Text, unique=True)
    arch: Mapped[str] = mapped_column(Text)
    cpu_model: Mapped[str | None] = mapped_column(Text)
    fields: Mapped[FingerprintFields] = mapped_column(Record(FingerprintFields))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


class Runner(Base):
    __tablename__ = "runners"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    arch: Mapped[str] = mapped_column(Text)
    cpus: Mapped[str | None] = mapped_column(Text)
    testbed: Mapped[JsonDict | None] = mapped_column(JSONB)
    testbed_id: Mapped[int | None] = mapped_column(ForeignKey("testbeds.id"))
    registered_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    last_seen_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    retired_at: Mapped[datetime | None] = mapped_column(TS)  # out of service (0012)


class ApiToken(Base):
    __tablename__ = "api_tokens"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[str] = mapped_column(Text)  # runner | user | admin
    runner_name: Mapped[str | None] = mapped_column(Text)
    description: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    revoked_at: Mapped[datetime | None] = mapped_column(TS)
    # a user token's projects (the jobs, attempts and logs it may read); None: every one
    projects: Mapped[list[str] | None] = mapped_column(ARRAY(Text))


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    kind: Mapped[str] = mapped_column(Text)  # commit | comparison
    state: Mapped[str] = mapped_column(Text, server_default="queued")
    arch: Mapped[str] = mapped_column(Text)
    spec: Mapped[JsonDict] = mapped_column(JSONB)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="SET NULL"))
    attempt: Mapped[int] = mapped_column(Integer, server_default="0")
    max_attempts: Mapped[int] = mapped_column(Integer, server_default="3")
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    claimed_at: Mapped[datetime | None] = mapped_column(TS)
    lease_expires_at: Mapped[datetime | None] = mapped_column(TS)
    finished_at: Mapped[datetime | None] = mapped_column(TS)


class JobAttempt(Base):
    """One claim of a job: who ran it, how it ended (done, failed, expired) and its log."""

    __tablename__ = "job_attempts"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    started_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    ended_at: Mapped[datetime | None] = mapped_column(TS)
    outcome: Mapped[str | None] = mapped_column(Text)
    log: Mapped[str | None] = mapped_column(Text)


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
    __tablename__ = "measures"
    id: Mapped[int] = mapped_column(SmallInteger, primary_key=True)
    name: Mapped[str] = mapped_column(Text, unique=True)
    unit: Mapped[str] = mapped_column(Text, server_default="")
    higher_is_better: Mapped[bool | None] = mapped_column(Boolean)


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


class ResultArtifacts(Base):
    """What a results post carries besides trials (hyperfine exports...), as posted."""

    __tablename__ = "result_artifacts"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    job_id: Mapped[int | None] = mapped_column(ForeignKey("jobs.id", ondelete="SET NULL"))
    runner_id: Mapped[int | None] = mapped_column(ForeignKey("runners.id", ondelete="SET NULL"))
    received_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    artifacts: Mapped[JsonDict] = mapped_column(JSONB)


class WebhookDelivery(Base):
    """A forge delivery id seen (migration 0005): a replayed delivery does nothing."""

    __tablename__ = "webhook_deliveries"
    forge: Mapped[str] = mapped_column(Text, primary_key=True)
    delivery_id: Mapped[str] = mapped_column(Text, primary_key=True)
    received_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())


__all__ = [
    "Allocator", "ApiToken", "Branch", "BranchCommit", "Commit", "Job", "JobAttempt",
    "Measure", "Project", "ResultArtifacts", "Runner", "Testbed", "Trial", "WebhookDelivery",
    "Workload",
]
