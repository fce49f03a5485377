"""Where a project's, job's or forge's URL may point: the API's allow-lists.

`MALLARD_REPO_URL_ALLOW` (and `MALLARD_FORGE_URL_ALLOW`) is a comma-separated list of
prefixes `scheme://host[:port][/path]`, e.g.
`https://github.com/acme,https://gitlab.example.com` or, for repositories on the runner's
disk, `file:///srv/git`. What a URL may be and when
a prefix covers it is one rule shared with the runner, `mallard_wire.repo_urls`; the API adds
only the form it stores: `scheme://host/path` or an absolute path, never git's scp-like
`host:path`, and a local path without `.` or `..` segments (the API cannot resolve it
on the runner's disk). The demo and the tests list a `file://` entry; compose lists
`file:///srv/git`.
"""

from __future__ import annotations

from functools import lru_cache

from mallard_wire.repo_urls import Prefix, allowed, parse_prefixes, parse_repo_url, resolved

SETTING = "MALLARD_REPO_URL_ALLOW"


@lru_cache(maxsize=8)
def parse_allow_list(text: str) -> tuple[Prefix, ...]:
    """`MALLARD_REPO_URL_ALLOW` -> prefixes; ValueError names a bad entry."""
    return parse_prefixes(text, SETTING)


def check_repo_url(url: str, allow: tuple[Prefix, ...]) -> str | None:
    """None when `url` is allowed, else the reason (for a 422 naming the field)."""
    try:
        repo = parse_repo_url(url)
    except ValueError as exc:
        return f"repo_url refused: {exc}"
    if repo.scp:
        return "repo_url must be a URL (scheme://host/path) or an absolute path; write " \
               "scp-style host:path as ssh://host/path"
    if not resolved(repo.path):
        return "repo_url must not contain '.' or '..' path segments"
    if allowed(repo, allow):
        return None
    if not allow:
        return f"no repository URL is allowed: the deployment sets none in {SETTING}"
    shown = ", ".join(str(p) for p in allow)
    return f"repo_url is not under an allowed prefix ({SETTING}: {shown})"


def same_repository(a: str, b: str) -> bool:
    """Whether two repository URLs name the same repository: the same scheme, host, port
    and path (a local path and its file:// URL alike, a trailing `/` aside; an ssh login
    names who fetches, not what). A URL that does not parse is no repository."""
    try:
        x, y = parse_repo_url(a), parse_repo_url(b)
    except ValueError:
        return False
    return (x.scheme, x.host, x.port, x.path.rstrip("/") or "/") == \
        (y.scheme, y.host, y.port, y.path.rstrip("/") or "/")
