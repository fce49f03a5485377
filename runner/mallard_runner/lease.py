"""A running job's lease: a thread renews it every third of its length until the run ends;
a lease the API says is lost (409) cancels the run, so nothing of it is posted."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from .client import ApiClient, ApiError, LeaseLost


@dataclass
class Lease:
    """A running job's lease: `cancel` stops the run, `lost` says why, `done` stops the
    renewals."""

    cancel: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)


def keep_lease(job_id: int, attempt: int, runner_id: int, lease_seconds: int,
               client: Callable[[], ApiClient], log: Callable[[str], None]) -> Lease:
    """Renew the lease of the job's claimed `attempt` in a thread until `done`; a lost
    lease (expired, or the job claimed again: another attempt) cancels the run."""
    lease = Lease()

    def renew() -> None:
        c = client()
        period = max(1.0, lease_seconds / 3)
        try:
            while not lease.done.wait(period):
                try:
                    c.renew(job_id, runner_id, attempt, lease_seconds)
                except LeaseLost:
                    lease.lost.set()
                    lease.cancel.set()
                    log(f"[red]lease on job {job_id} lost[/]: cancelling the run")
                    return
                except (ApiError, httpx.HTTPError) as e:
                    log(f"lease renewal failed ({e}); will retry")
        finally:
            c.close()

    threading.Thread(target=renew, name=f"lease-{job_id}", daemon=True).start()
    return lease
