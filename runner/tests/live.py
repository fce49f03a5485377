"""The real parts the agent's tests run against: the API (`mallard-api serve` over an
embedded PostgreSQL, `mallard_api.harness.ApiProcess`), a thin proxy in front of it for
the scenarios that need a misbehaving server (it drops, holds or refuses answers; it
never makes one up from nothing but a status), and the agent as a process of its own.

- `RealApi`: the API in a temporary folder, reading the suites the test writes; `admin`
  (an httpx client with an admin token), `runner_token(name)`, `job(spec)` queues a job,
  `sql(...)` runs a statement on its database (a job spec changed behind the API's back).
- `Proxy`: forwards every request to the API and records it (`seen`); `answer` decides
  per request: None (forward), a status (answer that, forward nothing), or `DROP` (forward
  it, then close the connection unanswered: the post was stored, its answer lost);
  `after` sees each answer before it is passed on (the API can be stopped right there).
- `Agent`: `mallard-runner agent` with its token in a 0600 file, its state under the
  test's folder, its log in `<state>/agent.log`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import psycopg
from mallard_api.harness import ApiProcess, database_of
from mallard_runner.settings import REPO_ROOT
from mallard_wire.recipes import RECIPE_FILE, read_recipe_file

from .conftest import first_cpu, reachable

AGENT_BIN = Path(sys.executable).parent / "mallard-runner"
DROP = "drop"


class RealApi(ApiProcess):
    """The real API (embedded PostgreSQL in `base`), reading the suites the test writes."""

    def __init__(self, base: Path, **env: str):
        self.base = base
        self.suites_dir = base / "suites"
        shutil.copytree(REPO_ROOT / "runner" / "suites", self.suites_dir)
        api_env = {**os.environ, "MALLARD_DATA_DIR": str(base / "pgdata"),
                   "MALLARD_REPO_URL_ALLOW": "file:///",
                   "MALLARD_SUITES_DIR": str(self.suites_dir), "MALLARD_SWEEP_SECONDS": "1",
                   **env}
        api_env.pop("DATABASE_URL", None)
        super().__init__(api_env, log=base / "api.log", cwd=REPO_ROOT)
        self._admin: httpx.Client | None = None

    @property
    def admin(self) -> httpx.Client:
        if self._admin is None:
            self._admin = httpx.Client(base_url=self.url + "/api/v1", timeout=60, headers={
                "Authorization": f"Bearer {self.token('admin')}"})
        return self._admin

    def add_suite(self, path: Path) -> None:
        shutil.copy(path, self.suites_dir / path.name)

    def project(self, name: str, repo: Path) -> None:
        """Project `name` on `repo`, with the recipe of the repository's .mallard.toml (or
        Mallard's own, when it has none)."""
        own = repo / RECIPE_FILE
        recipe = read_recipe_file((own if own.exists() else REPO_ROOT / RECIPE_FILE).read_text())
        assert recipe is not None
        self.admin.put(f"/projects/{name}", json={
            "repo_url": str(repo), "default_branch": "main",
            "recipe": recipe.model_dump(mode="json")}).raise_for_status()

    def job(self, spec: dict[str, Any], max_attempts: int = 3) -> int:
        r = self.admin.post("/jobs", json={"kind": "commit", "arch": platform.machine(),
                                           "project": spec["project"], "spec": spec,
                                           "max_attempts": max_attempts})
        assert r.status_code == 201, r.text
        return int(r.json()["id"])

    def get_job(self, job_id: int) -> dict[str, Any]:
        r = self.admin.get(f"/jobs/{job_id}")
        r.raise_for_status()
        return dict(r.json())

    def sql(self, statement: str, params: dict[str, Any] | None = None) -> None:
        url = database_of(self.env, self.cwd).replace("postgresql+psycopg://", "postgresql://")
        with psycopg.connect(url) as conn:
            conn.execute(statement, params or {})

    def close(self) -> None:
        if self._admin is not None:
            self._admin.close()
        self.stop()


