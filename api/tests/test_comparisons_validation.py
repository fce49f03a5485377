"""What a comparison may name: a bad request is a 422 naming the field and creates nothing."""

import pytest
from comparison_data import SHA_BASE, SHA_HEAD


def test_comparison_validation(client, user_headers, make_project):
    project = make_project()
    good = {"project": project["name"], "base": {"commit": SHA_BASE},
            "head": {"commit": SHA_HEAD}}
    r = client.post("/api/v1/comparisons", headers=user_headers,
                    json={**good, "hypothesis": "faster please"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "hypothesis"]
    r = client.post("/api/v1/comparisons", headers=user_headers,
                    json={**good, "project": "no-such-project"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "project"]
    r = client.post("/api/v1/comparisons", headers=user_headers, json={**good, "trials": 1})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "trials"]
    r = client.post("/api/v1/comparisons", headers=user_headers,
                    json={**good, "head": {"variant": "x"}})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "head", "commit"]
    r = client.get("/api/v1/comparisons/999999", headers=user_headers)
    assert r.status_code == 404
    r = client.post("/api/v1/comparisons", json=good)
    assert r.status_code == 401
    r = client.post("/api/v1/comparisons", headers=user_headers,
                    json={**good, "hypothesis": "+15-25%"})
    assert r.status_code == 201 and r.json()["hypothesis"] == "+15-25%"


# -- what a comparison may name (issue 15) -------------------------------------------------
@pytest.mark.parametrize("field,value,loc", [
    ("base", {"commit": "--upload-pack=touch${IFS}marker;git-upload-pack"},
     ["body", "base", "commit"]),
    ("head", {"commit": "main", "variant": "transfer"}, ["body", "head", "variant"]),
    ("head", {"commit": "main", "variant": "transfer="}, ["body", "head", "variant"]),
    ("head", {"commit": "main", "variant": "transfer=ring;id"}, ["body", "head", "variant"]),
    ("head", {"commit": "main", "variant": "bogus=1"}, ["body", "head", "variant"]),
    ("head", {"commit": "main", "variant": "stats_file=/tmp/x"}, ["body", "head", "variant"]),
    ("head", {"commit": "main", "branch": "x"}, ["body", "head", "branch"]),
    ("peers", ["glibc", "/tmp/evil.so"], ["body", "peers", 1]),
    ("peers", ["glibc", "nosuch@v1"], ["body", "peers", 1]),
    ("workloads", ["larson", "nosuch"], ["body", "workloads"]),
    ("suite", "quick.yaml", ["body", "suite"]),
    ("suite", "../../etc/passwd", ["body", "suite"]),
    ("suite", "nosuch", ["body", "suite"]),
    ("trial", 5, ["body", "trial"]),
])
def test_bad_comparisons_are_422_and_create_nothing(client, user_headers, make_project, field,
                                                    value, loc):
    project = make_project()
    body = {"project": project["name"], "base": {"commit": SHA_BASE},
            "head": {"commit": SHA_HEAD}, field: value}
    r = client.post("/api/v1/comparisons", headers=user_headers, json=body)
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"][:len(loc)] == loc
    assert client.get("/api/v1/comparisons", headers=user_headers,
                      params={"project": project["name"]}).json() == []
