"""Results ingest: normalise testbed, allocators, workloads and measures into their
dedup tables, then insert the raw trials with `ON CONFLICT (uid) DO NOTHING`."""

from __future__ import annotations

import hashlib
import json
from typing import Any, cast

from sqlalchemy import Table, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.core import Allocator, Measure, Workload
from mallard_api.schemas import ResultsIn, TrialIn
from mallard_api.sql import projects as project_sql
from mallard_api.sql import runners as runner_sql


def canonical_params(params: dict[str, Any]) -> tuple[str, str]:
    canonical = json.dumps(params, sort_keys=True, separators=(",", ":"))
    return canonical, hashlib.sha256(canonical.encode()).hexdigest()


def _threads(params: dict[str, Any]) -> int | None:
    value = params.get("threads")
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and -(2**31) <= value < 2**31:
        return value
    if isinstance(value, str) and value.isdigit() and len(value) < 10:
        return int(value)
    return None


# One statement for the whole batch: columns as arrays, unnested; a short query text that
# psycopg and PostgreSQL parse once, whatever the batch size.
INSERT_TRIALS = text("""
INSERT INTO trials (uid, job_id, runner_id, project_id, branch_id, commit_id, testbed_id,
                    allocator_id, workload_id, label, seq, warmup, ok, exit_code, signal,
                    stderr_tail, started_at, measures, counters)
SELECT u.uid, CAST(:job_id AS bigint), CAST(:runner_id AS integer),
       CAST(:project_id AS integer), CAST(:branch_id AS integer), u.commit_id,
       CAST(:testbed_id AS integer), u.allocator_id, u.workload_id, u.label, u.seq, u.warmup,
       u.ok, u.exit_code, u.signal, u.stderr_tail, u.started_at, u.measures::jsonb,
       u.counters::jsonb
FROM unnest(CAST(:uid AS text[]), CAST(:commit_id AS bigint[]), CAST(:allocator_id AS integer[]),
            CAST(:workload_id AS integer[]), CAST(:label AS text[]), CAST(:seq AS integer[]),
            CAST(:warmup AS boolean[]), CAST(:ok AS boolean[]), CAST(:exit_code AS integer[]),
            CAST(:signal AS integer[]), CAST(:stderr_tail AS text[]),
            CAST(:started_at AS timestamptz[]), CAST(:measures AS text[]),
            CAST(:counters AS text[]))
     AS u(uid, commit_id, allocator_id, workload_id, label, seq, warmup, ok, exit_code, signal,
          stderr_tail, started_at, measures, counters)
ON CONFLICT (uid) DO NOTHING
RETURNING id
""")

ALLOC_COLS = ("name", "commit_sha", "variant", "build_flags", "compiler", "library_sha256")
AllocKey = tuple[str, str, str, str, str, str]
_known_measures: dict[str, set[str]] = {}  # database URL -> measure names seen


def ensure_workloads(session: Session, wanted: dict[tuple[str, str], dict[str, Any]]
                     ) -> dict[tuple[str, str], int]:
    """(name, params sha256) -> workload id, inserting the new ones (one executemany)."""
    table = cast(Table, Workload.__table__)
    conn = session.connection()
    conn.execute(insert(table).on_conflict_do_nothing(index_elements=["name", "params_sha256"]),
                 [{"name": name, "params_sha256": digest, "params": wanted[(name, digest)],
                   "threads": _threads(wanted[(name, digest)])}
                  for name, digest in sorted(wanted)])  # one global order: no deadlocks
    rows = conn.execute(select(table.c.id, table.c.name, table.c.params_sha256)
                        .where(table.c.params_sha256.in_({d for _, d in wanted})))
    found = {(r.name, r.params_sha256): int(r.id) for r in rows}
    return {k: found[k] for k in wanted}


