"""Differential profiles of a comparison: list, ask for a case (queues a `profile` job),
read one (JSON) and its differential flame graph (SVG)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import Response
from mallard_wire.fields import INT32_MAX, INT64_MAX
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis import differential, profiles
from mallard_api.analysis.specs import SpecError
from mallard_api.auth import AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.comparisons import Comparison
from mallard_api.routes.checks import spec_error
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.profiles import ProfileOut, ProfileRequest
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import profiles as sql
from mallard_api.ui.flame import flame_svg

router = APIRouter(prefix="/comparisons/{comparison_id}/profiles", tags=["profiles"],
                   route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut},
                              404: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
ComparisonPath = Annotated[int, Path(ge=1, le=INT32_MAX)]
ProfilePath = Annotated[int, Path(ge=1, le=INT64_MAX)]
Conf = Annotated[Settings, Depends(get_settings)]


def profile_out(r: sql.ProfileRow) -> ProfileOut:
    p = r.body
    return ProfileOut(id=r.id, comparison_id=r.comparison_id, workload=r.workload,
                      threads=r.threads, params=r.params, state=r.state,
                      requested=r.requested, job_id=r.job_id, created_at=r.created_at,
                      why=differential.why(p) if p else None,
                      summary=differential.summary(p) if p else None, profile=p)


def _comparison(session: Session, comparison_id: int) -> Comparison:
    comp = comparison_sql.get(session, comparison_id)
    if comp is None:
        raise field_error(404, ["path", "comparison_id"], f"no comparison {comparison_id}",
                          "not_found")
    return comp


def _profile(session: Session, comparison_id: int, profile_id: int) -> sql.ProfileRow:
    row = sql.get(session, _comparison(session, comparison_id).id, profile_id)
    if row is None:
        raise field_error(404, ["path", "profile_id"], f"comparison {comparison_id} has no "
                          f"profile {profile_id}", "not_found")
    return row


@router.get("", response_model=list[ProfileOut])
def list_profiles(comparison_id: ComparisonPath, session: DB, _: AnyRole) -> list[ProfileOut]:
    comp = _comparison(session, comparison_id)
    return [profile_out(r) for r in sql.of_comparisons(session, [comp.id])]


@router.post("", response_model=ProfileOut, status_code=202,
             responses={409: {"model": ErrorOut}, 422: {"model": ErrorOut},
                        429: {"model": ErrorOut}})
def ask_profile(comparison_id: ComparisonPath, body: ProfileRequest, request: Request,
                session: DB, p: UserOrAdmin, settings: Conf) -> ProfileOut:
    """Ask for the differential profile of a case of the comparison (any cell, moved or
    not): a `profile` job, once per case and params (asking again answers the same),
    charged to the token's quotas (429 past one)."""
    comp = _comparison(session, comparison_id)
    try:
        profile_id, queued = profiles.ask(session, settings, comp, body)
    except SpecError as exc:
        raise spec_error(exc) from exc
    if queued is not None:
        quotas.charge(session, settings, request.app.state.catalog, p, jobs=[queued])
    session.commit()
    return profile_out(_profile(session, comp.id, profile_id))


@router.get("/{profile_id}", response_model=ProfileOut)
def get_profile(comparison_id: ComparisonPath, profile_id: ProfilePath, session: DB,
                _: AnyRole) -> ProfileOut:
    return profile_out(_profile(session, comparison_id, profile_id))


@router.get("/{profile_id}/flame.svg", response_class=Response,
            responses={200: {"content": {"image/svg+xml": {}}}})
def get_flame(comparison_id: ComparisonPath, profile_id: ProfilePath, session: DB,
              _: AnyRole) -> Response:
    row = _profile(session, comparison_id, profile_id)
    if row.body is None:
        raise field_error(404, ["path", "profile_id"], f"profile {profile_id} is "
                          f"{row.state}: no flame graph yet", "not_found")
    return Response(str(flame_svg(row.body)), media_type="image/svg+xml")
