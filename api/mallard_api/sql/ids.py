"""Ids of rows that never change once written, remembered per process: projects,
branches, commits, testbeds, workloads and allocators (deduplicated by their keys,
never updated in a way that changes their id, never deleted by the service). A results
post of a known runner then reads none of them again: fewer statements per post.

An id is remembered only once the transaction that saw it has committed (a row inserted
by a transaction that rolls back must not be remembered), per database URL and kind;
each kind keeps at most `MAX_ENTRIES` (then starts over)."""

from __future__ import annotations

import weakref
from collections.abc import Hashable, Iterable
from typing import Any, TypeVar

from sqlalchemy import Engine, event
from sqlalchemy.orm import Session

MAX_ENTRIES = 100_000
_PENDING = "mallard_ids_pending"
K = TypeVar("K", bound=Hashable)
_known: dict[tuple[str, str], dict[Hashable, int]] = {}
_urls: weakref.WeakKeyDictionary[Engine, str] = weakref.WeakKeyDictionary()


def db_key(session: Session) -> str:
    """The database a per-process cache entry belongs to (its URL). Rendered once per
    engine: a results post asks ~10 times, and rendering a URL costs more than the
    lookup it keys."""
    engine = (session.bind or session.get_bind()).engine
    url = _urls.get(engine)
    if url is None:
        url = _urls[engine] = str(engine.url)
    return url


def known(session: Session, kind: str, keys: Iterable[K]) -> tuple[dict[K, int], list[K]]:
    """(ids remembered for these keys, the keys not remembered)."""
    ids = _known.get((db_key(session), kind), {})
    found: dict[K, int] = {}
    missing: list[K] = []
    for key in keys:
        value = ids.get(key)
        if value is None:
            missing.append(key)
        else:
            found[key] = value
    return found, missing


def one(session: Session, kind: str, key: Hashable) -> int | None:
    return _known.get((db_key(session), kind), {}).get(key)


def remember(session: Session, kind: str, ids: dict[Any, int]) -> None:
    """Remember these ids once the session's transaction commits."""
    if ids:
        pending = session.info.setdefault(_PENDING, {})
        pending.setdefault((db_key(session), kind), {}).update(ids)


@event.listens_for(Session, "after_commit")
def _committed(session: Session) -> None:
    for where, ids in session.info.pop(_PENDING, {}).items():
        table = _known.setdefault(where, {})
        if len(table) + len(ids) > MAX_ENTRIES:
            table.clear()
        table.update(ids)


@event.listens_for(Session, "after_rollback")
def _rolled_back(session: Session) -> None:
    session.info.pop(_PENDING, None)
