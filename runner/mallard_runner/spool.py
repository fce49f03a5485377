"""The spool: posts that must reach the API, kept on disk until they do.

Every result (and every failure report) is written to the spool atomically
(temp file, fsync, rename) BEFORE the first attempt to post it, and removed only
after the API answered 2xx. A runner that crashes, or an API that restarts,
loses nothing: the next attempt re-posts the same trials with the same uids and
the API stores each uid once.

Each post has its own backoff (exponential, capped; `Retry-After` when the API
gives one). What the answer means:

- 2xx: delivered, the file is removed;
- no answer, 408, 425, 429, 503: the API is away, busy or asks for later (503: its
  database is unreachable; a value it refuses is a 4xx, never a 503); retried until
  delivered, each time after the `Retry-After` it gave (at least our own backoff);
- 409 whose `detail[0].type` is `lease_lost`: this runner no longer holds the job;
  the post is dropped (logged), never retried;
- any other 4xx (a 422 naming a field, a 413, a 403...): the API will never take it,
  so it is not tried again: the file moves at once to `rejected/` with the answer's
  status and body in `last_error` (kept for a person to read, never deleted) and the
  caller is told, so that the job is reported failed; so does a 5xx (a bug) answered
  `max_attempts` times.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TypedDict

import httpx
from mallard_wire.fields import JsonDict

REJECTED = "rejected"
RETRY_STATUSES = (408, 425, 429, 503)  # the API says "later": never counted against a post


class Outcome(Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    DROPPED = "dropped"  # lease lost: another runner holds the job now
    REJECTED = "rejected"  # the API will never accept it


class SpoolEntry(TypedDict):
    """One spool file: a POST and its delivery state."""

    method: str
    url: str
    body: JsonDict
    attempts: int
    created_at: float
    last_error: str | None
    server_errors: int
    next_attempt_at: float


@dataclass
class Pending:
    path: Path
    method: str
    url: str
    body: JsonDict
    attempts: int
    created_at: float
    last_error: str | None = None
    server_errors: int = 0  # 5xx answers other than 503
    next_attempt_at: float = 0.0

    def entry(self) -> SpoolEntry:
        return {"method": self.method, "url": self.url, "body": self.body,
                "attempts": self.attempts, "created_at": self.created_at,
                "last_error": self.last_error, "server_errors": self.server_errors,
                "next_attempt_at": self.next_attempt_at}

    @property
    def job_id(self) -> int | None:
        """The job a results post completes (None for other posts)."""
        jid = self.body.get("job_id") if self.url == "/results" else None
        return jid if isinstance(jid, int) else None


def lease_lost(r: httpx.Response) -> bool:
    """409 with detail[0].type == "lease_lost": the API's answer to a stale lease."""
    if r.status_code != 409:
        return False
    try:
        detail = r.json().get("detail")
    except (ValueError, AttributeError):
        return False
    return (isinstance(detail, list) and bool(detail) and isinstance(detail[0], dict)
            and detail[0].get("type") == "lease_lost")


def retry_after(r: httpx.Response) -> float | None:
    value = r.headers.get("Retry-After", "")
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None  # an HTTP date: use our own backoff


def classify(r: httpx.Response, server_errors: int, max_attempts: int) -> Outcome:
    """What an answer means for a spooled post (see the module's docstring)."""
    code = r.status_code
    if 200 <= code < 300:
        return Outcome.DELIVERED
    if lease_lost(r):
        return Outcome.DROPPED
    if code in RETRY_STATUSES:
        return Outcome.RETRY
    if code >= 500:
        return Outcome.REJECTED if server_errors >= max_attempts else Outcome.RETRY
    return Outcome.REJECTED


Hook = Callable[[Pending, httpx.Response], None]


