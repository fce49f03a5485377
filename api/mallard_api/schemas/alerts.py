"""Alerts as answered, and the label and triage users set."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from mallard_wire.fields import InModel, JsonDict
from pydantic import BaseModel


# --- alerts -------------------------------------------------------------------------------
class AlertOut(BaseModel):
    """The v_alerts columns, plus the series identity and the medians around the change."""

    alert_id: int
    opened_at: datetime
    updated_at: datetime
    acknowledged_at: datetime | None
    resolved_at: datetime | None
    state: str
    label: str | None
    project: str
    branch: str
    workload: str
    params: JsonDict
    threads: int | None
    arch: str
    testbed_fingerprint: str
    measure: str
    allocator: str
    variant: str
    first_bad_commit: str
    last_good_commit: str | None
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    p_value: float | None
    before_median: float | None
    after_median: float | None
    text: str


class LabelIn(InModel):
    label: Literal["true_positive", "false_positive"] | None


class TriageOut(BaseModel):
    series_key: str
    project: str
    workload: str
    threads: int | None
    measure: str
    arch: str
    alerts: int
    true_positive: int
    false_positive: int
