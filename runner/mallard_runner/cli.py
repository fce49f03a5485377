"""`mallard-runner`: local benchmark runs (`bench`), the node agent (`agent`), and other
harnesses' results uploaded (`upload`).

Modelled on hyperfine: one result type (ResultsIn), exporters per format, raw
samples (every trial, every hyperfine JSON) kept.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, get_args

import httpx
import typer
from mallard_wire.formats import READERS, FormatError
from mallard_wire.recipes import MAX_RECIPE_FILE, read_recipe_file
from mallard_wire.refs import FULL_SHA
from mallard_wire.results import ResultsIn, TestbedIn, TrialIn
from mallard_wire.timelines import Recording
from pydantic import ValidationError
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from . import export
from .agent import Agent
from .cells import Cell
from .client import ApiClient, ApiError
from .executor import Cancelled, require_tools
from .peers import CATALOGUE_NAMES, find_peers
from .runs import RunRequest, execute, prepare
from .sandbox import SandboxError, set_non_dumpable
from .settings import REPO_ROOT, RunnerSettings, read_token_file
from .suites import Suite, SuiteError, load_suite
from .testbed import check_cpus, collect, parse_cpus
from .tools import BuildError
from .variants import AllocatorSelector, VariantError, parse_selectors

app = typer.Typer(help="Mallard runner: build allocators, run pinned workloads, talk to the API.",
                  no_args_is_help=True, add_completion=False)
console = Console(stderr=True)


def _ints(text: str | None) -> list[int] | None:
    return [int(x) for x in text.split(",") if x.strip()] if text else None


def _names(text: str | None) -> list[str] | None:
    return [x.strip() for x in text.split(",") if x.strip()] if text else None


def _recordings(text: str | None) -> list[str] | None:
    names = _names(text)
    unknown = sorted(set(names or ()) - set(get_args(Recording)))
    if unknown:
        raise typer.BadParameter(f"unknown {', '.join(unknown)} (known: memory, latency)",
                                 param_hint="--record")
    return names


def progress_bar() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console)


ArchOption = Annotated[str | None, typer.Option(
    help="architecture to measure: the host's (default), or e.g. aarch64/arm64 cross-built and "
         "run under qemu-user (MALLARD_RUNNER_ARCH)")]


def load_settings(arch: str | None = None) -> RunnerSettings:
    """The settings (with --arch over MALLARD_RUNNER_ARCH); exit 2 with the reason when they,
    or the emulated target's tools, are wrong."""
    try:
        settings = RunnerSettings(arch=arch) if arch else RunnerSettings()
        settings.platform()  # an emulated target needs qemu, a sysroot and a toolchain file
    except (ValidationError, ValueError) as e:
        errors = e.errors(include_input=False) if isinstance(e, ValidationError) else [
            {"msg": str(e)}]
        for err in errors:
            console.print(f"[red]error:[/] {str(err['msg']).removeprefix('Value error, ')}")
        raise typer.Exit(2) from e
    return settings


def default_source() -> str | None:
    return str(REPO_ROOT) if (REPO_ROOT / ".git").exists() else None


