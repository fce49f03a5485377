"""Suites are data: the shipped ones load, expand and filter; bad ones are clear errors."""

from __future__ import annotations

import pytest
from mallard_runner.peers import CATALOGUE_NAMES
from mallard_runner.settings import RUNNER_DIR
from mallard_runner.suites import SuiteError, expand, load_suite
from mallard_runner.variants import parse_selectors

SUITES = RUNNER_DIR / "suites"
WORKLOADS_SRC = RUNNER_DIR / "workloads"


@pytest.mark.parametrize("name", ["quick", "full", "bench-allocator", "scaling",
                                  "transfer-cache"])
def test_shipped_suites_load_and_name_real_workloads(name):
    suite = load_suite(name, SUITES)
    assert suite.name == name
    sels = parse_selectors(",".join(suite.allocators))
    assert {s.name for s in sels} >= {"mallard", "glibc"}
    cases = expand(suite)
    assert cases and all("threads" in c.params for c in cases)
    for c in cases:  # every workload is a program of runner/workloads (C, or a macro script)
        stem = c.workload.replace("-", "_")
        assert any((WORKLOADS_SRC / f"{stem}{ext}").exists() for ext in (".c", ".py")), c.workload


def test_quick_suite_shape():
    quick = load_suite("quick", SUITES)
    assert 3 <= quick.trials <= 5 and quick.warmup == 1
    assert {t for c in expand(quick) for t in [c.params["threads"]]} == {1, 2}
    assert set(CATALOGUE_NAMES) <= set(quick.allocators)
    assert {"mallard:transfer=mutex", "mallard:transfer=ring"} <= set(quick.allocators)
    # every workload has deterministic counts at 1 thread (the thread count where they repeat)
    for c in expand(quick):
        assert (c.deterministic_params is not None) == (c.params["threads"] == 1), c
        if c.deterministic_params:
            assert c.deterministic_params["threads"] == 1
            assert set(c.deterministic_params) == set(c.params)


def test_deterministic_params_override_the_size_params(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: s\nthreads: [1, 2]\nworkloads:\n"
        "  a: {params: {ops: 1000000, size: [8, 64]}, deterministic: {params: {ops: 2000}, "
        "threads: [1]}}\n"
        "  b: {params: {n: 3}, deterministic: {params: {n: 1}}}\n"
        "  c: {params: {n: 3}}\n")
    cases = expand(load_suite("s", tmp_path))
    det = {(c.workload, c.params["threads"], c.params.get("size")): c.deterministic_params
           for c in cases}
    assert det[("a", 1, 8)] == {"threads": 1, "ops": 2000, "size": 8}
    assert det[("a", 1, 64)] == {"threads": 1, "ops": 2000, "size": 64}
    assert det[("a", 2, 8)] is None  # not a thread count whose counts repeat
    assert det[("b", 2, None)] == {"threads": 2, "n": 1}  # no list: every thread count
    assert det[("c", 1, None)] is None
    (tmp_path / "bad.yaml").write_text(
        "name: bad\nworkloads:\n  a: {deterministic: {ops: 5}}\n")
    with pytest.raises(SuiteError, match="deterministic"):
        load_suite("bad", tmp_path)


def test_bench_allocator_suite_shape():
    s = load_suite("bench-allocator", SUITES)
    assert set(s.workloads) == {"larson", "rpc"} and s.threads == [1, 2] and s.trials >= 5


