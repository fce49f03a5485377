"""Repository URLs: the one rule for what a `repo_url` may be and for the allow-lists that
say where it may point. The API checks a project's, job's or forge's URL against
`MALLARD_REPO_URL_ALLOW` (mallard_api.urls); the runner checks a job's again against its
own `MALLARD_RUNNER_REPO_ALLOW`, resolving local paths on its disk first
(mallard_runner.guard).

A repository is `scheme://[user@]host[:port]/path` (https, http, ssh, git) or a local
one, `file:///path` or an absolute path; git's scp-like `[user@]host:path` is ssh
(`Location.scp` says it was written so). Refused whatever a list says: an empty value or
one over 2048 characters, a leading `-` (git would read an option), git's remote-helper
syntax (`ext::`, `fd::`), whitespace, control characters and backslashes, characters a
URL may not have (so no query or fragment), percent-encoding (a server or git may decode
`%2e%2e` into `..`), any other scheme, a bad port, user info except an ssh login (a
`user@` is where a host is hidden: `https://github.com@evil.example`), a host that is
not a host name or IP address, a `file://` URL naming a host, and `.` or `..` segments
in a remote path (the server, not the list, would resolve them).

An allow-list is a comma-separated list of prefixes `scheme://[user@]host[:port][/path]`
(or `file:///folder`, or an absolute path). A prefix covers a repository when scheme,
host and port are equal (default ports filled in), the prefix's ssh login, if it names
one, is the repository's, and the repository's path is the prefix's path or lies under
it by whole segments. A local path is compared only once it has no `.` or `..`
segments: the runner resolves it on its disk first (`os.path.realpath`), the API, which
cannot, refuses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

SCHEMES = ("https", "http", "ssh", "git", "file")
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
URL_MAX = 2048
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
                   r"|\[[0-9a-f:.]+\]")
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/@!$&'()*+,;=\[\]-]+")
_SCP = re.compile(r"(?:(?P<user>[A-Za-z0-9._-]+)@)?(?P<host>[^@/:\[\]]+|\[[0-9A-Fa-f:.]+\])"
                  r":(?P<path>.*)")
_REMOTE_HELPER = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::")
_BAD_CHARS = re.compile(r"[\x00-\x20\x7f\\]")


@dataclass(frozen=True)
class Location:
    """A checked repository URL: the parts an allow-list compares."""

    scheme: str  # https, http, ssh, git or file: the one protocol git may speak for it
    host: str = ""  # lower case, no brackets; "" for a local repository
    port: int | None = None  # the default filled in; None for a local repository
    path: str = ""  # as written; for a local repository its absolute path
    user: str | None = None  # an ssh login
    scp: bool = False  # written git's scp-like way, [user@]host:path


def parse_repo_url(url: str) -> Location:
    """The parts of `url`, or ValueError saying why git must never be given it."""
    if not url or len(url) > URL_MAX:
        raise ValueError(f"empty or longer than {URL_MAX} characters")
    if url.startswith("-"):
        raise ValueError("starts with '-'")
    if _REMOTE_HELPER.match(url):
        raise ValueError("git remote-helper syntax (transport::address, e.g. ext::) is never "
                         "allowed")
    if _BAD_CHARS.search(url):
        raise ValueError("whitespace, a control character or a backslash")
    if "%" in url:
        raise ValueError("percent-encoded characters")
    if "://" in url:
        return _parse_url(url)
    m = _SCP.fullmatch(url)
    if m and "/" not in url.split(":", 1)[0]:  # git's scp-like syntax: [user@]host:path
        host = _host(m.group("host").lower())
        return Location("ssh", host, DEFAULT_PORTS["ssh"], m.group("path"),
                        user=m.group("user"), scp=True)
    if not url.startswith("/"):
        raise ValueError("a local repository must be an absolute path")
    return Location("file", path=url)


def _parse_url(url: str) -> Location:
    if not _URL_CHARS.fullmatch(url):
        raise ValueError("characters a URL may not have")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise ValueError(f"scheme {scheme!r} is not one of {', '.join(SCHEMES)}")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise ValueError("a file:// URL names no host (file:///path)")
        return Location("file", path=parts.path or "/")
    try:
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"bad port ({exc})") from exc
    if parts.password is not None or (parts.username is not None and scheme != "ssh"):
        raise ValueError("user info (only an ssh URL names a login, and no password)")
    host = _host((parts.hostname or "").lower())
    if any(seg in (".", "..") for seg in parts.path.split("/")):
        raise ValueError("'.' or '..' path segments")
    return Location(scheme, host, port or DEFAULT_PORTS[scheme], parts.path,
                    user=parts.username)


def _host(host: str) -> str:
    if not host:
        raise ValueError("names no host")
    if not _HOST.fullmatch(host if ":" not in host else f"[{host.strip('[]')}]"):
        raise ValueError("no valid host name")
    return host.strip("[]")


def resolved(path: str) -> bool:
    """Whether a local path can be compared with a prefix: no `.` or `..` segments."""
    return not any(seg in (".", "..") for seg in path.split("/"))


@dataclass(frozen=True)
class Prefix:
    """One allow-list entry."""

    scheme: str
    host: str
    port: int | None
    path: str  # no trailing slash; "" for the whole host
    user: str | None = None

    def covers(self, repo: Location) -> bool:
        if (self.scheme, self.host, self.port) != (repo.scheme, repo.host, repo.port):
            return False
        if self.user is not None and self.user != repo.user:
            return False
        if repo.scheme == "file" and not resolved(repo.path):
            return False
        path = repo.path.rstrip("/")
        return not self.path or path == self.path or path.startswith(self.path + "/")

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.path}"
        user = f"{self.user}@" if self.user else ""
        port = "" if self.port == DEFAULT_PORTS[self.scheme] else f":{self.port}"
        return f"{self.scheme}://{user}{self.host}{port}{self.path}"


def parse_prefix(entry: str) -> Prefix:
    """One allow-list entry (a URL or an absolute path), or ValueError saying why not."""
    loc = parse_repo_url(entry.strip())
    if loc.scp:
        raise ValueError("expected scheme://host[:port][/path], file:///folder or an "
                         "absolute path; write scp-style host:path as ssh://host/path")
    if not resolved(loc.path):
        raise ValueError("'.' or '..' path segments")
    return Prefix(loc.scheme, loc.host, loc.port, loc.path.rstrip("/"), loc.user)


def parse_prefixes(text: str, what: str) -> tuple[Prefix, ...]:
    """A comma-separated allow-list; a bad entry is a ValueError "<what> entry '...': why"."""
    out = []
    for item in (i.strip() for i in text.split(",")):
        if item:
            try:
                out.append(parse_prefix(item))
            except ValueError as exc:
                raise ValueError(f"{what} entry {item!r}: {exc}") from exc
    return tuple(out)


def allowed(repo: Location, allow: tuple[Prefix, ...]) -> bool:
    """Whether an entry of the allow-list covers the repository."""
    return any(p.covers(repo) for p in allow)
