"""The ref rule (refs.py): what passes is a full sha or a ref name git itself accepts, and
never something git could read as an option."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from mallard_wire.fields import GitRef
from mallard_wire.refs import REF_MAX, check_ref, ref_problem
from pydantic import TypeAdapter, ValidationError

ATTACK = "--upload-pack=touch${IFS}marker;git-upload-pack"

REFS_OK = ["main", "HEAD", "v1.2", "a.b", "refs/heads/main", "feature/x-y_z", "abc1234",
           "release-2026.11", "release/2026.11", "user@host", "x@y", "a" * 40, "B" * 64,
           "0123456789abcdef0123456789abcdef01234567", "x" * REF_MAX]
REFS_BAD = [ATTACK, "-x", "refs/heads/-x", "", "main~1", "a~1", "a^", "HEAD^", "a:b", "a b",
            "a\tb", "a?", "a*", "a[", "a[b", "a\\b", "a..b", ".hidden", ".a", "a/.b", "a.lock",
            "a/b.lock", "a/b.lock/c", "/a", "a/", "a//b", "a.", "@", "a@{1}", "a\x01b", "a\x7f",
            "a\x7fb", "a" * 40 + "\n", "x" * (REF_MAX + 1)]


@pytest.mark.parametrize("ref", REFS_OK)
def test_good_refs(ref):
    assert ref_problem(ref) is None
    assert check_ref(ref) == (ref.lower() if len(ref) in (40, 64) else ref)


@pytest.mark.parametrize("ref", REFS_BAD)
def test_bad_refs(ref):
    assert ref_problem(ref) is not None
    with pytest.raises(ValueError, match="must be a full sha or a git ref name"):
        check_ref(ref)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
@pytest.mark.parametrize("ref", REFS_OK + REFS_BAD)
def test_the_rule_is_gits_own(ref):
    """Our rule agrees with `git check-ref-format --allow-onelevel` (a full sha aside),
    plus: no component starts with '-' (git would take the branch name for an option), at
    most REF_MAX characters."""
    ours = ref_problem(ref) is None
    if any(part.startswith("-") for part in ref.split("/")) or len(ref) > REF_MAX:
        assert not ours
        return
    if len(ref) in (40, 64) and all(c in "0123456789abcdefABCDEF" for c in ref):
        assert ours
        return
    git_ok = subprocess.run(["git", "check-ref-format", "--allow-onelevel", ref],
                            capture_output=True).returncode == 0
    assert ours == git_ok, (ref, git_ok)


def test_a_git_ref_field_is_the_rule_and_its_column():
    field = TypeAdapter(GitRef)
    assert field.validate_python("A" * 40) == "a" * 40
    with pytest.raises(ValidationError, match="must be a full sha or a git ref name"):
        field.validate_python(ATTACK)
    with pytest.raises(ValidationError, match="at most 200 characters"):
        field.validate_python("x" * 201)
