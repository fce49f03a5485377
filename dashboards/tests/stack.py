"""Real processes for the dashboards tests: the API, Prometheus, Alertmanager, a webhook.

Each process gets a free port on 127.0.0.1, a log file in the test's temporary folder
(printed when it fails to start), bounded waits, and is stopped by whoever started it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mallard_api.harness import free_port, wait_for


def http_json(
    url: str,
    data: Any = None,
    *,
    method: str | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10,
) -> Any:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(
        url,
        data=body,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        raw = resp.read()
    return json.loads(raw) if raw else None


class Process:
    """A subprocess with its own process group and a log file."""

    def __init__(
        self,
        name: str,
        cmd: list[str],
        log: Path,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self.name = name
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )

    def log_tail(self, n: int = 4000) -> str:
        try:
            return (
                f"--- {self.name} log ({self.log_path}) ---\n"
                + self.log_path.read_text(errors="replace")[-n:]
            )
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_http(self, url: str, timeout: float) -> None:
        def check() -> bool:
            if not self.alive():
                raise AssertionError(
                    f"{self.name} exited ({self.proc.returncode})\n" + self.log_tail()
                )
            with urllib.request.urlopen(url, timeout=2) as resp:
                return resp.status == 200

        wait_for(f"{self.name} at {url}", check, timeout, on_timeout=self.log_tail)

    def stop(self) -> None:
        if self.alive():
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        self._log.close()


class WebhookReceiver:
    """A local HTTP server that keeps every JSON body POSTed to it (Alertmanager's)."""

    def __init__(self) -> None:
        self.received: list[tuple[str, Any]] = []
        self._cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with outer._cond:
                    outer.received.append((self.path, body))
                    outer._cond.notify_all()
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def wait(self, match: Callable[[str, Any], bool], timeout: float) -> tuple[str, Any]:
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                for item in self.received:
                    if match(*item):
                        return item
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"no matching webhook within {timeout:.0f}s; got {self.received!r}"
                    )
                self._cond.wait(left)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """Debian's prometheus with a test config: scrapes the API every second."""

    def __init__(self, workdir: Path, *, api_port: int, am_port: int, rules: Path) -> None:
        import yaml

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(rules)],
            "alerting": {
                "alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{am_port}"]}]}]
            },
            "scrape_configs": [
                {
                    "job_name": "mallard-api",
                    "metrics_path": "/metrics",
                    "static_configs": [{"targets": [f"127.0.0.1:{api_port}"]}],
                }
            ],
        }
        (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.proc = Process(
            "prometheus",
            [
                "prometheus",
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--storage.tsdb.retention.time=1h",
                "--log.level=warn",
            ],
            workdir / "prometheus.log",
        )
        self.proc.wait_http(f"{self.url}/-/ready", timeout=60)

    def api(self, path: str, **params: str) -> Any:
        qs = urllib.parse.urlencode(params)
        try:
            return http_json(f"{self.url}/api/v1/{path}?{qs}")
        except urllib.error.HTTPError as exc:  # 400/422 carry the error as JSON
            return json.loads(exc.read())

    def query(self, expr: str) -> Any:
        return self.api("query", query=expr)

    def stop(self) -> None:
        self.proc.stop()


class Alertmanager:
    """Debian's prometheus-alertmanager with the rendered dashboards/alertmanager config."""

    def __init__(self, workdir: Path, config: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        workdir.mkdir(parents=True, exist_ok=True)
        self.proc = Process(
            "alertmanager",
            [
                "prometheus-alertmanager",
                f"--config.file={config}",
                f"--storage.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                "--cluster.listen-address=",  # no gossip port: a single instance
                "--log.level=warn",
            ],
            workdir / "alertmanager.log",
        )
        self.proc.wait_http(f"{self.url}/-/ready", timeout=60)

    def stop(self) -> None:
        self.proc.stop()
