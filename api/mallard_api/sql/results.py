"""Results ingest: normalise testbed, allocators, workloads and measures into their
dedup tables, then insert the raw trials, skipping the uids already stored."""

from __future__ import annotations

import json
from typing import NamedTuple

from mallard_wire.fields import JsonDict
from mallard_wire.results import ResultsIn, TestbedFields, TrialIn
from pydantic_core import to_json
from sqlalchemy import text
from sqlalchemy.orm import Session

from mallard_api.errors import Refused
from mallard_api.params import params_key, params_sha256
from mallard_api.sql import ids
from mallard_api.sql import measures as measure_sql
from mallard_api.sql import projects as project_sql
from mallard_api.sql import runners as runner_sql


def _threads(params: JsonDict) -> int | None:
    value = params.get("threads")
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and -(2**31) <= value < 2**31:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 10:
        return int(value)
    return None


# The batch is one parameter: a JSON array of rows (one `pydantic_core.to_json`, in Rust,
# for the whole batch: 1.6x faster than `json.dumps`), unpacked by PostgreSQL in one
# statement that also upserts the commit and allocators this process does not remember
# yet (a new commit's), commits first
# (concurrent posts lock rows in one order; `DO UPDATE`, which changes nothing, returns
# the rows that existed or that a concurrent post inserted), inserts the trials, skipping
# the stored uids (migration 0017), and queues change detection (when analysis/ingest.py
# says so) for one trial per series touched (project, branch, workload, testbed,
# allocator, measure) among the valid, non-warm-up head trials: all
# `sql/alerts.touched_series` needs (~4 ids for a 100-trial post, not 100). Everything
# comes as JSON, so the plan does not depend on the sizes: PostgreSQL keeps one generic
# plan of the prepared statement (api/README.md, "Benchmark").
AllocKey = tuple[str, str, str, str, str, str]


class StagedTrial(NamedTuple):
    """One row of the batch, in the order `INSERT_TRIALS` reads it (`n`: its place)."""

    n: int
    uid: str
    commit_id: int | None
    allocator_id: int | None  # None: new to this process, see `new_allocator`
    workload_id: int
    label: str
    seq: int
    warmup: bool
    ok: bool
    exit_code: int | None
    signal: int | None
    stderr_tail: str | None
    started_at: str | None  # ISO 8601
    measures: dict[str, float]
    counters: JsonDict | None
    new_commit: int | None  # a commit new to this process: its place in :new_commits
    new_allocator: int | None  # an allocator new to this process: in :new_allocators
    memory: JsonDict | None  # the memory timeline and latency histogram, when recorded
    latency: JsonDict | None
    layout: JsonDict | None  # the trial's sampled layout (wire TrialLayout); None: fixed


