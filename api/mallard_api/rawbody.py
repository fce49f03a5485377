"""Request bodies parsed once, in Rust, after the caller is authenticated.

A route that declares its body as a pydantic parameter has it read, decoded by
`json.loads` and validated in Python before any dependency runs. For the hot results
post, the route instead reads the raw bytes once the token is checked
(routes/results.py) and validates them with pydantic's `model_validate_json` (parse and
validation in one pass in Rust): about a third of the API's CPU per 100-trial post went to the
double parse (api/README.md, "Benchmark"). The body's cap is unchanged (the
BodyLimitMiddleware, before anything is read).

A body the fast path refuses is parsed again the usual way (`strict_json`, then
`model_validate`), so every refusal, and every body only that way accepts (text with a
lone surrogate, which a log field keeps as U+FFFD), is answered exactly as before: a
422 naming the field, `["body", ...]`. `body_schema(Model)` keeps the body's schema in
the OpenAPI document (`openapi_extra`; `add_schemas` puts the models into its
components).
"""

from __future__ import annotations

import json
import re
from typing import TypeVar

from fastapi.exceptions import RequestValidationError
from mallard_wire.fields import JsonDict
from pydantic import BaseModel, ValidationError
from pydantic.json_schema import models_json_schema

from mallard_api.errors import strict_json

M = TypeVar("M", bound=BaseModel)
_MODELS: list[type[BaseModel]] = []  # bodies of raw routes, for the OpenAPI components
REF = "#/components/schemas/{model}"


# A JSON string, or an unterminated one up to the end (possessive: linear time whatever
# the bytes).
_JSON_STRING = re.compile(rb'"(?:[^"\\]++|\\.)*+(?:"|\Z)', re.DOTALL)


def json_values(raw: bytes, limit: int) -> int:
    """About how many values (array elements, object members) a JSON body holds: its
    commas outside strings, plus one. What parsing and validating a body costs grows
    with its values more than with its bytes (~100 bytes of memory each, however short:
    `[1,1,1,...]` costs 30 times its size), so a cap on them, checked before `parse`,
    bounds a post's memory. Commas inside strings are left out only when counting them
    all passes `limit` (string by string, in constant memory, until the rest fits)."""
    count = raw.count(b",") + 1
    if count <= limit:
        return count
    for m in _JSON_STRING.finditer(raw):
        count -= raw.count(b",", m.start(), m.end())
        if count <= limit:
            break
    return count


def parse(model: type[M], raw: bytes) -> M:
    """The body as `model`, or a RequestValidationError (a 422 at ["body", ...])."""
    try:
        return model.model_validate_json(raw)
    except ValidationError:
        pass  # answered below, as the usual path answers it
    if not raw:
        raise RequestValidationError([{"type": "missing", "loc": ("body",),
                                       "msg": "Field required", "input": None}])
    try:
        data = strict_json(raw)
    except UnicodeDecodeError as exc:
        raise _json_invalid("not UTF-8", exc.start) from exc
    except json.JSONDecodeError as exc:
        raise _json_invalid(exc.msg, exc.pos) from exc
    try:  # from_attributes: as FastAPI validates a body (the same error types)
        return model.model_validate(data, from_attributes=True)
    except ValidationError as exc:
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])}
                                      for e in exc.errors(include_url=False)]) from exc


def _json_invalid(msg: str, pos: int) -> RequestValidationError:
    return RequestValidationError([{"type": "json_invalid", "loc": ("body", pos),
                                    "msg": "JSON decode error", "input": {},
                                    "ctx": {"error": msg}}])


def body_schema(model: type[BaseModel]) -> JsonDict:
    """`openapi_extra` of a route that parses `model` from its raw body."""
    if model not in _MODELS:
        _MODELS.append(model)
    return {"requestBody": {"required": True, "content": {"application/json": {
        "schema": {"$ref": REF.format(model=model.__name__)}}}}}


def add_schemas(doc: JsonDict) -> None:
    """Put the raw routes' body models (and the models they use) into the document's
    components, keeping any of the same name FastAPI already wrote."""
    _, top = models_json_schema([(m, "validation") for m in _MODELS], ref_template=REF)
    components = doc.setdefault("components", {})
    schemas = components.setdefault("schemas", {}) if isinstance(components, dict) else None
    if not isinstance(schemas, dict):
        raise TypeError("the OpenAPI document's components.schemas is not an object")
    for name, schema in top.get("$defs", {}).items():
        schemas.setdefault(name, schema)