@app.command()
def bench(
    suite: Annotated[str, typer.Option(help="suite name (runner/suites/NAME.yaml) or a path")]
    = "quick",
    allocator_source: Annotated[str | None, typer.Option(
        help="git URL or local path of the repository the built allocators come from "
             "(default: this checkout)")] = None,
    commit: Annotated[str, typer.Option(help="commit or ref to build where a selector "
                                             "names none")] = "HEAD",
    recipe: Annotated[Path | None, typer.Option(
        help="a TOML file whose [allocator] table is the build recipe (default: the "
             "source's .mallard.toml at each commit; that file wins when present)")] = None,
    allocators: Annotated[str | None, typer.Option(
        help="comma list of name\\[@commit]\\[:variant], e.g. mallard:transfer=mutex,"
             "mimalloc@v2.1.7:arena_eager_commit=1,glibc,jemalloc; a catalogue name alone "
             "is the system allocator, any other is built (default: the suite's)")]
    = None,
    baseline: Annotated[str | None, typer.Option(help="allocator the ratios are against")] = None,
    cpus: Annotated[str | None, typer.Option(help="CPUs to pin the workloads to, e.g. 1 or 2,3")]
    = None,
    trials: Annotated[int | None, typer.Option(min=1, help="trials per cell")] = None,
    warmup: Annotated[int | None, typer.Option(min=0, help="warm-up trials per cell")] = None,
    workloads: Annotated[str | None, typer.Option(help="comma list of workloads")] = None,
    threads: Annotated[str | None, typer.Option(help="comma list of thread counts")] = None,
    seed: Annotated[int | None, typer.Option(help="seed of the interleaving order")] = None,
    record: Annotated[str | None, typer.Option(
        help="comma list of what trials record besides measures: memory (RSS over time), "
             "latency (sampled malloc/free histograms) (default: the suite's)")] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="write ResultsIn JSON here")]
    = None,
    markdown: Annotated[Path | None, typer.Option(help="write a markdown table here")] = None,
    csv_out: Annotated[Path | None, typer.Option("--csv", help="write one CSV row per trial")]
    = None,
    raw_dir: Annotated[Path | None, typer.Option(help="keep raw trial files here")] = None,
    arch: ArchOption = None,
) -> None:
    """Run a suite locally, pinned and interleaved; print a table per workload."""
    settings = load_settings(arch)
    s, selectors, cpu_list = _bench_plan(settings, suite, allocators, cpus)
    selectors = with_recipe(selectors, recipe)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    raw = raw_dir or settings.raw() / f"bench-{stamp}"
    source = allocator_source or default_source()
    req = RunRequest(suite=s, selectors=selectors, cpus=cpu_list, raw_dir=raw, source=source,
                     ref=commit, trials=trials, warmup=warmup,
                     workloads=_names(workloads), threads=_ints(threads), seed=seed,
                     record=_recordings(record))
    results = _bench_run(settings, req)
    base = baseline if baseline is not None else s.baseline
    _bench_report(results, base, json_out=json_out, markdown=markdown, csv_out=csv_out)
    console.print(f"raw trials kept in {raw}")
    n_fail = sum(1 for t in results.trials if not t.ok)
    if n_fail:
        console.print(f"[yellow]{n_fail} of {len(results.trials)} trials failed[/]")


def with_recipe(selectors: list[AllocatorSelector], path: Path | None
                ) -> list[AllocatorSelector]:
    """The built sides with the recipe of `path` (its [allocator] table); exit 2 when the
    file cannot be read or is not a recipe."""
    if path is None:
        return selectors
    try:
        with open(path, "rb") as f:
            text = f.read(MAX_RECIPE_FILE + 1).decode()
        found = read_recipe_file(text)
        if found is None:
            raise ValueError("it has no [allocator] table")
    except (OSError, ValueError) as e:
        console.print(f"[red]error:[/] --recipe {path}: {e}")
        raise typer.Exit(2) from e
    return [replace(s, recipe=found) if s.built else s for s in selectors]


def _bench_plan(settings: RunnerSettings, suite: str, allocators: str | None,
                cpus: str | None) -> tuple[Suite, list[AllocatorSelector], list[int]]:
    """The suite, the allocators to run and the CPUs to pin to; exit 2 when one is wrong."""
    try:
        s = load_suite(suite, settings.suites_dir, allow_path=True)
        names = [*CATALOGUE_NAMES, *settings.catalogue_entries()]
        selectors = parse_selectors(allocators or ",".join(s.allocators), names)
        cpu_list = parse_cpus(cpus or settings.cpus)
        check_cpus(cpu_list)
    except (SuiteError, VariantError, ValueError) as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from e
    return s, selectors, cpu_list


