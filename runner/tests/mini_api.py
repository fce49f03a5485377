"""A small real HTTP server speaking the runner's side of the REST contract (contracts §5).

For the agent's tests only, while the real API (api/, mallard_api) is written:
register, heartbeat, claim with a lease, renew, fail, results (stored once per
uid). State lives in a JSON file, saved after every change, so the server can
be stopped and restarted mid-run like a real API over a database.

    python mini_api.py --port P --state state.json --token T [--jobs jobs.json]
        [--exit-after-claim] [--drop-first-results-response] [--lose-lease]
        [--results-status CODE] [--requeue-on-results]

Results are taken only from the runner holding the job's lease at the claimed
`attempt` (else 409 with detail[0].type "lease_lost"), as the real API does; a
re-post by that holder after the job is done is answered as duplicates.
`--results-status CODE` answers every results post with CODE and stores nothing;
`--requeue-on-results` lets the lease expire and another runner claim the job just
before the results arrive.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

LOCK = threading.Lock()


class State:
    def __init__(self, path: Path, jobs: Path | None):
        self.path = path
        if path.exists():
            self.data: dict[str, Any] = json.loads(path.read_text())
        else:
            self.data = {"runners": [], "jobs": [], "trials": {}, "posts": [], "fails": [],
                         "heartbeats": 0, "leases": 0, "claims": 0}
            if jobs is not None:
                for spec in json.loads(jobs.read_text()):
                    self.data["jobs"].append({"id": len(self.data["jobs"]) + 1, "kind": "commit",
                                              "state": "queued", "attempt": 0, "max_attempts": 3,
                                              "arch": os.uname().machine, "spec": spec,
                                              "runner_id": None, "lease_expires_at": None})
            self.save()

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)


def make_handler(state: State, args: argparse.Namespace, server_box: list[Any]) -> type:
    flags = {"dropped": False}

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt: str, *a: Any) -> None:
            sys.stderr.write("mini_api: " + (fmt % a) + "\n")

        def reply(self, code: int, body: Any = None) -> None:
            raw = b"" if body is None else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:  # noqa: N802
            if self.path == "/api/v1/health":
                return self.reply(200, {"ok": True})
            if self.path == "/_state":
                with LOCK:
                    return self.reply(200, state.data)
            return self.reply(404, {"detail": "not found"})

        def do_POST(self) -> None:  # noqa: N802
            n = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(n) or b"{}")
            if self.headers.get("Authorization") != f"Bearer {args.token}":
                return self.reply(401, {"detail": "bad token"})
            with LOCK:
                self.route(body)

        def route(self, body: dict[str, Any]) -> None:
            d = state.data
            now = datetime.now(UTC)
            if self.path == "/api/v1/runners/register":
                runner = next((r for r in d["runners"] if r["name"] == body["name"]), None)
                if runner is None:
                    runner = {"id": len(d["runners"]) + 1}
                    d["runners"].append(runner)
                runner.update(name=body["name"], arch=body["arch"], cpus=body["cpus"],
                              testbed=body["testbed"], last_seen_at=now.isoformat())
                state.save()
                return self.reply(200, runner)
            m = re.fullmatch(r"/api/v1/runners/(\d+)/heartbeat", self.path)
            if m:
                d["heartbeats"] += 1
                state.save()
                return self.reply(200, d["runners"][int(m.group(1)) - 1])
            if self.path == "/api/v1/jobs/claim":
                d["claims"] += 1
                job = next((j for j in d["jobs"] if j["state"] == "queued"), None)
                if job is None:
                    state.save()
                    return self.reply(204)
                job.update(state="running", runner_id=body["runner_id"],
                           attempt=job["attempt"] + 1, lease_expires_at=(
                               now + timedelta(seconds=body["lease_seconds"])).isoformat())
                state.save()
                self.reply(200, job)
                if args.exit_after_claim:
                    self.wfile.flush()
                    os._exit(0)  # the API dies right after handing out the job
                return None
            m = re.fullmatch(r"/api/v1/jobs/(\d+)/lease", self.path)
            if m:
                job = d["jobs"][int(m.group(1)) - 1]
                d["leases"] += 1
                state.save()
                if args.lose_lease or job["state"] != "running" or \
                        job["runner_id"] != body["runner_id"]:
                    return self.reply(409, {"detail": "lease lost"})
                return self.reply(200, job)
            m = re.fullmatch(r"/api/v1/jobs/(\d+)/fail", self.path)
            if m:
                job = d["jobs"][int(m.group(1)) - 1]
                d["fails"].append({"job_id": job["id"], **body})
                retry = body.get("retryable") and job["attempt"] < job["max_attempts"]
                job["state"] = "queued" if retry else "failed"
                state.save()
                return self.reply(200, job)
            if self.path == "/api/v1/results":
                if args.results_status:
                    d["refused_results"] = d.get("refused_results", 0) + 1
                    state.save()
                    return self.reply(args.results_status, {"detail": [
                        {"type": "test", "msg": f"answered {args.results_status} on purpose"}]})
                jid = body.get("job_id")
                if jid:
                    job = d["jobs"][jid - 1]
                    if args.requeue_on_results and job["state"] == "running":
                        job.update(attempt=job["attempt"] + 1, runner_id=99)  # someone else's
                    holder = (job["runner_id"], job["attempt"])
                    mine = (body.get("runner_id"), body.get("attempt"))
                    if mine != holder or job["state"] not in ("running", "done"):
                        d["stale_results"] = d.get("stale_results", 0) + 1
                        state.save()
                        return self.reply(409, {"detail": [{
                            "type": "lease_lost", "loc": ["body", "attempt"],
                            "msg": f"job {jid} is held by runner {holder[0]} attempt "
                                   f"{holder[1]}, not {mine[0]} attempt {mine[1]}"}]})
                stored = dup = 0
                for t in body["trials"]:
                    if t["uid"] in d["trials"]:
                        dup += 1
                    else:
                        d["trials"][t["uid"]] = t
                        stored += 1
                d["posts"].append({"job_id": body.get("job_id"), "attempt": body.get("attempt"),
                                   "stored": stored,
                                   "duplicates": dup, "testbed": body["testbed"],
                                   "artifacts_keys": sorted(body.get("artifacts", {}))})
                if body.get("job_id"):
                    d["jobs"][body["job_id"] - 1]["state"] = "done"
                state.save()
                if args.drop_first_results_response and not flags["dropped"]:
                    flags["dropped"] = True  # stored, then the connection dies unanswered
                    self.close_connection = True
                    self.connection.shutdown(2)
                    return None
                return self.reply(201, {"stored": stored, "duplicates": dup,
                                        "job_id": body.get("job_id")})
            return self.reply(404, {"detail": "not found"})

    return Handler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--state", type=Path, required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--jobs", type=Path)
    p.add_argument("--exit-after-claim", action="store_true")
    p.add_argument("--drop-first-results-response", action="store_true")
    p.add_argument("--lose-lease", action="store_true")
    p.add_argument("--results-status", type=int)
    p.add_argument("--requeue-on-results", action="store_true")
    args = p.parse_args()
    state = State(args.state, args.jobs)
    box: list[Any] = []
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(state, args, box))
    box.append(server)
    print("ready", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
