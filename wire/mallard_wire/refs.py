"""Git refs: the one rule for what a job, a request or a webhook may name as a revision.

A ref is a full commit sha (40 or 64 hex digits) or a ref name git accepts
(`git check-ref-format --allow-onelevel`) none of whose components starts with `-` (as
git requires of branch names), at most `REF_MAX` characters: so the value, or a branch
name taken from it, can only ever be read by git as a revision, never as an option.
The API validates every ref it is sent with it (`fields.GitRef`); the runner checks each
one again before git sees it (mallard_runner.guard, which also passes
`--end-of-options`).
"""

from __future__ import annotations

import re

FULL_SHA = re.compile(r"^(?:[0-9a-fA-F]{40}|[0-9a-fA-F]{64})$")
REF_MAX = 255
_REF_FORBIDDEN = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")


def ref_problem(ref: str) -> str | None:
    """Why `ref` is neither a full sha nor a valid ref name (None: it is fine)."""
    if FULL_SHA.fullmatch(ref):
        return None
    if not ref:
        return "empty"
    if len(ref) > REF_MAX:
        return f"longer than {REF_MAX} characters"
    if ref.startswith("-"):
        return "starts with '-'"
    if _REF_FORBIDDEN.search(ref):
        return "contains whitespace, a control character or one of ~ ^ : ? * [ \\"
    if ref == "@" or "@{" in ref:
        return "is '@' or contains '@{'"
    if ".." in ref:
        return "contains '..'"
    if ref.startswith("/") or ref.endswith("/") or "//" in ref:
        return "has an empty path component"
    if ref.endswith("."):
        return "ends with '.'"
    for part in ref.split("/"):
        if part.startswith("."):
            return "has a component starting with '.'"
        if part.startswith("-"):
            return "has a component starting with '-'"
        if part.endswith(".lock"):
            return "has a component ending with '.lock'"
    return None


def check_ref(ref: str) -> str:
    """`ref` (a full sha in lower case), or ValueError saying why it is no ref."""
    why = ref_problem(ref)
    if why is not None:
        raise ValueError(f"must be a full sha or a git ref name: {why}")
    return ref.lower() if FULL_SHA.fullmatch(ref) else ref