def real_api(**env: str) -> RealApi:
    base = Path(tempfile.mkdtemp(prefix="mallard-runner-api-"))
    return RealApi(base, **env)


@contextmanager
def started_api(repo: Path) -> Iterator[RealApi]:
    """A started real API with project `mallard` building `repo`; stopped and its folder
    removed afterwards."""
    server = real_api()
    try:
        server.start()
        server.project("mallard", repo)
        yield server
    finally:
        server.close()
        shutil.rmtree(server.base, ignore_errors=True)


@dataclass
class Seen:
    """One request the proxy passed on (or answered itself) and what came back."""

    method: str
    path: str
    body: Any
    status: int | None  # None: dropped, or the API did not answer
    answer: Any = None


@dataclass
class Proxy:
    """A thin HTTP proxy on 127.0.0.1 in front of `upstream` (module docstring)."""

    upstream: str
    answer: Callable[[str, str, Any], int | str | None] = lambda method, path, body: None
    after: Callable[[Seen], None] = lambda seen: None  # once the API answered, before reply
    seen: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        proxy = self
        self.client = httpx.Client(base_url=self.upstream, timeout=120)

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802
                proxy.handle(self)

            do_POST = do_PUT = do_GET  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def posts(self, path: str) -> list[Seen]:
        return [s for s in self.seen if s.method == "POST" and s.path == path]

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        raw = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        path = h.path.removeprefix("/api/v1")
        decided = self.answer(h.command, path, body)
        if isinstance(decided, int):
            self.seen.append(Seen(h.command, path, body, decided))
            reply(h, decided, {"detail": [{"type": "proxy", "msg": f"answered {decided}"}]})
            return
        headers = {k: v for k, v in h.headers.items()
                   if k.lower() in ("authorization", "content-type")}
        try:
            r = self.client.request(h.command, h.path, content=raw, headers=headers)
        except httpx.HTTPError:  # the API is down: so is the connection
            self.seen.append(Seen(h.command, path, body, None))
            h.close_connection = True
            return
        answer = r.json() if r.content and r.headers.get("content-type", "").startswith(
            "application/json") else None
        if decided == DROP:
            self.seen.append(Seen(h.command, path, body, None, answer))
            h.close_connection = True
            return
        seen = Seen(h.command, path, body, r.status_code, answer)
        self.seen.append(seen)
        self.after(seen)
        reply(h, r.status_code, answer, r.content)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.client.close()


def reply(h: BaseHTTPRequestHandler, status: int, body: Any, raw: bytes | None = None) -> None:
    data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
    h.send_response(status)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


class Agent:
    """`mallard-runner agent` against `url` with `token` (in a 0600 file), state in
    `state` (searchable by the work user), `env` its settings."""

    def __init__(self, url: str, token: str, state: Path, env: dict[str, str],
                 name: str = "node-1"):
        state.mkdir(parents=True, exist_ok=True)
        self.url, self.state, self.env, self.name = url, reachable(state), env, name
        self.token_file = state / "runner.token"
        self.token_file.write_text(token + "\n")
        self.token_file.chmod(0o600)
        self.spool = state / "spool"
        self.log_file = state / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, *extra: str, cwd: Path | None = None) -> subprocess.Popen[bytes]:
        with open(self.log_file, "ab") as log:
            self.proc = subprocess.Popen(
                [str(AGENT_BIN), "agent", "--api", self.url, "--token-file",
                 str(self.token_file), "--cpus", str(first_cpu()), "--name", self.name,
                 "--spool", str(self.spool), *extra],
                env={**self.env, "MALLARD_RUNNER_STATE_DIR": str(self.state)},
                stdout=log, stderr=log, cwd=cwd)
        return self.proc

    def wait(self, timeout: float) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)

    def log(self) -> str:
        """The agent's log, lines unwrapped (Rich wraps at the console's width)."""
        if not self.log_file.exists():
            return ""
        return " ".join(self.log_file.read_text(errors="replace").split())

    def pending(self) -> list[dict[str, Any]]:
        return [json.loads(p.read_text()) for p in sorted(self.spool.glob("*.json"))]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
