"""Projects carry a build recipe and their peers (issue #28): set by an admin over REST and
the CLI, refused with a 4xx naming the field when it is not data; every side of every job
the API queues is the project's own build by that recipe (named after the project), a
catalogue peer, or another project's build at a ref; reports name the project."""

from __future__ import annotations

from typing import Any

import pytest
from comparison_data import SHA_BASE, SHA_HEAD, post_results, trial
from helpers import MALLARD_RECIPE, claim_job, push, register_recipe, sha
from mallard_api.cli import app as cli
from typer.testing import CliRunner

# an allocator nobody here wrote: built by make, options in one key:value variable
FIXALLOC = {"kind": "make", "source": "src", "target": "lib", "library": "out/libfix*.so",
            "options": {"variable": "FIXALLOC_CONF", "keys": ["arena", "decay"]}}


def loc_msg(r: Any) -> tuple[list[Any], str]:
    detail = r.json()["detail"][0]
    return detail["loc"], detail["msg"]


def test_recipe_set_and_show(client, admin_headers, user_headers, make_project):
    p = make_project(recipe=None)
    name = p["name"]
    assert p["recipe"] is None and p["peers"] is None
    r = client.get(f"/api/v1/projects/{name}/recipe", headers=user_headers)
    assert r.status_code == 200 and r.json() == {"project": name, "recipe": None}
    got = register_recipe(client, admin_headers, name, FIXALLOC)
    assert got["recipe"]["kind"] == "make" and got["recipe"]["library"] == "out/libfix*.so"
    r = client.get(f"/api/v1/projects/{name}/recipe", headers=user_headers)
    options = r.json()["recipe"]["options"]
    assert (options["prefix"], options["variable"], options["keys"]) == (
        None, "FIXALLOC_CONF", ["arena", "decay"])
    assert client.get(f"/api/v1/projects/{name}", headers=user_headers).json()[
        "recipe"]["source"] == "src"


def test_only_an_admin_sets_a_recipe(client, admin_headers, user_headers, make_project,
                                     unique):
    name = make_project(recipe=None)["name"]
    r = client.put(f"/api/v1/projects/{name}/recipe", headers=user_headers,
                   json={"recipe": FIXALLOC})
    assert r.status_code == 403
    assert client.get(f"/api/v1/projects/{name}/recipe",
                      headers=user_headers).json()["recipe"] is None
    body = {"repo_url": f"/srv/git/{unique}.git", "recipe": FIXALLOC}
    r = client.put(f"/api/v1/projects/new-{unique}", headers=user_headers, json=body)
    assert r.status_code == 403 and loc_msg(r)[0] == ["body", "recipe"]
    r = client.put(f"/api/v1/projects/new-{unique}", headers=admin_headers, json=body)
    assert r.status_code == 200 and r.json()["recipe"]["kind"] == "make"
    # a user re-sending the project without a recipe keeps the admin's
    r = client.put(f"/api/v1/projects/new-{unique}", headers=user_headers,
                   json={"repo_url": f"/srv/git/{unique}.git", "tracked_branches": ["dev"]})
    assert r.status_code == 200 and r.json()["recipe"]["kind"] == "make"
    r = client.put(f"/api/v1/projects/new-{unique}", headers=user_headers,
                   json={**body, "recipe": {**FIXALLOC, "target": "evil"}})
    assert r.status_code == 403 and loc_msg(r)[0] == ["body", "recipe"]


