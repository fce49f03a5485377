"""Testbeds: the noise of one, as its latest calibrations measured it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Path
from mallard_wire.fields import INT32_MAX
from sqlalchemy.orm import Session

from mallard_api.auth import AnyRole, field_error
from mallard_api.deps import get_session
from mallard_api.errors import StrictJsonRoute
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.calibrations import NoiseOut
from mallard_api.sql import calibrations as sql

router = APIRouter(prefix="/testbeds", tags=["testbeds"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]


@router.get("/{testbed_id}/noise", response_model=NoiseOut,
            responses={404: {"model": ErrorOut}})
def get_noise(testbed_id: Annotated[int, Path(ge=1, le=INT32_MAX)], session: DB,
              _: AnyRole) -> NoiseOut:
    tb = sql.testbed(session, testbed_id)
    if tb is None:
        raise field_error(404, ["path", "testbed_id"], f"no testbed {testbed_id}", "not_found")
    return NoiseOut(testbed_id=tb.id, fingerprint=tb.fingerprint, arch=tb.arch,
                    cpu_model=tb.cpu_model,
                    series=sql.latest_noise(session, tb.fingerprint))
