"""Runners and testbeds (a testbed is deduplicated by its fingerprint)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

from mallard_wire.fields import JsonDict
from mallard_wire.results import TestbedFields
from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from mallard_api.models.records import FingerprintFields
from mallard_api.models.runners import Runner
from mallard_api.models.testbeds import Testbed
from mallard_api.sql import ids

# contracts §5: the fingerprint covers exactly these fields.
FINGERPRINT_FIELDS = ("arch", "cpu_model", "cpus", "kernel", "governor", "smt", "thp",
                      "compiler", "libc", "page_size")


# ... and these only on an emulated testbed (so every native fingerprint stays as it was)
EMULATION_FIELDS = ("emulated", "emulator")


def fingerprint(testbed: TestbedFields) -> tuple[str, FingerprintFields]:
    data = testbed.model_dump(mode="json")
    fields: FingerprintFields = {k: data.get(k) for k in FINGERPRINT_FIELDS}
    if testbed.emulated:
        fields.update({k: data.get(k) for k in EMULATION_FIELDS})
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest(), fields


# the bind parameters of get_or_insert's statements
BindArgs = dict[str, str | int | None]


def get_or_insert(session: Session, select_sql: str, insert_sql: str, args: BindArgs) -> int:
    """The id a SELECT finds, else the one the INSERT ... ON CONFLICT DO NOTHING RETURNING
    id makes, else (a concurrent request inserted it meanwhile) the SELECT's again, in a
    statement of its own so that it sees the other request's row. Usually one statement."""
    found = session.execute(text(select_sql), args).scalar()
    if found is None:
        found = session.execute(text(insert_sql), args).scalar()
    if found is None:
        found = session.execute(text(select_sql), args).scalar_one()
    return int(found)


def ensure_testbed(session: Session, testbed: TestbedFields) -> int:
    fp, fields = fingerprint(testbed)
    return get_or_insert(
        session, "SELECT id FROM testbeds WHERE fingerprint = :fp",
        "INSERT INTO testbeds (fingerprint, arch, cpu_model, fields) "
        "VALUES (:fp, :arch, :cpu, CAST(:fields AS jsonb)) "
        "ON CONFLICT (fingerprint) DO NOTHING RETURNING id",
        {"fp": fp, "arch": str(fields.get("arch") or ""), "cpu": fields.get("cpu_model"),
         "fields": json.dumps(fields)})


def get(session: Session, runner_id: int) -> Runner | None:
    return session.get(Runner, runner_id)


def get_by_name(session: Session, name: str) -> Runner | None:
    return session.scalar(select(Runner).where(Runner.name == name))


@dataclass(frozen=True)
class RunnerRef:
    """What most calls need of a runner (a plain statement, no ORM object)."""

    id: int
    name: str
    arch: str


def ref(session: Session, *, runner_id: int | None = None, name: str | None = None,
        touch: bool = False) -> RunnerRef | None:
    """The runner by id or name; with `touch`, its last-seen time is set in the same
    statement (undone with the transaction if the caller then refuses the request)."""
    where = "id = :id" if runner_id is not None else "name = :n"
    sql = (f"UPDATE runners SET last_seen_at = now() WHERE {where} RETURNING id, name, arch"
           if touch else f"SELECT id, name, arch FROM runners WHERE {where}")
    row = session.execute(text(sql), {"id": runner_id, "n": name}).first()
    return None if row is None else RunnerRef(int(row[0]), str(row[1]), str(row[2]))


def _as_sent(testbed: TestbedFields) -> JsonDict:
    """The testbed a runner sent, as stored in runners.testbed (the fields it gave)."""
    return testbed.model_dump(mode="json", exclude_unset=True)


def _with_runner(testbed: TestbedFields, arch: str, cpus: str | None) -> TestbedFields:
    """The runner's arch and CPUs, unless its testbed gives its own."""
    return TestbedFields.model_validate({"arch": arch, "cpus": cpus, **_as_sent(testbed)})