@pytest.mark.parametrize(("change", "where", "says"), [
    ({"configure": ["--prefix=x;rm -rf ~"]}, ["configure", 0], "shell syntax"),
    ({"configure": ["$(id)"]}, ["configure", 0], "shell syntax"),
    ({"configure": ["--prefix=/usr"]}, ["configure", 0], "absolute path"),
    ({"configure": ["-DX=../../etc"]}, ["configure", 0], "'..'"),
    ({"source": "/etc"}, ["source"], "not absolute"),
    ({"source": "../elsewhere"}, ["source"], "inside the checkout"),
    ({"library": "../../lib/libc.so.6"}, ["library"], "inside the build folder"),
    ({"library": "/usr/lib/libc.so.6"}, ["library"], "inside the build folder"),
    ({"kind": "command", "commands": [["sh", "-c", "make"]]}, [], "shell"),
    ({"options": {"prefix": "X_", "variable": "Y"}}, ["options"], "exactly one"),
])
def test_a_recipe_that_is_not_data_is_refused_naming_the_field(client, admin_headers,
                                                               make_project, change, where,
                                                               says):
    name = make_project(recipe=None)["name"]
    r = client.put(f"/api/v1/projects/{name}/recipe", headers=admin_headers,
                   json={"recipe": {**FIXALLOC, **change}})
    assert r.status_code == 422, r.text
    loc, msg = loc_msg(r)
    assert loc == ["body", "recipe", *where] and says in msg, (loc, msg)
    assert client.get(f"/api/v1/projects/{name}/recipe",
                      headers=admin_headers).json()["recipe"] is None


