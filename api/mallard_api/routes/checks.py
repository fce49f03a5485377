"""Checks several routers make of a request body before they queue work."""

from __future__ import annotations

from sqlalchemy.orm import Session

from mallard_api.auth import field_error
from mallard_api.config import Settings
from mallard_api.models.projects import Project
from mallard_api.sql import projects as project_sql
from mallard_api.urls import check_repo_url, parse_allow_list


def buildable_project(session: Session, name: str, settings: Settings) -> Project:
    """The project named at body.project, whose repo_url runners may fetch
    (MALLARD_REPO_URL_ALLOW); otherwise a 422 naming body.project."""
    project = project_sql.get(session, name)
    if project is None:
        raise field_error(422, ["body", "project"], f"no project named '{name}'")
    reason = check_repo_url(project.repo_url, parse_allow_list(settings.repo_url_allow))
    if reason:
        raise field_error(422, ["body", "project"], f"project '{project.name}': {reason}")
    return project