def _bench_run(settings: RunnerSettings, req: RunRequest) -> ResultsIn:
    """Build and find the allocators, then run every trial behind a progress bar; SIGTERM
    cancels (exit 130), a failed build exits 1, a bad request 2."""
    cancel = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: cancel.set())
    with progress_bar() as progress:
        task = progress.add_task("building and finding allocators", total=None)

        def on_trial(t: TrialIn, cell: Cell) -> None:
            mark = "" if t.ok else " [red]FAILED[/]"
            progress.update(task, advance=1, description=f"{cell.target.display} "
                                                         f"{cell.case}{mark}")

        try:
            prep = prepare(settings, req, on_trial=on_trial, cancel=cancel)
        except BuildError as e:
            progress.stop()
            console.print(f"[red]build failed:[/] {e}")
            raise typer.Exit(1) from e
        except (SuiteError, FileNotFoundError, ValueError, RuntimeError) as e:
            progress.stop()
            console.print(f"[red]error:[/] {e}")
            raise typer.Exit(2) from e
        for note in prep.notes:
            progress.console.print(f"[yellow]{note}[/]")
        progress.update(task, total=prep.total, description=f"{len(prep.cells)} cells")
        try:
            return execute(prep)
        except Cancelled as e:
            progress.stop()
            console.print("[yellow]cancelled[/]")
            raise typer.Exit(130) from e


def _bench_report(results: ResultsIn, base: str | None, *, json_out: Path | None,
                  markdown: Path | None, csv_out: Path | None) -> None:
    """The tables on stdout, and the JSON, markdown and CSV files asked for."""
    out = Console(width=None if sys.stdout.isatty() else 160)
    export.print_tables(results, out, base)
    if json_out:
        export.write_atomic(json_out, export.to_json(results))
    if markdown:
        export.write_atomic(markdown, export.to_markdown(results, base))
    if csv_out:
        export.write_atomic(csv_out, export.to_csv(results))


@app.command()
def peers(arch: ArchOption = None) -> None:
    """List this node's catalogue of system allocators (for its target architecture)."""
    settings = load_settings(arch)
    found, missing = find_peers(target=settings.platform(),
                                operator=settings.catalogue_entries())
    for name, p in found.items():
        typer.echo(f"{name:9} {p.library or '(no preload)'}  sha256={p.sha256}")
    for name, why in missing.items():
        typer.echo(f"{name:9} MISSING: {why}")


@app.command()
def testbed(cpus: Annotated[str, typer.Option(help="pinned CPU set")] = "0",
            arch: ArchOption = None) -> None:
    """Print this node's testbed fingerprint fields as JSON."""
    target = load_settings(arch).platform()
    sampled = load_settings(arch).sampled_layouts
    typer.echo(collect(parse_cpus(cpus), target=target, sampled=sampled).model_dump_json(
        indent=2))


TOKEN_ENV = "MALLARD_RUNNER_TOKEN"


def api_and_token(settings: RunnerSettings, api: str | None,
                  token_file: Path | None) -> tuple[str, str]:
    """The API's URL and the runner's token (agent_token), from the options or settings;
    exit 2 when either is missing."""
    token = agent_token(token_file or settings.token_file)
    url = api or settings.api
    if not url:
        console.print("[red]error:[/] --api (or MALLARD_RUNNER_API) needed")
        raise typer.Exit(2)
    return url, token


def agent_token(token_file: Path | None) -> str:
    """The runner's token, from a file only the agent may read; exit 2 with the reason when
    it is missing, readable by others, a placeholder, or given in the environment."""
    if os.environ.get(TOKEN_ENV):
        console.print(f"[red]error:[/] {TOKEN_ENV} is not read: a process's environment is "
                      "readable by what it starts. Put the token in a file only the agent's "
                      "user may read (chmod 600) and name it with --token-file or "
                      "MALLARD_RUNNER_TOKEN_FILE")
        raise typer.Exit(2)
    if token_file is None:
        console.print("[red]error:[/] --token-file (or MALLARD_RUNNER_TOKEN_FILE) needed: a "
                      "file holding the runner token, mode 0600")
        raise typer.Exit(2)
    try:
        return read_token_file(token_file)
    except ValueError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from e


