"""One claimed job, turned into a run and back: the run its spec asks for (every value
checked first, guard.py), the progress it logs, and why it failed as the API is told it
(the log and whether another attempt may help)."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from pathlib import Path

from mallard_wire.jobs import ClaimedJob
from mallard_wire.results import TrialIn
from rich.markup import escape

from .cells import Cell
from .executor import Cancelled
from .guard import check_ref, check_repo
from .runs import RunRequest
from .settings import RunnerSettings
from .suites import SuiteError, load_suite
from .tools import BuildError
from .variants import AllocatorSelector, normalize_variant


class Progress:
    """Per-trial callback: failed trials logged, progress at every quarter."""

    def __init__(self, log: Callable[[str], None], job_id: int) -> None:
        self.log, self.job_id = log, job_id
        self.count = self.total = 0

    def __call__(self, t: TrialIn, cell: Cell) -> None:
        self.count += 1
        if not t.ok:
            self.log(escape(f"trial failed: {cell.key} seq {t.seq}: signal {t.signal} "
                            f"exit {t.exit_code}: {(t.stderr_tail or '').strip()[-200:]!r}"))
        n, c = self.total, self.count
        if n and c * 4 // n != (c - 1) * 4 // n:  # at every quarter
            self.log(f"job {self.job_id}: {c}/{n} trials")


def selectors_for(job: ClaimedJob, settings: RunnerSettings) -> list[AllocatorSelector]:
    """The spec's sides: a build (its repository on the allow-list, its commit a ref, its
    recipe the registered one) or a catalogue entry (guard.py)."""
    out: list[AllocatorSelector] = []
    for a in job.spec.allocators:
        if a.commit is not None:
            check_ref(a.commit)
        if a.build is None:
            out.append(AllocatorSelector(name=a.name, label=a.label, built=False))
            continue
        check_repo(a.build.repo_url, settings.repo_rules())
        out.append(AllocatorSelector(name=a.name, commit=a.commit, label=a.label,
                                     variant=normalize_variant(a.variant),
                                     source=a.build.repo_url, recipe=a.build.recipe))
    if not out:
        raise SuiteError("the job names no allocators")
    return out


def request_for(job: ClaimedJob, settings: RunnerSettings, cpus: list[int],
                runner_id: int | None) -> RunRequest:
    """The run a job asks for, every value of its spec checked first (guard.py); its rounds
    in blocks by case, base and head back to back (`executor.round_order`)."""
    spec = job.spec
    suite = load_suite(spec.suite, settings.suites_dir)  # a name, never a path
    if spec.commit is not None:
        check_ref(spec.commit)
    if spec.repo_url is not None:
        check_repo(spec.repo_url, settings.repo_rules())
    selectors = selectors_for(job, settings)
    raw = settings.raw() / f"job-{job.id}-attempt-{job.attempt or 1}"
    return RunRequest(suite=suite, selectors=selectors, cpus=cpus, raw_dir=Path(raw),
                      source=spec.repo_url, ref=spec.commit,
                      trials=spec.trials, warmup=spec.warmup, workloads=spec.workloads,
                      threads=spec.threads, record=spec.record, project=spec.project,
                      branch=spec.branch, job_id=job.id, attempt=job.attempt,
                      runner_id=runner_id, by_case=True)


def failure(e: Exception, trials_run: int) -> tuple[str, bool]:
    """Why a job did not finish, as the API is told: (log, retryable)."""
    if isinstance(e, Cancelled):
        return ("runner shutting down (SIGTERM) before the job finished; "
                f"{trials_run} trials were run", True)
    if isinstance(e, BuildError):
        return f"build failed: {e.args[0]}\n{e.log}", False
    if isinstance(e, SuiteError | FileNotFoundError | ValueError):
        return f"cannot run the job: {e}", False
    return "runner error:\n" + "".join(traceback.format_exception(e)), True
