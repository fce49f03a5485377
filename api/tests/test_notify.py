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