INSERT_TRIALS = text("""
WITH new_commits AS (
INSERT INTO commits AS c (project_id, sha)
SELECT CAST(:project_id AS integer), sha
FROM jsonb_array_elements_text(CAST(:new_commits AS jsonb)) AS sha ORDER BY sha
ON CONFLICT (project_id, sha) DO UPDATE SET parent_sha = c.parent_sha
RETURNING id, sha
), new_commit_ids AS (
SELECT u.n, c.id FROM new_commits c
JOIN jsonb_array_elements_text(CAST(:new_commits AS jsonb)) WITH ORDINALITY AS u(sha, n)
  USING (sha)
), wanted_allocators AS (
SELECT u.n, u.a->>0 AS name, u.a->>1 AS commit_sha, u.a->>2 AS variant,
       u.a->>3 AS build_flags, u.a->>4 AS compiler, u.a->>5 AS library_sha256
FROM jsonb_array_elements(CAST(:new_allocators AS jsonb)) WITH ORDINALITY AS u(a, n)
), new_allocators AS (
INSERT INTO allocators AS a (name, commit_sha, variant, build_flags, compiler,
                             library_sha256)
SELECT name, commit_sha, variant, build_flags, compiler, library_sha256
FROM wanted_allocators WHERE (SELECT count(*) FROM new_commits) >= 0 ORDER BY n
ON CONFLICT (name, commit_sha, variant, build_flags, compiler, library_sha256)
DO UPDATE SET name = a.name
RETURNING id, name, commit_sha, variant, build_flags, compiler, library_sha256
), new_allocator_ids AS (
SELECT w.n, a.id FROM new_allocators a JOIN wanted_allocators w
  USING (name, commit_sha, variant, build_flags, compiler, library_sha256)
), stored AS (
INSERT INTO trials (uid, job_id, runner_id, project_id, branch_id, commit_id, testbed_id,
                    allocator_id, workload_id, label, seq, warmup, ok, exit_code, signal,
                    stderr_tail, started_at, measures, counters, memory, latency, layout)
SELECT e->>1, CAST(:job_id AS bigint), CAST(:runner_id AS integer),
       CAST(:project_id AS integer), CAST(:branch_id AS integer),
       COALESCE((e->>2)::bigint,
                ((SELECT array_agg(id ORDER BY n) FROM new_commit_ids))[(e->>15)::int]),
       CAST(:testbed_id AS integer),
       COALESCE((e->>3)::integer,
                ((SELECT array_agg(id ORDER BY n) FROM new_allocator_ids))[(e->>16)::int]),
       (e->>4)::integer, e->>5,
       (e->>6)::integer, (e->>7)::boolean, (e->>8)::boolean, (e->>9)::integer,
       (e->>10)::integer, e->>11, (e->>12)::timestamptz, e->13, NULLIF(e->14, 'null'),
       NULLIF(e->17, 'null'), NULLIF(e->18, 'null'), NULLIF(e->19, 'null')
FROM jsonb_array_elements(CAST(:rows AS jsonb)) WITH ORDINALITY AS r(e, n)
ORDER BY r.n
ON CONFLICT ON CONSTRAINT trials_uid_excl DO NOTHING
RETURNING id, ok, warmup, label, project_id, branch_id, workload_id, testbed_id,
          allocator_id, measures
), queued AS (
INSERT INTO analysis_queue (kind, trial_ids)
SELECT 'changes', array_agg(DISTINCT id) FROM (
    SELECT min(id) AS id FROM (
        SELECT s.*, jsonb_object_keys(s.measures) AS measure FROM stored s
        WHERE CAST(:queue_changes AS boolean) AND s.ok AND NOT s.warmup
          AND s.label = 'head' AND s.branch_id IS NOT NULL) per_measure
    GROUP BY project_id, branch_id, workload_id, testbed_id, allocator_id, measure
) one_per_series
HAVING count(*) > 0
)
SELECT (SELECT count(*) FROM stored) AS stored,
       (SELECT json_agg(json_build_array(id, sha)) FROM new_commits)::text AS commits,
       (SELECT json_agg(json_build_array(id, name, commit_sha, variant, build_flags,
        compiler, library_sha256)) FROM new_allocators)::text AS allocators
""")

# Workloads: read what exists, insert what is missing, then read again in a statement of
# its own what a concurrent post inserted meanwhile (visible only to a later statement).
# Rows seen by a committed post are remembered (sql/ids.py): a post usually reads none.
_INSERT_WORKLOADS = text("""
INSERT INTO workloads (name, params_sha256, params, threads)
SELECT u.name, u.sha, CAST(u.params AS jsonb), u.threads
FROM unnest(CAST(:name AS text[]), CAST(:sha AS text[]), CAST(:params AS text[]),
            CAST(:threads AS integer[])) AS u(name, sha, params, threads)
ON CONFLICT (name, params_sha256) DO NOTHING
RETURNING id, name, params_sha256
""")
_SELECT_WORKLOADS = text("""
SELECT w.id, w.name, w.params_sha256 FROM workloads w
JOIN unnest(CAST(:name AS text[]), CAST(:sha AS text[])) AS u(name, sha)
  ON u.name = w.name AND u.sha = w.params_sha256
""")


