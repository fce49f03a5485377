"""Allocator selectors: a catalogue name alone is a system allocator, anything else is built;
variants are the recipe's (mallard_wire.recipes.variant_env, tested in wire and test_recipes)."""

from __future__ import annotations

import pytest
from mallard_runner.variants import VariantError, parse_selector, parse_selectors, show_variant


def test_selectors_built_and_catalogue():
    s = parse_selector("mallard@abc123:transfer=ring")
    assert (s.name, s.commit, s.variant, s.built, s.default_label()) == (
        "mallard", "abc123", "transfer=ring", True, "head")
    j = parse_selector("jemalloc")
    assert not j.built and j.default_label() == "peer"
    # a catalogue name with a commit is that project built from source
    m = parse_selector("mimalloc@v2.1.7:arena_eager_commit=1")
    assert m.built and m.commit == "v2.1.7" and m.variant == "arena_eager_commit=1"
    assert parse_selector("hoard").built  # not in the catalogue: built from the source
    assert not parse_selector("mine", catalogue=["glibc", "mine"]).built
    assert show_variant(None) == "default" and show_variant("") == "default"


def test_selector_lists_keep_variant_commas():
    sels = parse_selectors("mallard:transfer=mutex,mallard:transfer=ring,decay_ms=1,glibc,"
                           "tcmalloc,mimalloc@v2.0.9")
    assert [(s.name, s.variant, s.built) for s in sels] == [
        ("mallard", "transfer=mutex", True), ("mallard", "transfer=ring,decay_ms=1", True),
        ("glibc", None, False), ("tcmalloc", None, False), ("mimalloc", None, True)]


@pytest.mark.parametrize("bad", ["", "a b", "../x", "mallard:transfer", "mallard:=ring",
                                 "mallard:Transfer=1", "mallard:a=1,a=2", "-x"])
def test_bad_selectors(bad):
    with pytest.raises(VariantError):
        parse_selectors(bad) if "," in bad else parse_selector(bad)
