"""One benchmark run, end to end: suite -> targets (build, peers) -> cells -> executor -> ResultsIn.

`bench`, the agent, runner/bench/noise.py and runner/bench/allocators.py all go
through `run_suite`, so there is one timing loop and one result type.

Before the first trial the pinned CPUs are tuned where the node allows (governor
`performance`, turbo off; setting `tune_cpus`) and checked for other processes that may
run on them; what was found and done goes into the artifacts (`noise_control`), the
resulting state into the testbed fingerprint, and a CPU set that is not isolated into the
run's notes as a warning.

An emulated target (setting `arch` other than the host's, arch.py) cross-builds the
workloads from the runner's checkout into its workloads folder first, builds the allocators
with the toolchain file, takes the target's peers, and runs everything under qemu.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from mallard_wire.fields import JsonDict, as_json
from mallard_wire.results import ResultsIn, TrialIn

from .build import Builder
from .cells import Cell
from .cmake import cross_workloads
from .commands import CACHEGRIND_CACHES
from .executor import Executor, RunOutput
from .program_builds import ProgramBuilder, program_bins
from .sandbox import Sandbox
from .settings import RUNNER_DIR, RunnerSettings
from .suites import Suite, expand, skipped
from .targets import Resolved, make_cells, resolve_targets
from .testbed import collect, isolation, tune_cpus
from .variants import AllocatorSelector


class NoiseControl(TypedDict):
    """What was found and done about noise on the pinned CPUs (artifacts `noise_control`)."""

    cpu: list[str]
    aslr_off: bool
    layouts: str  # `sampled`: a layout drawn per timed trial (commands.py); `fixed`
    minimal_env: bool
    isolated: bool
    other_processes: int
    isolcpus: list[int]
    cachegrind_caches: dict[str, str]
    hw_counters: bool


class Oversubscribed(TypedDict):
    """The thread counts above the pinned CPUs (artifacts `oversubscribed`)."""

    pinned_cpus: int
    threads: list[int]


@dataclass
class RunRequest:
    suite: Suite
    selectors: list[AllocatorSelector]
    cpus: list[int]
    raw_dir: Path
    source: str | None = None
    ref: str | None = None
    trials: int | None = None
    warmup: int | None = None
    workloads: list[str] | None = None
    threads: list[int] | None = None
    seed: int | None = None
    record: Sequence[str] | None = None  # memory, latency (timelines.py); None: the suite's
    by_case: bool = False  # a round's cells grouped by case (executor.round_order)
    project: str | None = "mallard"  # a job's: its spec's (None: a job of no project)
    branch: str | None = None
    job_id: int | None = None
    attempt: int | None = None  # the claimed job's attempt: the API takes results only from it
    runner_id: int | None = None


@dataclass
class Prepared:
    request: RunRequest
    resolved: Resolved
    cells: list[Cell]
    executor: Executor
    trials: int
    warmup: int
    noise: NoiseControl
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.executor.trial_count(self.cells, self.trials, self.warmup)


def prepare(settings: RunnerSettings, req: RunRequest,
            on_trial: Callable[[TrialIn, Cell], None] | None = None,
            cancel: threading.Event | None = None, sandbox: Sandbox | None = None) -> Prepared:
    """Build and find everything (builds and trials in `sandbox`, default the settings');
    raises BuildError, SuiteError, FileNotFoundError, SandboxError."""
    target = settings.platform()
    box = sandbox if sandbox is not None else settings.sandbox()
    cases = expand(req.suite, req.workloads, req.threads, emulated=target.emulated)
    if target.emulated:
        cross_workloads(target, RUNNER_DIR / "workloads", settings.workloads_dir,
                        env=box.agent_env())
    rules = settings.repo_rules() if req.job_id is not None else None  # a job's allow-list
    builder = Builder(settings.cache(), platform=target, sandbox=box,
                      log_max_bytes=settings.build_log_max_bytes, repo_rules=rules)
    resolved = resolve_targets(req.selectors, builder, req.source, req.ref, target,
                               settings.catalogue_entries())
    notes = [f"peer {name} skipped: {why}" for name, why in resolved.missing.items()]
    if target.emulated:
        notes.append(f"emulated testbed: {target.arch} under {target.emulator_version} on "
                     f"{target.host}; timings are shown, never judged; no cachegrind or perf")
    notes += skipped(req.suite, req.workloads, target.emulated, target.arch)
    bins = program_bins(cases, ProgramBuilder(settings.cache(), box, rules),
                        settings.programs_dir or settings.workloads_dir, req.source, req.ref)
    cells = make_cells(resolved.targets, cases, settings.workloads_dir, bins)
    record = req.suite.record if req.record is None else req.record
    if target.emulated and record:
        notes.append(f"emulated testbed: {', '.join(record)} not recorded (timelines.py)")
    executor = Executor(settings, req.cpus, req.raw_dir, on_trial=on_trial, cancel=cancel,
                        target=target, sandbox=box, record=frozenset(record))
    trials = req.trials if req.trials is not None else req.suite.trials
    warmup = req.warmup if req.warmup is not None else req.suite.warmup
    iso = isolation(req.cpus)
    warning = iso.warning(req.cpus)
    if warning:
        notes.append(warning)
    noise = NoiseControl(cpu=tune_cpus(req.cpus, write=settings.tune_cpus),
                         aslr_off=bool(settings.noise_control and executor.commands.setarch
                                       and not executor.commands.sampled),
                         layouts="sampled" if executor.commands.sampled else "fixed",
                         minimal_env=settings.noise_control, isolated=iso.isolated,
                         other_processes=len(iso.others), isolcpus=iso.isolcpus,
                         cachegrind_caches=CACHEGRIND_CACHES, hw_counters=executor.use_perf)
    return Prepared(req, resolved, cells, executor, trials, warmup, noise, notes)


def execute(prep: Prepared) -> ResultsIn:
    req = prep.request
    seed = req.seed if req.seed is not None else req.suite.seed
    out: RunOutput = prep.executor.run(prep.cells, prep.trials, prep.warmup, seed,
                                       by_case=req.by_case)
    compilers = {b.compiler for b in prep.resolved.builds.values()}
    testbed = collect(req.cpus, compilers.pop() if len(compilers) == 1 else None,
                      noise_control=prep.executor.commands.noise_control,
                      target=prep.executor.target, sampled=prep.executor.commands.sampled)
    artifacts: JsonDict = {
        "hyperfine": out.hyperfine, "suite": req.suite.name,
        "order": [[r, k] for r, k in out.order], "notes": [*prep.notes],
        "missing_peers": as_json(prep.resolved.missing), "raw_dir": str(req.raw_dir),
        "seed": seed, "trials": prep.trials, "warmup": prep.warmup,
        "order_by_case": req.by_case, "record": as_json(sorted(prep.executor.record)),
        "noise_control": as_json(prep.noise),
        "oversubscribed": as_json(oversubscribed(prep.cells, req.cpus))}
    return ResultsIn(
        job_id=req.job_id, attempt=req.attempt, runner_id=req.runner_id, project=req.project,
        branch=req.branch, testbed=testbed, trials=out.trials, artifacts=artifacts)


def oversubscribed(cells: list[Cell], cpus: list[int]) -> Oversubscribed:
    """The thread counts above the pinned CPUs (allowed; where a small node's contention
    comes from): the API marks those points of a scaling curve the same way."""
    threads = sorted({int(t) for c in cells if isinstance(t := c.params.get("threads"), int)
                      and t > len(cpus)})
    return Oversubscribed(pinned_cpus=len(cpus), threads=threads)


def run_suite(settings: RunnerSettings, req: RunRequest,
              on_trial: Callable[[TrialIn, Cell], None] | None = None,
              cancel: threading.Event | None = None) -> ResultsIn:
    return execute(prepare(settings, req, on_trial, cancel))
