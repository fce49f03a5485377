"""The spool against the real API (api/, mallard_api, over an embedded PostgreSQL): what
the API will never take is set aside at once, not retried until the job's lease is lost.

The attack: a results post with a 3 KB `build_flags`, or more new measure names than a
sequence holds, was answered 503 "database unavailable", which the spool retried until
the lease was lost and the results dropped. The API now answers them 422 naming the
field, with PostgreSQL up, and the spool keeps them in `rejected/` with the answer after
one attempt, while a good post beside them is delivered.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import string
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from mallard_api.harness import API_BIN, ApiProcess, healthy
from mallard_runner.client import ApiClient
from mallard_runner.spool import Spool
from mallard_wire import results as wire

pytestmark = pytest.mark.skipif(not API_BIN.exists(), reason="mallard-api is not installed")
TESTBED = {"arch": "x86_64", "cpu_model": "Test CPU"}


@pytest.fixture
def real_api() -> Iterator[ApiProcess]:
    base = Path(tempfile.mkdtemp(prefix="mallard-runner-spool-"))
    env = {**os.environ, "MALLARD_DATA_DIR": str(base / "pgdata"),
           "MALLARD_ANALYSIS_POLL_SECONDS": "0"}
    env.pop("DATABASE_URL", None)
    api = ApiProcess(env, log=base / "api.log")
    try:
        api.start()
        yield api
    finally:
        api.stop()
        shutil.rmtree(base, ignore_errors=True)


def trial(measures: dict[str, float] | None = None, build_flags: str = "-O2") -> dict:
    return {"uid": str(uuid.uuid4()),
            "allocator": {"name": "mallard", "commit": "a" * 40, "build_flags": build_flags},
            "workload": {"name": "larson", "params": {"threads": 1}},
            "measures": measures or {"ops_per_sec": 1.0e6}}


def test_what_the_api_refuses_is_set_aside_at_once(real_api, tmp_path):
    client = ApiClient(real_api.url, real_api.token("runner", "node-spool"))
    runner_id = client.register("node-spool", "x86_64", "0", wire.TestbedIn(**TESTBED))
    flags = "".join(random.Random(1).choices(string.ascii_letters, k=3000))
    names = [trial({f"m_{i}_{j}": 1.0 for j in range(24)}) for i in range(2000)]
    spool = Spool(tmp_path / "spool")
    for kind, trials in (("flags", [trial(build_flags=flags)]), ("names", names),
                         ("good", [trial()])):
        spool.put("/results", {"runner_id": runner_id, "testbed": TESTBED,
                               "trials": trials}, kind)
    delivered, rejected = [], []
    left = spool.flush(client.post, on_done=lambda i, r: delivered.append(r.status_code),
                       on_rejected=lambda i, r: rejected.append(r.status_code))
    assert left == 0 and delivered == [201] and rejected == [422, 422]
    kept = {p.name.split("-")[1]: json.loads(p.read_text()) for p in spool.rejected()}
    assert set(kept) == {"flags", "names"}
    assert all(e["attempts"] == 1 and "HTTP 422" in e["last_error"] for e in kept.values())
    assert '"build_flags"' in kept["flags"]["last_error"]
    assert "MALLARD_MAX_NEW_MEASURES_PER_POST" in kept["names"]["last_error"]
    assert spool.pending() == [] and healthy(real_api.url)
    client.close()
