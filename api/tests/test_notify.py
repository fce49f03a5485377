"""Webhook notifications: payloads, targets, backoff, and outbox delivery to a real local
HTTP receiver (down, failing, back up) with the real database."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from mallard_api import delivery, notify
from mallard_api.analysis.changepoints import Change
from mallard_api.db import make_sessionmaker
from mallard_api.harness import free_port
from mallard_api.models.analysis import Alert, OutboxMessage
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import outbox as outbox_sql


class Receiver:
    """A local HTTP receiver in a thread; records every POST; can answer with an error."""

    def __init__(self, port: int = 0, status: int = 200) -> None:
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.status = status
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.requests.append((self.path, json.loads(body), dict(self.headers)))
                self.send_response(outer.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


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


def make_alert(session) -> Alert:
    series = alert_sql.TouchedSeries(
        project_id=None, project="mallard", branch_id=0, branch="main", workload="larson",
        params={"threads": 2}, params_sha="", threads=2, allocator="mallard", variant="",
        arch="x86_64", testbed_fingerprint="f" * 64, measure="ops_per_sec")
    change = Change(index=5, first_bad_commit="a" * 40, last_good_commit="b" * 40,
                    change_pct=-8.1, ci_low_pct=-9.0, ci_high_pct=-7.2, p_value=0.0001,
                    before_median=1e6, after_median=9.19e5, direction="regression")
    alert = alert_sql.add_alert(
        session, series, uuid.uuid4().hex, change,
        "larson threads=2 ops_per_sec on mallard/main: -8.1% from aaaaaaa")
    assert alert is not None
    return alert


def test_parse_targets():
    assert notify.parse_targets("generic:http://a/x, slack:https://b/y ,http://c:8080/z") == [
        notify.Target("generic", "http://a/x"), notify.Target("slack", "https://b/y"),
        notify.Target("generic", "http://c:8080/z")]
    assert notify.parse_targets("") == []
    with pytest.raises(ValueError):
        notify.parse_targets("slack:ftp://nope")


def test_backoff_doubles_and_caps():
    assert [delivery.backoff(n, 5, 60) for n in (1, 2, 3, 4, 5)] == [5, 10, 20, 40, 60]


def test_payload_shapes(db_session):
    alert = make_alert(db_session)
    slack = notify.payload(alert, "alert.opened", "slack")
    assert set(slack) == {"text", "blocks"}
    assert slack["text"].startswith(f"Regression alert #{alert.id}: larson")
    assert slack["blocks"][0] == {"type": "section",
                                  "text": {"type": "mrkdwn", "text": slack["text"]}}
    generic = notify.payload(alert, "alert.resolved", "generic")
    assert generic["event"] == "alert.resolved"
    assert generic["alert"]["first_bad_commit"] == "a" * 40
    assert generic["alert"]["change_pct"] == -8.1
    json.dumps(generic)  # JSON-ready


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


def test_targets_merge_settings_and_table(db_session):
    url = f"http://127.0.0.1:9/{uuid.uuid4().hex}"
    outbox_sql.add_endpoint(db_session, kind="slack", url=url)
    got = notify.targets(db_session, "generic:http://x/y")
    assert got[0] == notify.Target("generic", "http://x/y")
    assert notify.Target("slack", url) in got
    db_session.rollback()


def test_one_worker_per_app(app):
    first = delivery.start_outbox_worker(app)
    try:
        assert delivery.start_outbox_worker(app) is first and first.alive
    finally:
        first.stop()
    assert not first.alive


class BlockingReceiver(Receiver):
    """Holds every POST until `release` is set (a receiver that takes 30 s, without
    waiting 30 s)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        super().__init__()
        outer = self
        handler = self.server.RequestHandlerClass

        class Slow(handler):  # type: ignore[misc, valid-type]
            def do_POST(self) -> None:  # noqa: N802
                outer.entered.set()
                outer.release.wait(60)
                super().do_POST()

        self.server.RequestHandlerClass = Slow


def wait_for(check, what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


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