class Spool:
    def __init__(self, directory: Path, *, max_attempts: int = 10, backoff_base: float = 0.5,
                 backoff_max: float = 60.0):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.dir.chmod(0o700)  # pending posts are the agent's: no build may read them
        self.rejected_dir = self.dir / REJECTED
        self.max_attempts = max_attempts
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max

    def put(self, url: str, body: JsonDict, kind: str = "post") -> Path:
        """Write one pending POST atomically; returns its file."""
        name = f"{time.time_ns():020d}-{kind}-{uuid.uuid4().hex[:8]}.json"
        item = Pending(self.dir / name, "POST", url, body, 0, time.time())
        self._write(item.path, item.entry())
        return item.path

    def _write(self, path: Path, entry: SpoolEntry) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(entry, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        self._sync_dir(path.parent)

    @staticmethod
    def _sync_dir(directory: Path) -> None:
        fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def pending(self) -> list[Pending]:
        out: list[Pending] = []
        for p in sorted(self.dir.glob("*.json")):
            try:
                e = json.loads(p.read_text())
            except (OSError, ValueError):
                continue
            out.append(Pending(p, e["method"], e["url"], e["body"], e.get("attempts", 0),
                               e.get("created_at", 0.0), e.get("last_error"),
                               e.get("server_errors", 0), e.get("next_attempt_at", 0.0)))
        return out

    def rejected(self) -> list[Path]:
        return sorted(self.rejected_dir.glob("*.json")) if self.rejected_dir.is_dir() else []

    def next_due(self) -> float | None:
        """When the earliest pending post may be tried again (time.time()), None if none."""
        items = self.pending()
        return min(i.next_attempt_at for i in items) if items else None

    def _record_failure(self, item: Pending, error: str, wait: float | None = None) -> None:
        item.attempts += 1
        item.last_error = error
        delay = min(self.backoff_base * 2 ** (item.attempts - 1), self.backoff_max)
        item.next_attempt_at = time.time() + (delay if wait is None else max(wait, delay))
        self._write(item.path, item.entry())

    def _reject(self, item: Pending) -> Path:
        """Keep a post the API will never take in rejected/, with its last error."""
        self.rejected_dir.mkdir(exist_ok=True)
        dest = self.rejected_dir / item.path.name
        self._write(dest, item.entry())
        item.path.unlink(missing_ok=True)
        self._sync_dir(self.dir)
        item.path = dest
        return dest

    def flush(self, send: Callable[[str, JsonDict], httpx.Response],
              on_done: Hook | None = None, *, on_dropped: Hook | None = None,
              on_rejected: Hook | None = None, force: bool = False) -> int:
        """Try every pending post that is due, oldest first. Returns how many are left.

        `force` tries every post now, whatever its backoff (at start-up).
        """
        left = 0
        now = time.time()
        for item in self.pending():
            if not force and item.next_attempt_at > now:
                left += 1
                continue
            try:
                r = send(item.url, item.body)
            except httpx.HTTPError as e:
                self._record_failure(item, f"{type(e).__name__}: {e}")
                left += 1
                continue
            if r.status_code >= 500 and r.status_code not in RETRY_STATUSES:
                item.server_errors += 1
            outcome = classify(r, item.server_errors, self.max_attempts)
            if outcome is Outcome.DELIVERED:
                item.path.unlink(missing_ok=True)
                if on_done:
                    on_done(item, r)
            elif outcome is Outcome.DROPPED:
                item.last_error = f"HTTP 409 lease lost: {r.text[:500]}"
                item.path.unlink(missing_ok=True)
                if on_dropped:
                    on_dropped(item, r)
            elif outcome is Outcome.REJECTED:
                item.attempts += 1
                item.last_error = f"HTTP {r.status_code}: {r.text[:2000]}"
                self._reject(item)
                if on_rejected:
                    on_rejected(item, r)
            else:
                self._record_failure(item, f"HTTP {r.status_code}: {r.text[:200]}",
                                     retry_after(r))
                left += 1
        return left

    def drain(self, send: Callable[[str, JsonDict], httpx.Response], stop: threading.Event,
              max_seconds: float, on_done: Hook | None = None,
              on_retry: Callable[[int, float], None] | None = None, *,
              on_dropped: Hook | None = None, on_rejected: Hook | None = None) -> int:
        """Flush until empty, stopped, or out of time, waiting for each post's backoff."""
        deadline = time.monotonic() + max_seconds
        while True:
            left = self.flush(send, on_done, on_dropped=on_dropped, on_rejected=on_rejected)
            if left == 0:  # a hook may have spooled a new post (a rejected job's failure)
                left = len(self.pending())
            if left == 0 or stop.is_set() or time.monotonic() >= deadline:
                return left
            due = self.next_due()
            wait = max(0.05, (due or time.time()) - time.time())
            wait = min(wait, max(0.0, deadline - time.monotonic()))
            if on_retry:
                on_retry(left, wait)
            if stop.wait(wait):
                return len(self.pending())
