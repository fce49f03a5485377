"""A static copy of a project's history for offline reading (`mallard-api project export
NAME --out DIR`), as asv publishes its results: plain HTML files with relative links.

    DIR/index.html                 the project page (its default branch's history)
    DIR/branches/<n>-<name>.html   each branch's page (trends, baselines, broken ranges)
    DIR/commits/<sha>.html         each plotted commit's page
    DIR/series/<n>.svg             each plotted series as an image (`badges.standalone`)
    DIR/static/mallard.css         the pages' stylesheet

The pages are the live ones rendered as a visitor without a token sees a public project
(`public.py`: no forms, tokens, comparisons or bisections). A link to a page the export
holds is made relative; one to a page it does not (an alert, a comparison) points at
MALLARD_PUBLIC_URL when set, else nowhere (`#`)."""

from __future__ import annotations

import html
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from mallard_api.models.commits import Branch
from mallard_api.models.projects import Project
from mallard_api.sql import alerts as alert_sql
from mallard_api.sql import baselines as baseline_sql
from mallard_api.sql import pages as pages_sql
from mallard_api.sql import projects as project_sql
from mallard_api.ui import badges, history, links, public
from mallard_api.ui import commit as commit_page
from mallard_api.ui.render import HERE, render

_LINK = re.compile(r'\b(href)="([^"]*)"')


@dataclass
class Export:
    """What was written: file path (relative to DIR) -> its text, and the page map."""

    out: Path
    public_url: str | None
    files: dict[str, str] = field(default_factory=dict)
    pages: dict[str, str] = field(default_factory=dict)  # page path -> file path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80] or "_"


def _relink(page: str, body: str, ex: Export) -> str:
    """`body`'s links: to exported pages relative to `page`, others absolute or `#`."""
    here = os.path.dirname(page)

    def swap(m: re.Match[str]) -> str:
        target = html.unescape(m.group(2))
        if target in ex.pages:
            new = os.path.relpath(ex.pages[target], here or ".")
        elif target.startswith(links.PREFIX + "/static/"):
            new = os.path.relpath("static/" + target.rsplit("/", 1)[1], here or ".")
        elif target.startswith(links.PREFIX + "/"):
            new = links.absolute(ex.public_url, target) if ex.public_url else "#"
        else:
            new = target
        return f'{m.group(1)}="{html.escape(new, quote=True)}"'

    return _LINK.sub(swap, body)


def _branch_page(session: Session, proj: Project, b: Branch, last_n: int
                 ) -> tuple[dict[str, Any], history.BranchTrends]:
    trends = history.branch_trends(session, proj, b, None, measures=[], last_n=last_n)
    return dict(project=proj, branch=b, trends=trends, marks=baseline_sql.marks(session, b.id),
                may_change=False), trends


def _plan(session: Session, proj: Project, ex: Export, last_n: int
          ) -> tuple[list[tuple[str, str, dict[str, Any]]], set[str]]:
    """The pages to write (file, template, context) and the commits they plot; fills in
    the page map and writes the series images."""
    todo: list[tuple[str, str, dict[str, Any]]] = []
    shas: set[str] = set()
    ex.pages[links.project(proj.name)] = "index.html"
    for i, b in enumerate(project_sql.branches(session, proj)):
        ctx, trends = _branch_page(session, proj, b, last_n)
        name = f"branches/{i}-{_slug(b.name)}.html"
        ex.pages[links.branch(proj.name, b.name)] = name
        todo.append((name, "branch.html", ctx))
        shas.update(trends.shas)
        for w in trends.workloads:
            for p in w.plots:
                image = f"series/{len(ex.files)}.svg"
                ex.files[image] = badges.standalone(
                    p.svg, f"{proj.name}/{b.name}: {w.title} {p.measure}")
                ex.pages[links.series_image(proj.name, b.name, w.workload, w.params,
                                            p.measure)] = image
        if b.name == proj.default_branch:
            todo.append(("index.html", "project.html", dict(
                project=proj, branch=b, trends=trends,
                branches=project_sql.branches(session, proj), comparisons=[], bisections=[],
                forge_failures=[],
                alerts=alert_sql.list_alerts(session, state="open", project=proj.name,
                                             workload=None, limit=20, offset=0))))
    for sha in shas:
        ex.pages[links.commit(sha)] = f"commits/{sha}.html"
    return todo, shas


def export(session: Session, project: str, out: Path, *, public_url: str | None,
           last_n: int = 60) -> Export:
    """Write project `project`'s history pages under `out` (module doc)."""
    proj = project_sql.get(session, project)
    if proj is None:
        raise LookupError(f"no project named '{project}'")
    ex = Export(out, public_url)
    todo, shas = _plan(session, proj, ex, last_n)
    if not any(name == "index.html" for name, _, _ in todo):
        todo.append(("index.html", "project.html", dict(
            project=proj, branch=None, trends=None, comparisons=[], bisections=[],
            forge_failures=[],
            branches=project_sql.branches(session, proj), alerts=[])))
    for commit, owner in pages_sql.commits_of(session, proj.id, sorted(shas)):
        todo.append((f"commits/{commit.sha}.html", "commit.html", dict(
            sha=commit.sha, changeable=set(), projects=[(owner, commit_page.build(
                session, commit, owner, None, public.HIDDEN_SECTIONS))])))
    for name, template, ctx in todo:
        ex.files[name] = _relink(name, render(template, None, **ctx), ex)
    for name, body in ex.files.items():
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(body, encoding="utf-8")
    (out / "static").mkdir(parents=True, exist_ok=True)
    for asset in ("mallard.css", "favicon.svg"):
        shutil.copyfile(HERE / "static" / asset, out / "static" / asset)
    return ex
