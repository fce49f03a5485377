"""The job spec of contracts §5, built in one place for every job the API queues itself: a
comparison's first job and its follow-ups (`comparisons`), whatever opened it (a request,
a commit verdict, a bisection, a calibration, a pull request), and a plain commit job,
the head and the peers of a commit with no measured commit before it (`verdicts`).

Every side is an allocator build or a catalogue entry. The allocators are labelled `base`
(when there is one) and `head`, each the project's own allocator (named after the
project, built from its repository by its recipe), then one `peer` per peer: a catalogue
name (`glibc`: no build) or another registered project at a ref (`jemalloc@5.3.0`: that
project's build, by its recipe). A commit job names its branch and commit (the head's):
its head trials feed the branch history. A comparison's job names the comparison and its
round, and a bisection's probe names the bisection.

What cannot be built is a :class:`SpecError` naming the field: a project without a recipe
(409: set a recipe first), a variant key its recipe does not know, a peer project that is
not registered or has no recipe (422)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from mallard_wire.fields import ALLOCATOR_NAME
from mallard_wire.jobs import AllocatorBuild, JobSpec, SpecAllocator
from mallard_wire.recipes import variant_env
from sqlalchemy.orm import Session

from mallard_api.models.projects import Project
from mallard_api.models.records import Side
from mallard_api.peers import split_peer
from mallard_api.sql import projects as project_sql


class SpecError(ValueError):
    """A job that cannot be built: `field` (e.g. ["head", "variant"], ["peers", 0]) and
    why; `status` 409 when the project must be set up first (a recipe), else 422."""

    def __init__(self, field: list[str | int], msg: str, status: int = 422) -> None:
        super().__init__(msg)
        self.field = field
        self.msg = msg
        self.status = status


def project_build(project: Project) -> AllocatorBuild:
    """How `project`'s allocator builds: its repository and registered recipe."""
    if project.recipe is None:
        raise SpecError(["project"], f"project '{project.name}' has no build recipe: set a "
                        "recipe first (PUT /api/v1/projects/{name}/recipe, admin)", 409)
    if not ALLOCATOR_NAME.match(project.name):
        raise SpecError(["project"], f"project '{project.name}' cannot name an allocator: "
                        "a built project's name is letters, digits, '_', '.', '+', '-'")
    return AllocatorBuild(repo_url=project.repo_url, recipe=project.recipe)


def built_side(label: Literal["base", "head", "peer"], name: str, build: AllocatorBuild,
               commit: str | None, variant: str | None, field: list[str | int]
               ) -> SpecAllocator:
    """A side built by `build` at `commit` (the variant's keys must be the recipe's)."""
    try:
        variant_env(build.recipe.options, variant)
    except ValueError as exc:
        raise SpecError([*field, "variant"], f"{name}: {exc}") from exc
    return SpecAllocator(label=label, name=name, commit=commit, variant=variant, build=build)


def peer_sides(session: Session, peers: Sequence[str]) -> list[SpecAllocator]:
    """The peers as job sides: catalogue entries, or the named project's build at a ref."""
    out = []
    for i, peer in enumerate(peers):
        name, ref = split_peer(peer)
        if ref is None:
            out.append(SpecAllocator(label="peer", name=name))
            continue
        other = project_sql.get(session, name)
        if other is None:
            raise SpecError(["peers", i], f"peer {peer!r}: no project named '{name}' (a "
                            "peer built at a ref is a registered project)")
        try:
            build = project_build(other)
        except SpecError as exc:
            raise SpecError(["peers", i], f"peer {peer!r}: {exc.msg}") from exc
        out.append(built_side("peer", name, build, ref, None, ["peers", i]))
    return out


def job_spec(session: Session, *, project: Project, suite: str, trials: int, warmup: int,
             head: Side, base: Side | None = None, peers: Sequence[str] = (),
             workloads: list[str] | None = None, threads: list[int] | None = None,
             branch: str | None = None, comparison_id: int | None = None,
             round: int | None = None, bisection_id: int | None = None,
             build: AllocatorBuild | None = None) -> JobSpec:
    """The spec of one job (module doc); `branch`: a commit job of the head on it;
    `build`: the build of base and head (a follow-up keeps its first job's), else the
    project's registered one."""
    build = build or project_build(project)
    sides: list[tuple[Literal["base", "head"], Side | None]] = [("base", base), ("head", head)]
    return JobSpec(
        project=project.name, repo_url=project.repo_url, suite=suite,
        workloads=workloads, threads=threads, trials=trials, warmup=warmup, branch=branch,
        commit=head.commit if branch is not None else None,
        allocators=[built_side(label, project.name, build, side.commit, side.variant,
                               [label])
                    for label, side in sides if side is not None]
        + peer_sides(session, peers),
        comparison_id=comparison_id, round=round, bisection_id=bisection_id)


def peers_of(project: Project, default: Sequence[str]) -> list[str]:
    """A project's peers: its own, else the API's MALLARD_PEERS (`default`)."""
    return list(default if project.peers is None else project.peers)


def check_sides(session: Session, project: Project, base: Side | None, head: Side,
                peers: Sequence[str]) -> None:
    """SpecError when a job of these sides cannot be built (before anything is stored)."""
    job_spec(session, project=project, suite="quick", trials=1, warmup=0, head=head,
             base=base, peers=peers)
