"""Background loops (lease sweep, analysis worker, outbox dispatcher) and how they behave
when the database is away.

A loop runs its step in a daemon thread every `interval` seconds, or at once again when
the step says there is more to do, or when woken (after a commit that added work). When
the step fails because the database cannot be reached, the loop waits twice as long as
the time before (from `interval` up to `max_backoff`), and logs one line per failed
round, so an outage costs a few lines and then about one per `max_backoff`, never a
traceback per poll. The first success after failures logs that the database is back.
Any other error is logged with its traceback, with the same backoff.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from mallard_api.errors import DB_ERRORS, unavailable

log = logging.getLogger("mallard_api.background")


class BackgroundLoop:
    def __init__(self, name: str, step: Callable[[], bool | None], *, interval: float,
                 max_backoff: float) -> None:
        self.name = name
        self.step = step  # returns True when there is more to do right away
        self.interval = interval
        self.max_backoff = max(max_backoff, interval)
        self.failures = 0
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"mallard-{name}", daemon=True)

    def start(self) -> BackgroundLoop:
        self._thread.start()
        return self

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self._stop.is_set()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def run_once(self) -> float:
        """One guarded step; returns the seconds to wait before the next one."""
        try:
            more = self.step()
        except DB_ERRORS as exc:
            if not unavailable(exc):
                return self._failed()
            self.failures += 1
            delay = self.backoff()
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            log.warning("%s: database unavailable (%s: %s); next try in %.0f s", self.name,
                        type(exc).__name__, first[:200], delay)
            return delay
        except Exception:
            return self._failed()
        if self.failures:
            log.warning("%s: working again after %d failed round(s)", self.name, self.failures)
            self.failures = 0
        return 0.0 if more else self.interval

    def _failed(self) -> float:
        self.failures += 1
        delay = self.backoff()
        log.exception("%s failed; next try in %.0f s", self.name, delay)
        return delay

    def backoff(self) -> float:
        base = max(self.interval, 0.5)
        return float(min(self.max_backoff, base * 2 ** (self.failures - 1)))

    def _run(self) -> None:
        while not self._stop.is_set():
            delay = self.run_once()
            if self.failures:
                self._stop.wait(delay)  # a wake-up does not shorten a backoff
            elif delay > 0:
                self._wake.wait(delay)
            self._wake.clear()
