"""The allocator selectors the CLI accepts, and what a side of a run is.

A selector on the command line is `name[@commit][:variant]`: `glibc`, `jemalloc`,
`mallard:transfer=ring`, `mimalloc@v2.1.7:arena_eager_commit=1`. A name of the node's
catalogue (peers.py) without a commit or a variant is that system allocator; any other
selector is a built allocator: the project `name` built from the run's allocator source
(`--allocator-source`) at its commit (default `--commit`) by its recipe (`--recipe`, or
the source's `.mallard.toml` at that commit). Variants are the recipe's options
(mallard_wire.recipes: `variant_env`); no variant (None or "") is the default
configuration, shown as `default`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from mallard_wire.fields import AllocatorName
from mallard_wire.recipes import Recipe, normalize_variant, show_variant
from pydantic import TypeAdapter

from .peers import CATALOGUE_NAMES

__all__ = ["AllocatorSelector", "VariantError", "normalize_variant", "parse_selector",
           "parse_selectors", "show_variant"]
_NAME = TypeAdapter(AllocatorName)


class VariantError(ValueError):
    pass


@dataclass(frozen=True)
class AllocatorSelector:
    """An allocator asked for: a build (`built`: a project at a commit with a variant, from
    `source` by `recipe`; None: the run's defaults) or a catalogue entry."""

    name: str
    commit: str | None = None
    variant: str | None = None
    label: str | None = None
    built: bool = True
    source: str | None = None
    recipe: Recipe | None = None

    def default_label(self) -> str:
        return self.label or ("head" if self.built else "peer")


def _variant(text: str | None, selector: str) -> str | None:
    try:
        return normalize_variant(text)
    except ValueError as e:
        raise VariantError(f"bad variant in {selector[:80]!r}: {e}") from None


def parse_selector(text: str, catalogue: Collection[str] = CATALOGUE_NAMES) -> AllocatorSelector:
    """Parse `name[@commit][:variant]`; a catalogue name alone is the system allocator."""
    text = text.strip()
    head, _, variant = text.partition(":")
    name, _, commit = (s.strip() for s in head.partition("@"))
    try:
        _NAME.validate_python(name)
    except ValueError:
        raise VariantError(f"bad allocator {text[:80]!r}: expected name[@commit][:variant] "
                           f"with a name of letters, digits, _ . + -") from None
    built = bool(commit or variant.strip()) or name not in catalogue
    return AllocatorSelector(name=name, commit=commit or None, built=built,
                             variant=_variant(variant or None, text))


def parse_selectors(text: str, catalogue: Collection[str] = CATALOGUE_NAMES
                    ) -> list[AllocatorSelector]:
    """A comma list where variants may themselves hold commas: a piece with `=` before any
    `:` (no name has one) goes on with the previous selector's variant
    (`mallard:transfer=ring,decay_ms=0`)."""
    out: list[AllocatorSelector] = []
    for piece in (p.strip() for p in text.split(",")):
        if not piece:
            continue
        if out and "=" in piece.partition(":")[0]:
            prev = out.pop()
            joined = f"{prev.variant},{piece}" if prev.variant else piece
            out.append(AllocatorSelector(prev.name, prev.commit, _variant(joined, joined)))
            continue
        out.append(parse_selector(piece, catalogue))
    return out