def ensure_allocators(session: Session, wanted: set[AllocKey]) -> dict[AllocKey, int]:
    """The allocator rows for these keys, inserting the new ones (one executemany)."""
    table = cast(Table, Allocator.__table__)
    conn = session.connection()
    conn.execute(insert(table).on_conflict_do_nothing(index_elements=list(ALLOC_COLS)),
                 [dict(zip(ALLOC_COLS, key, strict=True)) for key in sorted(wanted)])
    rows = conn.execute(select(table.c.id, *[table.c[c] for c in ALLOC_COLS])
                        .where(table.c.name.in_({k[0] for k in wanted}),
                               table.c.commit_sha.in_({k[1] for k in wanted})))
    found = {tuple(r[1:]): int(r[0]) for r in rows}
    return {k: found[k] for k in wanted}


def ensure_measures(session: Session, names: set[str]) -> None:
    known = _known_measures.setdefault(str(session.get_bind().engine.url), set())
    new = names - known
    if new:
        session.execute(insert(Measure).values([{"name": n} for n in sorted(new)])
                        .on_conflict_do_nothing(index_elements=[Measure.name]))
        known.update(new)


def _alloc_key(t: TrialIn) -> AllocKey:
    a = t.allocator
    return (a.name, a.commit or "", a.variant or "", a.build_flags or "", a.compiler or "",
            a.library_sha256 or "")


def ingest(session: Session, body: ResultsIn, *, runner_id: int | None,
           project_id: int | None) -> tuple[list[int], int]:
    """Store the trials; return (ids of the newly stored trials, number of duplicates)."""
    if not body.trials:
        return [], 0
    testbed_id = runner_sql.ensure_testbed(session, body.testbed.model_dump())
    branch_id = None
    if project_id is not None and body.branch:
        project = session.get(project_sql.Project, project_id)
        assert project is not None
        branch_id = project_sql.ensure_branch(session, project, body.branch).id

    wkeys = [(t.workload.name, canonical_params(t.workload.params)) for t in body.trials]
    workloads = ensure_workloads(session, {(name, digest): json.loads(canonical)
                                           for name, (canonical, digest) in wkeys})
    allocators = ensure_allocators(session, {_alloc_key(t) for t in body.trials})
    commits: dict[str, int] = {}
    if project_id is not None:
        for sha in sorted({t.allocator.commit for t in body.trials if t.allocator.commit}):
            commits[sha] = project_sql.ensure_commit(session, project_id,
                                                     project_sql.CommitInfo(sha=sha))
    ensure_measures(session, {m for t in body.trials for m in t.measures})

    # Peers (no commit of their own) belong to the commit they ran beside: the head's.
    context_commit = None
    for t in body.trials:
        if t.allocator.commit and t.allocator.commit in commits:
            context_commit = commits[t.allocator.commit]
            if t.label == "head":
                break

    ts = body.trials
    cols: dict[str, Any] = dict(
        uid=[t.uid for t in ts],
        commit_id=[commits.get(t.allocator.commit or "", context_commit) for t in ts],
        allocator_id=[allocators[_alloc_key(t)] for t in ts],
        workload_id=[workloads[(name, digest)] for name, (_, digest) in wkeys],
        label=[t.label for t in ts], seq=[t.seq for t in ts], warmup=[t.warmup for t in ts],
        ok=[t.ok for t in ts], exit_code=[t.exit_code for t in ts],
        signal=[t.signal for t in ts], stderr_tail=[t.stderr_tail for t in ts],
        started_at=[t.started_at for t in ts],
        measures=[json.dumps(t.measures) for t in ts],
        counters=[None if t.counters is None else json.dumps(t.counters) for t in ts],
    )
    res = session.execute(INSERT_TRIALS, dict(
        cols, job_id=body.job_id, runner_id=runner_id, project_id=project_id,
        branch_id=branch_id, testbed_id=testbed_id))
    new_ids = [int(i) for i in res.scalars()]
    return new_ids, len(ts) - len(new_ids)


def store_artifacts(session: Session, *, job_id: int | None, runner_id: int | None,
                    artifacts: dict[str, Any]) -> None:
    session.execute(text(
        "INSERT INTO result_artifacts (job_id, runner_id, artifacts) "
        "VALUES (:j, :r, CAST(:a AS jsonb))"),
        {"j": job_id, "r": runner_id, "a": json.dumps(artifacts)})


def job_exists(session: Session, job_id: int) -> bool:
    return session.scalar(text("SELECT 1 FROM jobs WHERE id = :id"), {"id": job_id}) is not None
