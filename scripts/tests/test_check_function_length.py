"""`make lint`'s function-length check: a function of 61 lines fails, one of 60 passes; the
span runs from the first decorator to the last line; test folders and migrations are not read."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parent.parent / "check_function_length.py"


def function(lines: int, name: str = "f", decorators: int = 0) -> str:
    """Source of a function spanning exactly `lines` lines, `decorators` of them decorators."""
    head = ["@staticmethod"] * decorators + [f"def {name}() -> int:", '    """Doc."""']
    body = [f"    x{i} = {i}" for i in range(lines - len(head) - 1)]
    return "\n".join(head + body + ["    return 0", ""])


def check(*paths: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, paths)],
                          capture_output=True, text=True, check=False)


def test_a_function_of_61_lines_fails_and_names_itself(tmp_path):
    (tmp_path / "long.py").write_text("\n" + function(61, "too_long"))
    done = check(tmp_path)
    assert done.returncode == 1
    assert done.stdout == f"{tmp_path / 'long.py'}:2 too_long 61 lines (at most 60)\n"


def test_a_function_of_60_lines_passes(tmp_path):
    (tmp_path / "ok.py").write_text(function(60))
    done = check(tmp_path)
    assert (done.returncode, done.stdout) == (0, "")


def test_decorators_count_and_a_nested_function_is_measured_too(tmp_path):
    (tmp_path / "deco.py").write_text("class C:\n" + "\n".join(
        "    " + line for line in function(61, "m", decorators=1).splitlines()) + "\n")
    inner = "def outer() -> None:\n" + "\n".join(
        "    " + line for line in function(61, "inner").splitlines()) + "\n"
    (tmp_path / "nested.py").write_text(inner)
    done = check(tmp_path)
    assert done.returncode == 1
    assert "deco.py:3 m 61 lines" in done.stdout
    assert "nested.py:2 inner 61 lines" in done.stdout
    assert "nested.py:1 outer 62 lines" in done.stdout


def test_test_folders_and_migrations_below_a_root_are_not_read(tmp_path):
    for folder in ("tests", "pkg/test", "db/versions"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "long.py").write_text(function(61))
    assert check(tmp_path / "tests", tmp_path / "pkg").returncode == 1  # a test folder as root
    assert check(tmp_path / "pkg").returncode == 0
    assert check(tmp_path).returncode == 0
    frozen = Path(__file__).resolve().parents[2] / "db" / "versions"
    assert check(frozen.parent).returncode == 0  # the long migrations there are history
