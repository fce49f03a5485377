"""The repo_url allow-list (urls.py)."""

from __future__ import annotations

import pytest
from mallard_api.urls import check_repo_url, parse_allow_list

ALLOW = parse_allow_list("https://github.com/acme,https://gitlab.example.com,"
                         "ssh://git@github.com,file:///srv/git")


@pytest.mark.parametrize("url", [
    "https://github.com/acme/mallard.git", "https://github.com/acme",
    "https://GitHub.com/acme/x", "https://github.com:443/acme/x",
    "https://gitlab.example.com/group/sub/x.git", "ssh://git@github.com/acme/x.git",
    "/srv/git/mallard.git", "file:///srv/git/mallard.git", "file://localhost/srv/git/x",
])
def test_allowed(url):
    assert check_repo_url(url, ALLOW) is None


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8401/internal-only/secret.git",  # SSRF
    "https://github.com/acmecorp/x",  # a prefix, not a path segment
    "https://github.com/other/x", "http://github.com/acme/x", "https://github.com:8443/acme",
    "https://github.com@evil.example/acme/x", "https://evil.example/github.com/acme",
    "https://github.com/acme/../other/x", "https://github.com/acme/%2e%2e/other",
    "file:///etc/passwd", "/srv/git/../../etc/x", "/srv/gitx/y", "file://host/srv/git/x",
    "ext::sh -c touch% /tmp/pwned", "fd::17", "git@github.com:acme/x.git",
    "-uhttps://github.com/acme/x", " https://github.com/acme/x", "https://github.com/acme/x\n",
    "ssh://github.com/acme/x", "ssh://evil@github.com/acme/x", "relative/path",
    "https://github.com/acme/x?upload-pack=x", "https://github.com/acme/x#frag",
])
def test_refused(url):
    assert check_repo_url(url, ALLOW) is not None


def test_empty_list_allows_nothing_and_says_so():
    reason = check_repo_url("https://github.com/acme/x", parse_allow_list(""))
    assert reason and "MALLARD_REPO_URL_ALLOW" in reason


@pytest.mark.parametrize("entry", ["github.com", "ftp://x", "https://a@b", "file://host/x",
                                   "https://x/../y"])
def test_bad_allow_list_entries(entry):
    with pytest.raises(ValueError, match="MALLARD_REPO_URL_ALLOW"):
        parse_allow_list(entry)
