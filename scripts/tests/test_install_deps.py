"""scripts/install-deps.sh with a fake apt: a required package that does not install fails
it; an optional one (named in the script) only warns."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "install-deps.sh"


def run_with_fake_apt(tmp_path: Path, missing: list[str], broken: list[str]
                      ) -> subprocess.CompletedProcess[str]:
    """The script with dpkg-query saying `missing` are not installed and apt-get failing to
    install any of `broken` (and installing the rest)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    state = tmp_path / "installed"
    state.write_text("")
    fakes = {
        "id": 'echo 0',
        "dpkg-query": (f'p="${{@: -1}}"; if grep -qx "$p" {state}; then echo "install ok '
                       f'installed"; exit 0; fi; for m in {" ".join(missing)}; do '
                       '[ "$m" = "$p" ] && exit 1; done; echo "install ok installed"'),
        "apt-get": (f'[ "$1" = update ] && exit 0; for p in "$@"; do for b in '
                    f'{" ".join(broken) or "none"}; do [ "$p" = "$b" ] && {{ echo "E: Unable '
                    f'to locate package $p" >&2; exit 100; }}; done; done; for p in "$@"; do '
                    f'case $p in -*) ;; *) echo "Setting up $p"; echo "$p" >> {state};; esac; '
                    'done'),
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/bash\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"})


def test_everything_present_installs_nothing(tmp_path):
    out = run_with_fake_apt(tmp_path, [], [])
    assert out.returncode == 0 and "system packages present" in out.stdout


def test_a_required_package_that_does_not_install_fails(tmp_path):
    out = run_with_fake_apt(tmp_path, ["hyperfine", "valgrind"], ["valgrind"])
    assert out.returncode == 1, out.stdout + out.stderr
    assert "FAILED" in out.stderr and "valgrind" in out.stderr
    assert "deps: done" not in out.stdout


def test_missing_packages_are_installed(tmp_path):
    out = run_with_fake_apt(tmp_path, ["hyperfine", "qemu-user"], [])
    assert out.returncode == 0, out.stderr
    assert "deps: Setting up hyperfine" in out.stdout and "deps: Setting up qemu-user" in out.stdout
    assert out.stdout.rstrip().endswith("deps: done")


def test_an_optional_package_that_does_not_install_only_warns(tmp_path):
    out = run_with_fake_apt(tmp_path, ["qemu-user"], ["qemu-user"])
    assert out.returncode == 0, out.stderr
    assert "optional packages not installed" in out.stderr and "qemu-user" in out.stderr
    assert out.stdout.rstrip().endswith("deps: done")
