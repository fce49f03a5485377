"""Measure names, added as results posts name them, within caps.

A name is read before it is inserted, never inserted "just in case": an `INSERT ... ON
CONFLICT DO NOTHING` takes a sequence value for every row it skips, so a restarted API
(whose per-process memory of names is empty) or a re-post would use ids up for nothing.
Names new to the database are added under one transaction-level advisory lock, read
again under it (a concurrent post may have added some meanwhile), and counted against
the caps: `MALLARD_MAX_NEW_MEASURES_PER_POST` and `MALLARD_MAX_MEASURES_PER_PROJECT`
(the names a project's posts added; posts without a project count as one). Names that
exist are remembered per process once their transaction commits (sql/ids.py)."""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import text
from sqlalchemy.orm import Session

from mallard_api.errors import Refused
from mallard_api.sql import ids

# pg_advisory_xact_lock key of "adding measure names" ("mallmeas")
LOCK_KEY = 0x6D616C6C6D656173


class Caps(NamedTuple):
    per_post: int
    per_project: int


_SELECT = text("SELECT id, name FROM measures WHERE name = ANY(CAST(:names AS text[]))")
_LOCK = text("SELECT pg_advisory_xact_lock(:key)")
_ADDED = text("SELECT count(*) FROM measures WHERE added_at IS NOT NULL "
              "AND project_id IS NOT DISTINCT FROM CAST(:project AS integer)")
# Under the lock no other post adds a name, so the ON CONFLICT (a safety net against a
# name seeded outside the API meanwhile) skips nothing and takes no value for nothing.
_INSERT = text("""
INSERT INTO measures (name, project_id, added_at)
SELECT name, CAST(:project AS integer), now()
FROM unnest(CAST(:names AS text[])) AS name ORDER BY name
ON CONFLICT (name) DO NOTHING
RETURNING id, name
""")


def _stored(session: Session, names: list[str]) -> dict[str, int]:
    return {str(r.name): int(r.id) for r in session.execute(_SELECT, {"names": names})}


def ensure(session: Session, names: set[str], *, project_id: int | None, caps: Caps,
           project: str | None = None) -> None:
    """Make every name of `names` a stored measure, adding the missing ones; Refused
    (422 naming `trials`, before anything is added) when they are more than a cap
    allows."""
    _, unknown = ids.known(session, "measure", names)
    if not unknown:
        return
    found = _stored(session, unknown)
    missing = sorted(set(unknown) - set(found))
    if missing:
        session.execute(_LOCK, {"key": LOCK_KEY})
        found.update(_stored(session, missing))  # added by a post that held the lock
        missing = sorted(set(missing) - set(found))
    if missing:
        check(session, len(missing), project_id=project_id, caps=caps, project=project)
        rows = session.execute(_INSERT, {"names": missing, "project": project_id})
        found.update({str(r.name): int(r.id) for r in rows})
    ids.remember(session, "measure", found)


def check(session: Session, new: int, *, project_id: int | None, caps: Caps,
          project: str | None) -> None:
    """Refused unless `new` more names fit both caps (under the lock)."""
    if new > caps.per_post:
        raise Refused(["body", "trials"], f"the post names {new} measures that do not "
                      f"exist yet; a post may add at most {caps.per_post} "
                      "(MALLARD_MAX_NEW_MEASURES_PER_POST)", "too_many_new_measures")
    added = int(session.scalar(_ADDED, {"project": project_id}) or 0)
    if added + new > caps.per_project:
        whose = f"project '{project}'" if project is not None else "posts without a project"
        raise Refused(["body", "trials"], f"{whose} added {added} measure names; {new} more "
                      f"would pass the cap of {caps.per_project} "
                      "(MALLARD_MAX_MEASURES_PER_PROJECT)", "too_many_measures")
