"""The outbox delivery worker: POSTs the due webhook rows that `notify` queued, one
receiver at a time per thread, each message's state committed right after its POST.

A 2xx marks the row ``delivered``; anything else (refused connection, timeout, non-2xx)
counts an attempt and schedules the next one with exponential backoff
``base * 2**(attempts-1)`` capped at ``max_delay``; after ``max_attempts`` the row is
``failed`` (kept for inspection). A forge's permanent refusal (401, 403, 404, 422, 400:
forges.PERMANENT) ends the delivery at once, ``failed`` with the forge's message, shown
on the project's page. A receiver that comes back gets every event once.
Receivers are delivered concurrently, each POST bounded by
``MALLARD_WEBHOOK_TIMEOUT_SECONDS``, so a slow receiver delays only its own events (see
:class:`OutboxWorker`).
"""


from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy.orm import Session

from mallard_api import forges
from mallard_api.background import BackgroundLoop
from mallard_api.models.outbox import OutboxMessage
from mallard_api.sql import outbox

log = logging.getLogger("mallard_api.notify")


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


def _record(msg: OutboxMessage, failure: forges.Failure | None, when: datetime,
            policy: DeliveryPolicy, result: DeliveryResult) -> None:
    msg.attempts += 1
    msg.last_error = None if failure is None else failure.error
    if failure is None:
        msg.state = "delivered"
        msg.delivered_at = when
        result.delivered += 1
    elif failure.permanent or msg.attempts >= policy.max_attempts:
        msg.state = "failed"
        result.failed += 1
    else:
        msg.next_attempt_at = when + timedelta(
            seconds=backoff(msg.attempts, policy.base_delay, policy.max_delay))
        result.retried += 1


def deliver_receiver(session: Session, url: str, *, http: httpx.Client, policy: DeliveryPolicy,
                     now: datetime | None = None, limit: int = 50) -> DeliveryResult:
    """POST one receiver's due messages in order, one at a time: each is leased (its
    `next_attempt_at` pushed past the timeout) and committed before the POST, and its
    outcome committed right after, so no transaction stays open during a POST and a
    crash re-sends at most the one message in flight."""
    result = DeliveryResult()
    lease = policy.timeout + 30.0
    for _ in range(limit):
        msg = outbox.lease_next(session, url, now=now, lease_seconds=lease)
        if msg is None:
            break
        session.commit()
        failure = (forges.send(session, http, msg) if forges.is_forge(msg)
                   else _post(http, msg))
        _record(msg, failure, now or datetime.now(UTC), policy, result)
        session.commit()
    return result


def deliver_due(session: Session, *, client: httpx.Client | None = None,
                policy: DeliveryPolicy | None = None, now: datetime | None = None,
                limit: int = 50) -> DeliveryResult:
    """POST every due message once, receiver after receiver, committing each message's
    state as it goes (the background worker does receivers concurrently instead)."""
    policy = policy or DeliveryPolicy()
    total = DeliveryResult()
    http = client or httpx.Client(timeout=policy.timeout)
    try:
        for url in outbox.due_receivers(session, now=now):
            r = deliver_receiver(session, url, http=http, policy=policy, now=now, limit=limit)
            total.delivered += r.delivered
            total.retried += r.retried
            total.failed += r.failed
    finally:
        if client is None:
            http.close()
    return total


def _post(http: httpx.Client, msg: OutboxMessage) -> forges.Failure | None:
    """POST an alert event to a receiver of ours: every failure is retried."""
    try:
        resp = http.post(msg.url, json=msg.payload,
                         headers={"X-Mallard-Event": msg.event,
                                  "X-Mallard-Delivery": str(msg.id)})
    except httpx.HTTPError as exc:
        return forges.Failure(f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= resp.status_code < 300:
        return None
    return forges.Failure(f"HTTP {resp.status_code}: {resp.text[:200]}")


class OutboxWorker:
    """Delivers due messages in the background: every `poll_seconds` (or when woken) it
    looks for receivers with due messages and hands each to a thread of its own (at most
    `concurrency` at once), skipping receivers still in flight. A slow receiver (each
    POST bounded by the policy's timeout) holds back only its own messages."""

    def __init__(self, factory: Callable[[], Session], *, policy: DeliveryPolicy,
                 poll_seconds: float = 2.0, concurrency: int = 8,
                 max_backoff: float = 30.0) -> None:
        self.factory = factory
        self.policy = policy
        self._pool = ThreadPoolExecutor(max_workers=concurrency,
                                        thread_name_prefix="mallard-outbox")
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._loop = BackgroundLoop("outbox", self.dispatch, interval=poll_seconds,
                                    max_backoff=max_backoff)

    def start(self) -> OutboxWorker:
        self._loop.start()
        return self

    @property
    def alive(self) -> bool:
        return self._loop.alive

    def wake(self) -> None:
        """Deliver now rather than at the next poll (after a commit that added messages)."""
        self._loop.wake()

    def stop(self, timeout: float = 10.0) -> None:
        self._loop.stop(timeout)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def dispatch(self) -> bool:
        with self.factory() as session:
            with self._lock:
                busy = set(self._busy)
            urls = [u for u in outbox.due_receivers(session) if u not in busy]
        for url in urls:
            with self._lock:
                self._busy.add(url)
            try:
                self._pool.submit(self._deliver, url)
            except RuntimeError:  # shutting down
                with self._lock:
                    self._busy.discard(url)
        return False

    def _deliver(self, url: str) -> None:
        try:
            with self.factory() as session, httpx.Client(timeout=self.policy.timeout) as http:
                deliver_receiver(session, url, http=http, policy=self.policy)
        except Exception:  # the rows stay pending (or leased) and are tried again
            log.warning("outbox delivery to %s failed", url, exc_info=True)
        finally:
            with self._lock:
                self._busy.discard(url)
        self.wake()  # more may have become due meanwhile

    def run_once(self) -> DeliveryResult:
        """Deliver everything due now, in this thread (tests, tools)."""
        with self.factory() as session:
            return deliver_due(session, policy=self.policy)


def start_outbox_worker(app: Any) -> OutboxWorker:
    """Start the delivery worker of an app (its `state.background_sessionmaker` and
    `state.settings`; kept in `app.state.outbox_worker`, at most one running per app).
    Stop it with `.stop()`."""
    state = app.state
    running = getattr(state, "outbox_worker", None)
    if isinstance(running, OutboxWorker) and running.alive:
        return running  # one worker per app, however often its lifespan starts
    settings = state.settings
    policy = DeliveryPolicy(
        base_delay=settings.outbox_base_delay_seconds,
        max_delay=settings.outbox_max_delay_seconds,
        max_attempts=settings.outbox_max_attempts,
        timeout=settings.webhook_timeout_seconds,
    )
    worker = OutboxWorker(state.background_sessionmaker, policy=policy,
                          poll_seconds=settings.outbox_poll_seconds,
                          concurrency=settings.outbox_concurrency,
                          max_backoff=settings.background_max_backoff_seconds)
    state.outbox_worker = worker
    return worker.start()
