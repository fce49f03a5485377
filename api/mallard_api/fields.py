"""Field types that carry a rule about what a value may become downstream.

Everything here ends up somewhere dangerous if it is loose: a ref is passed to git on a
runner, a path is joined to a checkout, a variant becomes environment variables, text
and JSON go into PostgreSQL. Each type states the rule that makes the whole class of
bad values impossible, not a list of bad values.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, StringConstraints

from mallard_api.known import KNOWN_PEERS, VARIANT_KEYS

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


# --- git refs ---------------------------------------------------------------------------
FULL_SHA = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def check_ref(value: str) -> str:
    """A full commit sha (40 or 64 hex digits) or a ref name git accepts
    (`git check-ref-format --allow-onelevel`) none of whose components starts with `-`
    (as git requires of branch names): so the value, or the branch name taken from it,
    can only ever be read by git as a revision, never as an option."""
    if FULL_SHA.match(value):
        return value.lower()
    if value.startswith("-"):
        raise ValueError("must not start with '-'")
    if _REF_FORBIDDEN.search(value):
        raise ValueError("must be a full sha or a git ref name: no whitespace, control "
                         "characters or any of ~ ^ : ? * [ \\")
    if value == "@" or "@{" in value or ".." in value or "//" in value:
        raise ValueError("must be a git ref name: not '@', no '@{', '..' or '//'")
    if value.startswith("/") or value.endswith(("/", ".")):
        raise ValueError("must be a git ref name: not starting with '/' nor ending with "
                         "'/' or '.'")
    for part in value.split("/"):
        if part.startswith((".", "-")) or part.endswith(".lock"):
            raise ValueError("must be a git ref name: no component starting with '.' or "
                             "'-' or ending with '.lock'")
    return value


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


# --- variants -----------------------------------------------------------------------------
_VALUE = re.compile(r"^[A-Za-z0-9_.-]+$")


def check_variant(value: str) -> str:
    """`key=value[,key=value...]`: a known key (the allocator's options) and a value of
    `[A-Za-z0-9_.-]`, each key once; "" is the default configuration."""
    if value == "":
        return value
    seen = set()
    for pair in value.split(","):
        key, sep, val = pair.partition("=")
        if not sep or key not in VARIANT_KEYS:
            raise ValueError(f"must be key=value[,key=value...] with a key among "
                             f"{', '.join(VARIANT_KEYS)}; got {pair[:40]!r}")
        if not _VALUE.match(val):
            raise ValueError(f"the value of {key} must be letters, digits, '_', '.' or '-'")
        if key in seen:
            raise ValueError(f"{key} is given twice")
        seen.add(key)
    return value


Variant = Annotated[str, StringConstraints(max_length=500), AfterValidator(check_variant)]


def check_peer(value: str) -> str:
    if value not in KNOWN_PEERS:
        raise ValueError(f"unknown peer {value!r}; known: {', '.join(KNOWN_PEERS)}")
    return value


Peer = Annotated[str, StringConstraints(max_length=40), AfterValidator(check_peer)]
# A name that is never a path or an option (suites, workloads, arches).
Word = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}$")]
