"""The spool: posts that must reach the API, kept on disk until they do.

Every result (and every failure report) is written to the spool atomically
(temp file, fsync, rename) BEFORE the first attempt to post it, and removed only
after the API answered 2xx. A runner that crashes, or an API that restarts,
loses nothing: the next attempt re-posts the same trials with the same uids and
the API stores each uid once. Delivery retries with exponential backoff.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx


@dataclass
class Pending:
    path: Path
    method: str
    url: str
    body: dict[str, Any]
    attempts: int
    created_at: float
    last_error: str | None = None


class Spool:
    def __init__(self, directory: Path):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)

    def put(self, url: str, body: dict[str, Any], kind: str = "post") -> Path:
        """Write one pending POST atomically; returns its file."""
        entry = {"method": "POST", "url": url, "body": body, "attempts": 0,
                 "created_at": time.time(), "last_error": None}
        name = f"{time.time_ns():020d}-{kind}-{uuid.uuid4().hex[:8]}.json"
        self._write(self.dir / name, entry)
        return self.dir / name

    def _write(self, path: Path, entry: dict[str, Any]) -> None:
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(entry, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(self.dir, os.O_RDONLY)
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
                               e.get("created_at", 0.0), e.get("last_error")))
        return out

    def _record_failure(self, item: Pending, error: str) -> None:
        item.attempts += 1
        item.last_error = error
        self._write(item.path, {"method": item.method, "url": item.url, "body": item.body,
                                "attempts": item.attempts, "created_at": item.created_at,
                                "last_error": error})

    def flush(self, send: Callable[[str, dict[str, Any]], httpx.Response],
              on_done: Callable[[Pending, httpx.Response], None] | None = None) -> int:
        """Try every pending post once, oldest first. Returns how many are left."""
        left = 0
        for item in self.pending():
            try:
                r = send(item.url, item.body)
            except httpx.HTTPError as e:
                self._record_failure(item, f"{type(e).__name__}: {e}")
                left += 1
                continue
            if 200 <= r.status_code < 300:
                item.path.unlink(missing_ok=True)
                if on_done:
                    on_done(item, r)
            elif r.status_code in (400, 401, 403, 404, 409, 422):
                # the API will never take this one: keep it aside for a person, stop retrying
                self._record_failure(item, f"HTTP {r.status_code}: {r.text[:500]}")
                item.path.rename(item.path.with_suffix(".rejected"))
            else:
                self._record_failure(item, f"HTTP {r.status_code}: {r.text[:200]}")
                left += 1
        return left

    def drain(self, send: Callable[[str, dict[str, Any]], httpx.Response], stop: threading.Event,
              max_seconds: float, backoff_max: float = 60.0,
              on_done: Callable[[Pending, httpx.Response], None] | None = None,
              on_retry: Callable[[int, float], None] | None = None) -> int:
        """Flush with exponential backoff until empty, stopped, or out of time."""
        deadline = time.monotonic() + max_seconds
        delay = 0.5
        while True:
            left = self.flush(send, on_done)
            if left == 0 or stop.is_set() or time.monotonic() >= deadline:
                return left
            if on_retry:
                on_retry(left, delay)
            if stop.wait(min(delay, max(0.0, deadline - time.monotonic()))):
                return len(self.pending())
            delay = min(delay * 2, backoff_max)
