"""Baselines and broken ranges of a branch (analysis/triage.py): list, accept a commit as
the new baseline, mark a range broken. Readers and runners may not change them."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

from fastapi import APIRouter, Depends, Path
from sqlalchemy.orm import Session

from mallard_api.analysis import triage
from mallard_api.auth import AnyRole, Principal, UserOrAdmin, actor_name, field_error, may_triage
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.commits import Branch
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.baselines import BaselineIn, BrokenIn, MarkOut
from mallard_api.sql import baselines as sql
from mallard_api.sql import projects as project_sql

router = APIRouter(prefix="/projects", tags=["baselines"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut},
                              404: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
ProjectName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00/]+$")]
BranchName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]


def _branch(session: Session, name: str, branch: str) -> Branch:
    project = project_sql.get(session, name)
    b = None if project is None else project_sql.get_branch(session, project, branch)
    if b is None:
        raise field_error(404, ["path", "branch"], f"no branch '{branch}' in '{name}'",
                          "not_found")
    return b


def _actor(who: Principal, project: str) -> str:
    if not may_triage(who, project):
        raise field_error(403, ["header", "authorization"],
                          f"this token may not change baselines of {project}", "forbidden")
    return actor_name(who)


def _marks(session: Session, b: Branch) -> list[MarkOut]:
    return [MarkOut(**asdict(m)) for m in sql.marks(session, b.id)]


@router.get("/{name}/branches/{branch}/baselines", response_model=list[MarkOut])
def list_marks(name: ProjectName, branch: BranchName, session: DB, _: AnyRole
               ) -> list[MarkOut]:
    """The branch's baselines and broken ranges, oldest first."""
    return _marks(session, _branch(session, name, branch))


@router.post("/{name}/branches/{branch}/baselines", response_model=list[MarkOut],
             responses={422: {"model": ErrorOut}})
def accept(name: ProjectName, branch: BranchName, body: BaselineIn, session: DB,
           who: UserOrAdmin, settings: Annotated[Settings, Depends(get_settings)]
           ) -> list[MarkOut]:
    b = _branch(session, name, branch)
    try:
        triage.accept_baseline(session, settings, b, body.commit, _actor(who, name),
                               note=body.note)
    except triage.Refused as exc:
        raise field_error(exc.status, ["body", "commit"], exc.msg, "not_found") from exc
    session.commit()
    return _marks(session, b)


@router.post("/{name}/branches/{branch}/broken", response_model=list[MarkOut],
             responses={422: {"model": ErrorOut}})
def broken(name: ProjectName, branch: BranchName, body: BrokenIn, session: DB,
           who: UserOrAdmin) -> list[MarkOut]:
    b = _branch(session, name, branch)
    try:
        triage.mark_broken(session, b, body.first, body.last, _actor(who, name), body.reason)
    except triage.Refused as exc:
        raise field_error(exc.status, ["body", exc.field], exc.msg, "not_found") from exc
    session.commit()
    return _marks(session, b)
