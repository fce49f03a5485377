"""Outbox delivery to a real local HTTP receiver (down, failing, slow, back up) with the
real database: backoff, retries, the background worker, a crash mid-post."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from helpers import make_alert
from mallard_api import delivery, notify
from mallard_api.db import make_sessionmaker
from mallard_api.harness import free_port
from mallard_api.models.outbox import OutboxMessage
from mallard_api.sql import outbox as outbox_sql
from webhook_receiver import BlockingReceiver, Receiver, wait_for


@pytest.fixture(autouse=True)
def pause_app_worker(app):
    """These tests drive delivery by hand: pause the app's background worker (started by
    the app lifespan when another test opened the client) and restart it afterwards."""
    worker = getattr(app.state, "outbox_worker", None)
    if worker is not None:
        worker.stop()
    yield
    if worker is not None:
        delivery.start_outbox_worker(app)


def test_backoff_doubles_and_caps():
    assert [delivery.backoff(n, 5, 60) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 60]


def test_outbox_survives_a_receiver_that_is_down(engine):
    factory = make_sessionmaker(engine)
    port = free_port()
    policy = delivery.DeliveryPolicy(base_delay=10, max_delay=300, max_attempts=10, timeout=2)
    with factory() as s:
        alert = make_alert(s)
        targets = [notify.Target("generic", f"http://127.0.0.1:{port}/generic"),
                   notify.Target("slack", f"http://127.0.0.1:{port}/slack")]
        msgs = notify.enqueue_alert_event(s, alert, "alert.opened", targets)
        ids = [m.id for m in msgs]
        s.commit()

    def mine(s) -> list[OutboxMessage]:
        rows = [s.get(OutboxMessage, i) for i in ids]
        for r in rows:
            s.refresh(r)
        return rows

    # receiver down: attempts counted, backoff scheduled, nothing lost
    t0 = datetime.now(UTC)
    with factory() as s:
        delivery.deliver_due(s, policy=policy, now=t0)
        s.commit()
        rows = mine(s)
        assert [(r.state, r.attempts) for r in rows] == [("pending", 1), ("pending", 1)]
        assert all("Connect" in (r.last_error or "") for r in rows)
        assert all(r.next_attempt_at >= t0 + timedelta(seconds=9) for r in rows)
    # not due yet: no attempt
    with factory() as s:
        delivery.deliver_due(s, policy=policy, now=t0 + timedelta(seconds=1))
        s.commit()
        assert [r.attempts for r in mine(s)] == [1, 1]
    # still down at the next attempt: the delay doubles
    t1 = t0 + timedelta(seconds=11)
    with factory() as s:
        delivery.deliver_due(s, policy=policy, now=t1)
        s.commit()
        rows = mine(s)
        assert [r.attempts for r in rows] == [2, 2]
        assert all(r.next_attempt_at >= t1 + timedelta(seconds=19) for r in rows)
    # the receiver comes back: each event is delivered exactly once
    receiver = Receiver(port)
    try:
        for _ in range(2):
            with factory() as s:
                delivery.deliver_due(s, policy=policy, now=t1 + timedelta(seconds=3600))
                s.commit()
        with factory() as s:
            rows = mine(s)
            assert [(r.state, r.attempts) for r in rows] == [("delivered", 3), ("delivered", 3)]
        got = sorted((path, body.get("event"), "blocks" in body)
                     for path, body, _ in receiver.requests
                     if (body.get("alert") or {}).get("alert_id") == alert.id
                     or f"#{alert.id}:" in body.get("text", ""))
        assert got == [("/generic", "alert.opened", False), ("/slack", None, True)]
        headers = [h for _, _, h in receiver.requests]
        assert all(h.get("X-Mallard-Event") == "alert.opened" for h in headers)
    finally:
        receiver.close()


def test_error_status_retries_then_fails(engine):
    factory = make_sessionmaker(engine)
    receiver = Receiver(status=500)
    policy = delivery.DeliveryPolicy(base_delay=1, max_delay=2, max_attempts=2, timeout=2)
    try:
        with factory() as s:
            alert = make_alert(s)
            (msg,) = notify.enqueue_alert_event(
                s, alert, "alert.opened", [notify.Target("generic", receiver.url())])
            s.commit()
        now = datetime.now(UTC)
        for step in range(2):
            with factory() as s:
                delivery.deliver_due(s, policy=policy, now=now + timedelta(seconds=10 * step))
                s.commit()
        with factory() as s:
            row = s.get(OutboxMessage, msg.id)
            assert row is not None
            assert (row.state, row.attempts) == ("failed", 2)
            assert row.last_error.startswith("HTTP 500")
        assert len([1 for _, b, _ in receiver.requests if b["alert"]["alert_id"] == alert.id]) == 2
    finally:
        receiver.close()


def test_background_worker_delivers(engine):
    factory = make_sessionmaker(engine)
    receiver = Receiver()
    worker = delivery.OutboxWorker(factory, policy=delivery.DeliveryPolicy(timeout=2),
                                 poll_seconds=0.2).start()
    try:
        with factory() as s:
            alert = make_alert(s)
            (msg,) = notify.enqueue_alert_event(
                s, alert, "alert.resolved", [notify.Target("slack", receiver.url("/s"))])
            s.commit()
        worker.wake()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with factory() as s:
                row = s.get(OutboxMessage, msg.id)
                if row is not None and row.state == "delivered":
                    break
            time.sleep(0.1)
        else:
            pytest.fail("the worker did not deliver")
        texts = [b["text"] for p, b, _ in receiver.requests if p == "/s"]
        assert texts == [f"Resolved alert #{alert.id}: {alert.text}"]
    finally:
        worker.stop()
        receiver.close()


def test_one_worker_per_app(app):
    first = delivery.start_outbox_worker(app)
    try:
        assert delivery.start_outbox_worker(app) is first and first.alive
    finally:
        first.stop()
    assert not first.alive


def test_a_slow_receiver_holds_back_only_its_own_events(engine):
    factory = make_sessionmaker(engine)
    slow, fast = BlockingReceiver(), Receiver()
    worker = delivery.OutboxWorker(factory, policy=delivery.DeliveryPolicy(timeout=30),
                                 poll_seconds=0.05, concurrency=4).start()
    try:
        with factory() as s:
            alert = make_alert(s)
            mine = notify.enqueue_alert_event(
                s, alert, "alert.opened", [notify.Target("generic", slow.url("/slow")),
                                           notify.Target("generic", fast.url("/fast"))])
            mine += notify.enqueue_alert_event(
                s, alert, "alert.resolved", [notify.Target("generic", slow.url("/slow")),
                                             notify.Target("generic", fast.url("/fast"))])
            s.commit()
        worker.wake()
        wait_for(lambda: len(fast.requests) == 2 and slow.entered.is_set(),
                 "the fast receiver's events while the slow one is busy")
        assert slow.requests == []  # still inside its first POST

        def states() -> dict[str, str]:  # each message's state committed on its own
            with factory() as s:
                return {m.url.rsplit("/", 1)[1] + "-" + m.event:
                        s.get(OutboxMessage, m.id).state for m in mine}

        # the fast receiver has both requests; the worker records each answer after it
        wait_for(lambda: list(states().values()).count("delivered") == 2,
                 "the fast receiver's deliveries recorded")
        assert states() == {"fast-alert.opened": "delivered", "fast-alert.resolved": "delivered",
                          "slow-alert.opened": "pending", "slow-alert.resolved": "pending"}
        slow.release.set()
        wait_for(lambda: len(slow.requests) == 2, "the slow receiver's events")
        assert [b["event"] for _, b, _ in slow.requests] == ["alert.opened", "alert.resolved"]
    finally:
        slow.release.set()
        worker.stop()
        slow.close()
        fast.close()


def test_a_crash_mid_post_re_sends_only_the_message_in_flight(engine):
    factory = make_sessionmaker(engine)
    receiver = Receiver()
    policy = delivery.DeliveryPolicy(timeout=2)
    try:
        with factory() as s:
            alert = make_alert(s)
            url = receiver.url(f"/crash-{uuid.uuid4().hex}")
            msgs = [notify.enqueue_alert_event(s, alert, e, [notify.Target("generic", url)])[0]
                    for e in ("alert.opened", "alert.resolved")]
            s.commit()
        now = datetime.now(UTC)
        with factory() as s:  # a worker leases the first message, then dies before the POST
            assert outbox_sql.lease_next(s, url, now=now, lease_seconds=32).id == msgs[0].id
            s.commit()
        with factory() as s:  # another worker: the leased message is not sent again yet
            delivery.deliver_due(s, policy=policy, now=now)
        assert [b["event"] for _, b, _ in receiver.requests] == ["alert.resolved"]
        with factory() as s:  # the lease runs out: sent once
            delivery.deliver_due(s, policy=policy, now=now + timedelta(seconds=33))
            delivery.deliver_due(s, policy=policy, now=now + timedelta(seconds=34))
        assert [b["event"] for _, b, _ in receiver.requests] == ["alert.resolved",
                                                                 "alert.opened"]
    finally:
        receiver.close()