def ensure_workloads(session: Session, wanted: dict[tuple[str, str], JsonDict]
                     ) -> dict[tuple[str, str], int]:
    """(name, params sha256) -> workload id, inserting the new ones (rows inserted in
    one global order, so concurrent posts cannot deadlock)."""
    def select(keys: list[tuple[str, str]]) -> dict[tuple[str, str], int]:
        rows = session.execute(_SELECT_WORKLOADS, {"name": [k[0] for k in keys],
                                                   "sha": [k[1] for k in keys]})
        return {(str(r.name), str(r.params_sha256)): int(r.id) for r in rows}

    remembered, unknown = ids.known(session, "workload", wanted)
    found = dict(remembered)
    if unknown:
        found.update(select(sorted(unknown)))
        missing = sorted(set(wanted) - set(found))
        if missing:
            rows = session.execute(_INSERT_WORKLOADS, {
                "name": [k[0] for k in missing], "sha": [k[1] for k in missing],
                "params": [params_key(wanted[k]) for k in missing],
                "threads": [_threads(wanted[k]) for k in missing]})
            found.update({(str(r.name), str(r.params_sha256)): int(r.id) for r in rows})
            if set(missing) - set(found):  # inserted meanwhile by a concurrent post
                found.update(select(sorted(set(missing) - set(found))))
        ids.remember(session, "workload", {k: found[k] for k in unknown})
    return {k: found[k] for k in wanted}


def project_id(session: Session, name: str) -> int | None:
    found = ids.one(session, "project", name)
    if found is None:
        found = project_sql.id_of(session, name)
        if found is not None:
            ids.remember(session, "project", {name: found})
    return found


def ensure_testbed(session: Session, testbed: TestbedFields) -> int:
    fp, _ = runner_sql.fingerprint(testbed)
    found = ids.one(session, "testbed", fp)
    if found is None:
        found = runner_sql.ensure_testbed(session, testbed)
        ids.remember(session, "testbed", {fp: found})
    return found


def ensure_branch(session: Session, project_id: int, name: str) -> int:
    found = ids.one(session, "branch", (project_id, name))
    if found is None:
        found = project_sql.ensure_branch_id(session, project_id, name)
        ids.remember(session, "branch", {(project_id, name): found})
    return found


def _alloc_key(t: TrialIn) -> AllocKey:
    a = t.allocator
    return (a.name, a.commit or "", a.variant or "", a.build_flags or "", a.compiler or "",
            a.library_sha256 or "")


# An allocator's six fields are one entry of its unique index, which holds at most 2,704
# bytes: the wire bounds them in characters (mallard_wire.results.AllocatorIn), this in
# bytes (3 or 4 a character in some scripts), for the allocators this process does not
# remember (a post of known ones checks none).
ALLOCATOR_KEY_MAX_BYTES = 2600


def _check_allocator_keys(alloc_keys: list[AllocKey], new: list[AllocKey]) -> None:
    for key in new:
        size = sum(len(field.encode()) for field in key)
        if size > ALLOCATOR_KEY_MAX_BYTES:
            raise Refused(["body", "trials", alloc_keys.index(key), "allocator"],
                          f"the allocator's name, commit, variant, build_flags, compiler and "
                          f"library_sha256 take {size} bytes in UTF-8; together at most "
                          f"{ALLOCATOR_KEY_MAX_BYTES}", "too_large")


def ingest(session: Session, body: ResultsIn, *, runner_id: int | None,
           project_id: int | None, queue_changes: bool,
           caps: measure_sql.Caps) -> tuple[int, int]:
    """Store the trials, queueing change detection for the new ones if `queue_changes`;
    return (number of newly stored trials, number of duplicates). Measure names new to
    the database are added first, within `caps`; errors.Refused (422 naming the field,
    nothing stored) for what the database could not hold."""
    if not body.trials:
        return 0, 0
    measure_sql.ensure(session, {m for t in body.trials for m in t.measures},
                       project_id=project_id, caps=caps, project=body.project)
    testbed_id = ensure_testbed(session, body.testbed)
    branch_id = None
    if project_id is not None and body.branch:
        branch_id = ensure_branch(session, project_id, body.branch)
    wids = _workload_ids(session, body.trials)
    alloc_keys = [_alloc_key(t) for t in body.trials]
    allocators, new_allocs = ids.known(session, "allocator", set(alloc_keys))
    _check_allocator_keys(alloc_keys, new_allocs)
    commits, new_shas = _commit_ids(session, project_id, body.trials)
    shas = sorted(new_shas)
    new_allocs.sort()
    rows = _staged(body.trials, wids, alloc_keys, commits, allocators, shas, new_allocs)
    res = session.execute(INSERT_TRIALS, dict(
        job_id=body.job_id, runner_id=runner_id, project_id=project_id,
        branch_id=branch_id, testbed_id=testbed_id, rows=to_json(rows).decode(),
        queue_changes=queue_changes, new_commits=json.dumps(shas),
        new_allocators=json.dumps(new_allocs)),
    ).one()
    if project_id is not None:
        ids.remember(session, "commit", {(project_id, str(sha)): int(i)
                                         for i, sha in json.loads(res.commits or "[]")})
    ids.remember(session, "allocator", {tuple(r[1:]): int(r[0])
                                        for r in json.loads(res.allocators or "[]")})
    stored = int(res.stored)
    return stored, len(rows) - stored


