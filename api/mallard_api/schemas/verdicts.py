"""Commit verdicts as answered."""

from __future__ import annotations

from pydantic import BaseModel

from mallard_api.models.records import MovedCell


class CommitVerdictOut(BaseModel):
    arch: str
    branch: str
    base_sha: str
    state: str  # deferred (beyond a push's cap) | baseline (measured alone) | queued |
    #             running (its comparison's jobs run) | done | failed
    verdict: str | None  # regressed | improved | same | unknown (worst primary cell)
    moved: list[MovedCell]
    comparison_id: int | None
    report_url: str | None
    alert_id: int | None
    bisection_id: int | None