def test_a_project_without_a_recipe_queues_no_build(client, user_headers, make_project,
                                                    make_runner):
    name = make_project(recipe=None)["name"]
    runner, _ = make_runner()
    r = client.post("/api/v1/comparisons", headers=user_headers, json={
        "project": name, "base": {"commit": SHA_BASE}, "head": {"commit": SHA_HEAD},
        "arch": runner["arch"]})
    assert r.status_code == 409, r.text
    assert "set a recipe first" in loc_msg(r)[1]
    r = client.post("/api/v1/webhooks/push", headers=user_headers, json={
        "project": name, "ref": "refs/heads/main", "after": sha(1),
        "commits": [{"sha": sha(1)}]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["commits"] == 1 and out["jobs"] == [] and "set a recipe first" in out["ignored"]


def test_specs_of_another_allocator_name_it_and_carry_its_recipe(
        client, admin_headers, user_headers, make_project, make_runner, fast_analysis):
    """A comparison of project `fixalloc-...` (not Mallard): both sides are its builds by
    its recipe, the peers a catalogue entry and another project's build at a ref; a
    variant key its recipe does not know is a 422 naming the field; the report and the
    comparison's labels name the project."""
    p = make_project(recipe=FIXALLOC)
    name = p["name"]
    other = make_project(recipe=MALLARD_RECIPE)["name"]
    runner, rheaders = make_runner()
    body = {"project": name, "base": {"commit": SHA_BASE},
            "head": {"commit": SHA_HEAD, "variant": "arena=4"}, "workloads": ["larson"],
            "trials": 3, "arch": runner["arch"], "peers": ["glibc", f"{other}@v1.0"]}
    bad = client.post("/api/v1/comparisons", headers=user_headers,
                      json={**body, "head": {"commit": SHA_HEAD, "variant": "transfer=ring"}})
    assert bad.status_code == 422 and loc_msg(bad)[0] == ["body", "head", "variant"]
    assert "unknown option(s) transfer" in loc_msg(bad)[1]
    gone = client.post("/api/v1/comparisons", headers=user_headers,
                       json={**body, "peers": ["glibc", "nosuchproject@v1"]})
    assert gone.status_code == 422 and loc_msg(gone)[0] == ["body", "peers", 1]
    r = client.post("/api/v1/comparisons", headers=user_headers, json=body)
    assert r.status_code == 201, r.text
    comp = r.json()
    assert (comp["base_label"], comp["head_label"]) == (f"{name}@1111111",
                                                       f"{name}@2222222 arena=4")
    spec = claim_job(client, rheaders, runner)["spec"]
    build = {"repo_url": p["repo_url"], "recipe": client.get(
        f"/api/v1/projects/{name}/recipe", headers=user_headers).json()["recipe"]}
    base, head, glibc, peer = spec["allocators"]
    assert base == {"label": "base", "name": name, "commit": SHA_BASE, "variant": None,
                    "build": build}
    assert head["name"] == name and head["variant"] == "arena=4" and head["build"] == build
    assert glibc == {"label": "peer", "name": "glibc", "commit": None, "variant": None,
                     "build": None}
    assert (peer["name"], peer["commit"], peer["build"]["repo_url"]) == (
        other, "v1.0", f"/srv/git/{other}.git")
    assert peer["build"]["recipe"]["target"] == "mallard"
    trials = [trial(label, name, commit, variant, 1, {"ops_per_sec": 1e6 + i}, i)
              for i in range(3) for label, commit, variant in (
                  ("base", SHA_BASE, None), ("head", SHA_HEAD, "arena=4"))]
    post_results(client, rheaders, runner, name, spec_job_id(client, user_headers, comp),
                 trials)
    report = client.get(f"/api/v1/comparisons/{comp['id']}/report", headers=user_headers).text
    assert report.splitlines()[0].endswith(
        f"base {name}@1111111 vs head {name}@2222222 arena=4"), report
    page = client.get(f"/ui/comparisons/{comp['id']}", headers=user_headers)
    assert page.status_code == 200 and f"{name}@2222222 arena=4" in page.text
    assert "mallard@" not in page.text


def spec_job_id(client: Any, headers: dict[str, str], comp: dict[str, Any]) -> int:
    return int(client.get(f"/api/v1/comparisons/{comp['id']}",
                          headers=headers).json()["jobs"][0]["job_id"])


def test_a_push_queues_the_projects_own_allocator(client, user_headers, make_runner,
                                                  make_project, unique):
    name = f"fixalloc-{unique}"
    make_project(name, recipe=FIXALLOC)
    runner, rheaders = make_runner(arch="x86_64")
    r = client.put(f"/api/v1/projects/{name}/peers", headers=user_headers,
                   json={"peers": ["glibc", "jemalloc"]})
    assert r.status_code == 200 and r.json() == {"project": name, "default": False,
                                                 "peers": ["glibc", "jemalloc"]}
    push(client, user_headers, name, [sha(7)])
    jobs = client.get("/api/v1/jobs", headers=user_headers,
                      params={"state": "queued", "kind": "commit"}).json()
    spec = next(j["spec"] for j in jobs if j["spec"]["project"] == name)
    head, *peers = spec["allocators"]
    assert (head["label"], head["name"], head["commit"]) == ("head", name, sha(7))
    assert head["build"]["recipe"]["kind"] == "make"
    assert head["build"]["recipe"]["options"]["variable"] == "FIXALLOC_CONF"
    assert [(a["name"], a["build"]) for a in peers] == [("glibc", None), ("jemalloc", None)]
    del runner, rheaders


def test_peers_are_validated(client, user_headers, make_project):
    name = make_project()["name"]
    for peers, where in ((["glibc", "je malloc"], ["body", "peers", 1]),
                         (["nosuch@5.3.0"], ["body", "peers", 0]),
                         (["glibc", "x@-evil"], ["body", "peers", 1])):
        r = client.put(f"/api/v1/projects/{name}/peers", headers=user_headers,
                       json={"peers": peers})
        assert r.status_code == 422 and loc_msg(r)[0][:3] == where, (peers, r.text)
    r = client.put(f"/api/v1/projects/{name}/peers", headers=user_headers,
                   json={"peers": None})
    assert r.status_code == 200 and r.json()["default"] is True
    assert r.json()["peers"] == ["glibc", "jemalloc", "mimalloc", "tcmalloc"]


def test_a_hand_written_build_is_an_admins(client, user_headers, admin_headers,
                                           make_project):
    """POST /jobs: a side with a commit is the build of the registered project it names
    (filled in by the API); a user may not bring a recipe of their own."""
    p = make_project(recipe=FIXALLOC)
    spec = {"project": p["name"], "repo_url": p["repo_url"], "suite": "quick",
            "allocators": [{"label": "head", "name": p["name"], "commit": "main"},
                           {"label": "peer", "name": "glibc"}]}
    evil = {"repo_url": p["repo_url"], "recipe": {**FIXALLOC, "target": "evil"}}
    smuggled = {**spec, "allocators": [{**spec["allocators"][0], "build": evil}]}
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": "x86_64", "spec": smuggled})
    assert r.status_code == 403 and loc_msg(r)[0] == ["body", "spec", "allocators", 0, "build"]
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": "x86_64", "spec": {
                        **spec, "allocators": [{"label": "head", "name": "nosuch",
                                                "commit": "main"}]}})
    assert r.status_code == 422 and loc_msg(r)[0] == ["body", "spec", "allocators", 0, "name"]
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": "x86_64", "spec": {
                        **spec, "allocators": [{"label": "head", "name": p["name"],
                                                "commit": "main", "variant": "nokey=1"}]}})
    assert r.status_code == 422 and loc_msg(r)[0] == [
        "body", "spec", "allocators", 0, "variant"]
    r = client.post("/api/v1/jobs", headers=user_headers,
                    json={"kind": "commit", "arch": "x86_64", "spec": spec})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["allocators"][0]["build"]["recipe"]["target"] == "lib"
    r = client.post("/api/v1/jobs", headers=admin_headers,
                    json={"kind": "commit", "arch": "x86_64", "spec": smuggled})
    assert r.status_code == 201, r.text
    assert r.json()["spec"]["allocators"][0]["build"]["recipe"]["target"] == "evil"


