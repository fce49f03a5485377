"""The job spec of contracts §5, built in one place for every job the API queues itself: a
comparison's first job and its follow-ups (`comparisons`), whatever opened it (a request,
a commit verdict, a bisection, a calibration, a pull request), and a plain commit job,
the head and the peers of a commit with no measured commit before it (`verdicts`).

The allocators are labelled `base` (when there is one), `head`, then one `peer` per peer.
A commit job names its branch and commit (the head's): its head trials feed the branch
history. A comparison's job names the comparison and its round, and a bisection's probe
names the bisection."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from mallard_wire.jobs import JobSpec, SpecAllocator

from mallard_api.models.records import Side


def job_spec(*, project: str, repo_url: str, allocator_dir: str, suite: str, trials: int,
             warmup: int, head: Side, base: Side | None = None, peers: Sequence[str] = (),
             workloads: list[str] | None = None, threads: list[int] | None = None,
             branch: str | None = None, comparison_id: int | None = None,
             round: int | None = None, bisection_id: int | None = None) -> JobSpec:
    """The spec of one job (module doc); `branch`: a commit job of the head on it."""
    sides: list[tuple[Literal["base", "head"], Side | None]] = [("base", base), ("head", head)]
    return JobSpec(
        project=project, repo_url=repo_url, allocator_dir=allocator_dir, suite=suite,
        workloads=workloads, threads=threads, trials=trials, warmup=warmup, branch=branch,
        commit=head.commit if branch is not None else None,
        allocators=[SpecAllocator(label=label, name="mallard", commit=side.commit,
                                  variant=side.variant)
                    for label, side in sides if side is not None]
        + [SpecAllocator(label="peer", name=peer) for peer in peers],
        comparison_id=comparison_id, round=round, bisection_id=bisection_id)
