"""Projects (a repository holding an allocator), their branches and commits."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query
from mallard_wire.fields import ALLOCATOR_NAME
from sqlalchemy.orm import Session

from mallard_api.analysis import verdicts
from mallard_api.analysis.specs import SpecError, peer_sides, peers_of
from mallard_api.auth import Admin, AnyRole, UserOrAdmin, field_error
from mallard_api.config import Settings
from mallard_api.deps import get_session, get_settings
from mallard_api.errors import StrictJsonRoute
from mallard_api.models.projects import Project
from mallard_api.schemas.base import ErrorOut
from mallard_api.schemas.commits import CommitDetail, CommitOut
from mallard_api.schemas.projects import (
    BranchOut,
    Membership,
    PeersIn,
    PeersOut,
    ProjectIn,
    ProjectOut,
    PublicIn,
    RecipeIn,
    RecipeOut,
    RetentionIn,
    RetentionOut,
)
from mallard_api.sql import projects as sql
from mallard_api.sql import verdicts as verdict_sql
from mallard_api.urls import check_repo_url, parse_allow_list

router = APIRouter(prefix="/projects", tags=["projects"], route_class=StrictJsonRoute,
                   responses={401: {"model": ErrorOut}, 403: {"model": ErrorOut}})
DB = Annotated[Session, Depends(get_session)]
ProjectName = Annotated[str, Path(min_length=1, max_length=200, pattern=r"^[^\x00/]+$")]


def project_out(p: Project) -> ProjectOut:
    return ProjectOut(id=p.id, name=p.name, repo_url=p.repo_url, recipe=p.recipe,
                      peers=None if p.peers is None else list(p.peers),
                      default_branch=p.default_branch, tracked_branches=list(p.tracked_branches),
                      has_webhook_secret=bool(p.webhook_secret), public=bool(p.public),
                      created_at=p.created_at)


def load(session: Session, name: str) -> Project:
    project = sql.get(session, name)
    if project is None:
        raise field_error(404, ["path", "name"], f"no project named '{name}'", "not_found")
    return project


@router.get("", response_model=list[ProjectOut])
def list_projects(session: DB, _: AnyRole) -> list[ProjectOut]:
    return [project_out(p) for p in sql.list_all(session)]


ADMIN_FIELDS = ("repo_url", "recipe", "webhook_secret")


def changed_admin_fields(project: Project, body: ProjectIn) -> list[str]:
    """The fields of an existing project that only an admin may change, which `body`
    would change: where runners fetch from, what they build, who may push."""
    changed = ["repo_url"] if body.repo_url != project.repo_url else []
    if body.recipe is not None and body.recipe != project.recipe:
        changed.append("recipe")
    if body.webhook_secret is not None and not hmac.compare_digest(
            body.webhook_secret.encode(), (project.webhook_secret or "").encode()):
        changed.append("webhook_secret")
    return changed


@router.put("/{name}", response_model=ProjectOut,
            responses={422: {"model": ErrorOut}})
def put_project(name: ProjectName, body: ProjectIn, session: DB, p: UserOrAdmin,
                settings: Annotated[Settings, Depends(get_settings)]) -> ProjectOut:
    """Create a project (user or admin), or update one. Changing an existing project's
    repo_url or webhook_secret is for admins (403 naming the field); a user may re-send
    the same values, and change the branches. A `recipe` (how its allocator builds) is
    an admin's to give, on create or update (PUT .../recipe sets it alone)."""
    reason = check_repo_url(body.repo_url, parse_allow_list(settings.repo_url_allow))
    if reason:
        raise field_error(422, ["body", "repo_url"], reason)
    existing = sql.get(session, name, lock=True)
    if p.role != "admin":
        changed = (["recipe"] if body.recipe is not None else []) if existing is None \
            else changed_admin_fields(existing, body)
        if changed:
            raise field_error(403, ["body", changed[0]],
                              f"only an admin may set project '{name}''s "
                              f"{', '.join(changed)}", "forbidden")
    if body.recipe is not None:
        check_allocator_name(name)
    project = sql.upsert(session, name=name, repo_url=body.repo_url, recipe=body.recipe,
                         default_branch=body.default_branch,
                         tracked_branches=body.tracked_branches,
                         webhook_secret=body.webhook_secret, create_only=existing is None)
    if project is None:  # created by someone else meanwhile: ask again
        raise field_error(409, ["path", "name"], f"project '{name}' was just created; "
                          "send the request again", "conflict")
    session.commit()
    return project_out(project)


@router.get("/{name}", response_model=ProjectOut, responses={404: {"model": ErrorOut}})
def get_project(name: ProjectName, session: DB, _: AnyRole) -> ProjectOut:
    return project_out(load(session, name))


def check_allocator_name(name: str) -> None:
    """A project with a recipe names the allocator it builds: its trials, pages and
    reports say `name@commit`, so the name must be an allocator name."""
    if not ALLOCATOR_NAME.match(name):
        raise field_error(422, ["path", "name"], f"project '{name}' cannot have a recipe: "
                          "the allocator it builds is named after it (letters, digits, "
                          "'_', '.', '+', '-', at most 100)")


@router.get("/{name}/recipe", response_model=RecipeOut, responses={404: {"model": ErrorOut}})
def get_recipe(name: ProjectName, session: DB, _: AnyRole) -> RecipeOut:
    """How the project's allocator builds (null: not set yet; a `.mallard.toml` at a
    commit wins over it on the runner)."""
    project = load(session, name)
    return RecipeOut(project=project.name, recipe=project.recipe)