def test_cli_recipe_and_peers(client, database_url, monkeypatch, make_project, tmp_path,
                              user_headers):
    monkeypatch.setenv("DATABASE_URL", database_url)
    name = make_project(recipe=None)["name"]
    good = tmp_path / "recipe.toml"
    good.write_text('[allocator]\nkind = "autotools"\nconfigure = ["--disable-stats"]\n'
                    'library = "lib/libjemalloc.so*"\n'
                    '[allocator.options]\nvariable = "MALLOC_CONF"\n')
    res = CliRunner().invoke(cli, ["project", "recipe", "set", name, "--file", str(good)])
    assert res.exit_code == 0, res.output
    recipe = client.get(f"/api/v1/projects/{name}/recipe", headers=user_headers).json()
    assert recipe["recipe"]["kind"] == "autotools"
    res = CliRunner().invoke(cli, ["project", "recipe", "show", name])
    assert res.exit_code == 0 and '"MALLOC_CONF"' in res.output
    bad = tmp_path / "bad.toml"
    bad.write_text('[allocator]\nkind = "cmake"\nconfigure = ["-DX=1;reboot"]\n'
                   'library = "x.so"\n')
    res = CliRunner().invoke(cli, ["project", "recipe", "set", name, "--file", str(bad)])
    assert res.exit_code == 2 and "recipe.configure.0: " in res.output
    assert "shell syntax" in res.output
    res = CliRunner().invoke(cli, ["project", "recipe", "set", "nosuch-project-at-all",
                                   "--file", str(good)])
    assert res.exit_code == 1 and "no project named" in res.output
    res = CliRunner().invoke(cli, ["project", "peers", "set", name, "glibc,jemalloc"])
    assert res.exit_code == 0, res.output
    assert client.get(f"/api/v1/projects/{name}/peers",
                      headers=user_headers).json()["peers"] == ["glibc", "jemalloc"]
    res = CliRunner().invoke(cli, ["project", "peers", "set", name, "glibc,nosuch@1.0"])
    assert res.exit_code == 2 and "no project named 'nosuch'" in res.output
    res = CliRunner().invoke(cli, ["project", "peers", "show", name])
    assert res.output.strip() == f"{name}\tglibc,jemalloc"
