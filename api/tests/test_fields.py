"""The field rules (fields.py, recipes.py, peers.py, known.py): relative paths, variants,
peers, suites (the ref rule is wire/tests/test_refs.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers import MALLARD_RECIPE
from mallard_api.known import Catalog, CatalogError
from mallard_api.peers import check_peer
from mallard_wire.fields import check_relative_path
from mallard_wire.recipes import Recipe, check_variant, variant_env

REPO = Path(__file__).resolve().parents[2]
MALLARD = Recipe.model_validate(MALLARD_RECIPE)


@pytest.mark.parametrize("path", ["allocator", "src/alloc", "a-b/c_d.e", "x/y/z"])
def test_relative_paths_inside(path):
    assert check_relative_path(path) == path


@pytest.mark.parametrize("path", ["../../../../tmp/evil", "a/../b", "/abs", "-x", "a/-b",
                                  ".", "a/./b", "", "a//b", "a/", ".git", "a b", "a\\b",
                                  "~/x", "a/..", "$(touch x)"])
def test_relative_paths_outside_are_refused(path):
    with pytest.raises(ValueError):
        check_relative_path(path)


@pytest.mark.parametrize("variant", ["", "transfer=ring", "transfer=mutex,decay_ms=10",
                                     "transfer=naive,canary_ns=40",
                                     "remote=page,verbose=1,on_misuse=abort"])
def test_variants(variant):
    assert check_variant(variant) == variant
    variant_env(MALLARD.options, variant)  # all keys of mallard's recipe


@pytest.mark.parametrize("variant", ["transfer", "transfer=", "=ring", "transfer=ring;rm -rf /",
                                     "transfer=$(id)", "transfer=ring,transfer=mutex",
                                     "transfer=a b", "TRANSFER=ring", "stats_file=/tmp/x"])
def test_bad_variants(variant):
    with pytest.raises(ValueError):
        check_variant(variant)


@pytest.mark.parametrize("variant", ["nokey=1", "stats_file=x"])
def test_variant_keys_are_the_recipes(variant):
    check_variant(variant)  # well formed, but not an option of mallard's recipe
    with pytest.raises(ValueError, match="unknown option"):
        variant_env(MALLARD.options, variant)


def test_mallard_recipe_keys_are_the_allocators_options():
    """Mallard's recipe (.mallard.toml) lets a variant set the allocator's option table
    (allocator/src/options.c) minus STATS_FILE, a path the allocator writes to."""
    source = (REPO / "allocator" / "src" / "options.c").read_text()
    import re

    names = set(re.findall(r'\[MLD_OPT_[A-Z_]+\] = \{"([A-Z_]+)"', source))
    assert MALLARD.options is not None
    assert names and {n.lower() for n in names} - {"stats_file"} == set(MALLARD.options.keys)


@pytest.mark.parametrize("peer", ["glibc", "jemalloc", "mimalloc", "my-alloc_2.1",
                                  "jemalloc@5.3.0", "mimalloc@v2.1.7", "x@" + "a" * 40])
def test_peers(peer):
    assert check_peer(peer) == peer


@pytest.mark.parametrize("peer", ["", "@5.3.0", "je malloc", "/usr/lib/libc.so", "-x",
                                  "jemalloc@", "jemalloc@..", "jemalloc@-x", "a$(id)",
                                  "jemalloc@a b", "jemalloc@x@{1}"])
def test_bad_peers(peer):
    with pytest.raises(ValueError):
        check_peer(peer)


def test_catalog_is_the_runner_suites():
    folder = REPO / "runner" / "suites"
    catalog = Catalog.load(folder)
    for path in folder.glob("*.yaml"):
        assert catalog.suites[path.stem] == set(yaml.safe_load(path.read_text())["workloads"])
    assert catalog.check_suite("quick") is None
    assert "unknown suite" in (catalog.check_suite("/etc/passwd") or "")
    assert catalog.check_workloads("quick", ["larson", "rpc"]) is None
    assert "nope" in (catalog.check_workloads("quick", ["larson", "nope"]) or "")


def test_catalog_errors(tmp_path):
    with pytest.raises(CatalogError, match="not a folder"):
        Catalog.load(tmp_path / "missing")
    with pytest.raises(CatalogError, match="no \\*.yaml"):
        Catalog.load(tmp_path)
    (tmp_path / "bad.yaml").write_text("name: bad\n")
    with pytest.raises(CatalogError, match="names no workloads"):
        Catalog.load(tmp_path)


def test_catalog_reads_a_suite_added_since(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nworkloads: {larson: {}}\n")
    catalog = Catalog.load(tmp_path)
    assert catalog.check_suite("b") is not None
    (tmp_path / "b.yaml").write_text("name: b\nworkloads: {gate: {}}\n")
    assert catalog.check_suite("b") is None
    assert catalog.check_workloads("b", ["gate"]) is None
