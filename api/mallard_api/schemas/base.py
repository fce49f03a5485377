"""The error and health bodies of the API. The bounded field types every body is made of
are `mallard_wire.fields` (shared with the runner)."""

from __future__ import annotations

from pydantic import BaseModel


class ErrorItem(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ErrorOut(BaseModel):
    detail: list[ErrorItem] | str


class Health(BaseModel):
    status: str
    database: str
