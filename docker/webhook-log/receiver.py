"""A webhook receiver that keeps what it is sent: the compose stack's default destination
for the API's notifications and Alertmanager's, and the e2e test's witness.

POST <any path>   stores {"path", "received_at", "body"} (JSON body, or text) and logs one line
GET  /received    every stored message, oldest first, as a JSON list (?path=/prefix filters)
Standard library only; runs on the api image's python3. Listens on 0.0.0.0:$PORT (8080).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

_messages: list[dict] = []
_lock = threading.Lock()
MAX_MESSAGES = 10_000


class Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
        except ValueError:
            body = raw.decode("utf-8", "replace")
        msg = {"path": self.path, "received_at": datetime.now(UTC).isoformat(), "body": body}
        with _lock:
            _messages.append(msg)
            del _messages[:-MAX_MESSAGES]
        summary = json.dumps(body)[:300] if not isinstance(body, str) else body[:300]
        print(f"webhook-log: POST {self.path} {summary}", flush=True)
        self._reply(200, {"ok": True})

    def do_GET(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path != "/received":
            self._reply(404, {"error": "GET /received lists the messages"})
            return
        prefix = parse_qs(url.query).get("path", [""])[0]
        with _lock:
            found = [m for m in _messages if m["path"].startswith(prefix)]
        self._reply(200, found)

    def _reply(self, status: int, payload: object) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:  # the POST line is enough
        pass


def main() -> None:
    port = int(os.environ.get("PORT", "8080"))
    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)
    print(f"webhook-log: listening on :{port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
