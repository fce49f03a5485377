"""What the agent spools is scrubbed first (delivery.py): a failure log and the stderr
tails were written by the code under test, and may hold what it read."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from mallard_runner.delivery import Delivery
from mallard_runner.spool import Spool
from mallard_wire import results as wire
from mallard_wire.results import AllocatorIn, ResultsIn, TrialIn, WorkloadIn

TOKEN = "plain-runner-token-0123456789"  # not token-shaped: only known, so scrubbed by value
API_TOKEN = "mlrd_" + "x1Y2z3" * 7


def delivery(tmp_path) -> Delivery:
    return Delivery(Spool(tmp_path / "spool"), "node-1", lambda msg: None, secrets=(TOKEN,))


def test_a_failure_log_is_spooled_without_the_agents_token(tmp_path):
    path = delivery(tmp_path).fail(7, 1, 1, f"build failed\ncat token: {TOKEN}\n{API_TOKEN}\n"
                                          "CMake Error", retryable=False)
    log = json.loads(path.read_text())["body"]["log"]
    assert TOKEN not in log and API_TOKEN not in log
    assert log.startswith("build failed\n") and log.endswith("CMake Error")


def test_stderr_tails_are_spooled_without_tokens(tmp_path):
    trial = TrialIn(uid="u1", label="head", allocator=AllocatorIn(name="mallard"),
                    workload=WorkloadIn(name="larson", params={}), seq=0, warmup=False,
                    started_at=datetime.now(UTC), ok=False, exit_code=1,
                    stderr_tail=f"leak {TOKEN} and Authorization: Bearer {API_TOKEN}; abort",
                    measures={})
    results = ResultsIn(job_id=7, attempt=1, runner_id=1, project="mallard",
                        testbed=wire.TestbedIn(arch="x86_64"), trials=[trial])
    path = delivery(tmp_path).results(results)
    tail = json.loads(path.read_text())["body"]["trials"][0]["stderr_tail"]
    assert TOKEN not in tail and API_TOKEN not in tail and tail.endswith(" abort")
    assert results.trials[0].stderr_tail and TOKEN in results.trials[0].stderr_tail
