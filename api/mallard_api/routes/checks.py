"""Checks several routers make of a request body before they queue work."""

from __future__ import annotations

from fastapi import HTTPException
from sqlalchemy.orm import Session

from mallard_api.analysis.specs import SpecError, project_build
from mallard_api.auth import field_error
from mallard_api.config import Settings
from mallard_api.models.projects import Project
from mallard_api.sql import projects as project_sql
from mallard_api.urls import check_repo_url, parse_allow_list


def spec_error(exc: SpecError) -> HTTPException:
    """A job that cannot be built, as the request's error naming the body's field."""
    return field_error(exc.status, ["body", *exc.field], exc.msg,
                       "conflict" if exc.status == 409 else "value_error")


def buildable_project(session: Session, name: str, settings: Settings) -> Project:
    """The project named at body.project, whose repo_url runners may fetch
    (MALLARD_REPO_URL_ALLOW) and which has a recipe to build by; otherwise a 422 (409
    without a recipe: set one first) naming body.project."""
    project = project_sql.get(session, name)
    if project is None:
        raise field_error(422, ["body", "project"], f"no project named '{name}'")
    reason = check_repo_url(project.repo_url, parse_allow_list(settings.repo_url_allow))
    if reason:
        raise field_error(422, ["body", "project"], f"project '{project.name}': {reason}")
    try:
        project_build(project)
    except SpecError as exc:
        raise spec_error(exc) from exc
    return project
