"""Where untrusted code runs: builds and workloads in a scrubbed environment, as a work user.

The commits under test are code from whoever may push, and so is the allocator a trial
preloads: the runner's token, its spool and its memory must be out of their reach.

- **Environment**: an explicit allow-list (`PATH`, `HOME` and `TMPDIR` in the work folder,
  `LANG`/`LC_ALL=C`, plus what the caller adds: a trial's preload and variant, git's
  protocol guards); nothing of the agent's own (no `MALLARD_*`, no `LD_*`, no secret).
- **Identity**: when the agent runs as root, builds and workloads run as the work user
  (setting `work_user`, default `mallard-work`; created with `useradd` when missing, or
  `uid:gid`), switched by `subprocess` in the child before it execs (`user=`, `group=`,
  `extra_groups=[]`, `umask`): it cannot read the agent's `/proc/<pid>/environ`, memory,
  token file or spool. The folders it writes (a build folder, a trial folder, its home
  and tmp) are given to it before the run and taken back after (`give`, `take`: without
  following links), so one commit's build cannot change another's library or results.
- **Not root** (the weaker mode, logged at start): everything runs as the agent's own
  user; the agent makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), so a child
  cannot read its `/proc/<pid>/environ` or memory, but it can read the agent's files,
  the token file among them.

git runs as the agent (it writes the mirrors and trees, which must stay out of a build's
reach), with the same allow-listed environment and a home of the agent's own.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import re
import shutil
import stat
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_WORK_USER = "mallard-work"
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
PR_SET_DUMPABLE = 4
UMASK = 0o022


class SandboxError(RuntimeError):
    """The work user cannot be had, or cannot reach a folder it needs."""


def set_non_dumpable() -> bool:
    """prctl(PR_SET_DUMPABLE, 0): this process's /proc files (environ, mem, maps) become
    root's, so processes of the same user cannot read them. False where it failed."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def work_identity(user: str) -> tuple[int, int, str]:
    """(uid, gid, name) of the work user: `uid:gid`, or a user name, created (a system
    user with its own group, no home, no shell) when it does not exist."""
    m = re.fullmatch(r"(\d+):(\d+)", user)
    if m:
        uid, gid = int(m.group(1)), int(m.group(2))
        if uid == 0 or gid == 0:
            raise SandboxError(f"work user {user!r}: root cannot be the work user")
        return uid, gid, user
    if not re.fullmatch(r"[a-z_][a-z0-9_-]{0,31}", user):
        raise SandboxError(f"work user {user!r}: not a user name or uid:gid")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        out = subprocess.run(["useradd", "--system", "--user-group", "--no-create-home",
                              "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                              user], capture_output=True, text=True)
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            raise SandboxError(f"work user {user!r} does not exist and useradd failed: "
                               f"{out.stderr.strip()}") from None
    if pw.pw_uid == 0 or pw.pw_gid == 0:
        raise SandboxError(f"work user {user!r}: root cannot be the work user")
    return pw.pw_uid, pw.pw_gid, user


def clean_env(home: Path, tmp: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allow-listed environment of every process the runner starts on untrusted data."""
    return {"PATH": os.environ.get("PATH") or DEFAULT_PATH, "HOME": str(home),
            "TMPDIR": str(tmp), "LANG": "C", "LC_ALL": "C", **(extra or {})}


@dataclass(frozen=True)
class Sandbox:
    """How this runner starts untrusted processes: `work_dir` holds the work user's home
    and tmp (and the agent's home for git); `uid`/`gid` None: the agent's own user."""

    work_dir: Path
    uid: int | None = None
    gid: int | None = None
    user: str | None = None

    @classmethod
    def create(cls, work_dir: Path, user: str = DEFAULT_WORK_USER) -> Sandbox:
        """As root: the work user (created if missing); else the agent's own user. Makes
        the folders; SandboxError when the work user cannot reach them."""
        work_dir = Path(work_dir).resolve()
        if os.geteuid() == 0:
            uid, gid, name = work_identity(user)
            box = cls(work_dir, uid, gid, name)
        else:
            box = cls(work_dir)
        box._make_dirs()
        return box

    @property
    def separate(self) -> bool:
        """Builds and workloads run as another user than the agent."""
        return self.uid is not None

    @property
    def home(self) -> Path:
        return self.work_dir / "home"

    @property
    def tmp(self) -> Path:
        return self.work_dir / "tmp"

    @property
    def agent_home(self) -> Path:
        return self.work_dir / "agent"

    def describe(self) -> str:
        if self.separate:
            return (f"builds and workloads run as {self.user} (uid {self.uid}, gid {self.gid}) "
                    "in an allow-listed environment")
        return ("builds and workloads run as this agent's own user (it is not root): the agent "
                "is non-dumpable, so they cannot read its environment or memory, but they can "
                "read its files, the token file among them; run the agent as root to give "
                "them a work user of their own")

    # -- the processes --------------------------------------------------------------------
    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """A build's or a workload's environment."""
        return clean_env(self.home, self.tmp, extra)

    def agent_env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """git's environment: the same allow-list, a home only the agent may write."""
        return clean_env(self.agent_home, self.agent_home / "tmp",
                         {"GIT_CONFIG_GLOBAL": os.devnull, **(extra or {})})

    def identity(self) -> dict[str, Any]:
        """subprocess keyword arguments that switch the child to the work user before exec."""
        if not self.separate:
            return {"umask": UMASK}
        return {"user": self.uid, "group": self.gid, "extra_groups": [], "umask": UMASK}

    # -- the folders ----------------------------------------------------------------------
    def _make_dirs(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.work_dir.chmod(0o755)
        for d in (self.agent_home, self.agent_home / "tmp"):
            d.mkdir(mode=0o700, exist_ok=True)
        for d in (self.home, self.tmp):
            self.take(d)
            shutil.rmtree(d, ignore_errors=True)
            self.give(d)
        self.check_reachable(self.work_dir)

    def fresh(self) -> None:
        """Empty the work user's home and tmp (before a build: nothing of an earlier one
        is left for it to find)."""
        for d in (self.home, self.tmp):
            self.take(d)
            shutil.rmtree(d, ignore_errors=True)
            self.give(d)

    def give(self, path: Path) -> Path:
        """A new or empty folder `path`, owned by the work user (mode 0755)."""
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
        if self.separate:
            assert self.uid is not None and self.gid is not None
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
        return path

    def take(self, path: Path) -> None:
        """Everything under `path` back to the agent's user, no link followed, and no write
        for group or others, no set-id bit left: the work user can no longer change it.

        Top down, through file descriptors (os.fwalk): each folder is the agent's before
        its entries are listed, so none can be swapped for a link meanwhile."""
        if not self.separate or not path.exists() or path.is_symlink():
            return
        uid, gid = os.geteuid(), os.getegid()
        os.chown(path, uid, gid, follow_symlinks=False)
        os.chmod(path, _safe_mode(path.lstat().st_mode))
        for _, dirs, files, fd in os.fwalk(path, follow_symlinks=False):
            for name in [*dirs, *files]:
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    os.chown(name, uid, gid, dir_fd=fd, follow_symlinks=False)
                    if not stat.S_ISLNK(st.st_mode):
                        os.chmod(name, _safe_mode(st.st_mode), dir_fd=fd)
                except FileNotFoundError:
                    continue

    def guard(self, *dirs: Path) -> None:
        """The agent's own folders (made when missing): owned by the agent, no write for
        group or others, so the work user cannot plant a tree, a build or a mirror in
        them (an emptyDir, for one, starts world-writable). SandboxError when one belongs
        to another user."""
        if not self.separate:
            return
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
            st = d.lstat()
            if st.st_uid != os.geteuid() or stat.S_ISLNK(st.st_mode):
                raise SandboxError(f"{d} belongs to uid {st.st_uid}, not to the agent "
                                   f"(uid {os.geteuid()}): the work user could change it")
            if st.st_mode & 0o022:
                d.chmod(stat.S_IMODE(st.st_mode) & ~0o022)

    def check_reachable(self, path: Path) -> None:
        """SandboxError unless the work user may traverse every folder above `path`."""
        if not self.separate:
            return
        for d in [path, *path.parents]:
            try:
                st = d.stat()
            except FileNotFoundError:
                continue  # made later, by the agent, mode 0755
            may = st.st_mode & stat.S_IXOTH or (st.st_uid == self.uid and st.st_mode
                                                & stat.S_IXUSR) or (
                st.st_gid == self.gid and st.st_mode & stat.S_IXGRP)
            if not may:
                raise SandboxError(
                    f"the work user {self.user} cannot reach {path}: {d} is mode "
                    f"{stat.S_IMODE(st.st_mode):04o} (give others search permission, o+x, "
                    "or move the runner's state folder)")


def _safe_mode(mode: int) -> int:
    """A folder the agent may walk (u+rwx), any entry without set-id bits or write for
    group and others."""
    bits = stat.S_IMODE(mode) & 0o755
    return bits | 0o700 if stat.S_ISDIR(mode) else bits
