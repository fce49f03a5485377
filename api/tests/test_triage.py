"""Alert triage over REST through the real API and database: every field set and cleared,
each change audited with who made it, acknowledging through the triage state and the
acknowledge route alike, accepting an alert's change as the new baseline, roles (a reader
or a runner cannot triage, a user token of another project neither), bad input named."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from helpers import make_alert, shas
from mallard_api.models.projects import Project
from mallard_api.sql import projects as project_sql
from sqlalchemy.orm import Session


def _alert(db_session: Session, project: str | None = None, commits: list[str] | None = None
           ) -> int:
    a = make_alert(db_session)
    if project is not None and commits is not None:
        proj = db_session.query(Project).filter_by(name=project).one()
        project_sql.record_push(db_session, proj, "main", commits[-1], [
            project_sql.CommitInfo(sha=c, parent=commits[i - 1] if i else None,
                                   message=f"c{i}", author="Ada")
            for i, c in enumerate(commits)])
        a.project, a.project_id, a.first_bad_commit = project, proj.id, commits[2]
    db_session.commit()
    return a.id


def test_triage_sets_clears_and_audits_every_field(
        client: TestClient, db_session: Session, user_headers: dict[str, str]) -> None:
    alert_id = _alert(db_session)
    url = f"/api/v1/alerts/{alert_id}/triage"
    assert client.get(url, headers=user_headers).json()["triage"] == "untriaged"
    r = client.post(url, headers=user_headers, json={
        "triage": "investigating", "assignee": "ada", "bug_url": "https://bugs.test/42",
        "label": "true_positive", "note": "the transfer cache again"})
    assert r.status_code == 200, r.text
    t = r.json()
    assert (t["triage"], t["assignee"], t["bug_url"], t["label"], t["state"]) == (
        "investigating", "ada", "https://bugs.test/42", "true_positive", "open")
    assert [n["body"] for n in t["notes"]] == ["the transfer cache again"]
    assert t["notes"][0]["author"].startswith("user #")
    assert {a["field"]: (a["old_value"], a["new_value"]) for a in t["audit"]} == {
        "triage": ("untriaged", "investigating"), "assignee": (None, "ada"),
        "bug_url": (None, "https://bugs.test/42"), "label": (None, "true_positive"),
        "note": (None, "the transfer cache again")}
    r = client.post(url, headers=user_headers, json={"assignee": "", "bug_url": None})
    t = r.json()
    assert (t["assignee"], t["bug_url"], t["triage"]) == (None, None, "investigating")
    assert len(t["audit"]) == 7  # two more; the fields not sent did not change
    r = client.post(url, headers=user_headers, json={"assignee": None})
    assert len(r.json()["audit"]) == 7  # no change, no audit row


def test_acknowledging_is_one_path_and_a_resolved_alert_cannot_be(
        client: TestClient, db_session: Session, user_headers: dict[str, str]) -> None:
    first, second = _alert(db_session), _alert(db_session)
    r = client.post(f"/api/v1/alerts/{first}/triage", headers=user_headers,
                    json={"triage": "acknowledged"})
    assert (r.json()["state"], r.json()["triage"]) == ("acknowledged", "acknowledged")
    r = client.post(f"/api/v1/alerts/{second}/acknowledge", headers=user_headers)
    assert (r.json()["state"], r.json()["triage"]) == ("acknowledged", "acknowledged")
    audit = client.get(f"/api/v1/alerts/{second}/triage", headers=user_headers).json()["audit"]
    assert [a["field"] for a in audit] == ["state", "triage"]
    client.post(f"/api/v1/alerts/{second}/resolve", headers=user_headers).raise_for_status()
    for path, body in (("acknowledge", None), ("triage", {"triage": "acknowledged"})):
        r = client.post(f"/api/v1/alerts/{second}/{path}", headers=user_headers, json=body)
        assert r.status_code == 409, r.text


def test_accepting_an_alert_makes_its_commit_the_baseline(
        client: TestClient, db_session: Session, make_project: Any,
        user_headers: dict[str, str], unique: str) -> None:
    name = make_project(name=f"tri-{unique}")["name"]
    c = shas(4, f"tri{unique}")
    alert_id = _alert(db_session, name, c)
    r = client.post(f"/api/v1/alerts/{alert_id}/accept", headers=user_headers,
                    json={"note": "memory for speed, on purpose"})
    assert r.status_code == 200, r.text
    assert (r.json()["state"], r.json()["triage"]) == ("resolved", "wont_fix")
    marks = client.get(f"/api/v1/projects/{name}/branches/main/baselines",
                       headers=user_headers).json()
    assert [(m["kind"], m["first_sha"], m["note"]) for m in marks] == [
        ("baseline", c[2], "memory for speed, on purpose")]


def test_who_may_triage_and_bad_input(client: TestClient, db_session: Session,
                                      make_token: Any, user_headers: dict[str, str]) -> None:
    alert_id = _alert(db_session)
    url = f"/api/v1/alerts/{alert_id}/triage"
    for role, projects in (("reader", None), ("user", ["elsewhere"])):
        h = {"Authorization": f"Bearer {make_token(role, projects=projects)}"}
        assert client.get(url, headers=h).status_code == 200  # reading is fine
        for path, body in (("triage", {"triage": "invalid"}), ("acknowledge", None),
                           ("resolve", None), ("label", {"label": "false_positive"})):
            r = client.post(f"/api/v1/alerts/{alert_id}/{path}", headers=h, json=body)
            assert r.status_code == 403, (role, path, r.text)
    runner = {"Authorization": f"Bearer {make_token('runner', 'r-tri')}"}
    assert client.post(url, headers=runner, json={"triage": "fixed"}).status_code == 403
    for body, field in (({"triage": "done"}, "triage"), ({"bug_url": "javascript:x"},
                                                         "bug_url"),
                        ({"assignee": "a\nb"}, "assignee"), ({"note": "x" * 4001}, "note"),
                        ({"nope": 1}, "nope")):
        r = client.post(url, headers=user_headers, json=body)
        assert r.status_code == 422 and field in str(r.json()["detail"]), r.text
    assert client.get(url, headers=user_headers).json()["audit"] == []
    assert client.post("/api/v1/alerts/999999/triage", headers=user_headers,
                       json={}).status_code == 404