@router.put("/{name}/recipe", response_model=RecipeOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def put_recipe(name: ProjectName, body: RecipeIn, session: DB, _: Admin) -> RecipeOut:
    """Set how the project's allocator builds (admins: a recipe says what runners run).
    A recipe is data: argv lists without shell syntax, paths inside the tree, a library
    glob inside the build folder (422 naming the field otherwise)."""
    project = load(session, name)
    check_allocator_name(project.name)
    sql.set_recipe(session, project, body.recipe)
    session.commit()
    return RecipeOut(project=project.name, recipe=project.recipe)


@router.put("/{name}/public", response_model=ProjectOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def put_public(name: ProjectName, body: PublicIn, session: DB, _: Admin) -> ProjectOut:
    """Make the project's read-only pages (project, branch, commit, alert), its badges and
    series images readable without a token, or not (admins: it publishes its history).
    A visitor never sees tokens, forge settings, comparisons or bisections; a private
    project's pages are a 404 to one."""
    project = load(session, name)
    sql.set_public(session, project, body.public)
    session.commit()
    return project_out(project)


def peers_out(project: Project, settings: Settings) -> PeersOut:
    return PeersOut(project=project.name, default=project.peers is None,
                    peers=peers_of(project, settings.peer_list))


@router.get("/{name}/peers", response_model=PeersOut, responses={404: {"model": ErrorOut}})
def get_peers(name: ProjectName, session: DB, _: AnyRole,
              settings: Annotated[Settings, Depends(get_settings)]) -> PeersOut:
    return peers_out(load(session, name), settings)


@router.put("/{name}/peers", response_model=PeersOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def put_peers(name: ProjectName, body: PeersIn, session: DB, _: UserOrAdmin,
              settings: Annotated[Settings, Depends(get_settings)]) -> PeersOut:
    """Set what the project's commit jobs are compared beside: catalogue names, or other
    projects at a ref (`jemalloc@5.3.0`: a registered project with a recipe); null:
    MALLARD_PEERS."""
    project = load(session, name)
    try:
        peer_sides(session, body.peers or [])
    except SpecError as exc:
        raise field_error(422, ["body", *exc.field], exc.msg) from exc
    sql.set_peers(session, project, None if body.peers is None else list(body.peers))
    session.commit()
    return peers_out(project, settings)


def retention_out(project: Project) -> RetentionOut:
    return RetentionOut(project=project.name, keep_pr_days=project.keep_pr_days,
                        keep_raw_days=project.keep_raw_days)


@router.get("/{name}/retention", response_model=RetentionOut,
            responses={404: {"model": ErrorOut}})
def get_retention(name: ProjectName, session: DB, _: AnyRole) -> RetentionOut:
    return retention_out(load(session, name))


@router.put("/{name}/retention", response_model=RetentionOut,
            responses={404: {"model": ErrorOut}, 422: {"model": ErrorOut}})
def put_retention(name: ProjectName, body: RetentionIn, session: DB, _: Admin
                  ) -> RetentionOut:
    """Set how long the project's trials are kept (admins: it deletes data); the analysis
    worker applies it (`mallard-api retention run --dry-run` shows what it would do)."""
    project = load(session, name)
    sql.set_retention(session, project, body.keep_pr_days, body.keep_raw_days)
    session.commit()
    return retention_out(project)


@router.get("/{name}/branches", response_model=list[BranchOut],
            responses={404: {"model": ErrorOut}})
def list_branches(name: ProjectName, session: DB, _: AnyRole) -> list[BranchOut]:
    project = load(session, name)
    return [BranchOut(id=b.id, project=project.name, name=b.name, head_sha=b.head_sha,
                      updated_at=b.updated_at) for b in sql.branches(session, project)]


@router.get("/{name}/branches/{branch}/commits", response_model=list[CommitOut],
            responses={404: {"model": ErrorOut}})
def branch_commits(
    name: ProjectName, branch: Annotated[str, Path(min_length=1, max_length=200,
                                                   pattern=r"^[^\x00]+$")],
    session: DB, _: AnyRole,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
) -> list[CommitOut]:
    """Commits on a branch, newest (highest position) first."""
    project = load(session, name)
    b = sql.get_branch(session, project, branch)
    if b is None:
        raise field_error(404, ["path", "branch"], f"no branch '{branch}' in '{name}'",
                          "not_found")
    return [CommitOut(sha=c.sha, parent_sha=c.parent_sha, message=c.message, author=c.author,
                      committed_at=c.committed_at,
                      branches=[Membership(branch=b.name, position=pos)])
            for c, pos in sql.commits_on_branch(session, b, limit, offset)]


@router.get("/{name}/commits/{sha}", response_model=CommitDetail,
            responses={404: {"model": ErrorOut}})
def get_commit(name: ProjectName,
               sha: Annotated[str, Path(pattern=r"^[0-9a-fA-F]{4,64}$")],
               session: DB, _: AnyRole,
               settings: Annotated[Settings, Depends(get_settings)]) -> CommitDetail:
    """The commit, its branches, and per arch its verdict against the branch's last
    measured commit (the cells that moved, the report's link)."""
    project = load(session, name)
    c = sql.get_commit(session, project, sha.lower())
    if c is None:
        raise field_error(404, ["path", "sha"], f"no single commit '{sha}' in '{name}'",
                          "not_found")
    return CommitDetail(sha=c.sha, parent_sha=c.parent_sha, message=c.message,
                        author=c.author, committed_at=c.committed_at,
                        branches=[Membership(branch=b, position=p)
                                  for b, p in sql.memberships(session, c)],
                        verdicts=verdicts.verdicts_out(session, settings, project.id, c.sha),
                        unreachable_on=verdict_sql.unreachable_on(session, c.id))
