"""Program workloads (programs.py): suites that name them, argv templates that are refused,
each reader on good and malformed output, builds from a repository made here, and the
Google Benchmark program bench_draining really run under glibc."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from mallard_runner.cells import Cell, Target
from mallard_runner.executor import Executor
from mallard_runner.guard import parse_rules
from mallard_runner.measures import read_output
from mallard_runner.program_builds import ProgramBuilder, node_bin, program_bins
from mallard_runner.programs import Program, ProgramError, read_gbench, read_regex
from mallard_runner.settings import REPO_ROOT, RUNNER_DIR
from mallard_runner.suites import SuiteError, expand, load_suite, skipped
from mallard_runner.targets import make_cells
from mallard_runner.tools import BuildError
from mallard_wire.results import AllocatorIn

from .conftest import first_cpu, git, reachable

GLIBC = Target("peer", AllocatorIn(name="glibc"))
WORKLOADS = REPO_ROOT / "build" / "workloads"


def suite_file(tmp_path: Path, program: dict[str, Any], **workload: Any) -> Path:
    data = {"name": "s", "threads": [1], "workloads": {"p": {"program": program, **workload}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    return tmp_path


def load(tmp_path: Path, program: dict[str, Any], **workload: Any):
    return load_suite("s", suite_file(tmp_path, program, **workload))


# -- suites ---------------------------------------------------------------------------------
def test_the_draining_suite_names_a_gbench_program_with_its_work_in_every_cell():
    s = load_suite("draining", RUNNER_DIR / "suites")
    cases = expand(s)
    assert {c.params["batch"] for c in cases} == {8, 64}
    assert {c.params["threads"] for c in cases} == {1, 2}
    for c in cases:
        assert c.program is not None and c.program.reader == "gbench"
        assert c.params["blocks"] == 12800000  # the fixed work, recorded in params
    assert {"mallard:transfer=mutex", "mallard:transfer=ring", "glibc"} <= set(s.allocators)


def test_a_program_renders_per_item_with_bin_inside_its_folder(tmp_path):
    s = load(tmp_path, {"argv": ["{bin}/prog", "--n={n}", "{threads}", "--in={bin}/data.txt",
                                 "a:{bin}/x"], "work": {"n": 5}})
    (case,) = expand(s)
    assert case.params == {"threads": 1, "n": 5}
    assert case.program is not None
    argv = case.program.render(case.params, tmp_path / "bin")
    assert argv == [f"{tmp_path}/bin/prog", "--n=5", "1", f"--in={tmp_path}/bin/data.txt",
                    f"a:{tmp_path}/bin/x"]


@pytest.mark.parametrize(("argv", "why"), [
    (["{bin}/prog", "--x;rm"], "shell syntax"),
    (["{bin}/prog", "$(id)"], "shell syntax"),
    (["{bin}/prog", "a b|c"], "shell syntax"),
    (["{bin}/prog", "--in={bin}/../etc/passwd"], "'..'"),
    (["{bin}/../prog"], "argv\\[0\\]"),
    (["{bin}/prog", "/etc/passwd"], "absolute path"),
    (["{bin}/prog", "--in=/etc/passwd"], "absolute path"),
    (["/usr/bin/prog"], "argv\\[0\\]"),
    (["prog"], "argv\\[0\\]"),
    (["{bin}/prog", "x{bin}/y"], "only at the start"),
    (["{bin}/prog", "{bin}x"], "only at the start"),
    (["{bin}/prog", "{nope}"], "unknown placeholder"),
])
def test_argv_templates_that_could_leave_their_folder_or_reach_a_shell_are_refused(
        tmp_path, argv, why):
    with pytest.raises(SuiteError, match=why):
        load(tmp_path, {"argv": argv})


@pytest.mark.parametrize(("program", "workload", "why"), [
    ({"argv": ["{bin}/p"], "reader": "xml"}, {}, "reader"),
    ({"argv": ["{bin}/p"], "reader": "regex", "measures": {"rate": "rate [0-9.]+"}}, {},
     "exactly one group"),
    ({"argv": ["{bin}/p"], "reader": "regex", "measures": {"rate": "(a)(b)"}}, {},
     "exactly one group"),
    ({"argv": ["{bin}/p"], "reader": "regex", "measures": {"rate": "(unclosed"}}, {},
     "not a regular expression"),
    ({"argv": ["{bin}/p"], "reader": "regex"}, {}, "needs measures"),
    ({"argv": ["{bin}/p"], "measures": {"rate": "(x)"}}, {}, "for reader regex"),
    ({"argv": ["{bin}/p", "{n}"]}, {"params": {"n": ["1;id"]}}, "cannot stand in an argv"),
    ({"argv": ["{bin}/p", "{n}"]}, {"params": {"n": "/etc"}}, "cannot stand in an argv"),
    ({"argv": ["{bin}/p"], "from": "node", "build": {"kind": "command",
                                                      "commands": [["make"]]}}, {}, "no build"),
    ({"argv": ["{bin}/p"], "from": "measured"}, {}, "needs a build"),
    ({"argv": ["{bin}/p"], "from": "project", "build": {"kind": "cmake"}}, {}, "repo and ref"),
    ({"argv": ["{bin}/p"], "from": "measured", "build": {
        "kind": "command", "commands": [["sh", "-c", "make"]]}}, {}, "never a shell"),
    ({"argv": ["{bin}/p"], "from": "elsewhere"}, {}, "from"),
    ({"argv": ["{bin}/p"], "work": {"n": 1}}, {"params": {"n": 2}}, "both set"),
    ({"argv": ["{bin}/p"], "stdin": "/etc/passwd"}, {}, "stdin must be"),
    ({"argv": ["{bin}/p"], "stdin": "{bin}/a/../x"}, {}, r"\.\."),
    ({"argv": ["{bin}/p"], "reader": "regex", "measures": {"rate": "(x)"},
      "scale": {"other": 2}}, {}, "not measures"),
    ({"argv": ["{bin}/p"], "reader": "regex", "measures": {"rate": "(x)"},
      "scale": {"rate": 0}}, {}, "greater than 0"),
])
def test_bad_program_workloads_are_refused_naming_the_problem(tmp_path, program, workload, why):
    with pytest.raises(SuiteError, match=why):
        load(tmp_path, program, **workload)


def test_a_rendered_combination_that_makes_dotdot_fails_before_any_trial(tmp_path):
    s = load(tmp_path, {"argv": ["{bin}/p", "{a}{b}/x"]}, params={"a": ".", "b": "."})
    with pytest.raises(SuiteError, match=r"workload p: .*'\.\.'"):
        make_cells([GLIBC], expand(s), tmp_path, {"p": tmp_path})


def test_program_workloads_are_skipped_on_an_emulated_testbed(tmp_path):
    data = {"name": "s", "workloads": {"larson": {"params": {"ops": 1}},
                                       "p": {"program": {"argv": ["{bin}/p"]}}}}
    (tmp_path / "s.yaml").write_text(yaml.safe_dump(data))
    s = load_suite("s", tmp_path)
    assert {c.workload for c in expand(s, emulated=True)} == {"larson"}
    assert {c.workload for c in expand(s)} == {"larson", "p"}
    (note,) = skipped(s, emulated=True, arch="aarch64")
    assert note.startswith("workload p skipped") and "no cross build for aarch64" in note
    assert skipped(s) == []


# -- readers --------------------------------------------------------------------------------
def program(**kw: Any) -> Program:
    return Program.model_validate({"argv": ["{bin}/p"], **kw})


def test_the_regex_reader_takes_one_group_per_measure_and_names_a_missing_one():
    measures = {"rate": r"throughput: ([0-9.]+)", "p99_ns": r"^p99 (\d+) ns$"}
    assert read_regex(measures, "start\nthroughput: 12.5 ops/s\np99 800 ns\n") == {
        "rate": 12.5, "p99_ns": 800.0}
    with pytest.raises(ProgramError, match="measure p99_ns: its regex"):
        read_regex(measures, "throughput: 12.5\n")
    with pytest.raises(ProgramError, match="measure rate: matched '1.2.3', not a number"):
        read_regex({"rate": r"rate=(\S+)"}, "rate=1.2.3")
    # through the executor's reader: a failed trial, the note naming the measure
    m: dict[str, float] = {"wall_seconds": 1.0}
    ok, note = read_output(program(reader="regex", measures=measures), "throughput: 3\n", True,
                           "", m)
    assert not ok and "p99_ns" in note and m == {"wall_seconds": 1.0}


def gbench_doc(*rows: dict[str, Any]) -> str:
    return json.dumps({"context": {}, "benchmarks": list(rows)})


ROW = {"name": "BM_Draining/64/iterations:100/real_time/threads:1", "run_type": "iteration",
       "iterations": 100, "real_time": 2.5, "cpu_time": 2.0, "time_unit": "us",
       "items_per_second": 2.56e7}


def test_the_gbench_reader_takes_one_benchmark_run_per_trial():
    assert read_gbench(gbench_doc(ROW, {**ROW, "run_type": "aggregate",
                                        "aggregate_name": "mean"})) == {
        "real_time_ns": 2500.0, "cpu_time_ns": 2000.0, "items_per_second": 2.56e7}
    with pytest.raises(ProgramError, match="failed: out of memory"):
        read_gbench(gbench_doc({**ROW, "error_occurred": True, "error_message": "out of memory"}))
    with pytest.raises(ProgramError, match="2 benchmark runs .*filter to one per cell"):
        read_gbench(gbench_doc(ROW, {**ROW, "name": "BM_Draining/8"}))
    for bad in ("", "not json", '{"benchmarks": []}', '{"context": {}}'):
        with pytest.raises(ProgramError, match="Google Benchmark output"):
            read_gbench(bad)
    ok, note = read_output(program(reader="gbench"), gbench_doc(
        {**ROW, "error_occurred": True, "error_message": "boom"}), True, "", {})
    assert not ok and "boom" in note


def test_the_jsonline_reader_of_a_program_takes_every_number_of_its_last_line():
    m: dict[str, float] = {}
    assert read_output(program(), 'log\n{"operations": 10, "seconds": 2, "hits": 3, "x": "a"}',
                       True, "", m) == (True, "")
    assert m == {"ops_per_sec": 5.0, "hits": 3.0}
    assert read_output(program(), '{"latency_us": 7}', True, "", m) == (True, "")
    for bad, why in (("", "no JSON object"), ("{broken", "no JSON object"),
                     ('{"name": "x"}', "no number")):
        ok, note = read_output(program(), bad, True, "", {})
        assert not ok and why in note
    # a program that failed is never read
    assert read_output(program(), '{"latency_us": 7}', False, "exit 3", m) == (False, "exit 3")


# -- programs from the node, the measured repository, a project ------------------------------
def script(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("#!/bin/sh\n" + text)
    path.chmod(0o755)
    return reachable(folder)


def test_a_node_program_with_the_regex_reader_runs_as_trials(make_settings, tmp_path):
    bin_dir = script(tmp_path / "programs", "rate", 'echo "items $1"; echo "rate: $2 per s"\n')
    settings = make_settings(programs_dir=bin_dir)
    s = load(tmp_path, {"argv": ["{bin}/rate", "{n}", "{speed}"], "reader": "regex",
                        "measures": {"rate": r"rate: ([0-9.]+)", "items": r"items (\d+)"},
                        "work": {"n": 40}}, params={"speed": [2.5, "fast"]})
    cases = expand(s)
    cells = make_cells([GLIBC], cases, settings.workloads_dir,
                       program_bins(cases, ProgramBuilder(settings.cache(), settings.sandbox()),
                                    bin_dir, None, None))
    out = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
        cells, trials=1, warmup=0)
    by_speed = {t.workload.params["speed"]: t for t in out.trials}
    good, bad = by_speed[2.5], by_speed["fast"]
    assert good.ok, good.stderr_tail
    assert good.measures["rate"] == 2.5 and good.measures["items"] == 40
    assert good.measures["wall_seconds"] > 0  # the runner's own timing still applies
    assert good.workload.params == {"threads": 1, "speed": 2.5, "n": 40}
    assert not bad.ok and "measure rate" in (bad.stderr_tail or "")


def test_a_program_that_prints_no_measure_is_timed_with_its_stdin_and_peak_rss(
        make_settings, tmp_path):
    """reader `time`: run_seconds is the run; stdin is the file of its folder; every program
    trial has cpu_seconds and max_rss_bytes (GNU time), and `scale` multiplies a regex's."""
    bin_dir = script(tmp_path / "programs", "eat",
                     'read n; head -c "$n" /dev/zero | sort >/dev/null; echo "rate: 3 M"\n')
    (bin_dir / "input").write_text("30000000\n")
    settings = make_settings(programs_dir=bin_dir)
    rows = []
    for reader in ({"reader": "time"},
                   {"reader": "regex", "measures": {"ops_per_sec": r"rate: (\d+) M"},
                    "scale": {"ops_per_sec": 1e6}}):
        s = load(tmp_path, {"argv": ["{bin}/eat"], "stdin": "{bin}/input", **reader})
        cases = expand(s)
        cells = make_cells([GLIBC], cases, settings.workloads_dir, program_bins(
            cases, ProgramBuilder(settings.cache(), settings.sandbox()), bin_dir, None, None))
        (t,) = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
            cells, trials=1, warmup=0).trials
        assert t.ok, t.stderr_tail
        rows.append(t.measures)
    timed, scaled = rows
    assert timed["run_seconds"] == timed["wall_seconds"] > 0 and "ops_per_sec" not in timed
    assert scaled["ops_per_sec"] == 3e6 and "run_seconds" not in scaled
    for m in rows:  # sort holds the bytes stdin counts: the peak RSS (a descendant's) shows it
        assert m["max_rss_bytes"] > 25e6 and m["cpu_seconds"] > 0


