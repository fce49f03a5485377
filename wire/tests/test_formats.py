"""The readers of other harnesses' output (mallard_wire/formats): real files (captured
once, wire/tests/data/README.md, and made live here where the harness is installed), and
malformed ones, each refused with the place and the problem named."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import pytest
from mallard_wire import formats
from mallard_wire.formats import READERS, FormatError, Sample, bmf, gbench, hyperfine
from mallard_wire.formats import pytest_benchmark as pb
from mallard_wire.formats.base import MAX_MEASURES, MEASURE_NAME, WORKLOAD_NAME
from mallard_wire.results import TrialIn

DATA = Path(__file__).parent / "data"


def read(fmt: str, doc: object) -> list[Sample]:
    return READERS[fmt](doc if isinstance(doc, str) else json.dumps(doc))


def refused(fmt: str, doc: object) -> FormatError:
    with pytest.raises(FormatError) as e:
        read(fmt, doc)
    return e.value


def as_trial(s: Sample, i: int) -> TrialIn:
    """What the upload route makes of a sample: the wire model takes every one."""
    return TrialIn.model_validate({
        "uid": f"u{i}", "allocator": {"name": "x", "commit": "a" * 40},
        "workload": {"name": s.workload, "params": s.params}, "seq": s.seq,
        "measures": s.measures})


def test_the_registry_names_every_format():
    assert set(READERS) == {"gbench", "hyperfine", "bmf", "pytest-benchmark"}
    assert formats.Sample is Sample and formats.FormatError is FormatError


def test_the_names_agree_with_the_wire_models():
    from mallard_wire import fields, results

    assert MAX_MEASURES == fields.MAX_MEASURES
    assert formats.base.MAX_PARAMS == results.MAX_PARAMS
    assert MEASURE_NAME.pattern in str(TrialIn.model_json_schema())
    assert WORKLOAD_NAME.pattern in str(TrialIn.model_json_schema())


# --- Google Benchmark ---------------------------------------------------------------------

def check_gbench(samples: list[Sample]) -> None:
    cells = {(s.workload, tuple(sorted(s.params.items()))) for s in samples}
    assert len(cells) == 4 and len(samples) == 8  # 2 args x 2 thread counts x 2 repetitions
    assert {s.workload for s in samples} == {"BM_Alloc"}
    assert {s.params["arg0"] for s in samples} == {64, 4096}
    assert {s.params["threads"] for s in samples} == {1, 2}
    assert sorted({s.seq for s in samples}) == [0, 1]
    for s in samples:
        assert s.measures["real_time_ns"] > 0 and s.measures["cpu_time_ns"] > 0
        assert s.measures["items_per_second"] > 0
        assert s.measures["allocs"] == s.params["threads"]  # a counter sums over threads
    for i, s in enumerate(samples):
        as_trial(s, i)


def test_gbench_reads_a_real_file():
    check_gbench(read("gbench", (DATA / "gbench.json").read_text()))


@pytest.mark.skipif(not shutil.which("g++") or not Path("/usr/include/benchmark").is_dir(),
                    reason="needs g++ and libbenchmark-dev")
def test_gbench_reads_a_benchmark_built_and_run_here(tmp_path):
    exe = tmp_path / "bm"
    subprocess.run(["g++", "-O1", str(DATA / "bm.cc"), "-o", str(exe), "-lbenchmark",
                    "-lpthread"], check=True, timeout=300)
    out = subprocess.run([str(exe), "--benchmark_format=json", "--benchmark_repetitions=2",
                          "--benchmark_min_time=0.001"], check=True, capture_output=True,
                         text=True, timeout=120).stdout
    check_gbench(read("gbench", out))


def gbench_doc(**row: object) -> dict[str, object]:
    base = {"name": "BM_X/8", "run_type": "iteration", "real_time": 10.0, "cpu_time": 9.0,
            "time_unit": "us", "iterations": 100}
    return {"benchmarks": [base, {**base, **row}]}


def test_gbench_converts_units_and_leaves_out_aggregates():
    doc = gbench_doc(run_type="aggregate", aggregate_name="mean")
    [s] = read("gbench", doc)
    assert s.measures["real_time_ns"] == 10_000.0 and s.params == {"arg0": 8}


@pytest.mark.parametrize(("row", "where", "problem"), [
    ({"real_time": "fast"}, "benchmarks[1].real_time", "finite number"),
    ({"real_time": None}, "benchmarks[1].real_time", "finite number"),
    ({"cpu_time": True}, "benchmarks[1].cpu_time", "finite number"),
    ({"time_unit": "fortnight"}, "benchmarks[1].time_unit", "one of"),
    ({"name": 7, "run_name": None}, "benchmarks[1].name", "name"),
    ({"name": "BM X/1", "run_name": None}, "benchmarks[1].name", "usable name"),
    ({"error_occurred": True, "error_message": "boom"}, "benchmarks[1]", "boom"),
    ({f"c{i}": 1.0 for i in range(40)}, "benchmarks[1]", "at most 32"),
])
def test_gbench_refuses_a_malformed_row(row, where, problem):
    e = refused("gbench", gbench_doc(**row))
    assert e.where == where and problem in e.problem


def test_gbench_refuses_nan_which_is_not_json():
    text = json.dumps(gbench_doc()).replace("10.0", "NaN", 1)
    e = refused("gbench", text)
    assert "NaN" in str(e) and "not JSON" in str(e)


@pytest.mark.parametrize(("doc", "where"), [
    ("", "line 1"), ("   \n", "line 1"), ("{\"benchmarks\": [", "line 1"), ("[]", "benchmarks"),
    ({"context": {}}, "benchmarks"), ({"benchmarks": {}}, "benchmarks"),
    ({"benchmarks": []}, "benchmarks"), ({"benchmarks": [1]}, "benchmarks[0]"),
])
def test_gbench_refuses_what_is_no_benchmark_document(doc, where):
    assert refused("gbench", doc).where == where


# --- hyperfine ----------------------------------------------------------------------------

def test_hyperfine_reads_a_real_file_with_parameters_and_names():
    samples = read("hyperfine", (DATA / "hyperfine.json").read_text())
    assert len(samples) == 6
    assert {s.workload for s in samples} == {"sleep-1", "sleep-2"}  # --command-name
    assert {s.params["n"] for s in samples} == {"1", "2"}
    assert [s.seq for s in samples] == [0, 1, 2, 0, 1, 2]
    doc = json.loads((DATA / "hyperfine.json").read_text())
    assert [s.measures for s in samples[:3]] == [{"run_seconds": t}
                                                 for t in doc["results"][0]["times"]]


@pytest.mark.skipif(not shutil.which("hyperfine"), reason="needs hyperfine")
def test_hyperfine_reads_what_hyperfine_writes_here(tmp_path):
    out = tmp_path / "h.json"
    subprocess.run(["hyperfine", "--runs", "4", "-N", "--export-json", str(out), "true",
                    "true --version"], check=True, capture_output=True, timeout=120)
    samples = read("hyperfine", out.read_text())
    assert len(samples) == 8
    # a command line is no workload name: it is made one
    assert {s.workload for s in samples} == {"true", "true-version"}
    assert all(s.measures["run_seconds"] > 0 and set(s.measures) == {"run_seconds"}
               for s in samples)  # user/system are means in the file: not a run's own


def test_hyperfine_keeps_per_run_user_system_and_memory_when_given():
    doc = {"results": [{"command": "./bench --size 10", "times": [0.5, 0.6],
                        "user": [0.4, 0.5], "system": [0.1, 0.1],
                        "memory_usage_byte": [1000, 1100], "exit_codes": [0, 0]}]}
    a, b = read("hyperfine", doc)
    assert a.workload == "bench-size-10"
    assert b.measures == {"run_seconds": 0.6, "user_seconds": 0.5, "sys_seconds": 0.1,
                          "max_rss_bytes": 1100.0}


@pytest.mark.parametrize(("result", "where", "problem"), [
    ({"times": [0.1]}, "results[0].command", "non-empty string"),
    ({"command": "", "times": [0.1]}, "results[0].command", "non-empty string"),
    ({"command": "$%^&", "times": [0.1]}, "results[0].command", "no workload name"),
    ({"command": "a"}, "results[0].times", "array"),
    ({"command": "a", "times": []}, "results[0].times", "empty"),
    ({"command": "a", "times": [0.1, "0.2"]}, "results[0].times[1]", "finite number"),
    ({"command": "a", "times": [-1.0]}, "results[0].times[0]", "negative"),
    ({"command": "a", "times": [0.1], "user": [0.1, 0.2]}, "results[0].user", "2 values"),
    ({"command": "a", "times": [0.1], "parameters": [1]}, "results[0].parameters", "object"),
])
def test_hyperfine_refuses_a_malformed_result(result, where, problem):
    e = refused("hyperfine", {"results": [result]})
    assert e.where == where and problem in e.problem, str(e)


def test_hyperfine_refuses_two_commands_that_make_one_name():
    e = refused("hyperfine", {"results": [{"command": "sleep 1", "times": [1.0]},
                                          {"command": "sleep  1", "times": [1.0]}]})
    assert e.where == "results[1].command" and "--command-name" not in e.problem
    assert "name them apart" in e.problem


@pytest.mark.parametrize("doc", ["", "nope", "[]", {"results": []}, {"result": [1]},
                                 '{"results": [{"command": "a", "times": [Infinity]}]}'])
def test_hyperfine_refuses_what_is_no_export(doc):
    refused("hyperfine", doc)


# --- Bencher Metric Format ----------------------------------------------------------------

def test_bmf_maps_measures_to_names_that_say_their_direction():
    doc = {"bencher::mock_0": {"latency": {"value": 88.0, "lower_value": 87.4,
                                           "upper_value": 88.6},
                               "throughput": {"value": 1e6}},
           "alloc/small 64": {"l1-hits": {"value": 12}, "file-size": {"value": 4096},
                              "build-time": {"value": 1.5}, "2nd pass": {"value": 3}}}
    a, b = read("bmf", doc)
    assert (a.workload, a.measures) == ("bencher-mock_0", {"latency_ns": 88.0,
                                                          "throughput": 1e6})
    assert b.workload == "alloc-small-64"
    assert b.measures == {"l1_hits": 12.0, "file_size_bytes": 4096.0,
                          "build_time_seconds": 1.5, "_2nd_pass": 3.0}
    for i, s in enumerate((a, b)):
        as_trial(s, i)


@pytest.mark.parametrize(("doc", "where", "problem"), [
    ({}, "document", "no benchmark"),
    ([], "document", "object of benchmarks"),
    ({"b": 1}, '"b"', "object"),
    ({"b": {}}, '"b"', "no measure"),
    ({"b": {"latency": 5}}, '"b".latency', "object"),
    ({"b": {"latency": {}}}, '"b".latency.value', "missing"),
    ({"b": {"latency": {"value": "5"}}}, '"b".latency.value', "finite number"),
    ({"b": {"latency": {"value": 5, "upper_value": "x"}}}, '"b".latency.upper_value',
     "finite number"),
    ({"b": {"a-b": {"value": 1}, "a b": {"value": 2}}}, '"b".a b', "both make"),
    ({"b": {"!!": {"value": 1}}}, '"b".!!', "no measure name"),
    ({"a b": {"x": {"value": 1}}, "a-b": {"x": {"value": 1}}}, '"a-b"', "name them apart"),
    ({"b": {f"m{i}": {"value": 1} for i in range(33)}}, '"b"', "at most 32"),
])
def test_bmf_refuses_a_malformed_document(doc, where, problem):
    e = refused("bmf", doc)
    assert e.where == where and problem in e.problem, str(e)


def test_bmf_refuses_nan():
    assert "not JSON" in str(refused("bmf", '{"b": {"latency": {"value": NaN}}}'))


# --- pytest-benchmark ---------------------------------------------------------------------

def test_pytest_benchmark_reads_raw_rounds_of_a_real_file():
    doc = json.loads((DATA / "pytest_benchmark.json").read_text())
    samples = read("pytest-benchmark", doc)
    by_cell: dict[tuple[str, str], list[Sample]] = {}
    for s in samples:
        by_cell.setdefault((s.workload, json.dumps(s.params)), []).append(s)
    assert set(by_cell) == {("test_pb.test_sum", '{"n": 10}'),
                            ("test_pb.test_sum", '{"n": 1000}'), ("test_pb.test_sorted", "{}")}
    sorted_rounds = by_cell[("test_pb.test_sorted", "{}")]
    assert [s.measures["round_seconds"] for s in sorted_rounds] == \
        doc["benchmarks"][2]["stats"]["data"]  # 5 rounds: kept as they are
    # 150 rounds: 100 medians of consecutive rounds, said so
    big = by_cell[("test_pb.test_sum", '{"n": 10}')]
    assert len(big) == pb.MAX_ROUNDS and [s.seq for s in big] == list(range(100))
    assert pb.BATCH_NOTE in samples.notes  # type: ignore[attr-defined]
    for i, s in enumerate(samples):
        as_trial(s, i)


def test_pytest_benchmark_reads_a_saved_file_of_stats_and_says_so():
    doc = json.loads((DATA / "pytest_benchmark_saved.json").read_text())
    samples = read("pytest-benchmark", doc)
    assert len(samples) == 3
    assert [s.measures["round_seconds"] for s in samples] == [
        b["stats"]["median"] for b in doc["benchmarks"]]
    assert samples.notes == [pb.SUMMARY_NOTE]  # type: ignore[attr-defined]


def test_pytest_benchmark_names_and_params():
    assert pb.workload_of("tests/bench/test_x.py::TestA::test_sum[10-a]") == \
        "tests.bench.test_x.TestA.test_sum"
    doc = {"benchmarks": [{"fullname": "t.py::test_f[x]", "params": {"shape": [2, 3], "k": None},
                           "stats": {"data": [1e-6, 2e-6]}}]}
    a, b = read("pytest-benchmark", doc)
    assert a.workload == "t.test_f" and a.params == {"shape": "[2, 3]", "k": "null"}
    assert (a.seq, b.seq, b.measures) == (0, 1, {"round_seconds": 2e-6})


def test_batches_are_medians_of_consecutive_runs():
    values = [float(i) for i in range(1000)]
    out = pb.batches(values, 100)
    assert len(out) == 100 and out[0] == 4.5 and out[-1] == 994.5
    assert pb.batches([3.0, 1.0], 100) == [3.0, 1.0]


@pytest.mark.parametrize(("bench", "where", "problem"), [
    ({"stats": {"data": [1e-6]}}, "benchmarks[0].fullname", "non-empty string"),
    ({"fullname": "t::f"}, "benchmarks[0].stats", "object"),
    ({"fullname": "t::f", "stats": {}}, "benchmarks[0].stats.median", "finite number"),
    ({"fullname": "t::f", "stats": {"data": []}}, "benchmarks[0].stats.data", "empty"),
    ({"fullname": "t::f", "stats": {"data": [1e-6, None]}}, "benchmarks[0].stats.data[1]",
     "finite number"),
    ({"fullname": "t::f", "stats": {"data": [-1.0]}}, "benchmarks[0].stats.data[0]",
     "negative"),
    ({"fullname": "t::f", "params": {"n": "x" * 300}, "stats": {"data": [1.0]}},
     "benchmarks[0].params.n", "at most 200"),
])
def test_pytest_benchmark_refuses_a_malformed_benchmark(bench, where, problem):
    e = refused("pytest-benchmark", {"benchmarks": [bench]})
    assert e.where == where and problem in e.problem, str(e)


@pytest.mark.parametrize("doc", ["", "{", {"benchmarks": []}, {"machine_info": {}}, [1]])
def test_pytest_benchmark_refuses_what_is_no_report(doc):
    refused("pytest-benchmark", doc)


# --- shared rules -------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", sorted(READERS))
def test_every_reader_refuses_non_json_and_empty_files(fmt):
    for doc in ("", "not json", "{\"a\": NaN}", "\x00"):
        e = refused(fmt, doc)
        assert e.where and e.problem and str(e).startswith(e.where)


@pytest.mark.parametrize("fmt", sorted(READERS))
def test_every_reader_refuses_deep_nesting(fmt):
    refused(fmt, "[" * 100_000 + "]" * 100_000)


def test_every_reader_gives_only_finite_numbers_and_valid_names():
    docs = {"gbench": (DATA / "gbench.json").read_text(),
            "hyperfine": (DATA / "hyperfine.json").read_text(),
            "pytest-benchmark": (DATA / "pytest_benchmark.json").read_text(),
            "bmf": json.dumps({"a": {"latency": {"value": 1}}})}
    for fmt, text in docs.items():
        for s in READERS[fmt](text):
            assert WORKLOAD_NAME.match(s.workload)
            assert all(MEASURE_NAME.match(m) and math.isfinite(v) for m, v in s.measures.items())


def test_modules_are_what_the_registry_calls():
    assert READERS["gbench"] is gbench.read and READERS["hyperfine"] is hyperfine.read
    assert READERS["bmf"] is bmf.read and READERS["pytest-benchmark"] is pb.read
