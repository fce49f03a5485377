"""Query-string values that carry JSON: a workload's params as `?params={"threads":2}`,
read once here for the REST series and the pages' images, and refused with a 422
naming `query.params` when they are not a JSON object of workload params."""

from __future__ import annotations

from mallard_wire.fields import JsonDict, check_json

from mallard_api.auth import field_error
from mallard_api.errors import printable, strict_json


def params_object(text: str | None) -> JsonDict | None:
    """The params object `text` holds (None when absent); 422 naming the field."""
    if text is None:
        return None
    try:
        parsed = strict_json(text)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
        check_json(parsed)
    except ValueError as exc:
        raise field_error(422, ["query", "params"], printable(
            f"must be a JSON object of workload params ({exc})")) from exc
    return parsed
