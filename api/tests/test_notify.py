"""Webhook notifications: targets (settings and table) and payload shapes; delivery
through the outbox is in test_delivery.py."""

from __future__ import annotations

import json
import uuid

import pytest
from helpers import make_alert
from mallard_api import notify
from mallard_api.sql import outbox as outbox_sql


def test_parse_targets():
    assert notify.parse_targets("generic:http://a/x, slack:https://b/y ,http://c:8080/z") == [
        notify.Target("generic", "http://a/x"), notify.Target("slack", "https://b/y"),
        notify.Target("generic", "http://c:8080/z")]
    assert notify.parse_targets("") == []
    with pytest.raises(ValueError):
        notify.parse_targets("slack:ftp://nope")


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


def test_targets_merge_settings_and_table(db_session):
    url = f"http://127.0.0.1:9/{uuid.uuid4().hex}"
    outbox_sql.add_endpoint(db_session, kind="slack", url=url)
    got = notify.targets(db_session, "generic:http://x/y")
    assert got[0] == notify.Target("generic", "http://x/y")
    assert notify.Target("slack", url) in got
    db_session.rollback()


def test_explained_payloads_carry_the_why(db_session):
    alert = make_alert(db_session)
    why = notify.Why("std::vector<int>::push_back +12 instructions per call (+40%)",
                     "/ui/comparisons/7#profiles")
    generic = notify.payload(alert, "alert.explained", "generic", why)
    assert generic["event"] == "alert.explained" and generic["why"] == why.text
    assert generic["text"] == f"Explained alert #{alert.id}: {alert.text}; why: {why.text}"
    assert generic["profile_url"].endswith("/ui/comparisons/7#profiles")
    assert "why" not in notify.payload(alert, "alert.opened", "generic")
    slack = notify.payload(alert, "alert.explained", "slack", why)
    assert "std::vector&lt;int&gt;::push_back" in slack["text"] and "<int>" not in slack["text"]
    assert any(f["text"].startswith("*profile* <") and f["text"].endswith("(+40%)>")
               for f in slack["blocks"][1]["fields"])
    with pytest.raises(ValueError):  # an explained event needs its why, others take none
        notify.enqueue_alert_event(db_session, alert, "alert.explained", [])
    with pytest.raises(ValueError):
        notify.enqueue_alert_event(db_session, alert, "alert.opened", [], why)
    db_session.rollback()
