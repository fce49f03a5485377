"""What the agent posts, through the spool (spool.py): results and failure reports are
spooled before they are sent; the answers are logged, a post of a lost lease is dropped,
and a post the API will never take is kept and its job reported failed with the reason.
Logs and stderr tails are scrubbed of secrets first (`mallard_wire.scrub`, the agent's own
token among them): the code under test wrote them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import httpx
from mallard_wire.jobs import FailIn
from mallard_wire.results import ResultsIn
from mallard_wire.scrub import scrub

from .client import ApiClient
from .spool import Pending, Spool


class Delivery:
    def __init__(self, spool: Spool, runner_name: str, log: Callable[[str], None],
                 secrets: tuple[str, ...] = ()) -> None:
        self.spool, self.name, self.log = spool, runner_name, log
        self.secrets = secrets

    # -- what is spooled --------------------------------------------------------------
    def results(self, results: ResultsIn) -> Path:
        body = results.model_dump(mode="json")
        for trial in body["trials"]:
            if trial.get("stderr_tail"):
                trial["stderr_tail"] = scrub(trial["stderr_tail"], self.secrets)
        return self.spool.put("/results", body, f"results-{results.job_id}")

    def fail(self, job_id: int, runner_id: int, attempt: int, log: str, retryable: bool
             ) -> Path:
        """The failure report of the job's claimed `attempt` (POST /jobs/{id}/fail), its
        log scrubbed and cut to the last 60000 characters; the API refuses one of an older
        attempt."""
        body = FailIn(runner_id=runner_id, attempt=attempt, log=scrub(log, self.secrets)[-60000:],
                      retryable=retryable)
        return self.spool.put(f"/jobs/{job_id}/fail", body.model_dump(mode="json"),
                              f"fail-{job_id}")

    # -- sending ----------------------------------------------------------------------
    def flush(self, client: ApiClient, force: bool = False) -> int:
        return self.spool.flush(client.post, self._delivered, on_dropped=self._dropped,
                                on_rejected=self._rejected, force=force)

    def drain(self, client: ApiClient, stop: threading.Event, budget: float) -> int:
        """Deliver what is pending (with backoff) within `budget` seconds; how many are left."""
        return self.spool.drain(
            client.post, stop, budget, self._delivered,
            lambda n, d: self.log(f"{n} post(s) pending; retrying in {d:.1f}s"),
            on_dropped=self._dropped, on_rejected=self._rejected)

    # -- the answers --------------------------------------------------------------------
    def _dropped(self, item: Pending, r: httpx.Response) -> None:
        self.log(f"[yellow]dropped {item.path.name}[/] ({item.url}, job {item.body.get('job_id')}"
                 f" attempt {item.body.get('attempt')}): the API says this runner no longer "
                 "holds the job's lease; not retried")

    def _rejected(self, item: Pending, r: httpx.Response) -> None:
        """The API will never accept this post: keep it, and fail its job with the reason."""
        why = (f"HTTP {r.status_code} after {item.server_errors} server errors"
               if r.status_code >= 500 else f"HTTP {r.status_code}")
        self.log(f"[red]rejected {item.url}[/] ({why}); kept as {item.path}")
        job_id, runner_id = item.job_id, item.body.get("runner_id")
        attempt = item.body.get("attempt")
        if job_id is None or type(runner_id) is not int or type(attempt) is not int:
            return
        log = (f"the API did not accept this job's results ({why}); the runner gave up and "
               f"kept them in {item.path} on {self.name}\n{(item.last_error or '')[:4000]}")
        self.fail(job_id, runner_id, attempt, log, retryable=r.status_code >= 500)

    def _delivered(self, item: Pending, r: httpx.Response) -> None:
        what = item.url
        try:
            body = r.json()
        except ValueError:
            body = {}
        if isinstance(body, dict) and "stored" in body:
            what += f": stored {body.get('stored')}, duplicates {body.get('duplicates')}"
        self.log(f"delivered {item.path.name} ({what}) after {item.attempts + 1} attempt(s)")
