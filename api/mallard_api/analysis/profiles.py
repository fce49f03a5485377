"""Differential profiles of a comparison, a second pass after its verdict: when a
comparison settles with REGRESSED or IMPROVED cells, one `profile` job per moved case
(workload x threads, at most MALLARD_PROFILE_MAX_CASES) asks a runner for callgrind of base
and head at the case's deterministic params (`on_settled`); any case of a comparison can be
asked for over REST (`ask`). The runner's profile is stored with the case (results ingest,
sql/profiles.py). A profile job is not one of the comparison's jobs: the verdict never
waits for it. Calibrations and canary probes are not profiled."""

from __future__ import annotations

from mallard_wire.jobs import JobSpec
from mallard_wire.profiles import ProfileCase
from sqlalchemy.orm import Session

from mallard_api import quotas
from mallard_api.analysis.cells import CellRow
from mallard_api.analysis.specs import SpecError, job_spec
from mallard_api.config import Settings
from mallard_api.models.comparisons import Comparison
from mallard_api.models.projects import Project
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import jobs as job_sql
from mallard_api.sql import profiles as sql

MOVED = ("regressed", "improved")


def moved_cases(cells: list[CellRow], limit: int) -> list[ProfileCase]:
    """The distinct cases of the moved cells, in the cells' order, at most `limit`."""
    out: list[ProfileCase] = []
    for c in cells:
        case = ProfileCase(workload=c.workload, threads=c.threads)
        if c.verdict in MOVED and case not in out:
            out.append(case)
    return out[:limit]


def on_settled(session: Session, settings: Settings, comp: Comparison,
               cells: list[CellRow]) -> None:
    """Queue the profiles of a settled comparison's moved cases (module doc)."""
    if comp.state != "done" or comp.calibration_id is not None or comp.canary_probe:
        return
    for case in moved_cases(cells, settings.profile_max_cases):
        _, job = queue(session, settings, comp, case, requested=False)
        if job is not None:  # counted against the token that asked for the comparison
            quotas.count_for(session, settings, comp.requested_by, [job])


def check_case(session: Session, comp: Comparison, case: ProfileCase) -> None:
    """SpecError naming the field unless the comparison has a cell of the case."""
    cells = comparison_sql.cells(session, comp.id)
    if not any(c.workload == case.workload for c in cells):
        raise SpecError(["workload"], f"comparison {comp.id} has no cell of workload "
                        f"{case.workload!r}", 404)
    if case.threads is not None and not any(
            c.workload == case.workload and c.threads == case.threads for c in cells):
        raise SpecError(["threads"], f"comparison {comp.id} has no cell of "
                        f"{case.workload} at threads={case.threads}", 404)


def ask(session: Session, settings: Settings, comp: Comparison, case: ProfileCase
        ) -> tuple[int, tuple[int, JobSpec] | None]:
    """A case asked for over REST: (its profile's id, the job queued now with its spec,
    None when the case was asked for before)."""
    check_case(session, comp, case)
    return queue(session, settings, comp, case, requested=True)


def queue(session: Session, settings: Settings, comp: Comparison, case: ProfileCase,
          requested: bool) -> tuple[int, tuple[int, JobSpec] | None]:
    """The case's row and, when it is new, its profile job; (row id, (job id, spec) of
    the job queued now or None)."""
    profile_id, created = sql.ask(session, comp.id, case, requested)
    if not created:
        return profile_id, None
    project = session.get(Project, comp.project_id) if comp.project_id is not None else None
    if project is None:
        raise SpecError(["comparison"], f"comparison {comp.id} has no project", 409)
    spec = job_spec(session, project=project, suite=comp.suite, trials=1, warmup=0,
                    head=comp.head, base=comp.base, workloads=[case.workload],
                    threads=[case.threads] if case.threads is not None else None)
    spec = spec.model_copy(update={"profile": [case]})
    job = job_sql.enqueue(session, kind="profile", arch=comp.arch, spec=spec,
                          project_id=project.id, max_attempts=settings.job_max_attempts)
    sql.attach_job(session, profile_id, job.id)
    return profile_id, (job.id, spec)
