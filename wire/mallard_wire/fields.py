"""Field types that carry a rule about what a value may become downstream.

Everything here ends up somewhere dangerous if it is loose: a ref is passed to git on a
runner, a path is joined to a checkout, a variant becomes environment variables, text
and JSON go into PostgreSQL. Each type states the rule that makes the whole class of
bad values impossible, not a list of bad values.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetPydanticSchema,
    JsonValue,
    StringConstraints,
    TypeAdapter,
    WithJsonSchema,
)
from pydantic_core import core_schema

from mallard_wire.refs import FULL_SHA, check_ref

MAX_JSON_DEPTH = 32


def check_text(value: str) -> str:
    if "\x00" in value:
        raise ValueError("must not contain NUL characters")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError("must be valid UTF-8 (no lone surrogates)") from exc
    return value


def check_json(value: Any, depth: int = 0) -> Any:
    """A JSON value PostgreSQL can store as jsonb and that is not absurdly deep."""
    if depth > MAX_JSON_DEPTH:
        raise ValueError(f"nested too deeply (more than {MAX_JSON_DEPTH} levels)")
    if isinstance(value, str):
        return check_text(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        if abs(value) > 10**300:
            raise ValueError("number too large")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("numbers must be finite (no NaN or Infinity)")
        return value
    if isinstance(value, list):
        return [check_json(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {check_text(str(k)): check_json(v, depth + 1) for k, v in value.items()}
    raise ValueError(f"unsupported JSON value of type {type(value).__name__}")


# --- git refs (the rule is refs.py) -------------------------------------------------------
GitRef = Annotated[str, StringConstraints(min_length=1, max_length=200),
                   AfterValidator(check_text), AfterValidator(check_ref)]
FullSha = Annotated[str, StringConstraints(pattern=FULL_SHA.pattern),
                    AfterValidator(str.lower)]


# --- paths inside a checkout -------------------------------------------------------------
_SEGMENT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")


def check_relative_path(value: str) -> str:
    """A relative path that stays inside the folder it is joined to: segments of
    `[A-Za-z0-9_.-]` that do not start with `.` or `-` (so no `..`, no hidden files, no
    option), not absolute, no empty segments."""
    if value.startswith("/"):
        raise ValueError("must be a relative path inside the checkout, not absolute")
    parts = value.split("/")
    for part in parts:
        if not _SEGMENT.match(part):
            raise ValueError("must be a relative path inside the checkout: segments of "
                             "letters, digits, '_', '.', '-', not starting with '.' or "
                             "'-', no '..' or empty segments")
    return value


RelativePath = Annotated[str, StringConstraints(min_length=1, max_length=200),
                         AfterValidator(check_relative_path)]


# --- allocator names -----------------------------------------------------------------------
# What a trial's allocator is called: a project's name (a build of it) or an entry of the
# node's catalogue of system allocators (glibc, the Debian peers, any library the node's
# operator lists: runner/README.md).
ALLOCATOR_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,99}$")
AllocatorName = Annotated[str, StringConstraints(pattern=ALLOCATOR_NAME.pattern)]
# A name that is never a path or an option (suites, workloads, arches).
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")]


# --- bounded types: what passes validation can be stored ------------------------------------
# No NUL characters or lone surrogates in text (PostgreSQL rejects them), finite floats
# only, integers within their column's range. A violation is a 422 that names the field.
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


# Text PostgreSQL can store: no NUL (the pattern), no lone surrogates (pydantic-core
# refuses those for any constrained string). Checked in Rust, not in a Python callback.
NO_NUL = r"^[^\x00]*$"
Text = Annotated[str, StringConstraints(max_length=1_000_000, pattern=NO_NUL)]


_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def _clean_log(value: Any) -> Any:
    """Logs and stderr tails are kept, not rejected: characters PostgreSQL cannot store
    (NUL, lone surrogates) become U+FFFD (before the string is validated: pydantic
    refuses lone surrogates in any constrained string)."""
    return _UNSTORABLE.sub("\ufffd", value) if isinstance(value, str) else value


LogText = Annotated[str, StringConstraints(max_length=1_000_000), BeforeValidator(_clean_log)]


Str200 = Annotated[str, StringConstraints(max_length=200, pattern=NO_NUL)]
Str500 = Annotated[str, StringConstraints(max_length=500, pattern=NO_NUL)]


Name = Annotated[
    str, StringConstraints(min_length=1, max_length=200, strip_whitespace=True,
                           pattern=NO_NUL),
]
Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{4,64}$")]
MeasureName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")]
MAX_MEASURES = 32  # per trial (~25 with perf's counts, the memory and latency measures)



# Values inside one nested object or array of a `JsonObject` (a workload's params, a
# trial's counters): what a results post makes of them (hashes, canonical JSON, jsonb)
# stays a small multiple of the body.
MAX_NESTED_VALUES = 1_000


def _too_many_values(value: Any, limit: int) -> bool:
    """Whether `value` holds more than `limit` values (looks at no more than that)."""
    stack, seen = [value], 0
    while stack:
        item = stack.pop()
        seen += 1
        if isinstance(item, list | dict):
            if seen + len(item) > limit:
                return True
            stack.extend(item.values() if isinstance(item, dict) else item)
    return seen > limit


def _nested(value: Any) -> Any:
    if _too_many_values(value, MAX_NESTED_VALUES):
        raise ValueError(f"more than {MAX_NESTED_VALUES} values")
    return check_json(value, 1)


# Free-form JSON (a forge's webhook body before parsing, a workload's params, a trial's
# counters, an OpenAPI document): one name on both sides, read by narrowing with
# isinstance. Records whose fields are known are TypedDicts or models, not this.
JsonDict = dict[str, JsonValue]
_JSON_VALUE: TypeAdapter[JsonValue] = TypeAdapter(JsonValue)


def as_json(value: object) -> JsonValue:
    """A record (a TypedDict, a list of them) as the JSON value it is, checked once."""
    return _JSON_VALUE.validate_python(value)

# JSON objects PostgreSQL can store (check_json's rules). `JsonObject` (a workload's
# params, a trial's counters: a hundred per results post) has its values checked in Rust,
# a nested object or array by check_json (a Python walk of every value cost ~5 % of the
# API's CPU per results post); a bad value is one error naming its key ("json_value"),
# not one per alternative. `JsonDocument` (artifacts: one per post, often nested) is
# walked whole, its errors at the field.
_JSON_VALUES = core_schema.union_schema([
    core_schema.bool_schema(strict=True),
    core_schema.int_schema(strict=True, ge=-(10**300), le=10**300),
    core_schema.float_schema(strict=True, allow_inf_nan=False),
    core_schema.str_schema(pattern=NO_NUL),
    core_schema.none_schema(),
    core_schema.no_info_after_validator_function(_nested, core_schema.union_schema([
        core_schema.dict_schema(), core_schema.list_schema()])),
], custom_error_type="json_value", custom_error_message=(
    "must be a JSON value PostgreSQL can store: finite numbers (|n| <= 1e300), text "
    f"without NUL characters, objects and arrays nested at most {MAX_JSON_DEPTH} levels "
    f"holding at most {MAX_NESTED_VALUES} values"))
JsonObject = Annotated[
    JsonDict,
    GetPydanticSchema(lambda _tp, _handler: core_schema.dict_schema(
        core_schema.str_schema(pattern=NO_NUL), _JSON_VALUES)),
    WithJsonSchema({"type": "object", "additionalProperties": True}),
]
JsonDocument = Annotated[
    JsonDict,
    GetPydanticSchema(lambda _tp, handler: handler(dict[str, Any])),  # checked whole below
    AfterValidator(check_json),
]
# A number (an integer or a float, finite), never a boolean or a numeric string.
FiniteFloat = Annotated[float, Field(allow_inf_nan=False, strict=True)]
Int32 = Annotated[int, Field(ge=-(2**31), le=INT32_MAX)]
RunnerId = Annotated[int, Field(ge=1, le=INT32_MAX)]
JobId = Annotated[int, Field(ge=1, le=INT64_MAX)]
LeaseSeconds = Annotated[int, Field(ge=1, le=7 * 86400)]


class InModel(BaseModel):
    """Every request body: a field it does not know (a misspelling) is a 422 naming it."""

    model_config = ConfigDict(extra="forbid")


RepoUrl = Annotated[str, StringConstraints(min_length=1, max_length=2000, pattern=NO_NUL)]
BranchName = Annotated[GitRef, StringConstraints(max_length=200)]

# what people and tools also call an architecture -> the kernel's name (`uname -m`), the one
# runners register with and jobs are queued for (the runner's arch.py reads it too)
ARCH_ALIASES = {"arm64": "aarch64", "amd64": "x86_64", "x64": "x86_64"}


def normalize_arch(value: str) -> str:
    """`arm64` -> `aarch64`, `AMD64` -> `x86_64`; other names as they are."""
    return ARCH_ALIASES.get(value.lower(), value)


Arch = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]{1,40}$"),
                 AfterValidator(normalize_arch)]
Label = Literal["base", "head", "peer"]
# noise controls a testbed reports (runner/README.md)
Turbo = Literal["on", "off", "unknown"]
Aslr = Literal["on", "off"]
# what a job or comparison may ask the runner to run (None: the whole suite)
Workloads = Annotated[list[Word], Field(min_length=1, max_length=100)]
Threads = Annotated[list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1, max_length=64)]
Warmup = Annotated[int, Field(ge=0, le=100)]
