"""Where a project's or job's `repo_url` may point: a per-deployment allow-list.

`MALLARD_REPO_URL_ALLOW` is a comma-separated list of prefixes
`scheme://host[:port][/path]`, e.g. `https://github.com/acme,https://gitlab.example.com`
or, for repositories on the runner's disk, `file:///srv/git`. A URL is allowed when its
scheme, host and port equal an entry's (default ports filled in) and its path lies under
the entry's path (whole segments). A plain absolute path (`/srv/git/x.git`) is the URL
`file:///srv/git/x.git`, so local repositories are allowed only when the deployment
lists a `file://` entry (the demo and the tests do; compose lists `file:///srv/git`).

Refused whatever the list says: user info (`https://x@host`), `..` segments (also
percent-encoded), a leading `-`, whitespace or control characters, `scp`-style
`host:path` (write it as `ssh://host/path`), and any other scheme (`ext::`, `fd::`...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote, urlsplit

SCHEMES = {"https": 443, "http": 80, "ssh": 22, "git": 9418, "file": None}
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


@dataclass(frozen=True)
class Prefix:
    scheme: str
    host: str
    port: int | None
    path: str  # no trailing slash; "" for the whole host

    def covers(self, other: Prefix) -> bool:
        if (self.scheme, self.host, self.port) != (other.scheme, other.host, other.port):
            return False
        return other.path == self.path or other.path.startswith(self.path + "/")


def _parse(url: str, what: str) -> Prefix:
    """The parts of a URL (or absolute path) that the allow-list compares."""
    if not url or url != url.strip() or _BAD_CHARS.search(url):
        raise ValueError(f"{what} must not contain whitespace, backslashes or control "
                         "characters")
    if url.startswith("-"):
        raise ValueError(f"{what} must not start with '-'")
    if url.startswith("/"):
        url = "file://" + url
    if "://" not in url:
        raise ValueError(f"{what} must be a URL (scheme://host/path) or an absolute path; "
                         "write scp-style host:path as ssh://host/path")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"{what}: scheme {scheme!r} is not one of "
                         f"{', '.join(sorted(SCHEMES))}")
    if parts.query or parts.fragment:
        raise ValueError(f"{what} must not have a query or a fragment")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"{what}: bad port") from exc
    if parts.username is not None or parts.password is not None:
        # user@ is where a host is hidden (https://github.com@evil.example); ssh users are
        # part of the allowed prefix only when written there too, so compare the netloc.
        if scheme != "ssh":
            raise ValueError(f"{what} must not carry user info")
    host = (parts.hostname or "").lower()
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError(f"{what}: a file URL names no host (file:///path)")
        host = ""
    elif not host:
        raise ValueError(f"{what} names no host")
    elif scheme == "ssh" and parts.username:
        host = f"{parts.username}@{host}"
    path = parts.path
    segments = unquote(path).split("/")
    if any(seg in ("..", ".") for seg in segments):
        raise ValueError(f"{what} must not contain '.' or '..' path segments")
    if "%" in path:
        raise ValueError(f"{what} must not contain percent-encoded characters")
    return Prefix(scheme, host, port or SCHEMES[scheme], path.rstrip("/"))


@lru_cache(maxsize=8)
def parse_allow_list(text: str) -> tuple[Prefix, ...]:
    """`MALLARD_REPO_URL_ALLOW` -> prefixes; ValueError names a bad entry."""
    out = []
    for item in (i.strip() for i in text.split(",")):
        if item:
            out.append(_parse(item, f"MALLARD_REPO_URL_ALLOW entry {item!r}"))
    return tuple(out)


def check_repo_url(url: str, allow: tuple[Prefix, ...]) -> str | None:
    """None when `url` is allowed, else the reason (for a 422 naming the field)."""
    try:
        target = _parse(url, "repo_url")
    except ValueError as exc:
        return str(exc)
    if any(p.covers(target) for p in allow):
        return None
    if not allow:
        return "no repository URL is allowed: the deployment sets none in " \
               "MALLARD_REPO_URL_ALLOW"
    shown = ", ".join(f"{p.scheme}://{p.host}{p.path}" for p in allow)
    return f"repo_url is not under an allowed prefix (MALLARD_REPO_URL_ALLOW: {shown})"
