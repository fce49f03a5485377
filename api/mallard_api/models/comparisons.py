"""Comparisons, the jobs that measure them, and their computed cells."""

from __future__ import annotations

from datetime import datetime

from mallard_wire.fields import JsonDict
from sqlalchemy import BigInteger, Boolean, Float, ForeignKey, Integer, Text, UniqueConstraint, func
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

from mallard_api.models.base import TS, Base
from mallard_api.models.records import PeerMedian, Record, Side


class Comparison(Base):
    __tablename__ = "comparisons"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    project_id: Mapped[int | None] = mapped_column(ForeignKey("projects.id", ondelete="CASCADE"))
    project: Mapped[str] = mapped_column(Text)
    arch: Mapped[str] = mapped_column(Text)
    base: Mapped[Side] = mapped_column(Record(Side))
    head: Mapped[Side] = mapped_column(Record(Side))
    base_label: Mapped[str] = mapped_column(Text)
    head_label: Mapped[str] = mapped_column(Text)
    workloads: Mapped[list[str] | None] = mapped_column(JSONB)
    threads: Mapped[list[int] | None] = mapped_column(JSONB)
    suite: Mapped[str] = mapped_column(Text, server_default="quick")
    trials: Mapped[int] = mapped_column(Integer)
    warmup: Mapped[int] = mapped_column(Integer, server_default="1")
    peers: Mapped[list[str]] = mapped_column(JSONB, server_default="[]")
    hypothesis: Mapped[str | None] = mapped_column(Text)
    hypothesis_low_pct: Mapped[float | None] = mapped_column(Float)
    hypothesis_high_pct: Mapped[float | None] = mapped_column(Float)
    hypothesis_measure: Mapped[str | None] = mapped_column(Text)
    state: Mapped[str] = mapped_column(Text, server_default="queued")
    follow_ups: Mapped[int] = mapped_column(Integer, server_default="0")
    max_follow_ups: Mapped[int] = mapped_column(Integer, server_default="2")
    peer_medians: Mapped[list[PeerMedian]] = mapped_column(Record(list[PeerMedian]),
                                                           server_default="[]")
    testbed_fingerprint: Mapped[str | None] = mapped_column(Text)
    cpu_model: Mapped[str | None] = mapped_column(Text)
    note: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
    finished_at: Mapped[datetime | None] = mapped_column(TS)
    # a comparison run for a calibration (db/versions/0009): its A/A or canary size
    calibration_id: Mapped[int | None] = mapped_column(
        ForeignKey("calibrations.id", ondelete="CASCADE"))
    canary_pct: Mapped[float | None] = mapped_column(Float)
    # a probe that sizes the canaries (db/versions/0015): neither A/A nor canary
    canary_probe: Mapped[bool] = mapped_column(Boolean, server_default="false", default=False)
    # the token that asked for it (db/versions/0020): its quota counts it while it runs
    requested_by: Mapped[int | None] = mapped_column(
        ForeignKey("api_tokens.id", ondelete="SET NULL"))


class ComparisonJob(Base):
    __tablename__ = "comparison_jobs"
    comparison_id: Mapped[int] = mapped_column(
        ForeignKey("comparisons.id", ondelete="CASCADE"), primary_key=True
    )
    job_id: Mapped[int] = mapped_column(
        BigInteger, ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True
    )
    round: Mapped[int] = mapped_column(Integer, server_default="0")
    trials: Mapped[int] = mapped_column(Integer)


class ComparisonCell(Base):
    __tablename__ = "comparison_cells"
    __table_args__ = (UniqueConstraint("comparison_id", "workload", "params", "measure"),)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    comparison_id: Mapped[int] = mapped_column(ForeignKey("comparisons.id", ondelete="CASCADE"))
    workload: Mapped[str] = mapped_column(Text)
    params: Mapped[JsonDict] = mapped_column(JSONB)
    threads: Mapped[int | None] = mapped_column(Integer)
    measure: Mapped[str] = mapped_column(Text)
    higher_is_better: Mapped[bool] = mapped_column(Boolean)
    base_median: Mapped[float | None] = mapped_column(Float)
    head_median: Mapped[float | None] = mapped_column(Float)
    ratio: Mapped[float | None] = mapped_column(Float)
    diff_pct: Mapped[float | None] = mapped_column(Float)
    ci_low_pct: Mapped[float | None] = mapped_column(Float)
    ci_high_pct: Mapped[float | None] = mapped_column(Float)
    p_value: Mapped[float | None] = mapped_column(Float)
    p_adjusted: Mapped[float | None] = mapped_column(Float)
    n_base: Mapped[int] = mapped_column(Integer)
    n_head: Mapped[int] = mapped_column(Integer)
    robust_base: Mapped[int] = mapped_column(Integer)
    robust_head: Mapped[int] = mapped_column(Integer)
    verdict: Mapped[str] = mapped_column(Text)
    mde_pct: Mapped[float | None] = mapped_column(Float)  # db/versions/0007_cell_mde.py
    # judged on pairs of rounds, its counts pairs (db/versions/0025_paired_cells.py)
    paired: Mapped[bool] = mapped_column(Boolean, server_default="false")
    # the pairs' design effect over blocks of rounds; the level of the cell's look (0029)
    block_effect: Mapped[float] = mapped_column(Float, server_default="1")
    alpha: Mapped[float | None] = mapped_column(Float)
    # why a cell has no verdict whatever it measures ("emulated testbed"); 0011
    unjudged_reason: Mapped[str | None] = mapped_column(Text)
    line: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(TS, server_default=func.now())
