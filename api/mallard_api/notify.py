"""Alert notifications: the targets, the webhook payloads, and the outbox rows an alert
event becomes (delivered by `delivery.py`).

An alert event (``alert.opened``, ``alert.explained``, ``alert.resolved``) becomes one
outbox row per target, written in the same transaction as what it announces, so nothing
is announced that was not stored and nothing stored is lost when a receiver is down.
``alert.explained`` follows ``alert.opened`` once per alert, when the differential profile
of its regression is stored (analysis/why.py): it carries the `why:`.

Targets: ``MALLARD_ALERT_WEBHOOKS`` (``generic:http://...,slack:http://...``; a URL
without a kind is ``generic``) plus the enabled rows of ``webhook_endpoints``.

Payloads:

* ``generic``: ``{"event": "alert.opened", "alert": {... the v_alerts columns ...},
  "text": "...", "page_url": "<MALLARD_PUBLIC_URL>/ui/alerts/<id>",
  "bisection_url": "<MALLARD_PUBLIC_URL>/ui/bisections/<id>" or null}``: the bisection
  that looks for the culprit of a regressed commit verdict, when one was started;
  ``alert.explained`` adds ``"why": "mld_free +312 instructions per call (+540%)"`` and
  ``"profile_url"`` (the profile on its comparison's page)
* ``slack`` (Slack incoming-webhook compatible): ``{"text": "...", "blocks": [...]}``, the
  page's link (and the bisection's) among the fields
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from mallard_api.config import get_settings
from mallard_api.models.alerts import Alert
from mallard_api.models.outbox import OutboxMessage
from mallard_api.schemas.outbox import AlertRecord, GenericAlertPayload, SlackPayload
from mallard_api.sql import outbox
from mallard_api.ui import links

log = logging.getLogger("mallard_api.notify")

KINDS = ("generic", "slack")
EVENTS = ("alert.opened", "alert.explained", "alert.resolved")


@dataclass(frozen=True)
class Target:
    kind: str
    url: str


def parse_targets(text: str | None) -> list[Target]:
    """``"generic:http://a/hook,slack:http://b/x,http://c"`` -> targets (kind optional)."""
    out: list[Target] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        kind, sep, rest = item.partition(":")
        if sep and kind in KINDS:
            url = rest
        else:
            kind, url = "generic", item
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"webhook target {item!r}: the URL must start with http(s)://")
        out.append(Target(kind, url))
    return out


def targets(session: Session, configured: str | None) -> list[Target]:
    """Configured targets plus enabled ``webhook_endpoints`` rows, without duplicates."""
    seen: dict[Target, None] = {}
    for t in parse_targets(configured):
        seen.setdefault(t)
    for ep in outbox.endpoints(session):
        seen.setdefault(Target(ep.kind, ep.url))
    return list(seen)


def alert_dict(alert: Alert) -> AlertRecord:
    """The alert as the v_alerts columns (JSON-ready)."""

    def ts(v: datetime | None) -> str | None:
        return v.isoformat() if v else None

    return {
        "alert_id": alert.id, "opened_at": ts(alert.opened_at), "updated_at": ts(alert.updated_at),
        "resolved_at": ts(alert.resolved_at), "state": alert.state, "label": alert.label,
        "project": alert.project, "branch": alert.branch, "workload": alert.workload,
        "params": alert.params, "threads": alert.threads, "arch": alert.arch,
        "measure": alert.measure, "allocator": alert.allocator, "variant": alert.variant,
        "first_bad_commit": alert.first_bad_commit, "last_good_commit": alert.last_good_commit,
        "change_pct": alert.change_pct, "ci_low_pct": alert.ci_low_pct,
        "ci_high_pct": alert.ci_high_pct, "text": alert.text,
    }


@dataclass(frozen=True)
class Why:
    """What ``alert.explained`` adds: the `why:` and the page of the profile it came from."""

    text: str
    page: str


def event_text(alert: Alert, event: str, why: Why | None = None) -> str:
    if event == "alert.resolved":
        return f"Resolved alert #{alert.id}: {alert.text}"
    if event == "alert.explained" and why is not None:
        return f"Explained alert #{alert.id}: {alert.text}; why: {why.text}"
    return f"Regression alert #{alert.id}: {alert.text}"


def slack_escape(text: str) -> str:
    """Slack's mrkdwn control characters (`&`, `<`, `>`: a C++ function's template
    arguments) as the entities Slack asks for."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(alert: Alert, event: str, kind: str, why: Why | None = None
            ) -> GenericAlertPayload | SlackPayload:
    text = event_text(alert, event, why)
    base = get_settings().public_url
    page = links.absolute(base, links.alert(alert.id))
    bisection = None if alert.bisection_id is None else \
        links.absolute(base, links.bisection(alert.bisection_id))
    if kind == "slack":
        text = slack_escape(text)
        fields = [
            f"*project* {alert.project}/{alert.branch}",
            f"*first bad commit* `{alert.first_bad_commit[:12]}`",
            f"*last good commit* `{(alert.last_good_commit or '?')[:12]}`",
            f"*testbed* {alert.arch} {alert.testbed_fingerprint[:12]}",
            f"*page* <{page}|alert #{alert.id}>",
        ]
        if bisection is not None:
            fields.append(f"*bisection* <{bisection}|bisection #{alert.bisection_id}>")
        if why is not None:
            fields.append(f"*profile* <{links.absolute(base, why.page)}|why: "
                          f"{slack_escape(why.text)}>")
        return {
            "text": text,
            "blocks": [
                {"type": "section", "text": {"type": "mrkdwn", "text": text}},
                {"type": "section",
                 "fields": [{"type": "mrkdwn", "text": f} for f in fields]},
                {"type": "context",
                 "elements": [{"type": "mrkdwn", "text": f"event `{event}`, state {alert.state}"}]},
            ],
        }
    out: GenericAlertPayload = {"event": event, "alert": alert_dict(alert), "text": text,
                                "page_url": page, "bisection_url": bisection}
    if why is not None:
        out["why"], out["profile_url"] = why.text, links.absolute(base, why.page)
    return out


def enqueue_alert_event(session: Session, alert: Alert, event: str,
                        to: list[Target], why: Why | None = None) -> list[OutboxMessage]:
    """One outbox row per target, in the caller's transaction (`why`: of
    ``alert.explained``, which needs it)."""
    if event not in EVENTS or (event == "alert.explained") != (why is not None):
        raise ValueError(f"unknown event {event!r} or a why it does not take")
    session.flush()
    return [
        outbox.add(session, event=event, alert_id=alert.id, kind=t.kind, url=t.url,
                   payload=payload(alert, event, t.kind, why))
        for t in to
    ]
