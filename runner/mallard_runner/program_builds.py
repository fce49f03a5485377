"""Where a program workload's `{bin}` is: the node's programs folder, or a build of a tree.

`from: node` is the runner's programs folder (setting `programs_dir`, default the
workloads folder); the program must be a file there (symlinks resolved inside it).
`from: measured` builds the measured repository's tree at the job's commit, `from:
project` a benchmark project's `repo` at `ref`: a clean tree (checkout.py), then the
program's `build` (programs.ProgramBuild) into <cache>/programs/<sha>-<digest of the
build> as the work user in an allow-listed environment (sandbox.py), the same way as an
allocator build (build.py). A build is cached per sha and build; a failed one raises
BuildError with its log.

This is a small builder of its own (cmake or argv commands, nothing else) rather than the
allocator recipes' builder, which is being rewritten beside it (issue 28.1).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from mallard_wire.repo_urls import Prefix

from .checkout import checkout, resolve
from .cmake import generator
from .guard import Refused, check_repo, classify, inside
from .programs import Program, ProgramBuild
from .sandbox import Sandbox
from .suites import Case
from .tools import BuildError, locked, run


def node_bin(program: Program, programs_dir: Path) -> Path:
    """The node's programs folder, with the program proven a file inside it."""
    root = programs_dir.resolve()
    rel = program.argv[0].removeprefix("{bin}/")
    try:
        path = inside(root, rel, "program")
    except Refused as e:
        raise FileNotFoundError(str(e)) from e
    if not path.is_file() or not os.access(path, os.X_OK):
        raise FileNotFoundError(f"program {rel} not found (or not executable) in {root}: "
                                f"install it there, or set MALLARD_RUNNER_PROGRAMS_DIR")
    return root


def build_key(sha: str, build: ProgramBuild) -> str:
    digest = hashlib.sha256(build.model_dump_json().encode()).hexdigest()[:12]
    return f"{sha}-{digest}"


class ProgramBuilder:
    """Builds program workloads from trees, once per (sha, build)."""

    def __init__(self, cache_dir: Path, sandbox: Sandbox,
                 repo_rules: tuple[Prefix, ...] | None = None):
        self.cache = Path(cache_dir)
        self.sandbox = sandbox
        # a job's: a benchmark project's repository must be on the runner's allow-list,
        # as every repository a job builds (None: a local run, git's refusals only)
        self.repo_rules = repo_rules
        self.sandbox.guard(self.cache, *(self.cache / d for d in ("repos", "trees",
                                                                   "programs")))

    def bin_dir(self, program: Program, source: str | None, ref: str | None) -> Path:
        """`{bin}` of a built program: its repository (`source`/`ref`: the measured one's,
        for `from: measured`) built at the commit."""
        assert program.build is not None
        if program.origin == "project":
            source, ref = program.repo, program.ref
            assert source is not None
            try:
                if self.repo_rules is not None:
                    check_repo(source, self.repo_rules)
                else:
                    classify(source)  # refuses what git must never be given
            except Refused as e:
                raise BuildError(str(e), "") from e
        if source is None:
            raise ValueError("a program from the measured repository needs its source "
                             "(--allocator-source)")
        log: list[str] = []
        bare, sha = resolve(self.cache, source, ref or "HEAD", log, self.sandbox.agent_env())
        out = self.cache / "programs" / build_key(sha, program.build)
        done = out / ".mallard-program.json"
        with locked(self.cache / "programs" / f"{out.name}.lock"):
            if not done.exists():
                tree = checkout(self.cache, bare, sha, log, self.sandbox.agent_env())
                self._build(tree, out, program.build, sha, log)
                done.write_text(json.dumps({"commit": sha, "source": source}))
        try:
            bin_dir = inside(out, program.build.bin, "build.bin") if program.build.bin else out
            binary = inside(bin_dir, program.argv[0].removeprefix("{bin}/"), "program")
        except Refused as e:
            raise BuildError(f"{e} at {sha[:12]}", "\n".join(log)) from e
        if not binary.is_file():
            raise BuildError(f"the build made no {program.argv[0]} at {sha[:12]}",
                             "\n".join(log))
        return bin_dir

    def _build(self, tree: Path, out: Path, build: ProgramBuild, sha: str,
               log: list[str]) -> None:
        """The build, as the work user in a fresh `out` folder; the agent's afterwards (no
        later build can change it)."""
        try:
            src = inside(tree, build.source, "build.source") if build.source else tree
        except Refused as e:
            raise BuildError(f"{e} at {sha[:12]}", "\n".join(log)) from e
        box = self.sandbox
        box.take(out)
        shutil.rmtree(out, ignore_errors=True)
        box.check_reachable(out.parent)
        if build.kind == "command":  # a copy of the tree, all of it the work user's
            shutil.copytree(src, out, symlinks=True)
            _give_tree(box, out)
        else:
            box.give(out)
        box.fresh()
        try:
            for cmd, cwd in _steps(build, src, out):
                res = run(cmd, log, env=box.env(), cwd=cwd, timeout=build.timeout_seconds,
                          identity=box.identity())
                if res.returncode != 0:
                    raise BuildError(f"program build step {cmd[0]} failed at {sha[:12]}",
                                     "\n".join(log))
        finally:
            box.take(out)


def _give_tree(box: Sandbox, root: Path) -> None:
    """Every folder of a copied tree to the work user (a command build writes in it)."""
    if not box.separate:
        return
    assert box.uid is not None and box.gid is not None
    for d, _dirs, files in os.walk(root):
        os.chown(d, box.uid, box.gid, follow_symlinks=False)
        for f in files:
            os.chown(os.path.join(d, f), box.uid, box.gid, follow_symlinks=False)


def _steps(build: ProgramBuild, src: Path, out: Path) -> list[tuple[list[str], Path | None]]:
    if build.kind == "cmake":
        steps: list[tuple[list[str], Path | None]] = [
            (["cmake", "-S", str(src), "-B", str(out), *generator(),
              "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_TESTING=OFF", *build.configure], None)]
        targets = [a for t in build.targets for a in ("--target", t)]
        steps.append((["cmake", "--build", str(out), *targets], None))
        return steps
    return [(list(cmd), out) for cmd in build.commands]


def program_bins(cases: list[Case], builder: ProgramBuilder, programs_dir: Path,
                 source: str | None, ref: str | None) -> dict[str, Path]:
    """`{bin}` of each program workload of `cases` (built once per workload)."""
    bins: dict[str, Path] = {}
    for case in cases:
        program = case.program
        if program is None or case.workload in bins:
            continue
        bins[case.workload] = (node_bin(program, programs_dir) if program.origin == "node"
                               else builder.bin_dir(program, source, ref))
    return bins
