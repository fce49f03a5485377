"""Building the toy allocator (libmallard.so, by its .mallard.toml) at a commit: clean tree,
full sha, cache, failures with their log; git values are data. Recipes: test_recipes.py."""

from __future__ import annotations

import subprocess

import pytest
from mallard_runner.build import Builder
from mallard_runner.peers import sha256_file
from mallard_runner.settings import REPO_ROOT
from mallard_runner.tools import BuildError

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


def test_unknown_ref_is_a_clear_failure(toy_repo, tmp_path):
    b = Builder(tmp_path / "cache")
    with pytest.raises(BuildError, match="cannot resolve 'no-such-ref'"):
        b.build(str(toy_repo), "no-such-ref")


def test_builds_the_real_allocator_at_head(real_mallard):
    assert len(real_mallard.commit) == 40
    assert git(REPO_ROOT, "cat-file", "-t", real_mallard.commit) == "commit"
    nm = subprocess.run(["nm", "-D", "--defined-only", str(real_mallard.library_path)],
                        capture_output=True, text=True).stdout
    assert " malloc" in nm and " free" in nm
    assert real_mallard.library_sha256 == sha256_file(real_mallard.library_path)


# -- a job's values are data, never options or paths outside the checkout ------------------
ATTACK = "--upload-pack=touch${IFS}marker;git-upload-pack"


def markers(*roots) -> list[str]:
    return [str(p) for r in roots for p in r.rglob("marker")]


def test_the_payload_is_live_on_this_git(toy_repo, tmp_path):
    """Control: without --end-of-options git runs the ref as an option (so the tests below
    would see a marker if the runner passed it that way)."""
    bare = tmp_path / "m.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    subprocess.run(["git", "-C", str(bare), "fetch", "-q", f"file://{toy_repo}", ATTACK],
                   capture_output=True)
    assert markers(tmp_path)


def test_an_option_as_commit_is_refused_and_runs_nothing(toy_repo, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    b = Builder(tmp_path / "cache")
    for source in (str(toy_repo), f"file://{toy_repo}"):
        with pytest.raises(BuildError, match="not a full sha or a valid ref name"):
            b.build(source, ATTACK)
    assert not markers(tmp_path, toy_repo)


def test_end_of_options_holds_even_without_the_ref_check(toy_repo, tmp_path, monkeypatch):
    """Defence in depth: with the check switched off, git still reads the ref as a ref."""
    import mallard_runner.checkout as checkout

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(checkout, "check_ref", lambda ref: ref)
    with pytest.raises(BuildError, match="cannot resolve"):
        Builder(tmp_path / "cache").build(f"file://{toy_repo}", ATTACK)
    assert not markers(tmp_path, toy_repo)


def test_remote_helper_sources_are_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(BuildError, match="remote-helper"):
        Builder(tmp_path / "cache").build("ext::sh -c touch${IFS}marker", "main")
    with pytest.raises(BuildError, match="starts with '-'"):
        Builder(tmp_path / "cache").build("--upload-pack=touch marker", "main")
    assert not markers(tmp_path)


def test_a_tree_with_a_symlink_out_of_it_is_refused(tmp_path):
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", "-b", "main", str(repo))
    (repo / "allocator").symlink_to(tmp_path)  # absolute, out of the tree
    (repo / "up").symlink_to("../..")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "links out")
    with pytest.raises(BuildError, match="cannot check out|refused"):
        Builder(tmp_path / "cache").build(str(repo), "main")


def test_archive_members_leaving_the_tree_are_refused_without_the_tar_filter():
    """The images' Python (3.11.2) has no tarfile filter: our own check stands in."""
    import io
    import tarfile

    from mallard_runner.checkout import _members_inside

    def archive(*members: tuple[str, bytes | None, str | None]) -> tarfile.TarFile:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as t:
            for name, data, link in members:
                info = tarfile.TarInfo(name)
                if link is not None:
                    info.type, info.linkname = tarfile.SYMTYPE, link
                    t.addfile(info)
                else:
                    info.size = len(data or b"")
                    t.addfile(info, io.BytesIO(data or b""))
        buf.seek(0)
        return tarfile.open(fileobj=buf)

    ok = archive(("a/b.c", b"x", None), ("a/l", None, "b.c"), ("d", None, "a/b.c"))
    assert len(_members_inside(ok, "0" * 40, [])) == 3
    for bad in (("../x", b"x", None), ("/etc/x", b"x", None), ("l", None, "/etc"),
                ("a/l", None, "../../x"), ("l", None, "a/../..")):
        with pytest.raises(BuildError, match="may leave it"):
            _members_inside(archive(bad), "0" * 40, [])
