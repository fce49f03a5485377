"""The runner's REST client (contracts §5): httpx, bearer token, JSON."""

from __future__ import annotations

import httpx
from mallard_wire.fields import JsonDict
from mallard_wire.jobs import ClaimedJob, ClaimIn, LeaseIn
from mallard_wire.results import TestbedIn
from mallard_wire.runners import Heartbeat, RunnerRegister
from pydantic import ValidationError


class ApiError(RuntimeError):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class LeaseLost(ApiError):
    pass


class BadJob(ApiError):
    """A claimed job whose shape the runner cannot read; `job_id` when it has one."""

    def __init__(self, message: str, job_id: int | None, attempt: int | None):
        super().__init__(message, 200)
        self.job_id = job_id
        self.attempt = attempt


class ApiClient:
    def __init__(self, base_url: str, token: str, timeout: float = 30.0):
        self.http = httpx.Client(base_url=base_url.rstrip("/") + "/api/v1", timeout=timeout,
                                 headers={"Authorization": f"Bearer {token}"})

    def close(self) -> None:
        self.http.close()

    def _check(self, r: httpx.Response, what: str) -> httpx.Response:
        if r.status_code >= 400:
            raise ApiError(f"{what}: HTTP {r.status_code}: {r.text[:500]}", r.status_code)
        return r

    def register(self, name: str, arch: str, cpus: str, testbed: TestbedIn) -> int:
        """The runner's id (registering again under the same name keeps it)."""
        body = RunnerRegister(name=name, arch=arch, cpus=cpus, testbed=testbed)
        r = self.http.post("/runners/register", json=body.model_dump(mode="json"))
        data = self._check(r, "register").json()
        runner_id = data.get("id") if isinstance(data, dict) else None
        if type(runner_id) is not int:
            raise ApiError(f"register: no runner id in {r.text[:200]!r}", r.status_code)
        return runner_id

    def heartbeat(self, runner_id: int, testbed: TestbedIn | None = None) -> None:
        r = self.http.post(f"/runners/{runner_id}/heartbeat",
                           json=Heartbeat(testbed=testbed).model_dump(mode="json"))
        self._check(r, "heartbeat")

    def claim(self, runner_id: int, lease_seconds: int) -> ClaimedJob | None:
        body = ClaimIn(runner_id=runner_id, lease_seconds=lease_seconds)
        r = self.http.post("/jobs/claim", json=body.model_dump(mode="json"))
        if r.status_code == 204:
            return None
        try:
            data = self._check(r, "claim").json()
        except ValueError as e:
            raise ApiError(f"claim: not JSON: {r.text[:200]!r}", r.status_code) from e
        try:
            return ClaimedJob.model_validate(data)
        except ValidationError as e:
            jid = data.get("id") if isinstance(data, dict) else None
            att = data.get("attempt") if isinstance(data, dict) else None
            raise BadJob(f"the claimed job is malformed: {e}",
                         jid if type(jid) is int else None,
                         att if type(att) is int else None) from e

    def renew(self, job_id: int, runner_id: int, attempt: int, lease_seconds: int) -> None:
        """Renew the lease of the claimed `attempt`; LeaseLost when the API says it is
        lost (expired, or the job runs another attempt now)."""
        body = LeaseIn(runner_id=runner_id, attempt=attempt, lease_seconds=lease_seconds)
        r = self.http.post(f"/jobs/{job_id}/lease", json=body.model_dump(mode="json"))
        if r.status_code == 409:
            raise LeaseLost(f"lease on job {job_id} lost", 409)
        self._check(r, "lease")

    def post(self, path: str, body: JsonDict) -> httpx.Response:
        """A raw POST (used by the spool: results and failure reports)."""
        return self.http.post(path, json=body)
