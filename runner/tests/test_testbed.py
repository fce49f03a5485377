"""The testbed's noise controls: CPU frequency state read and written where permitted,
ASLR, and whether other processes may run on the pinned CPUs.

sysfs cannot be written on this VM (no cpufreq), so tune_cpus is tested against a tree of
files shaped like /sys/devices/system/cpu; isolation against this machine's real /proc and
against a /proc-shaped tree with known processes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mallard_runner import testbed
from mallard_runner.testbed import isolation, tune_cpus


def fake_sys(root: Path, governor: str | None = "powersave", no_turbo: str | None = "0",
             boost: str | None = None) -> Path:
    for cpu in (0, 1):
        if governor is not None:
            d = root / f"cpu{cpu}" / "cpufreq"
            d.mkdir(parents=True)
            (d / "scaling_governor").write_text(governor + "\n")
    if no_turbo is not None:
        (root / "intel_pstate").mkdir()
        (root / "intel_pstate" / "no_turbo").write_text(no_turbo + "\n")
    if boost is not None:
        (root / "cpufreq").mkdir(exist_ok=True)
        (root / "cpufreq" / "boost").write_text(boost + "\n")
    return root


def test_governor_and_turbo_are_set_where_allowed(tmp_path):
    root = fake_sys(tmp_path)
    actions = tune_cpus([1], write=True, sys_cpu=root)
    assert "cpu1 governor: powersave -> performance" in actions
    assert "turbo: on -> off" in actions
    assert (root / "cpu1" / "cpufreq" / "scaling_governor").read_text() == "performance"
    assert (root / "cpu0" / "cpufreq" / "scaling_governor").read_text().strip() == "powersave"
    assert (root / "intel_pstate" / "no_turbo").read_text() == "1"
    assert testbed.turbo(root) == "off"
    # a second run finds them set and says so
    again = tune_cpus([1], write=True, sys_cpu=root)
    assert "cpu1 governor: performance" in again and "turbo: off" in again


def test_read_only_when_writing_is_off_or_refused(tmp_path):
    root = fake_sys(tmp_path / "a", boost="1", no_turbo=None)
    actions = tune_cpus([0], write=False, sys_cpu=root)
    assert "cpu0 governor: powersave" in actions and "turbo: on" in actions
    assert (root / "cpufreq" / "boost").read_text().strip() == "1"
    ro = fake_sys(tmp_path / "b")
    gov = ro / "cpu1" / "cpufreq" / "scaling_governor"
    gov.unlink()
    gov.mkdir()  # a write to a directory fails, as sysfs does without permission
    (gov / "x").write_text("")
    out = tune_cpus([1], write=True, sys_cpu=ro)
    assert any(a.startswith("cpu1 governor:") for a in out)


def test_a_node_without_cpufreq_says_so(tmp_path):
    actions = tune_cpus([1], write=True, sys_cpu=tmp_path)
    assert actions[0] == "cpu1 governor: none (no cpufreq on this node)"
    assert actions[1].startswith("turbo: unknown")
    assert actions[2].startswith("smt: ")


def fake_proc(root: Path, procs: list[tuple[int, int, str, str, bool]]) -> Path:
    """(pid, ppid, name, Cpus_allowed_list, kernel thread) -> a /proc-shaped tree."""
    for pid, ppid, name, cpus, kthread in procs:
        d = root / str(pid)
        d.mkdir(parents=True)
        (d / "status").write_text(f"Name:\t{name}\nPid:\t{pid}\nPPid:\t{ppid}\n"
                                  f"Cpus_allowed_list:\t{cpus}\n")
        flags = 0x00208040 if kthread else 0x00400100
        (d / "stat").write_text(f"{pid} ({name} x) S {ppid} 1 1 0 -1 {flags} 0 0\n")
    (root / "self").mkdir()
    return root


def test_isolation_ignores_kernel_threads_and_our_own_processes(tmp_path):
    proc = fake_proc(tmp_path, [
        (1, 0, "init", "0", False),            # pinned elsewhere: fine
        (2, 0, "kthreadd", "0-3", True),        # kernel threads are per-CPU by design
        (50, 1, "bash", "0-3", False),          # our shell: an ancestor
        (60, 50, "runner", "0-3", False),       # us
        (70, 60, "larson", "2", False),         # our workload
        (80, 50, "vim", "0", False),            # a sibling, elsewhere
    ])
    iso = isolation([2, 3], proc=proc, me=60)
    assert iso.isolated and iso.others == [] and iso.warning([2, 3]) is None
    busy = fake_proc(tmp_path / "busy", [
        (1, 0, "init", "0-3", False), (60, 1, "runner", "0-3", False),
        (90, 1, "make", "0-3", False), (91, 1, "cc1", "3", False), (92, 1, "sshd", "0", False)])
    iso = isolation([2, 3], proc=busy, me=60)
    assert not iso.isolated and iso.others == ["1 init", "90 make", "91 cc1"]
    warning = iso.warning([2, 3])
    assert warning is not None and "CPUs 2,3 are not isolated: 3 other processes" in warning


def test_isolation_on_this_machine_sees_another_process():
    # `sleep` outlives its shell: reparented, it is no longer ours, and may run anywhere
    out = subprocess.run(["sh", "-c", "sleep 30 >/dev/null 2>&1 & echo $!"], capture_output=True,
                         text=True, check=True)
    pid = int(out.stdout.strip())
    try:
        cpus = sorted(os.sched_getaffinity(0))
        iso = isolation(cpus)
        assert f"{pid} sleep" in iso.others and not iso.isolated
        mine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:  # a child of ours (as the workload is) does not count
            assert not any(o.startswith(f"{mine.pid} ") for o in isolation(cpus).others)
        finally:
            mine.kill()
            mine.wait()
        tb = testbed.collect(cpus)
        assert tb.isolated is False
        assert tb.aslr in ("on", "off") and tb.workload_env == "minimal"
        assert testbed.collect(cpus, noise_control=False).workload_env == "inherited"
    finally:
        os.kill(pid, 9)
