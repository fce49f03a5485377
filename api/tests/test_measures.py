"""Measure names cannot use ingestion up (sql/measures.py, migration 0021). The attack:
one post of 2,000 trials x 24 new names took every id a smallserial had, and from the
next restart on every post naming a measure was refused. Now a post may add at most
MALLARD_MAX_NEW_MEASURES_PER_POST names and a project MALLARD_MAX_MEASURES_PER_PROJECT
(a 422 naming `trials` and the cap; nothing stored); names are read before they are
inserted, so neither a restart nor a re-post takes an id; the ids are bigint."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from conftest import MIGRATIONS, create_database
from helpers import results, trial
from mallard_api import db
from mallard_api.harness import ApiProcess
from mallard_api.sql import ids
from sqlalchemy import Engine, text
from test_results import post_at_once


def last_id(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT last_value FROM measures_id_seq")).scalar_one())


def names_like(engine: Engine, prefix: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM measures WHERE name LIKE :p"),
                                {"p": f"{prefix}%"}).scalar_one())


def stored(engine: Engine, uids: list[str]) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text("SELECT count(*) FROM trials WHERE uid = ANY(:u)"),
                                {"u": uids}).scalar_one())


def many_new_names(prefix: str, trials: int = 2000, per_trial: int = 24) -> list[dict]:
    return [trial(measures={f"{prefix}_{i}_{j}": 1.0 for j in range(per_trial)})
            for i in range(trials)]


def test_a_post_of_2000_trials_x_24_new_names_is_refused_whole(client, make_runner,
                                                               make_project, engine, unique):
    runner, headers = make_runner()
    project = make_project()["name"]
    trials = many_new_names(f"n{unique}")
    before = last_id(engine)
    r = client.post("/api/v1/results", headers=headers,
                    json=results(trials, runner_id=runner["id"], project=project))
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "trials"] and err["type"] == "too_many_new_measures"
    assert "48000" in err["msg"] and "MALLARD_MAX_NEW_MEASURES_PER_POST" in err["msg"]
    assert stored(engine, [t["uid"] for t in trials]) == 0
    assert names_like(engine, f"n{unique}") == 0 and last_id(engine) == before


def test_a_project_adds_at_most_its_cap_of_names(client, app, monkeypatch, make_runner,
                                                 make_project, engine, unique):
    settings = app.state.settings.model_copy(update={"max_new_measures_per_post": 20,
                                                     "max_measures_per_project": 30})
    monkeypatch.setitem(app.state._state, "settings", settings)
    runner, headers = make_runner()
    first, second = make_project()["name"], make_project()["name"]

    def post(project: str, prefix: str, n: int) -> httpx.Response:
        body = results([trial(measures={f"{prefix}_{j}": 1.0 for j in range(n)})],
                       runner_id=runner["id"], project=project)
        return client.post("/api/v1/results", headers=headers, json=body)

    assert post(first, f"a{unique}", 20).status_code == 201
    r = post(first, f"b{unique}", 11)  # 31 > 30
    assert r.status_code == 422, r.text
    err = r.json()["detail"][0]
    assert err["loc"] == ["body", "trials"] and err["type"] == "too_many_measures"
    assert first in err["msg"] and "MALLARD_MAX_MEASURES_PER_PROJECT" in err["msg"]
    assert names_like(engine, f"b{unique}") == 0
    assert post(first, f"b{unique}", 10).status_code == 201  # exactly 30
    assert post(first, f"a{unique}", 20).status_code == 201  # names it has: no cap
    assert post(second, f"b{unique}", 10).status_code == 201  # another project's names
    assert post(second, f"c{unique}", 20).status_code == 201


def test_known_names_take_no_ids_after_a_restart_or_a_re_post(client, make_runner,
                                                              make_project, engine, unique):
    runner, headers = make_runner()
    project = make_project()["name"]
    names = {f"k{unique}_{j}": 1.0 for j in range(23)}

    def post() -> None:
        body = results([trial(measures={**names, "ops_per_sec": 1.0}) for _ in range(3)],
                       runner_id=runner["id"], project=project)
        for _ in range(2):  # and its re-post
            assert client.post("/api/v1/results", headers=headers, json=body).status_code == 201

    post()
    after_first = last_id(engine)
    for _ in range(3):
        ids._known.clear()  # as a new process: nothing remembered
        post()
    assert last_id(engine) == after_first


@pytest.fixture
def own_database(pg_server, unique) -> Iterator[tuple[str, Path]]:
    """A database of its own (its sequence is changed) and a folder for the API's log."""
    url = create_database(pg_server, f"mallard_measures_{unique}")
    db.migrate(url, MIGRATIONS)
    base = Path(tempfile.mkdtemp(prefix="mallard-api-measures-"))
    try:
        yield url, base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_a_real_api_restarted_after_the_attack_takes_posts(own_database, unique):
    """A real API process on a database whose measure ids went past a smallint's range
    (as the old sequence left it): the attack is refused, a normal post with new names is
    stored, and after a restart a normal post is stored and takes no id."""
    url, base = own_database
    plain = url.replace("postgresql+psycopg://", "postgresql://")

    def last() -> int:
        with psycopg.connect(plain) as conn:
            return int(conn.execute("SELECT last_value FROM measures_id_seq").fetchone()[0])

    with psycopg.connect(plain, autocommit=True) as conn:
        conn.execute("SELECT setval('measures_id_seq', 32767)")  # the old sequence's end
    env = {**os.environ, "DATABASE_URL": url, "MALLARD_ANALYSIS_POLL_SECONDS": "0",
           "MALLARD_REPO_URL_ALLOW": "file:///"}
    names = {f"custom_{j}": 1.0 for j in range(23)}
    for start in range(2):
        with ApiProcess(env, log=base / "api.log") as api:
            auth = {"Authorization": f"Bearer {api.token('admin')}"}
            with httpx.Client(base_url=f"{api.url}/api/v1", headers=auth, timeout=120) as http:
                if start == 0:
                    r = http.post("/results", json=results(many_new_names("attack")))
                    assert r.status_code == 422, r.text
                body = results([trial(measures={**names, "ops_per_sec": 2.0e6}),
                                trial()])
                r = http.post("/results", json=body)
                assert r.status_code == 201 and r.json()["stored"] == 2, r.text
                assert http.post("/results", json=body).json()["duplicates"] == 2
        assert last() == 32767 + len(names)  # the first start added them; none since


def test_concurrent_posts_of_the_same_new_names_take_one_id_each(live_server, make_runner,
                                                                 make_project, engine, unique):
    runner, headers = make_runner()
    project = make_project()["name"]
    names = {f"c{unique}_{j}": 1.0 for j in range(20)}
    before = last_id(engine)
    bodies = [results([trial(measures=names)], runner_id=runner["id"], project=project)
              for _ in range(6)]
    assert post_at_once(live_server, headers, bodies) == [201] * 6
    assert names_like(engine, f"c{unique}") == 20 and last_id(engine) == before + 20
