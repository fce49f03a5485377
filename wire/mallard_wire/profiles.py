"""Differential profiles between the API and a runner (contracts §5): what a profile job
asks for (`ProfileCase`: one case of a comparison, at its deterministic params) and what
the runner posts back with the job's results (`ProfileIn`: callgrind of base and head,
per function and as one merged call tree for the differential flame graph).

Counts are instructions (callgrind's `Ir`). Every list is capped, so a post is bounded
whatever the program profiled: the functions that moved most (`MAX_FUNCTIONS`) and the
call tree's frames above a width threshold (`MAX_FRAMES`)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from mallard_wire.fields import INT64_MAX, FiniteFloat, InModel, Str200, Str500, Word

MAX_FUNCTIONS = 200
MAX_FRAMES = 2000
MAX_PROFILE_PARAM = 10_000_000  # a profiled param (ops, blocks, ...): callgrind is ~50x slower
MAX_PROFILE_PARAMS = 16

Count = Annotated[int, Field(ge=0, le=INT64_MAX, strict=True)]
ProfileParams = Annotated[dict[Word, Annotated[int, Field(ge=0, le=MAX_PROFILE_PARAM)]],
                          Field(max_length=MAX_PROFILE_PARAMS)]


class ProfileCase(InModel):
    """One case to profile: a workload at a thread count (the comparison's cell), run at its
    suite's deterministic params, with `params` (integers, each at most 10,000,000)
    overriding some of them."""

    workload: Word
    threads: Annotated[int, Field(ge=1, le=4096)] | None = None
    params: ProfileParams = {}


class SideCost(InModel):
    """One function on one side: instructions in it (`exclusive`), in it and what it called
    (`inclusive`), and the calls it received (0: an entry point callgrind saw no call to)."""

    exclusive: Count = 0
    inclusive: Count = 0
    calls: Count = 0


class FunctionDiff(InModel):
    """One function (`name` with the clone suffixes .constprop/.isra/.part/.cold folded in;
    code inlined into it counts as its own) in the object it lives in, on both sides."""

    name: Str200
    object: Str200 = ""
    base: SideCost
    head: SideCost


class Frame(InModel):
    """One frame of the merged call tree: `parent` is the index of an earlier frame (-1 for
    the root), widths are inclusive instructions on each side."""

    name: Str200
    parent: Annotated[int, Field(ge=-1, le=MAX_FRAMES)]
    base: Count
    head: Count


class ProfileIn(InModel):
    """The differential profile of one case: totals, the functions that moved most, the
    merged call tree, what the reader should know (`notes`: missing symbols), the runner
    seconds it took (both callgrind runs)."""

    case: ProfileCase
    params: Annotated[dict[Word, bool | int | FiniteFloat | Str200], Field(max_length=64)] = {}
    base_total: Count
    head_total: Count
    functions: Annotated[list[FunctionDiff], Field(max_length=MAX_FUNCTIONS)]
    frames: Annotated[list[Frame], Field(max_length=MAX_FRAMES)]
    notes: Annotated[list[Str500], Field(max_length=20)] = []
    seconds: Annotated[FiniteFloat, Field(ge=0, le=1e6)] = 0.0
    library: Str200 = ""
