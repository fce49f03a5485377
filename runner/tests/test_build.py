"""Building libmallard.so at a commit: clean tree, full sha, cache, failures with their log."""

from __future__ import annotations

import subprocess

import pytest
from mallard_runner.build import Builder, BuildError
from mallard_runner.peers import sha256_file
from mallard_runner.settings import REPO_ROOT

from .conftest import git


def test_builds_the_commit_and_records_compiler_flags_and_sha256(toy_repo, tmp_path):
    b = Builder(tmp_path / "cache")
    built = b.build(str(toy_repo), "main")
    assert built.commit == git(toy_repo, "rev-parse", "main")  # the ref resolved to a full sha
    assert len(built.commit) == 40
    assert built.library_path.name == "libmallard.so" and built.library_path.exists()
    assert built.library_sha256 == sha256_file(built.library_path)
    assert built.compiler.split()[0] in ("gcc", "clang") and built.compiler.split()[1][0].isdigit()
    assert "-O3" in built.build_flags and "-fvisibility=hidden" in built.build_flags
    assert not built.cached
    again = b.build(str(toy_repo), built.commit)  # by sha: the same build, from the cache
    assert again.cached and again.library_sha256 == built.library_sha256
    # the work tree is clean: the checkout of `main` never sees the broken branch's file
    tree = tmp_path / "cache" / "trees" / built.commit
    assert "this is not C" not in (tree / "allocator" / "toy.c").read_text()
    assert not (tree / ".git").exists()


def test_git_url_source(toy_repo, tmp_path):
    built = Builder(tmp_path / "cache").build(f"file://{toy_repo}", "main")
    assert built.commit == git(toy_repo, "rev-parse", "main")


def test_failing_build_raises_with_the_compiler_log(toy_repo, tmp_path):
    with pytest.raises(BuildError) as e:
        Builder(tmp_path / "cache").build(str(toy_repo), "broken")
    assert "build of mallard failed" in str(e.value)
    assert "toy.c" in e.value.log and "error" in e.value.log
    assert "$ cmake --build" in e.value.log


def test_unknown_ref_and_missing_project_are_clear_failures(toy_repo, tmp_path):
    b = Builder(tmp_path / "cache")
    with pytest.raises(BuildError, match="cannot resolve 'no-such-ref'"):
        b.build(str(toy_repo), "no-such-ref")
    with pytest.raises(BuildError, match="nowhere/CMakeLists.txt not found"):
        b.build(str(toy_repo), "main", allocator_dir="nowhere")


def test_builds_the_real_allocator_at_head(real_mallard):
    assert len(real_mallard.commit) == 40
    assert git(REPO_ROOT, "cat-file", "-t", real_mallard.commit) == "commit"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(real_mallard.library_path)],
                        capture_output=True, text=True).stdout
    assert " malloc" in nm and " free" in nm
    assert real_mallard.library_sha256 == sha256_file(real_mallard.library_path)
