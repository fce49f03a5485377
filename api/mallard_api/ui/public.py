"""Who may see a project's pages: any token (every project), or a visitor without one
(public projects only: `projects.public`, set by an admin over REST or the CLI).

A private project's pages, badges and images are a 404 to a visitor without a token, as
if it did not exist (a 401 would say that it does). What a visitor sees of a public
project is what a reader token sees minus the comparisons and bisections (their pages
name runners and carry job logs): never a token, a forge setting or a runner."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from mallard_api.auth import Principal, field_error, may_triage
from mallard_api.deps import get_session
from mallard_api.models.projects import Project
from mallard_api.ui import login


def visitor(request: Request, session: Annotated[Session, Depends(get_session)]
            ) -> Principal | None:
    return login.page_visitor(request, session)


Visitor = Annotated[Principal | None, Depends(visitor)]  # None: no token (public pages)
HIDDEN_SECTIONS = ("comparisons", "bisections")  # of the commit page, from a visitor


def may_see(who: Principal | None, project: Project | None) -> bool:
    return project is not None and (who is not None or bool(project.public))


def visible(who: Principal | None, project: Project | None, name: str) -> Project:
    """The project if `who` may see it, else the 404 of a project that does not exist."""
    if project is None or not may_see(who, project):
        raise field_error(404, ["path", "project"], f"There is no project '{name}'.",
                          "not_found")
    return project


def may_change(who: Principal | None, project: str) -> bool:
    """Whether the page shows its forms (triage, baselines, broken ranges)."""
    return who is not None and may_triage(who, project)
