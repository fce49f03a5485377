"""The payloads the webhook outbox carries: alert events (generic, Slack) and forge
statuses and comments. Stored as jsonb in webhook_outbox.payload and POSTed as they are."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from mallard_wire.fields import JsonDict


class AlertRecord(TypedDict):
    """An alert as the v_alerts columns (JSON-ready)."""

    alert_id: int
    opened_at: str | None
    updated_at: str | None
    resolved_at: str | None
    state: str
    label: str | None
    project: str
    branch: str
    workload: str
    params: JsonDict
    threads: int | None
    arch: str
    measure: str
    allocator: str
    variant: str
    first_bad_commit: str
    last_good_commit: str | None
    change_pct: float
    ci_low_pct: float | None
    ci_high_pct: float | None
    text: str


class GenericAlertPayload(TypedDict):
    event: str
    alert: AlertRecord
    text: str
    page_url: str
    bisection_url: str | None
    why: NotRequired[str]  # alert.explained: the function that moved most, and where
    profile_url: NotRequired[str]


class SlackPayload(TypedDict):
    """Slack incoming-webhook compatible: the text and its Block Kit blocks."""

    text: str
    blocks: list[JsonDict]


class StatusPayload(TypedDict):
    """A GitHub/Gitea commit status."""

    state: str
    target_url: str
    description: str
    context: str


class GitLabStatusPayload(TypedDict):
    state: str
    name: str
    target_url: str
    description: str


class CommentPayload(TypedDict):
    """A pull/merge request's comment (created once, then updated)."""

    number: int
    body: str


OutboxPayload = (GenericAlertPayload | SlackPayload | StatusPayload | GitLabStatusPayload
                 | CommentPayload)
