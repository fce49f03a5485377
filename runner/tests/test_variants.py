"""Variants (contracts §3) and allocator selectors."""

from __future__ import annotations

import pytest
from mallard_runner.variants import (
    VariantError,
    parse_selector,
    parse_selectors,
    show_variant,
    variant_env,
)


def test_variant_becomes_mallard_environment():
    assert variant_env("transfer=ring") == {"MALLARD_TRANSFER": "ring"}
    assert variant_env("transfer=mutex, foo_bar=1") == {"MALLARD_TRANSFER": "mutex",
                                                        "MALLARD_FOO_BAR": "1"}
    assert variant_env(None) == {} and variant_env("") == {}
    assert show_variant(None) == "default" and show_variant("") == "default"


@pytest.mark.parametrize("bad", ["transfer", "=ring", "transfer=", "1x=2"])
def test_bad_variants(bad):
    with pytest.raises(VariantError):
        variant_env(bad)


def test_selectors():
    s = parse_selector("mallard@abc123:transfer=ring")
    assert (s.name, s.commit, s.variant, s.default_label()) == ("mallard", "abc123",
                                                                "transfer=ring", "head")
    assert parse_selector("jemalloc").default_label() == "peer"
    sels = parse_selectors("mallard:transfer=mutex,mallard:transfer=ring,x=1,glibc,tcmalloc")
    assert [(s.name, s.variant) for s in sels] == [
        ("mallard", "transfer=mutex"), ("mallard", "transfer=ring,x=1"), ("glibc", None),
        ("tcmalloc", None)]
    with pytest.raises(VariantError, match="unknown allocator"):
        parse_selector("hoard")
    with pytest.raises(VariantError, match="peer"):
        parse_selector("glibc:transfer=ring")
