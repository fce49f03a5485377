"""What a job may name: refs, folders inside the checkout, repositories on an allow-list.

A job spec comes from the API, and the API takes it from users and forges: the
runner treats it as hostile data. Every value that reaches git, cmake or the file
system passes one of these checks first:

- a ref is a full hex sha or a valid git ref name, never starting with `-` (the rule is
  `mallard_wire.refs`, the API's too); git gets it after `--end-of-options` anyway;
- `allocator_dir` is a relative path that stays inside the checkout, symlinks
  resolved;
- `repo_url` is a repository URL git may be given (the rule is `mallard_wire.repo_urls`, the
  API's too) on the runner's own allow-list (MALLARD_RUNNER_REPO_ALLOW): a scheme and
  host (and port), or for `file://` a folder local repositories must be under, both
  sides of that comparison resolved on this disk (symlinks, `..`). git itself may then
  speak only the one protocol that was checked (GIT_ALLOW_PROTOCOL), never follows HTTP
  redirects, never runs `ext::`.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path, PurePosixPath

from mallard_wire.refs import ref_problem
from mallard_wire.repo_urls import Location, Prefix, allowed, parse_prefixes, parse_repo_url


class Refused(ValueError):
    """A job value the runner will not use; the message says which and why."""


def _show(value: str, limit: int = 120) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


# -- refs -----------------------------------------------------------------------------
def check_ref(ref: str) -> str:
    why = ref_problem(ref) if isinstance(ref, str) else "not a string"
    if why is not None:
        raise Refused(f"commit {_show(str(ref))} refused: not a full sha or a valid ref name "
                      f"({why})")
    return ref


# -- folders inside the checkout ------------------------------------------------------
def check_relative_dir(rel: str, what: str = "allocator_dir") -> str:
    """A relative path without `..`, absolute parts, backslashes or control characters."""
    if not isinstance(rel, str) or not rel or len(rel) > 255:
        raise Refused(f"{what} {_show(str(rel))} refused: empty or too long")
    if re.search(r"[\x00-\x1f\x7f\\]", rel):
        raise Refused(f"{what} {_show(rel)} refused: control character or backslash")
    p = PurePosixPath(rel)
    if p.is_absolute():
        raise Refused(f"{what} {_show(rel)} refused: an absolute path (it must be relative "
                      "to the repository)")
    if any(part == ".." for part in p.parts):
        raise Refused(f"{what} {_show(rel)} refused: '..' leaves the repository")
    if any(part.startswith("-") for part in p.parts):
        raise Refused(f"{what} {_show(rel)} refused: a component starts with '-'")
    return rel


def inside(tree: Path, rel: str, what: str = "allocator_dir") -> Path:
    """`tree/rel`, proven inside `tree` once symlinks are resolved."""
    check_relative_dir(rel, what)
    root = tree.resolve()
    target = (root / rel).resolve()
    if target != root and root not in target.parents:
        raise Refused(f"{what} {_show(rel)} refused: it resolves outside the checkout "
                      "(a symlink)")
    return target


# -- repositories -----------------------------------------------------------------------
def parse_rules(text: str) -> tuple[Prefix, ...]:
    """MALLARD_RUNNER_REPO_ALLOW: `https://github.com`, `ssh://git.example.org:2222`,
    `file:///srv/git`; a host entry allows every repository of that host, a `file` entry
    the folder as resolved on this disk."""
    rules = parse_prefixes(text, "repo allow-list")
    for rule in rules:
        if rule.scheme != "file" and rule.path:
            raise ValueError(f"repo allow-list entry {str(rule)!r}: a host, not a path "
                             "(every repository of an allowed host is allowed)")
    return tuple(replace(r, path=os.path.realpath(r.path or "/").rstrip("/"))
                 if r.scheme == "file" else r for r in rules)


def classify(url: str) -> Location:
    """What kind of repository `url` is, a local one resolved on this disk; refuses what
    git must never be given."""
    try:
        repo = parse_repo_url(url)
    except ValueError as e:
        raise Refused(f"repo_url {_show(url)} refused: {e}") from e
    if repo.scheme == "file":
        return replace(repo, path=os.path.realpath(repo.path))
    return repo


def check_repo(url: str, rules: tuple[Prefix, ...]) -> Location:
    """`url` if the allow-list permits it, else Refused naming the list."""
    repo = classify(url)
    if allowed(repo, rules):
        return repo
    shown = ", ".join(str(r) for r in rules) or "nothing (MALLARD_RUNNER_REPO_ALLOW is empty)"
    raise Refused(f"repo_url {_show(url)} refused: not on this runner's allow-list ({shown})")


def git_env(source: str) -> dict[str, str]:
    """The environment git runs with for `source`: only its own protocol, no prompts."""
    protocol = classify(source).scheme if source else "file"
    return {"GIT_ALLOW_PROTOCOL": protocol, "GIT_TERMINAL_PROMPT": "0",
            "GIT_PROTOCOL_FROM_USER": "0"}


# -c options for every git command that may talk to a remote
GIT_SAFE_CONFIG = ["-c", "protocol.ext.allow=never", "-c", "http.followRedirects=false"]