@app.command()
def agent(
    api: Annotated[str | None, typer.Option(help="API base URL, e.g. http://127.0.0.1:8000")]
    = None,
    token_file: Annotated[Path | None, typer.Option(
        help="file holding the runner token (mallard-api token create), readable by this "
             "user only (MALLARD_RUNNER_TOKEN_FILE)")] = None,
    cpus: Annotated[str | None, typer.Option(help="CPUs this node pins workloads to")] = None,
    name: Annotated[str | None, typer.Option(help="runner name (default: host name)")] = None,
    spool: Annotated[Path | None, typer.Option(help="spool directory for pending posts")] = None,
    once: Annotated[bool, typer.Option(help="exit after one job")] = False,
    max_idle: Annotated[float | None, typer.Option(
        help="with --once: give up after this many seconds without a job")] = None,
    arch: ArchOption = None,
) -> None:
    """Register, heartbeat, claim jobs with a lease, run them, post results (spooled)."""
    set_non_dumpable()  # before the token is read: no process of this user reads our memory
    # a placeholder token, a bad allow-list entry, an emulated arch without qemu: exit 2
    settings = load_settings(arch)
    api, token = api_and_token(settings, api, token_file)
    if spool is not None:
        settings.spool_dir = spool
    try:
        cpu_list = parse_cpus(cpus or settings.cpus)
        check_cpus(cpu_list)
        sandbox = settings.sandbox()
        require_tools(settings)
    except (ValueError, SandboxError, FileNotFoundError) as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from e
    node = name or settings.name or os.uname().nodename
    a = Agent(settings, api=api, token=token, name=node, cpus=cpu_list, console=console,
              sandbox=sandbox)
    signal.signal(signal.SIGTERM, lambda *_: a.stop())
    signal.signal(signal.SIGINT, lambda *_: a.stop())
    code = a.run(once=once, max_idle=max_idle)
    raise typer.Exit(code)


def _upload_file(file: Path, fmt: str) -> bytes:
    """The file's bytes, read here by its format's reader first (as the API will read
    it); exit 2 naming what is wrong."""
    if fmt not in READERS:
        console.print(f"[red]error:[/] --format must be one of {', '.join(READERS)}")
        raise typer.Exit(2)
    try:
        raw = file.read_bytes()
        READERS[fmt](raw.decode("utf-8"))
        return raw
    except OSError as e:
        console.print(f"[red]error:[/] {file}: {e.strerror}")
        raise typer.Exit(2) from e
    except UnicodeDecodeError as e:
        console.print(f"[red]error:[/] {file}: not UTF-8 (byte {e.start})")
        raise typer.Exit(2) from e
    except FormatError as e:
        console.print(f"[red]error:[/] {file}: not a {fmt} file: {e}")
        raise typer.Exit(2) from e


