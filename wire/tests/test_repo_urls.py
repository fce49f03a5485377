"""The repository URL rule (repo_urls.py): what a repo_url may be, what an allow-list entry
may be, and when an entry covers a repository; the API and the runner both use it."""

from __future__ import annotations

import pytest
from mallard_wire.repo_urls import (
    Location,
    Prefix,
    allowed,
    parse_prefix,
    parse_prefixes,
    parse_repo_url,
    resolved,
)


@pytest.mark.parametrize("url,parts", [
    ("https://github.com/acme/m.git", ("https", "github.com", 443, "/acme/m.git", None)),
    ("HTTPS://GitHub.com:443/acme/m", ("https", "github.com", 443, "/acme/m", None)),
    ("http://127.0.0.1:8401/x.git", ("http", "127.0.0.1", 8401, "/x.git", None)),
    ("git://git.example.org/m", ("git", "git.example.org", 9418, "/m", None)),
    ("ssh://git@git.example.org:2222/m.git", ("ssh", "git.example.org", 2222, "/m.git", "git")),
    ("https://[::1]:8443/m", ("https", "::1", 8443, "/m", None)),
    ("file:///srv/git/m.git", ("file", "", None, "/srv/git/m.git", None)),
    ("file://localhost/srv/git/x", ("file", "", None, "/srv/git/x", None)),
    ("/srv/git/m.git", ("file", "", None, "/srv/git/m.git", None)),
    ("/srv/git/sub/../m.git", ("file", "", None, "/srv/git/sub/../m.git", None)),
])
def test_parts(url, parts):
    repo = parse_repo_url(url)
    assert (repo.scheme, repo.host, repo.port, repo.path, repo.user) == parts
    assert not repo.scp


def test_scp_like_is_ssh_and_says_so():
    assert parse_repo_url("git@git.example.org:team/m.git") == Location(
        "ssh", "git.example.org", 22, "team/m.git", user="git", scp=True)
    assert parse_repo_url("github.com:o/m.git").scp


@pytest.mark.parametrize("url,why", [
    ("", "empty"),
    ("https://h.example/" + "x" * 2048, "longer than 2048"),
    ("--upload-pack=touch /tmp/x", "starts with '-'"),
    ("-oProxyCommand=x", "starts with '-'"),
    ("ext::sh -c touch% /tmp/pwned", "remote-helper"),
    ("fd::17", "remote-helper"),
    (" https://github.com/acme/x", "whitespace"),
    ("https://github.com/acme/x\n", "control character"),
    ("https://github.com\\@127.0.0.1/x", "backslash"),
    ("https://github.com/acme/%2e%2e/other", "percent-encoded"),
    ("file:///srv/git/%2e%2e/etc", "percent-encoded"),
    ("https://github.com/x?a=b", "may not have"),
    ("https://github.com/x#frag", "may not have"),
    ("https://github.com/ü", "may not have"),
    ("ftp://github.com/x", "scheme"),
    ("https://h:99999/x", "bad port"),
    ("https://github.com@evil.example/acme/x", "user info"),
    ("https://user:secret@github.com/acme/x", "user info"),
    ("ssh://git:secret@github.com/acme/x", "user info"),
    ("https:///x", "names no host"),
    ("https://bad_host.example/x", "no valid host"),
    ("file://host/srv/git/x", "names no host"),
    ("https://github.com/acme/../other/x", "'..'"),
    ("https://github.com/acme/./x", "'.'"),
    ("relative/path", "absolute path"),
])
def test_refused(url, why):
    with pytest.raises(ValueError, match=why):
        parse_repo_url(url)


ALLOW = "https://github.com/acme,https://gitlab.example.com,ssh://git@github.com," \
        "ssh://git.example.org,file:///srv/git"


@pytest.mark.parametrize("url", [
    "https://github.com/acme/mallard.git", "https://github.com/acme", "https://github.com/acme/",
    "https://GitHub.com:443/acme/x", "https://gitlab.example.com/group/sub/x.git",
    "ssh://git@github.com/acme/x.git", "ssh://git.example.org/m.git",
    "ssh://anyone@git.example.org/m.git", "git@git.example.org:team/m.git",
    "git@github.com:acme/x.git",  # the whole host, for the login the entry names
    "/srv/git/mallard.git", "file:///srv/git/mallard.git", "file://localhost/srv/git/x",
])
def test_covered(url):
    assert allowed(parse_repo_url(url), parse_prefixes(ALLOW, "TEST"))


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8401/internal-only/secret.git",  # SSRF
    "https://github.com/acmecorp/x",  # a prefix of whole segments, not of characters
    "https://github.com/other/x", "http://github.com/acme/x", "https://github.com:8443/acme",
    "https://evil.example/github.com/acme", "https://github.com.evil.example/acme",
    "ssh://github.com/acme/x", "ssh://evil@github.com/acme/x",  # the entry names its login
    "file:///etc/passwd", "/srv/gitx/y",
    "/srv/git/../../etc/x",  # a local path is compared once resolved
])
def test_not_covered(url):
    assert not allowed(parse_repo_url(url), parse_prefixes(ALLOW, "TEST"))


def test_an_scp_path_is_relative_to_the_login_home():
    """`host:acme/x` is ~/acme/x on the host, so a prefix with a path never covers it."""
    assert not allowed(parse_repo_url("git@github.com:acme/x.git"),
                       parse_prefixes("ssh://git@github.com/acme", "TEST"))


def test_entries():
    assert parse_prefix("https://github.com/acme/") == Prefix("https", "github.com", 443, "/acme")
    assert parse_prefix("/srv/git") == parse_prefix("file:///srv/git") == Prefix(
        "file", "", None, "/srv/git")
    assert [str(p) for p in parse_prefixes(ALLOW + ",https://h.example:8443", "TEST")] == [
        "https://github.com/acme", "https://gitlab.example.com", "ssh://git@github.com",
        "ssh://git.example.org", "file:///srv/git", "https://h.example:8443"]
    assert parse_prefixes(" , ", "TEST") == ()


@pytest.mark.parametrize("entry,why", [
    ("github.com", "absolute path"), ("ftp://x", "scheme"), ("https://a@b", "user info"),
    ("file://host/x", "names no host"), ("https://x/../y", "'..'"), ("/srv/git/../x", "'..'"),
    ("git@github.com:acme", "ssh://host/path"), ("https://", "names no host"),
    ("https://h:99999", "bad port"),
])
def test_bad_entries_name_the_setting(entry, why):
    with pytest.raises(ValueError, match=f"^SETTING entry {entry!r}: .*{why}"):
        parse_prefixes(f"https://fine.example,{entry}", "SETTING")


def test_resolved():
    assert resolved("/srv/git/m.git") and resolved("team/m.git") and resolved("")
    assert not resolved("/srv/git/../m.git") and not resolved("/srv/./git")