def test_filters_and_lists_expand(tmp_path):
    (tmp_path / "s.yaml").write_text(
        "name: s\nthreads: [1, 2]\nworkloads:\n  a: {params: {size: [8, 64], seed: 1}}\n"
        "  b: {params: {n: 3}, threads: [1]}\n")
    s = load_suite("s", tmp_path)
    cases = expand(s)
    assert [(c.workload, c.params) for c in cases] == [
        ("a", {"threads": 1, "size": 8, "seed": 1}), ("a", {"threads": 1, "size": 64, "seed": 1}),
        ("a", {"threads": 2, "size": 8, "seed": 1}), ("a", {"threads": 2, "size": 64, "seed": 1}),
        ("b", {"threads": 1, "n": 3})]
    assert {c.workload for c in expand(s, workloads=["b"])} == {"b"}
    assert {c.params["threads"] for c in expand(s, threads=[2]) if c.workload == "a"} == {2}
    assert [c for c in expand(s, threads=[2]) if c.workload == "b"] == []
    with pytest.raises(SuiteError, match="not in suite"):
        expand(s, workloads=["zzz"])


def test_bad_suites_are_clear_errors(tmp_path):
    with pytest.raises(SuiteError, match="not found"):
        load_suite("missing", tmp_path)
    (tmp_path / "bad.yaml").write_text("name: bad\ntrials: 0\nworkloads: {a: {}}\n")
    with pytest.raises(SuiteError, match="trials"):
        load_suite("bad", tmp_path)
    (tmp_path / "typo.yaml").write_text("name: typo\nworklods: {a: {}}\n")
    with pytest.raises(SuiteError):
        load_suite("typo", tmp_path)


@pytest.mark.parametrize("name", ["/etc/passwd", "../secret", "sub/quick", "quick.yaml",
                                  "..", "", "-x", "a" * 100, "x\ny"])
def test_a_job_names_a_suite_never_a_path(tmp_path, name):
    (tmp_path / "quick.yaml").write_text("name: quick\nworkloads: {a: {}}\n")
    with pytest.raises(SuiteError, match="refused|not found") as e:
        load_suite(name, tmp_path)
    assert "known: quick" in str(e.value)


def test_the_content_of_a_file_never_comes_back(tmp_path):
    secret = tmp_path / "secret.yaml"
    secret.write_text("name: s\ntoken: hunter2-SECRET-VALUE\nworkloads: {a: {}}\n")
    suites = tmp_path / "suites"
    suites.mkdir()
    for name in (str(secret), str(tmp_path / "secret"), "../secret"):
        with pytest.raises(SuiteError) as e:
            load_suite(name, suites)
        assert "hunter2" not in str(e.value)
    # a bad suite of the runner's own folder: its errors, not its values
    (suites / "bad.yaml").write_text("name: bad\nworklods: {hunter2-SECRET-VALUE: {}}\n")
    with pytest.raises(SuiteError, match="worklods") as e:
        load_suite("bad", suites)
    assert "hunter2" not in str(e.value)


def test_local_runs_may_load_a_file_explicitly(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\nworkloads: {a: {}}\n")
    assert load_suite(str(path), tmp_path / "nowhere", allow_path=True).name == "mine"
    with pytest.raises(SuiteError, match="refused"):
        load_suite(str(path), tmp_path / "nowhere")


def test_scaling_suite_runs_every_workload_at_1_to_64_threads_and_marks_oversubscription():
    from mallard_runner.cells import Cell, Target
    from mallard_runner.runs import oversubscribed
    from mallard_wire.results import AllocatorIn

    scaling = load_suite("scaling", SUITES)
    cases = expand(scaling)
    threads = {w: sorted({c.params["threads"] for c in cases if c.workload == w})
               for w in {c.workload for c in cases}}
    assert threads == {w: [1, 2, 4, 8, 16, 32, 64] for w in ("transfer", "xmalloc", "larson")}
    assert "mallard:transfer=naive" in scaling.allocators
    target = Target(label="head", info=AllocatorIn(name="glibc"))
    cells = [Cell(target, c.workload, c.params, RUNNER_DIR) for c in cases]
    assert oversubscribed(cells, [0, 1]) == {"pinned_cpus": 2, "threads": [4, 8, 16, 32, 64]}
    assert oversubscribed(cells, list(range(64))) == {"pinned_cpus": 64, "threads": []}
