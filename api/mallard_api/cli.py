"""The admin CLI: `mallard-api serve | analysis-worker | migrate | db-url |
token create|list|revoke | runner list|retire|projects |
project recipe set|show | project peers set|show | project public | project export |
retention run [--dry-run]`."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, TypeVar

import typer
import uvicorn
from mallard_wire.fields import ALLOCATOR_NAME
from mallard_wire.recipes import Recipe, read_recipe_file
from pydantic import ValidationError
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from mallard_api import db, retention, server
from mallard_api.analysis.specs import SpecError, peer_sides
from mallard_api.analysis.worker import AnalysisService, AnalysisWorker
from mallard_api.auth import ROLES, hash_token, new_token
from mallard_api.config import Settings
from mallard_api.known import CatalogError
from mallard_api.main import create_app
from mallard_api.models.projects import Project
from mallard_api.models.runners import Runner
from mallard_api.schemas.projects import PeersIn
from mallard_api.schemas.runners import RunnerProjectsIn
from mallard_api.sql import projects, runners, tokens
from mallard_api.ui import export

T = TypeVar("T")

app = typer.Typer(help="Mallard API: serve, migrate, tokens.", no_args_is_help=True)
token_app = typer.Typer(help="API tokens (stored hashed; printed once).", no_args_is_help=True)
app.add_typer(token_app, name="token")
runner_app = typer.Typer(help="Runners: list them, retire one, the projects one may write.",
                         no_args_is_help=True)
app.add_typer(runner_app, name="runner")
project_app = typer.Typer(help="Projects: their recipe, their peers, sharing, a static export.",
                          no_args_is_help=True)
app.add_typer(project_app, name="project")
recipe_app = typer.Typer(help="A project's build recipe (what PUT .../recipe sets).",
                         no_args_is_help=True)
project_app.add_typer(recipe_app, name="recipe")
peers_app = typer.Typer(help="What a project's builds are compared beside.",
                        no_args_is_help=True)
project_app.add_typer(peers_app, name="peers")
retention_app = typer.Typer(help="Retention: apply the projects' policies.",
                            no_args_is_help=True)
app.add_typer(retention_app, name="retention")


@app.command()
def serve(host: str = "127.0.0.1", port: int = 8000, workers: int = 1,
          log_level: str = "info") -> None:
    """Run the API with uvicorn (starting the embedded PostgreSQL when no DATABASE_URL),
    with the bounds of mallard_api/server.py. Idle keep-alive connections are kept
    MALLARD_KEEP_ALIVE_SECONDS (75 s), longer than clients keep theirs (httpx: 5 s), so a
    client never sends on a connection the server is closing."""
    settings = load_settings()
    # SIGTERM before uvicorn takes over (while migrating): unwind, so `finally` runs
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        url = db.database_url(settings)  # starts the embedded server when needed
        where = "DATABASE_URL" if settings.database_url else f"embedded, {settings.data_dir}"
        typer.echo(f"mallard-api: database {_redact(url)} ({where})", err=True)
        if workers > 1:
            # The database and the migrations are settled once, in this process; the
            # workers only connect.
            if settings.migrate_on_start:
                db.migrate(url, settings.migrations_dir)
            os.environ["DATABASE_URL"] = url
            os.environ["MALLARD_MIGRATE_ON_START"] = "false"
            uvicorn.run("mallard_api.main:app_factory", factory=True, workers=workers,
                        host=host, port=port, log_level=log_level,
                        **server.options(settings, bound=False))
        else:
            uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level,
                        **server.options(settings))
    except CatalogError as exc:
        typer.echo(f"mallard-api: configuration error: {exc}", err=True)
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        pass
    finally:
        db.stop_embedded()


def load_settings() -> Settings:
    """The settings, or exit 2 with one line per bad variable (placeholder or short
    secrets, unknown peers, a bad allow-list...)."""
    try:
        return Settings()
    except ValidationError as exc:
        for err in exc.errors():
            field = ".".join(str(x) for x in err["loc"]) or "settings"
            typer.echo(f"mallard-api: configuration error: {field}: {err['msg']}", err=True)
        raise typer.Exit(2) from exc


def _redact(url: str) -> str:
    """The URL without its password."""
    return make_url(url).render_as_string(hide_password=True)


@app.command("analysis-worker")
def analysis_worker(poll_seconds: float = 1.0) -> None:
    """Run only the analysis worker (comparisons, change detection) until stopped: for API
    processes started with MALLARD_ANALYSIS_POLL_SECONDS=0, so that analysis never takes
    CPU from requests."""
    settings = load_settings()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        engine = db.make_engine(db.database_url(settings), 2, overflow=0,
                                connect_timeout=settings.db_connect_timeout_seconds)
        service = AnalysisService(AnalysisWorker(db.make_sessionmaker(engine), settings),
                                  poll_seconds=poll_seconds,
                                  max_backoff=settings.background_max_backoff_seconds)
        service.start()
        typer.echo("mallard-api: analysis worker running", err=True)
        stop.wait()
        service.stop()
        engine.dispose()
    finally:
        db.stop_embedded()


@app.command()
def migrate(revision: str = "head") -> None:
    """Upgrade the database schema (Alembic) to REVISION."""
    settings = load_settings()
    try:
        db.migrate(db.database_url(settings), settings.migrations_dir, revision)
        typer.echo(f"migrated to {revision}")
    finally:
        db.stop_embedded()


@app.command("db-url")
def db_url() -> None:
    """Print the database URL (of the running embedded server when no DATABASE_URL)."""
    settings = load_settings()
    try:
        url = db.database_url(settings, start=False)
    except RuntimeError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(1) from exc
    typer.echo(url.replace("postgresql+psycopg://", "postgresql://"))


@contextmanager
def _session() -> Iterator[Session]:
    """A session on the configured database for one admin command; afterwards the engine
    is disposed and an embedded server this command started is stopped."""
    engine = db.make_engine(db.database_url(load_settings()), 1)
    session = db.make_sessionmaker(engine)()
    try:
        yield session
    finally:
        session.close()
        engine.dispose()
        db.stop_embedded()


@token_app.command("create")
def token_create(
    role: Annotated[str, typer.Option(help="runner, user, admin or reader")],
    runner: Annotated[str | None, typer.Option(help="the runner's name (role runner)")] = None,
    description: Annotated[str | None, typer.Option()] = None,
    project: Annotated[list[str] | None, typer.Option(
        help="role user: the token reads the jobs (attempts, logs) of this project only "
             "(repeat for more); none: of every project")] = None,
) -> None:
    """Create a token and print it (once; only its sha256 is stored)."""
    if role not in ROLES:
        typer.echo(f"--role must be one of {', '.join(ROLES)}", err=True)
        raise typer.Exit(2)
    if role == "runner" and not runner:
        typer.echo("--runner NAME is required with --role runner", err=True)
        raise typer.Exit(2)
    if project and role != "user":
        typer.echo("--project is for --role user (admins read every job, runners theirs)",
                   err=True)
        raise typer.Exit(2)
    token = new_token()
    with _session() as session:
        tokens.create(session, token_sha256=hash_token(token), role=role,
                      runner_name=runner if role == "runner" else None,
                      description=description, projects=list(project) if project else None)
        session.commit()
    sys.stdout.write(token + "\n")


@token_app.command("list")
def token_list() -> None:
    """List tokens (id, role, runner, created, revoked); never the tokens themselves."""
    with _session() as session:
        for t in tokens.list_all(session):
            typer.echo(f"{t.id}\t{t.role}\t{t.runner_name or '-'}\t{t.created_at:%Y-%m-%d}\t"
                       f"{'revoked' if t.revoked_at else 'active'}\t{t.description or ''}")


@token_app.command("revoke")
def token_revoke(token_id: int) -> None:
    """Revoke a token by id."""
    with _session() as session:
        ok = tokens.revoke(session, token_id)
        session.commit()
    if not ok:
        typer.echo(f"no active token {token_id}", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {token_id}")


@runner_app.command("list")
def runner_list() -> None:
    """List runners (id, name, arch, last seen, in service or retired)."""
    with _session() as session:
        for r, _ in runners.list_all(session):
            state = f"retired {r.retired_at:%Y-%m-%d %H:%M}" if r.retired_at else "in service"
            typer.echo(f"{r.id}\t{r.name}\t{r.arch}\t{r.last_seen_at:%Y-%m-%d %H:%M:%S}\t{state}")


@runner_app.command("retire")
def runner_retire(name: str) -> None:
    """Retire a runner by name: no longer expected (MallardRunnerDown resolves) until it
    registers again."""
    with _session() as session:
        runner = runners.get_by_name(session, name)
        if runner is not None:
            runners.retire(session, runner)
            session.commit()
    if runner is None:
        typer.echo(f"no runner named '{name}'", err=True)
        raise typer.Exit(1)
    typer.echo(f"retired {name}")


def _scope(r: Runner) -> str:
    return "all" if r.all_projects else (",".join(r.projects or []) or "none")


@runner_app.command("projects")
def runner_projects(
    name: str,
    allow: Annotated[list[str] | None, typer.Option(
        "--allow", help="a project it may post history without a job to (repeatable; "
        "replaces the list)")] = None,
    all_projects: Annotated[bool, typer.Option("--all", help="every project")] = False,
    none: Annotated[bool, typer.Option("--none", help="no project")] = False,
) -> None:
    """Show, or set, the projects runner NAME may post history without a job to (none
    by default; its jobs' results go to their own projects regardless)."""
    if sum([bool(allow), all_projects, none]) > 1:
        typer.echo("give one of --allow, --all, --none", err=True)
        raise typer.Exit(2)
    try:
        RunnerProjectsIn(projects=allow or [])
    except ValidationError as exc:
        typer.echo(f"--allow: {exc.errors()[0]['msg']}", err=True)
        raise typer.Exit(2) from exc
    with _session() as session:
        runner = runners.get_by_name(session, name)
        if runner is not None and (allow or all_projects or none):
            runners.set_projects(session, runner, None if all_projects else (allow or []))
            session.commit()
        scope = None if runner is None else _scope(runner)
    if scope is None:
        typer.echo(f"no runner named '{name}'", err=True)
        raise typer.Exit(1)
    typer.echo(f"{name}\t{scope}")


def _fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(message, err=True)
    return typer.Exit(code)


def _read_recipe(path: Path) -> Recipe:
    """The `[allocator]` table of a TOML file (as a repository's .mallard.toml), or exit 2
    naming what is wrong (the field, as the REST route would)."""
    try:
        recipe = read_recipe_file(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise _fail(f"--file: cannot read {path}: {exc.strerror}", 2) from exc
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(x) for x in ("recipe", *err["loc"]))
        raise _fail(f"--file: {where}: {err['msg']}", 2) from exc
    except ValueError as exc:  # tomllib's, or the file's size
        raise _fail(f"--file: {path} is not a recipe file: {exc}", 2) from exc
    if recipe is None:
        raise _fail(f"--file: {path} has no [allocator] table", 2)
    return recipe


@recipe_app.command("set")
def recipe_set(name: str, file: Annotated[Path, typer.Option(
        "--file", help="a TOML file with an [allocator] table (as .mallard.toml)")]) -> None:
    """Set how project NAME's allocator builds, from the [allocator] table of a file."""
    recipe = _read_recipe(file)
    if not ALLOCATOR_NAME.match(name):
        raise _fail(f"project '{name}' cannot have a recipe: its allocator is named after "
                    "it (letters, digits, '_', '.', '+', '-')", 2)
    with _session() as session:
        project = projects.get(session, name)
        if project is not None:
            projects.set_recipe(session, project, recipe)
            session.commit()
    if project is None:
        raise _fail(f"no project named '{name}'")
    typer.echo(f"{name}\t{recipe.kind}\t{recipe.source or '.'}\t{recipe.library}")


def _project_value(name: str, read: Callable[[Project], T]) -> T:
    """`read` of project NAME, read in one session; an unknown project fails the command."""
    with _session() as session:
        project = projects.get(session, name)
        if project is None:
            raise _fail(f"no project named '{name}'")
        return read(project)


@recipe_app.command("show")
def recipe_show(name: str) -> None:
    """Print project NAME's recipe as JSON (null: none set yet)."""
    recipe = _project_value(name, lambda p: p.recipe)
    typer.echo("null" if recipe is None else recipe.model_dump_json(indent=2,
                                                                  exclude_defaults=True))


@peers_app.command("set")
def peers_set(name: str, peers: Annotated[str, typer.Argument(
        help="comma-separated: catalogue names (glibc) or project@ref; 'default' for "
             "MALLARD_PEERS")]) -> None:
    """Set what project NAME's builds are compared beside."""
    listed = None if peers == "default" else [p.strip() for p in peers.split(",") if p.strip()]
    try:
        PeersIn(peers=listed)
    except ValidationError as exc:
        raise _fail(f"PEERS: {exc.errors()[0]['msg']}", 2) from exc
    with _session() as session:
        project = projects.get(session, name)
        if project is None:
            raise _fail(f"no project named '{name}'")
        try:
            peer_sides(session, listed or [])
        except SpecError as exc:
            raise _fail(f"PEERS: {exc.msg}", 2) from exc
        projects.set_peers(session, project, listed)
        session.commit()
    typer.echo(f"{name}\t{peers if listed is None else ','.join(listed)}")


@peers_app.command("show")
def peers_show(name: str) -> None:
    """Print project NAME's peers ('default': MALLARD_PEERS)."""
    peers = _project_value(name, lambda p: p.peers)
    typer.echo(f"{name}\t{'default' if peers is None else ','.join(peers)}")


@retention_app.command("run")
def retention_run(dry_run: Annotated[bool, typer.Option(
        "--dry-run", help="count what would be deleted; delete nothing")] = False) -> None:
    """Apply every project's retention policy now (as the analysis worker does daily)."""
    with _session() as session:
        counts = retention.run(session, dry_run=dry_run)
        if dry_run:
            session.rollback()
        else:
            session.commit()
    typer.echo(("dry run: nothing deleted\n" if dry_run else "") + retention.table(counts))


@project_app.command("public")
def project_public(name: str, off: Annotated[bool, typer.Option(
        "--off", help="make it private again: its pages need a token")] = False) -> None:
    """Make project NAME's read-only pages, badges and series images readable without a
    token (as PUT /api/v1/projects/NAME/public)."""
    with _session() as session:
        project = projects.get(session, name)
        if project is None:
            raise _fail(f"no project named '{name}'")
        projects.set_public(session, project, not off)
        session.commit()
    typer.echo(f"{name}\t{'private' if off else 'public'}")


@project_app.command("export")
def project_export(name: str, out: Annotated[Path, typer.Option(
        "--out", help="the folder to write (created; files in it are replaced)")],
        commits: Annotated[int, typer.Option(min=2, max=500,
                                             help="the last N commits of each branch")] = 60
        ) -> None:
    """Write project NAME's branch, commit and series pages as static HTML with relative
    links under --out, for offline reading (as a visitor sees a public project)."""
    settings = load_settings()
    with _session() as session:
        try:
            done = export.export(session, name, out, public_url=settings.public_url,
                                 last_n=commits)
        except LookupError as exc:
            raise _fail(str(exc)) from exc
    pages = sum(1 for f in done.files if f.endswith(".html"))
    typer.echo(f"{name}\t{pages} pages, {len(done.files) - pages} series images\t{out}")
