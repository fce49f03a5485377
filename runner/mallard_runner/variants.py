"""Variants (contracts §3) and the allocator selectors the CLI accepts.

`transfer=ring` becomes MALLARD_TRANSFER=ring for mallard; no variant (None or
"") is the default configuration, shown as `default`. A selector on the command
line is `name[@commit][:variant]`: `mallard:transfer=ring`, `glibc`,
`mallard@v1.2:transfer=mutex`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .peers import PEER_LIBRARIES

# the node's catalogue (peers.py); mallard_wire.names is gone (issue 28): a stopgap until
# the build helper's rewrite of this module lands
PEER_NAMES = ("glibc", *PEER_LIBRARIES)
_KEY = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


class VariantError(ValueError):
    pass


def parse_variant(variant: str | None) -> dict[str, str]:
    """`"transfer=ring,foo=1"` -> {"transfer": "ring", "foo": "1"}; None or "" -> {}."""
    if not variant:
        return {}
    pairs: dict[str, str] = {}
    for part in variant.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key) or not value.strip():
            raise VariantError(f"bad variant {variant!r}: expected key=value[,key=value...]")
        pairs[key] = value.strip()
    return pairs


def variant_env(variant: str | None) -> dict[str, str]:
    """The environment a mallard variant runs with: MALLARD_<KEY>=value."""
    return {f"MALLARD_{k.upper()}": v for k, v in parse_variant(variant).items()}


def normalize_variant(variant: str | None) -> str | None:
    """Canonical spelling (pairs as given, whitespace stripped); None for the default."""
    pairs = parse_variant(variant)
    return ",".join(f"{k}={v}" for k, v in pairs.items()) or None


def show_variant(variant: str | None) -> str:
    return normalize_variant(variant) or "default"


@dataclass(frozen=True)
class AllocatorSelector:
    """An allocator asked for: `mallard` (at a commit, with a variant) or a peer."""

    name: str
    commit: str | None = None
    variant: str | None = None
    label: str | None = None

    @property
    def is_mallard(self) -> bool:
        return self.name == "mallard"

    def default_label(self) -> str:
        return self.label or ("head" if self.is_mallard else "peer")


def parse_selector(text: str) -> AllocatorSelector:
    """Parse `name[@commit][:variant]`."""
    text = text.strip()
    head, _, variant = text.partition(":")
    name, _, commit = head.partition("@")
    name = name.strip()
    if not name:
        raise VariantError(f"bad allocator {text!r}")
    if name != "mallard" and name not in PEER_NAMES:
        raise VariantError(f"unknown allocator {name!r}: mallard or one of {', '.join(PEER_NAMES)}")
    if name != "mallard" and (commit or variant):
        raise VariantError(f"{name} is a peer found on the node: it has no commit or variant")
    return AllocatorSelector(name=name, commit=commit or None,
                             variant=normalize_variant(variant or None))


def parse_selectors(text: str) -> list[AllocatorSelector]:
    """A comma list where variants may themselves hold commas: split on known names."""
    out: list[AllocatorSelector] = []
    pieces = [p for p in text.split(",") if p.strip()]
    for piece in pieces:
        name = piece.strip().partition(":")[0].partition("@")[0]
        if out and name not in PEER_NAMES and name != "mallard" and "=" in piece:
            # continuation of the previous variant: mallard:transfer=ring,foo=1
            prev = out.pop()
            joined = f"{prev.variant},{piece.strip()}" if prev.variant else piece.strip()
            out.append(AllocatorSelector(prev.name, prev.commit, normalize_variant(joined)))
            continue
        out.append(parse_selector(piece))
    return out
