"""Alert notifications: webhook payloads, the outbox, and the delivery worker.

An alert event (``alert.opened``, ``alert.resolved``) becomes one outbox row per target,
written in the same transaction as the alert itself, so nothing is announced that was
not stored and nothing stored is lost when a receiver is down. The delivery worker
POSTs due rows; a 2xx marks the row ``delivered``; anything else (refused connection,
timeout, non-2xx) counts an attempt and schedules the next one with exponential backoff
``base * 2**(attempts-1)`` capped at ``max_delay``; after ``max_attempts`` the row is
``failed`` (kept for inspection). A receiver that comes back gets every event once.

Targets: ``MALLARD_ALERT_WEBHOOKS`` (``generic:http://...,slack:http://...``; a URL
without a kind is ``generic``) plus the enabled rows of ``webhook_endpoints``.

Payloads:

* ``generic``: ``{"event": "alert.opened", "alert": {... the v_alerts columns ...},
  "text": "...", "page_url": "<MALLARD_PUBLIC_URL>/ui/alerts/<id>"}``
* ``slack`` (Slack incoming-webhook compatible): ``{"text": "...", "blocks": [...]}``, the
  page's link among the fields
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.orm import Session

from mallard_api.config import get_settings
from mallard_api.models.analysis import Alert, OutboxMessage
from mallard_api.sql import outbox
from mallard_api.ui import links

log = logging.getLogger("mallard_api.notify")

KINDS = ("generic", "slack")
EVENTS = ("alert.opened", "alert.resolved")


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


def alert_dict(alert: Alert) -> dict[str, Any]:
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


def event_text(alert: Alert, event: str) -> str:
    if event == "alert.resolved":
        return f"Resolved alert #{alert.id}: {alert.text}"
    return f"Regression alert #{alert.id}: {alert.text}"


def payload(alert: Alert, event: str, kind: str) -> dict[str, Any]:
    text = event_text(alert, event)
    page = links.absolute(get_settings().public_url, links.alert(alert.id))
    if kind == "slack":
        fields = [
            f"*project* {alert.project}/{alert.branch}",
            f"*first bad commit* `{alert.first_bad_commit[:12]}`",
            f"*last good commit* `{(alert.last_good_commit or '?')[:12]}`",
            f"*testbed* {alert.arch} {alert.testbed_fingerprint[:12]}",
            f"*page* <{page}|alert #{alert.id}>",
        ]
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
    return {"event": event, "alert": alert_dict(alert), "text": text, "page_url": page}


def enqueue_alert_event(session: Session, alert: Alert, event: str,
                        to: list[Target]) -> list[OutboxMessage]:
    """One outbox row per target, in the caller's transaction."""
    if event not in EVENTS:
        raise ValueError(f"unknown event {event!r}")
    session.flush()
    return [
        outbox.add(session, event=event, alert_id=alert.id, kind=t.kind, url=t.url,
                   payload=payload(alert, event, t.kind))
        for t in to
    ]


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds to wait after the ``attempts``-th failure: ``base * 2**(attempts-1)``, capped."""
    return float(min(cap, base * (2 ** max(0, attempts - 1))))


@dataclass
class DeliveryPolicy:
    base_delay: float = 5.0
    max_delay: float = 3600.0
    max_attempts: int = 25
    timeout: float = 5.0


@dataclass
class DeliveryResult:
    delivered: int = 0
    retried: int = 0
    failed: int = 0


def deliver_due(session: Session, *, client: httpx.Client | None = None,
                policy: DeliveryPolicy | None = None, now: datetime | None = None,
                limit: int = 50) -> DeliveryResult:
    """POST every due outbox message once. The caller commits."""
    policy = policy or DeliveryPolicy()
    own = client is None
    http = client or httpx.Client(timeout=policy.timeout)
    result = DeliveryResult()
    try:
        for msg in outbox.claim_due(session, now=now, limit=limit):
            error = _post(http, msg)
            when = now or datetime.now(UTC)
            msg.attempts += 1
            if error is None:
                msg.state = "delivered"
                msg.delivered_at = when
                msg.last_error = None
                result.delivered += 1
            elif msg.attempts >= policy.max_attempts:
                msg.state = "failed"
                msg.last_error = error
                result.failed += 1
            else:
                delay = backoff(msg.attempts, policy.base_delay, policy.max_delay)
                msg.next_attempt_at = when + timedelta(seconds=delay)
                msg.last_error = error
                result.retried += 1
        session.flush()
    finally:
        if own:
            http.close()
    return result


def _post(http: httpx.Client, msg: OutboxMessage) -> str | None:
    try:
        resp = http.post(msg.url, json=msg.payload,
                         headers={"X-Mallard-Event": msg.event,
                                  "X-Mallard-Delivery": str(msg.id)})
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"[:500]
    if 200 <= resp.status_code < 300:
        return None
    return f"HTTP {resp.status_code}: {resp.text[:200]}"


class OutboxWorker:
    """A daemon thread that runs :func:`deliver_due` every ``poll_seconds``."""

    def __init__(self, factory: Callable[[], Session], *, policy: DeliveryPolicy,
                 poll_seconds: float = 2.0) -> None:
        self.factory = factory
        self.policy = policy
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mallard-outbox", daemon=True)

    def start(self) -> OutboxWorker:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def wake(self) -> None:
        """Deliver now rather than at the next poll (after a commit that added messages)."""
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def run_once(self) -> DeliveryResult:
        with self.factory() as session, httpx.Client(timeout=self.policy.timeout) as http:
            res = deliver_due(session, client=http, policy=self.policy)
            session.commit()
            return res

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # keep the worker alive; the rows stay pending
                log.exception("outbox delivery failed")
            self._wake.wait(self.poll_seconds)
            self._wake.clear()


def start_outbox_worker(app_or_factory: Any, settings: Any | None = None) -> OutboxWorker:
    """Start the delivery worker for an app (uses ``app.state.sessionmaker`` and
    ``app.state.settings``; kept in ``app.state.outbox_worker``, at most one running per
    app) or for a session factory. Stop it with ``.stop()``."""
    state = getattr(app_or_factory, "state", None)
    factory: Callable[[], Session]
    if state is not None:
        running = getattr(state, "outbox_worker", None)
        if isinstance(running, OutboxWorker) and running.alive:
            return running  # one worker per app, however often its lifespan starts
        factory = state.sessionmaker
        settings = settings or getattr(state, "settings", None)
    else:
        factory = app_or_factory
    policy = DeliveryPolicy(
        base_delay=getattr(settings, "outbox_base_delay_seconds", 5.0),
        max_delay=getattr(settings, "outbox_max_delay_seconds", 3600.0),
        max_attempts=getattr(settings, "outbox_max_attempts", 25),
        timeout=getattr(settings, "webhook_timeout_seconds", 5.0),
    )
    worker = OutboxWorker(factory, policy=policy,
                          poll_seconds=getattr(settings, "outbox_poll_seconds", 2.0))
    if state is not None:
        state.outbox_worker = worker
    return worker.start()


__all__ = [
    "DeliveryPolicy", "DeliveryResult", "OutboxWorker", "Target", "backoff", "deliver_due",
    "enqueue_alert_event", "parse_targets", "payload", "start_outbox_worker", "targets",
]