def _upload_commit(commit: str) -> str:
    """A full sha as given, or the commit a ref names in the repository here."""
    if FULL_SHA.fullmatch(commit):
        return commit.lower()
    try:
        out = subprocess.run(["git", "rev-parse", "--verify", "--quiet", "--end-of-options",
                              f"{commit}^{{commit}}"], capture_output=True, text=True,
                             timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        console.print(f"[red]error:[/] --commit {commit!r}: git: {e}")
        raise typer.Exit(2) from e
    sha = out.stdout.strip()
    if out.returncode != 0 or not FULL_SHA.fullmatch(sha):
        console.print(f"[red]error:[/] --commit {commit!r} is neither a full sha nor a commit "
                      "of the git repository here")
        raise typer.Exit(2)
    return sha


def _testbed_query(testbed: TestbedIn) -> dict[str, str]:
    return {k: (str(v).lower() if isinstance(v, bool) else str(v))
            for k, v in testbed.model_dump(mode="json", exclude_none=True).items()}


def _upload_post(client: ApiClient, params: dict[str, str], raw: bytes) -> dict[str, object]:
    """POST /uploads; exit 1 with the API's reason when it refuses."""
    try:
        r = client.http.post("/uploads", params=params, content=raw,
                             headers={"Content-Type": "application/octet-stream"})
    except httpx.HTTPError as e:
        console.print(f"[red]error:[/] upload: the API is unreachable: {e}")
        raise typer.Exit(1) from e
    if r.status_code != 201:
        try:
            reason = "; ".join(f"{'.'.join(map(str, d.get('loc', [])))}: {d.get('msg')}"
                               for d in r.json()["detail"])
        except (ValueError, KeyError, TypeError, AttributeError):
            reason = r.text[:500]
        console.print(f"[red]error:[/] upload refused: HTTP {r.status_code}: {reason}")
        raise typer.Exit(1)
    out: dict[str, object] = r.json()
    return out


@app.command()
def upload(
    file: Annotated[Path, typer.Argument(help="the harness's output file")],
    fmt: Annotated[str, typer.Option("--format", help=f"the harness: {', '.join(READERS)}")],
    project: Annotated[str, typer.Option(help="the project the results go to")],
    commit: Annotated[str, typer.Option(
        help="the measured commit: a full sha, or a ref of the git repository here")],
    branch: Annotated[str | None, typer.Option(help="its branch (the project's default)")]
    = None,
    allocator: Annotated[str | None, typer.Option(
        help="the measured allocator's name (the project's name)")] = None,
    api: Annotated[str | None, typer.Option(help="API base URL (MALLARD_RUNNER_API)")] = None,
    token_file: Annotated[Path | None, typer.Option(
        help="file holding the runner token, readable by this user only "
             "(MALLARD_RUNNER_TOKEN_FILE)")] = None,
    name: Annotated[str | None, typer.Option(help="runner name (default: host name)")] = None,
    cpus: Annotated[str | None, typer.Option(help="the CPUs the harness ran on")] = None,
    arch: ArchOption = None,
) -> None:
    """Store another harness's results file as trials of the project at the commit, on
    this machine's testbed (registered as runner NAME, as the agent registers)."""
    set_non_dumpable()
    settings = load_settings(arch)
    raw = _upload_file(file, fmt)
    sha = _upload_commit(commit)
    api, token = api_and_token(settings, api, token_file)
    try:
        cpu_list = parse_cpus(cpus or settings.cpus)
    except ValueError as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(2) from e
    bed = collect(cpu_list, noise_control=False, target=settings.platform())
    params = {"project": project, "format": fmt, "commit": sha, **_testbed_query(bed)}
    params.update({k: v for k, v in (("branch", branch), ("allocator", allocator)) if v})
    client = ApiClient(api, token)
    try:
        client.register(name or settings.name or os.uname().nodename, bed.arch,
                        bed.cpus or "0", bed)
        out = _upload_post(client, params, raw)
    except (ApiError, httpx.HTTPError) as e:
        console.print(f"[red]error:[/] {e}")
        raise typer.Exit(1) from e
    finally:
        client.close()
    notes = out.get("notes")
    for note in notes if isinstance(notes, list) else []:
        console.print(f"[yellow]{note}[/]")
    again = f", {out['duplicates']} already stored" if out.get("duplicates") else ""
    typer.echo(f"upload: {out['stored']} trials of {out['cells']} cells stored in "
               f"{out['allocator']}@{sha[:7]} on {out['project']}/{out['branch']} "
               f"({fmt}{again})")


if __name__ == "__main__":  # pragma: no cover
    app()
