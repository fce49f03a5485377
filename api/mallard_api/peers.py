"""Peers: what a project's builds are compared beside. A peer is a system allocator of the
node's catalogue, by name (`glibc`, `jemalloc`: the runner's catalogue decides what a node
has), or another registered project built at a ref (`jemalloc@5.3.0`: project `jemalloc`,
ref `5.3.0`, built by that project's recipe). Projects without peers of their own are
compared beside MALLARD_PEERS."""

from __future__ import annotations

from typing import Annotated

from mallard_wire.fields import ALLOCATOR_NAME
from mallard_wire.refs import ref_problem
from pydantic import AfterValidator, StringConstraints


def split_peer(value: str) -> tuple[str, str | None]:
    """`jemalloc@5.3.0` -> ("jemalloc", "5.3.0"); `glibc` -> ("glibc", None)."""
    name, sep, ref = value.partition("@")
    return name, (ref if sep else None)


def check_peer(value: str) -> str:
    name, ref = split_peer(value)
    if not ALLOCATOR_NAME.match(name):
        raise ValueError(f"{value[:60]!r}: a peer is a catalogue name (letters, digits, "
                         f"'_', '.', '+', '-') or project@ref")
    if ref is not None:
        problem = ref_problem(ref)
        if problem:
            raise ValueError(f"{value[:60]!r}: the ref after '@' {problem}")
    return value


Peer = Annotated[str, StringConstraints(min_length=1, max_length=300),
                 AfterValidator(check_peer)]
