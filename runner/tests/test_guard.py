"""What a job may name (guard.py): refs, folders inside the checkout, allowed repositories
(the ref and URL rules themselves: wire/tests)."""

from __future__ import annotations

import pytest
from mallard_runner.guard import (
    Refused,
    check_ref,
    check_repo,
    classify,
    git_env,
    inside,
    parse_rules,
)

ATTACK = "--upload-pack=touch${IFS}marker;git-upload-pack"


def test_a_full_sha_is_always_fine_and_the_attack_never():
    assert check_ref("f" * 64) == "f" * 64
    with pytest.raises(Refused, match="not a full sha or a valid ref name"):
        check_ref(ATTACK)


@pytest.mark.parametrize("rel", ["/tmp/evil", "../../../../tmp/evil", "allocator/../../x",
                                 "a\\..\\b", "", "-x/y", "a/\x00"])
def test_allocator_dir_must_stay_relative(tmp_path, rel):
    with pytest.raises(Refused):
        inside(tmp_path, rel)


def test_allocator_dir_symlinks_are_resolved(tmp_path):
    tree = tmp_path / "tree"
    (tree / "allocator").mkdir(parents=True)
    (tree / "escape").symlink_to(tmp_path)
    (tree / "fine").symlink_to("allocator")
    assert inside(tree, "allocator") == (tree / "allocator").resolve()
    assert inside(tree, "fine") == (tree / "allocator").resolve()
    assert inside(tree, ".") == tree.resolve()
    with pytest.raises(Refused, match="outside the checkout"):
        inside(tree, "escape")
    with pytest.raises(Refused, match="outside the checkout"):
        inside(tree, "escape/elsewhere")
    # a detour through the outside that comes back in is still inside
    assert inside(tree, "escape/tree/allocator") == (tree / "allocator").resolve()


RULES = "https://github.com,https://git.example.org:8443,ssh://git.example.org,file:///srv/git"


@pytest.mark.parametrize("url", [
    "https://github.com/o/mallard.git", "https://GitHub.com:443/o/m",
    "https://git.example.org:8443/m.git", "ssh://git@git.example.org/m.git",
    "git@git.example.org:team/m.git", "file:///srv/git/m.git", "/srv/git/m.git",
    "/srv/git/sub/../m.git"])
def test_allowed_repositories(url):
    check_repo(url, parse_rules(RULES))


@pytest.mark.parametrize("url,why", [
    ("http://127.0.0.1:8401/internal-only/secret.git", "allow-list"),
    ("https://github.com.evil.example/x", "allow-list"),
    ("https://github.com@127.0.0.1/x", "user info"),
    ("https://github.com:8443/x", "allow-list"),
    ("https://git.example.org/m.git", "allow-list"),  # the rule has port 8443
    ("http://github.com/x", "allow-list"),  # https only
    ("git://github.com/x", "allow-list"),
    ("ssh://github.com/x", "allow-list"),
    ("github.com:o/m.git", "allow-list"),  # scp-like is ssh
    ("file:///etc", "allow-list"),
    ("/srv/git/../../etc", "allow-list"),
    ("/srv/gitx/m.git", "allow-list"),
    ("ext::sh -c touch% /tmp/pwned", "remote-helper"),
    ("https://h.example/a b", "whitespace"),
    ("ext::sh", "remote-helper"),
    ("fd::17", "remote-helper"),
    ("--upload-pack=touch /tmp/x", "starts with '-'"),
    ("-oProxyCommand=x", "starts with '-'"),
    ("relative/path", "absolute path"),
    ("ftp://github.com/x", "scheme"),
    ("https://github.com/x?a=b", "may not have"),
    ("https://github.com\\@127.0.0.1/x", "backslash"),
    ("https://github.com/x y", "whitespace"),
    ("https:///x", "host"),
])
def test_refused_repositories(url, why):
    with pytest.raises(Refused, match=why):
        check_repo(url, parse_rules(RULES))


def test_empty_allow_list_refuses_everything():
    with pytest.raises(Refused, match="MALLARD_RUNNER_REPO_ALLOW is empty"):
        check_repo("https://github.com/o/m", ())


def test_symlinked_local_repository_is_judged_by_its_target(tmp_path):
    allowed = tmp_path / "git"
    allowed.mkdir()
    (allowed / "link.git").symlink_to("/etc")
    with pytest.raises(Refused, match="allow-list"):
        check_repo(str(allowed / "link.git"), parse_rules(f"file://{allowed}"))


@pytest.mark.parametrize("entry", ["github.com", "https://github.com/org", "ftp://x",
                                   "file://relative", "https://", "https://h:99999"])
def test_bad_allow_list_entries_are_errors(entry):
    with pytest.raises(ValueError):
        parse_rules(entry)


def test_git_speaks_only_the_checked_protocol():
    assert git_env("https://github.com/o/m")["GIT_ALLOW_PROTOCOL"] == "https"
    assert git_env("/srv/git/m.git")["GIT_ALLOW_PROTOCOL"] == "file"
    assert git_env("git@h.example:m.git")["GIT_ALLOW_PROTOCOL"] == "ssh"
    assert classify("file:///srv/git/m.git").scheme == "file"
    with pytest.raises(Refused):
        git_env("ext::sh -c id")