def register(session: Session, *, name: str, arch: str, cpus: str | None,
             testbed: TestbedFields | None) -> Runner:
    testbed_id = None
    sent = None if testbed is None else _as_sent(testbed)
    if testbed is not None:
        testbed_id = ensure_testbed(session, _with_runner(testbed, arch, cpus))
    stmt = insert(Runner).values(name=name, arch=arch, cpus=cpus, testbed=sent,
                                 testbed_id=testbed_id)
    changes: dict[str, object] = dict(arch=arch, cpus=cpus, last_seen_at=func.now(),
                                      retired_at=None)  # registering brings it back
    if testbed is not None:
        changes.update(testbed=sent, testbed_id=testbed_id)
    session.execute(stmt.on_conflict_do_update(index_elements=[Runner.name], set_=changes))
    runner = get_by_name(session, name)
    assert runner is not None
    session.refresh(runner)
    return runner


def heartbeat(session: Session, runner: Runner, testbed: TestbedFields | None) -> Runner:
    if testbed is not None:
        runner.testbed = _as_sent(testbed)
        runner.testbed_id = ensure_testbed(session, _with_runner(testbed, runner.arch,
                                                                 runner.cpus))
    runner.last_seen_at = session.scalar(select(func.now()))  # type: ignore[assignment]
    session.flush()
    return runner


def retire(session: Session, runner: Runner) -> Runner:
    """Out of service: no longer exported as last seen (MallardRunnerDown resolves) nor
    counted among the arches push jobs are queued for, until it registers again."""
    if runner.retired_at is None:
        runner.retired_at = session.scalar(select(func.now()))
        session.flush()
    return runner


# Results posts touch their runner at most this often (per process): the touch was one
# statement of every post, and `last_seen_at` is read in minutes (runner-down alerts).
TOUCH_SECONDS = 10.0
_seen: dict[tuple[str, int | str], tuple[RunnerRef, float]] = {}


def seen(session: Session, *, runner_id: int | None = None, name: str | None = None
         ) -> RunnerRef | None:
    """`ref(..., touch=True)`, unless this process touched the runner less than
    TOUCH_SECONDS ago (a runner row is never deleted; its id and name never change)."""
    key = (ids.db_key(session), runner_id if runner_id is not None else str(name))
    hit = _seen.get(key)
    now = time.monotonic()
    if hit is not None and now - hit[1] < TOUCH_SECONDS:
        return hit[0]
    runner = ref(session, runner_id=runner_id, name=name, touch=True)
    if runner is not None:
        if len(_seen) > ids.MAX_ENTRIES:
            _seen.clear()
        _seen[key] = (runner, now)
    return runner


def touch(session: Session, runner_id: int) -> None:
    session.execute(text("UPDATE runners SET last_seen_at = now() WHERE id = :id"),
                    {"id": runner_id})


def list_all(session: Session) -> list[tuple[Runner, str | None]]:
    rows = session.execute(
        select(Runner, Testbed.fingerprint).outerjoin(Testbed, Testbed.id == Runner.testbed_id)
        .order_by(Runner.name))
    return [(r, fp) for r, fp in rows]


def testbed_fingerprint(session: Session, runner: Runner) -> str | None:
    if runner.testbed_id is None:
        return None
    return session.scalar(select(Testbed.fingerprint).where(Testbed.id == runner.testbed_id))



def may_write(session: Session, runner_id: int, project: str) -> bool:
    """Whether the runner may post history without a job to the project (its scope)."""
    return bool(session.scalar(text(
        "SELECT all_projects OR :p = ANY(projects) FROM runners WHERE id = :r"),
        {"r": runner_id, "p": project}))


def set_projects(session: Session, runner: Runner, projects: list[str] | None) -> Runner:
    """The runner's scope: these projects, or every one (None)."""
    runner.all_projects = projects is None
    runner.projects = sorted(set(projects or []))
    session.flush()
    return runner
