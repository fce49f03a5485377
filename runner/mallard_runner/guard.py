"""What a job may name: refs, folders inside the checkout, repositories on an allow-list.

A job spec comes from the API, and the API takes it from users and forges: the
runner treats it as hostile data. Every value that reaches git, cmake or the file
system passes one of these checks first:

- a ref is a full hex sha or a valid git ref name (git check-ref-format rules),
  never starting with `-`; git gets it after `--end-of-options` anyway;
- `allocator_dir` is a relative path that stays inside the checkout, symlinks
  resolved;
- `repo_url` matches the runner's allow-list (MALLARD_RUNNER_REPO_ALLOW): a scheme
  and host (and port), or for `file://` a folder local repositories must be under.
  git itself may then speak only the one protocol that was checked
  (GIT_ALLOW_PROTOCOL), never follows HTTP redirects, never runs `ext::`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit


class Refused(ValueError):
    """A job value the runner will not use; the message says which and why."""


def _show(value: str, limit: int = 120) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


# -- refs -----------------------------------------------------------------------------
_FULL_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_REF_BAD_CHARS = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]")
REF_MAX = 255


def ref_problem(ref: str) -> str | None:
    """Why `ref` is neither a full sha nor a valid ref name (None: it is fine).

    The rules of `git check-ref-format --allow-onelevel`, plus: never starting with `-`
    (git would read an option), at most 255 characters.
    """
    if _FULL_SHA.fullmatch(ref):
        return None
    if not ref:
        return "empty"
    if len(ref) > REF_MAX:
        return f"longer than {REF_MAX} characters"
    if ref.startswith("-"):
        return "starts with '-'"
    if _REF_BAD_CHARS.search(ref):
        return "contains a space, a control character or one of ~ ^ : ? * [ \\"
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
        if part.endswith(".lock"):
            return "has a component ending with '.lock'"
    return None


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
SCHEMES = ("https", "http", "ssh", "git", "file")
DEFAULT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
_HOST = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*"
                   r"|\[[0-9a-f:.]+\]")
_URL_CHARS = re.compile(r"[A-Za-z0-9._~:/@!$&'()*+,;=%\[\]-]+")
_SCP = re.compile(r"(?:[A-Za-z0-9._-]+@)?(?P<host>[^@/:\[\]]+|\[[0-9A-Fa-f:.]+\]):(?P<path>.*)")


@dataclass(frozen=True)
class Rule:
    """One allow-list entry: scheme + host (+ port), or `file` + a folder."""

    scheme: str
    host: str | None = None
    port: int | None = None
    root: Path | None = None

    def __str__(self) -> str:
        if self.scheme == "file":
            return f"file://{self.root}"
        return f"{self.scheme}://{self.host}" + (f":{self.port}" if self.port else "")


@dataclass(frozen=True)
class Source:
    """A checked repository: what git is given and the one protocol it may use."""

    url: str
    protocol: str  # https, http, ssh, git or file (GIT_ALLOW_PROTOCOL)
    host: str | None = None
    port: int | None = None
    path: Path | None = None  # local repositories: the resolved folder


def parse_rule(entry: str) -> Rule:
    """`https://github.com`, `ssh://git.example.org:2222`, `file:///srv/git`."""
    entry = entry.strip()
    parts = urlsplit(entry)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES or "://" not in entry:
        raise ValueError(f"repo allow-list entry {entry!r}: expected scheme://host[:port] "
                         f"({', '.join(s for s in SCHEMES if s != 'file')}) or file:///folder")
    if parts.query or parts.fragment:
        raise ValueError(f"repo allow-list entry {entry!r}: no query or fragment")
    if scheme == "file":
        if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
            raise ValueError(f"repo allow-list entry {entry!r}: file:///absolute/folder")
        return Rule("file", root=Path(os.path.realpath(parts.path)))
    host = (parts.hostname or "").lower()
    if not host or not _HOST.fullmatch(host if not host.count(":") else f"[{host}]"):
        raise ValueError(f"repo allow-list entry {entry!r}: no valid host")
    if parts.path not in ("", "/"):
        raise ValueError(f"repo allow-list entry {entry!r}: a host, not a path "
                         "(every repository of an allowed host is allowed)")
    try:
        port = parts.port
    except ValueError as e:
        raise ValueError(f"repo allow-list entry {entry!r}: {e}") from e
    return Rule(scheme, host=host.strip("[]"), port=port)


def parse_rules(text: str) -> tuple[Rule, ...]:
    return tuple(parse_rule(e) for e in text.split(",") if e.strip())


def classify(url: str) -> Source:
    """What kind of repository `url` is; refuses what git must never be given."""
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise Refused("repo_url refused: empty or longer than 2048 characters")
    if url.startswith("-"):
        raise Refused(f"repo_url {_show(url)} refused: starts with '-'")
    if re.match(r"[A-Za-z][A-Za-z0-9+.-]*::", url):
        raise Refused(f"repo_url {_show(url)} refused: git remote-helper syntax "
                      "(transport::address, e.g. ext::) is never allowed")
    if re.search(r"[\x00-\x20\x7f\\]", url):
        raise Refused(f"repo_url {_show(url)} refused: whitespace, a control character "
                      "or a backslash")
    if "://" in url:
        if not _URL_CHARS.fullmatch(url):
            raise Refused(f"repo_url {_show(url)} refused: characters a URL may not have")
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            raise Refused(f"repo_url {_show(url)} refused: scheme {scheme!r} is not one of "
                          f"{', '.join(SCHEMES)}")
        if parts.query or parts.fragment:
            raise Refused(f"repo_url {_show(url)} refused: a query or fragment")
        if scheme == "file":
            if parts.netloc not in ("", "localhost"):
                raise Refused(f"repo_url {_show(url)} refused: file:// with a host")
            return Source(url, "file", path=Path(os.path.realpath(parts.path or "/")))
        host = (parts.hostname or "").lower()
        try:
            port = parts.port
        except ValueError as e:
            raise Refused(f"repo_url {_show(url)} refused: {e}") from e
        if not host or not _HOST.fullmatch(host if ":" not in host else f"[{host}]"):
            raise Refused(f"repo_url {_show(url)} refused: no valid host name")
        return Source(url, scheme, host=host, port=port or DEFAULT_PORTS[scheme])
    m = _SCP.fullmatch(url)
    if m and "/" not in url.split(":", 1)[0]:  # git's scp-like syntax: [user@]host:path
        host = m.group("host").lower().strip("[]")
        if not _HOST.fullmatch(host if ":" not in host else f"[{host}]"):
            raise Refused(f"repo_url {_show(url)} refused: no valid host name")
        return Source(url, "ssh", host=host, port=DEFAULT_PORTS["ssh"])
    if not url.startswith("/"):
        raise Refused(f"repo_url {_show(url)} refused: a local repository must be an "
                      "absolute path")
    return Source(url, "file", path=Path(os.path.realpath(url)))


def check_repo(url: str, rules: tuple[Rule, ...]) -> Source:
    """`url` if the allow-list permits it, else Refused naming the list."""
    src = classify(url)
    for rule in rules:
        if rule.scheme != src.protocol:
            continue
        if src.protocol == "file":
            assert rule.root is not None and src.path is not None
            if src.path == rule.root or rule.root in src.path.parents:
                return src
        elif rule.host == src.host and (rule.port or DEFAULT_PORTS[rule.scheme]) == src.port:
            return src
    allowed = ", ".join(str(r) for r in rules) or "nothing (MALLARD_RUNNER_REPO_ALLOW is empty)"
    raise Refused(f"repo_url {_show(url)} refused: not on this runner's allow-list ({allowed})")


def git_env(source: str) -> dict[str, str]:
    """The environment git runs with for `source`: only its own protocol, no prompts."""
    protocol = classify(source).protocol if source else "file"
    return {"GIT_ALLOW_PROTOCOL": protocol, "GIT_TERMINAL_PROMPT": "0",
            "GIT_PROTOCOL_FROM_USER": "0"}


# -c options for every git command that may talk to a remote
GIT_SAFE_CONFIG = ["-c", "protocol.ext.allow=never", "-c", "http.followRedirects=false"]
