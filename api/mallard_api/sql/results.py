"""Results ingest: normalise testbed, allocators, workloads and measures into their
dedup tables, then insert the raw trials with `ON CONFLICT (uid) DO NOTHING`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sqlalchemy import select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.core import Allocator, Measure, Trial, Workload
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


def ensure_workload(session: Session, name: str, params: dict[str, Any]) -> int:
    canonical, digest = canonical_params(params)
    session.execute(
        insert(Workload).values(name=name, params=json.loads(canonical), params_sha256=digest,
                                threads=_threads(params))
        .on_conflict_do_nothing(index_elements=[Workload.name, Workload.params_sha256]))
    return int(session.scalar(select(Workload.id).where(
        Workload.name == name, Workload.params_sha256 == digest)) or 0)


def _alloc_key(t: TrialIn) -> tuple[str, str, str, str, str, str]:
    a = t.allocator
    return (a.name, a.commit or "", a.variant or "", a.build_flags or "", a.compiler or "",
            a.library_sha256 or "")


def ensure_allocator(session: Session, key: tuple[str, str, str, str, str, str]) -> int:
    cols = dict(zip(("name", "commit_sha", "variant", "build_flags", "compiler",
                     "library_sha256"), key, strict=True))
    session.execute(insert(Allocator).values(**cols).on_conflict_do_nothing(
        index_elements=list(cols)))
    return int(session.scalar(select(Allocator.id).filter_by(**cols)) or 0)


def ensure_measures(session: Session, names: set[str]) -> None:
    if names:
        session.execute(insert(Measure).values([{"name": n} for n in sorted(names)])
                        .on_conflict_do_nothing(index_elements=[Measure.name]))


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

    allocators: dict[tuple[str, str, str, str, str, str], int] = {}
    workloads: dict[tuple[str, str], int] = {}
    commits: dict[str, int] = {}
    measure_names: set[str] = set()
    for t in body.trials:
        key = _alloc_key(t)
        if key not in allocators:
            allocators[key] = ensure_allocator(session, key)
        wkey = (t.workload.name, canonical_params(t.workload.params)[1])
        if wkey not in workloads:
            workloads[wkey] = ensure_workload(session, t.workload.name, t.workload.params)
        if project_id is not None and t.allocator.commit and t.allocator.commit not in commits:
            commits[t.allocator.commit] = project_sql.ensure_commit(
                session, project_id, project_sql.CommitInfo(sha=t.allocator.commit))
        measure_names.update(t.measures)
    ensure_measures(session, measure_names)

    # Peers (no commit of their own) belong to the commit they ran beside: the head's.
    context_commit = None
    for t in body.trials:
        if t.allocator.commit and t.allocator.commit in commits:
            context_commit = commits[t.allocator.commit]
            if t.label == "head":
                break

    rows = []
    for t in body.trials:
        rows.append(dict(
            uid=t.uid, job_id=body.job_id, runner_id=runner_id, project_id=project_id,
            branch_id=branch_id,
            commit_id=commits.get(t.allocator.commit or "", context_commit),
            testbed_id=testbed_id, allocator_id=allocators[_alloc_key(t)],
            workload_id=workloads[(t.workload.name, canonical_params(t.workload.params)[1])],
            label=t.label, seq=t.seq, warmup=t.warmup, ok=t.ok, exit_code=t.exit_code,
            signal=t.signal, stderr_tail=t.stderr_tail, started_at=t.started_at,
            measures=dict(t.measures), counters=t.counters,
        ))
    new_ids: list[int] = []
    for start in range(0, len(rows), 1000):
        chunk = rows[start:start + 1000]
        res = session.execute(insert(Trial).values(chunk)
                              .on_conflict_do_nothing(index_elements=[Trial.uid])
                              .returning(Trial.id))
        new_ids.extend(int(i) for i in res.scalars())
    return new_ids, len(rows) - len(new_ids)


def job_exists(session: Session, job_id: int) -> bool:
    return session.scalar(text("SELECT 1 FROM jobs WHERE id = :id"), {"id": job_id}) is not None
