"""`make lint`: no product function over 60 lines.

A function's length is its span on the page, from its first decorator (or its `def`) to its
last line, docstring, comments and blank lines included: what a reader has to hold. Every
Python file under the roots is read, except the folders named `tests` or `test` below a root
(test files; name such a folder as a root to check it, as `tests/e2e`, the end-to-end program,
is) and the Alembic migrations under `db/versions` (frozen history). Prints one line per
function over the limit, `path:line name N lines`, and exits 1 if there is any.

    python scripts/check_function_length.py            # the repository's product code
    python scripts/check_function_length.py PATH ...   # these files or folders
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MAX_LINES = 60
REPO_ROOT = Path(__file__).resolve().parent.parent
ROOTS = ("api", "runner", "stats", "wire", "dashboards", "scripts", "tests/e2e", "k8s",
         "allocator", "db")
SKIPPED_DIRS = frozenset({"tests", "test", ".venv", "__pycache__"})
FROZEN = "/db/versions/"


def function_lengths(tree: ast.AST) -> Iterator[tuple[int, str, int]]:
    """(line of the def, name, lines from the first decorator to the last line) per function."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = min([d.lineno for d in node.decorator_list] + [node.lineno])
            end = node.end_lineno if node.end_lineno is not None else node.lineno
            yield node.lineno, node.name, end - start + 1


def python_files(root: Path) -> Iterator[Path]:
    if root.is_file():
        yield root
        return
    for path in sorted(root.rglob("*.py")):
        below = path.relative_to(root).parts[:-1]
        if SKIPPED_DIRS.isdisjoint(below) and FROZEN not in path.resolve().as_posix():
            yield path


def _shown(path: Path) -> str:
    try:
        return path.resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return str(path)


def too_long(roots: list[Path], limit: int = MAX_LINES) -> list[tuple[str, int, str, int]]:
    """(path, line, name, length) of every function over `limit` lines under the roots."""
    found = []
    for root in roots:
        for path in python_files(root):
            tree = ast.parse(path.read_text(), filename=str(path))
            for line, name, length in function_lengths(tree):
                if length > limit:
                    found.append((_shown(path), line, name, length))
    return found


def main(argv: list[str]) -> int:
    roots = [Path(a) for a in argv] or [REPO_ROOT / r for r in ROOTS]
    found = too_long(roots)
    for path, line, name, length in found:
        print(f"{path}:{line} {name} {length} lines (at most {MAX_LINES})")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