def test_a_node_program_must_be_an_executable_inside_the_programs_folder(tmp_path):
    bin_dir = script(tmp_path / "programs", "p", "exit 0\n")
    (tmp_path / "programs" / "link").symlink_to("/bin/true")
    assert node_bin(program(), bin_dir) == bin_dir.resolve()
    with pytest.raises(FileNotFoundError, match="not found"):
        node_bin(Program.model_validate({"argv": ["{bin}/missing"]}), bin_dir)
    with pytest.raises(FileNotFoundError, match="outside"):
        node_bin(Program.model_validate({"argv": ["{bin}/link"]}), bin_dir)


BENCH_C = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000, sum = 0;
    for (long i = 0; i < n; i++) { char *p = malloc(64); p[0] = (char)i; sum += p[0]; free(p); }
    printf("{\"operations\": %ld, \"seconds\": 0.001, \"sum\": %ld}\n", n, sum);
    return 0;
}
"""


@pytest.fixture
def bench_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "benchrepo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "bench").mkdir()
    (repo / "bench" / "mb.c").write_text(BENCH_C)
    (repo / "bench" / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(mb C)\nadd_executable(mb mb.c)\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "a benchmark")
    return reachable(repo)


@pytest.mark.parametrize("origin", ["measured", "project"])
def test_a_program_built_from_a_repository_runs_from_its_build(make_settings, tmp_path,
                                                                bench_repo, origin):
    settings = make_settings()
    build = ({"kind": "command", "source": "bench", "commands": [["mkdir", "-p", "out"],
                                                                 ["cc", "-O2", "-o", "out/mb",
                                                                  "mb.c"]], "bin": "out"}
             if origin == "measured" else {"kind": "cmake", "source": "bench",
                                           "targets": ["mb"]})
    where = {"repo": str(bench_repo), "ref": "main"} if origin == "project" else {}
    s = load(tmp_path, {"argv": ["{bin}/mb", "{n}"], "from": origin, "build": build, **where,
                        "work": {"n": 5000}})
    cases = expand(s)
    builder = ProgramBuilder(settings.cache(), settings.sandbox())
    source = None if origin == "project" else str(bench_repo)
    bins = program_bins(cases, builder, settings.workloads_dir, source, "main")
    assert (bins["p"] / "mb").is_file()
    assert program_bins(cases, builder, settings.workloads_dir, source, "main") == bins  # cached
    cells = make_cells([GLIBC], cases, settings.workloads_dir, bins)
    (t,) = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
        cells, trials=1, warmup=0).trials
    assert t.ok, t.stderr_tail
    assert t.measures["ops_per_sec"] == 5000 / 0.001 and t.measures["sum"] > 0


def test_a_program_build_that_fails_or_makes_no_program_is_a_build_error(make_settings,
                                                                        tmp_path, bench_repo):
    settings = make_settings()
    builder = ProgramBuilder(settings.cache(), settings.sandbox())
    broken = program(**{"from": "measured", "build": {
        "kind": "command", "source": "bench", "commands": [["cc", "nope.c"]]}})
    with pytest.raises(BuildError, match="program build step cc failed"):
        builder.bin_dir(broken, str(bench_repo), "main")
    none = program(**{"from": "measured", "build": {
        "kind": "command", "source": "bench", "commands": [["true"]]}})
    with pytest.raises(BuildError, match=r"made no \{bin\}/p"):
        builder.bin_dir(none, str(bench_repo), "main")


def test_a_jobs_benchmark_project_must_be_on_the_runners_allow_list(make_settings,
                                                                    bench_repo):
    """In a job, a `from: project` repository is fetched only when the runner's
    REPO_ALLOW has it, as every repository a job builds; nothing is fetched otherwise."""
    settings = make_settings()
    project = program(**{"argv": ["{bin}/mb"], "from": "project", "repo": str(bench_repo),
                         "ref": "main",
                         "build": {"kind": "cmake", "source": "bench", "targets": ["mb"]}})
    refused = ProgramBuilder(settings.cache(), settings.sandbox(),
                             parse_rules("file:///nonexistent-allowed"))
    with pytest.raises(BuildError, match="not on this runner's allow-list"):
        refused.bin_dir(project, None, None)
    assert not (settings.cache() / "repos").exists() or not any(
        (settings.cache() / "repos").iterdir())
    allowed = ProgramBuilder(settings.cache(), settings.sandbox(),
                             parse_rules(f"file://{bench_repo}"))
    assert (allowed.bin_dir(project, None, None) / "mb").is_file()


# -- the Google Benchmark program ------------------------------------------------------------
@pytest.mark.skipif(not (WORKLOADS / "bench_draining").exists(),
                    reason="bench_draining not built (make workloads; needs libbenchmark-dev)")
def test_bench_draining_runs_under_glibc_and_reports_items_per_second(make_settings, tmp_path):
    settings = make_settings(programs_dir=WORKLOADS)
    s = load_suite("draining", RUNNER_DIR / "suites")
    s.workloads["draining"].program.work["blocks"] = 16000  # type: ignore[union-attr]
    cases = [c for c in expand(s) if c.params["batch"] == 8]
    bins = program_bins(cases, ProgramBuilder(settings.cache(), settings.sandbox()), WORKLOADS,
                        None, None)
    cells = make_cells([GLIBC], cases, settings.workloads_dir, bins)
    assert [a for a in cells[0].argv() if a.startswith("--benchmark_filter=")] == [
        "--benchmark_filter=BM_Draining/8/iterations:.+/real_time/threads:1"]
    out = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
        cells, trials=1, warmup=0)
    assert len(out.trials) == 2
    for t in out.trials:
        assert t.ok, t.stderr_tail
        assert t.measures["items_per_second"] > 0
        assert t.measures["real_time_ns"] > 0 and t.measures["cpu_time_ns"] > 0
        assert t.measures["wall_seconds"] > 0


def test_bench_draining_cell_whose_filter_matches_nothing_fails(make_settings, tmp_path):
    if not (WORKLOADS / "bench_draining").exists():
        pytest.skip("bench_draining not built")
    settings = make_settings()
    s = load(tmp_path, {"argv": ["{bin}/bench_draining", "--benchmark_format=json",
                                 "--benchmark_filter=BM_Nothing"], "reader": "gbench"})
    cells = make_cells([GLIBC], expand(s), settings.workloads_dir, {"p": WORKLOADS})
    (t,) = Executor(settings, [first_cpu()], tmp_path / "raw", use_perf=False).run(
        cells, trials=1, warmup=0).trials
    assert not t.ok


def test_cell_argv_of_a_builtin_is_unchanged(tmp_path):
    c = Cell(target=GLIBC, workload="larson", params={"threads": 2, "ok": True},
             binary=tmp_path / "larson")
    assert c.argv() == [str(tmp_path / "larson"), "--threads", "2", "--ok", "true"]