def _workload_ids(session: Session, trials: list[TrialIn]) -> list[int]:
    """Each trial's workload id, the workloads new to the database inserted."""
    digests: dict[tuple[object, ...], str] = {}  # a post's trials share a few params

    def digest(params: JsonDict) -> str:
        try:  # typed: 1, 1.0 and true are equal in Python, not in JSON
            key = tuple((k, type(v), v) for k, v in params.items())
            found = digests.get(key)
        except TypeError:  # a nested value: not hashable
            return params_sha256(params)
        if found is None:
            found = digests[key] = params_sha256(params)
        return found

    wkeys = [(t.workload.name, digest(t.workload.params), t.workload.params) for t in trials]
    workloads = ensure_workloads(session, {(name, digest): params
                                           for name, digest, params in wkeys})
    return [workloads[(name, digest)] for name, digest, _ in wkeys]


def _commit_ids(session: Session, project_id: int | None,
                trials: list[TrialIn]) -> tuple[dict[str, int], set[str]]:
    """The trials' commits this process remembers (sha -> id), and the others, which the
    insert inserts (or reads)."""
    if project_id is None:
        return {}, set()
    known, unknown = ids.known(session, "commit", {
        (project_id, t.allocator.commit) for t in trials if t.allocator.commit})
    return {sha: i for (_, sha), i in known.items()}, {sha for _, sha in unknown}


def _staged(trials: list[TrialIn], wids: list[int], alloc_keys: list[AllocKey],
            commits: dict[str, int], allocators: dict[AllocKey, int], shas: list[str],
            new_allocs: list[AllocKey]) -> list[StagedTrial]:
    """The batch's rows: a commit or allocator new to this process by its place in
    `shas` / `new_allocs`; a peer's commit is the one it ran beside."""
    # Peers (no commit of their own) belong to the commit they ran beside: the head's.
    seen = commits.keys() | set(shas)
    context: str | None = None
    for t in trials:
        if t.allocator.commit in seen:
            context = t.allocator.commit
            if t.label == "head":
                break
    place = {k: i + 1 for i, k in enumerate(shas)}  # WITH ORDINALITY counts from 1
    aplace = {k: i + 1 for i, k in enumerate(new_allocs)}
    rows = []
    for n, (t, wid, akey) in enumerate(zip(trials, wids, alloc_keys, strict=True)):
        sha = t.allocator.commit if t.allocator.commit in seen else context
        rows.append(StagedTrial(
            n, t.uid, commits.get(sha or ""), allocators.get(akey), wid, t.label, t.seq,
            t.warmup, t.ok, t.exit_code, t.signal, t.stderr_tail,
            None if t.started_at is None else t.started_at.isoformat(), t.measures,
            t.counters, place.get(sha or ""), aplace.get(akey),
            None if t.memory is None else t.memory.model_dump(),
            None if t.latency is None else t.latency.model_dump(),
            None if t.layout is None else t.layout.model_dump()))
    return rows


def store_artifacts(session: Session, *, job_id: int | None, runner_id: int | None,
                    artifacts: JsonDict) -> None:
    session.execute(text(
        "INSERT INTO result_artifacts (job_id, runner_id, artifacts) "
        "VALUES (:j, :r, CAST(:a AS jsonb))"),
        {"j": job_id, "r": runner_id, "a": json.dumps(artifacts)})
