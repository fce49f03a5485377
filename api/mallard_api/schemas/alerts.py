"""Alerts as answered, and the label and triage users set."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from mallard_wire.fields import InModel, JsonDict
from pydantic import BaseModel, StringConstraints


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
    triage: str
    assignee: str | None
    bug_url: str | None
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


# --- triage (analysis/triage.py) --------------------------------------------------------
TriageState = Literal["untriaged", "acknowledged", "investigating", "fixed", "wont_fix",
                      "invalid"]
BugUrl = Annotated[str, StringConstraints(max_length=2000, pattern=r"^https?://[^\s\x00]+$")]
Person = Annotated[str, StringConstraints(max_length=200, pattern=r"^[^\x00-\x1f]*$")]
NoteText = Annotated[str, StringConstraints(min_length=1, max_length=4000,
                                            pattern=r"^[^\x00]*$")]


class TriageIn(InModel):
    """What a person decided; only the fields sent change (null or "" clears one)."""

    triage: TriageState | None = None
    assignee: Person | None = None
    bug_url: BugUrl | Literal[""] | None = None
    label: Literal["true_positive", "false_positive", ""] | None = None
    note: NoteText | None = None


class NoteOut(BaseModel):
    author: str
    body: str
    created_at: datetime


class AuditOut(BaseModel):
    actor: str
    field: str
    old_value: str | None
    new_value: str | None
    at: datetime


class AlertTriageOut(BaseModel):
    """An alert's triage: its decisions, its notes and every change made to them."""

    alert_id: int
    state: str
    triage: str
    assignee: str | None
    bug_url: str | None
    label: str | None
    notes: list[NoteOut]
    audit: list[AuditOut]


class AcceptIn(InModel):
    """Why the change is intended (a note on the alert and the baseline)."""

    note: NoteText | None = None
