"""Every relative link in every tracked Markdown file points to a file that exists, and
every `#anchor` to a heading of its target (GitHub's anchors); no README outgrows its
line budget (the top one 250 lines, a part's 400)."""

from __future__ import annotations

import re
import subprocess
import unicodedata
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
TOP_README_LINES = 250
PART_README_LINES = 400
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...
HTML_TARGET = re.compile(r"""\b(?:href|src)\s*=\s*["']([^"']+)["']""")
HTML_ID = re.compile(r"""\b(?:id|name)\s*=\s*["']([^"']+)["']""")


def tracked_markdown() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "*.md"], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout
        files = [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a checkout: every .md file
        files = [p for p in ROOT.rglob("*.md") if ".venv" not in p.parts]
    return sorted(p for p in files if p.is_file())


MARKDOWN = MarkdownIt("commonmark").enable("table")


@cache
def tokens(path: Path) -> list[Token]:
    return MARKDOWN.parse(path.read_text(encoding="utf-8"))


def walk(toks: list[Token]) -> list[Token]:
    """The tokens with their inline children, in document order."""
    out: list[Token] = []
    for t in toks:
        out.append(t)
        if t.children:
            out.extend(walk(t.children))
    return out


def slug(text: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (letters, digits,
    `_` and `-` kept), spaces turned into hyphens."""
    kept = "".join(c for c in text.lower()
                   if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors a Markdown file offers: one per heading (a repeated heading gets -1,
    -2, ...), plus any HTML id or name."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    toks = tokens(path)
    for i, t in enumerate(toks):
        if t.type == "heading_open":
            text = "".join(c.content for c in walk(toks[i + 1].children or [])
                           if c.type in ("text", "code_inline"))
            base = slug(text)
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
        elif t.type in ("html_block", "html_inline"):
            found.update(HTML_ID.findall(t.content))
    return frozenset(found)


def targets(path: Path) -> list[str]:
    """Every link and image target of a Markdown file (code spans and blocks aside)."""
    out: list[str] = []
    for t in walk(tokens(path)):
        if t.type == "link_open":
            out.append(str(t.attrs.get("href", "")))
        elif t.type == "image":
            out.append(str(t.attrs.get("src", "")))
        elif t.type in ("html_block", "html_inline"):
            out.extend(HTML_TARGET.findall(t.content))
    return out


def rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def broken(path: Path, target: str) -> str | None:
    """Why a link is broken, or None when it is fine (or not ours to check)."""
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    ref, _, anchor = target.partition("#")
    ref = unquote(ref.split("?", 1)[0])
    if ref.startswith("/"):
        dest = (ROOT / ref.lstrip("/")).resolve()
    else:
        dest = (path.parent / ref).resolve() if ref else path
    if not dest.exists():
        return f"{target}: no such file {rel(dest)}"
    if anchor and dest.is_file() and dest.suffix == ".md":
        if unquote(anchor).lower() not in anchors(dest):
            return f"{target}: no heading with anchor #{anchor} in {rel(dest)}"
    return None


FILES = tracked_markdown()


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(ROOT)) for p in FILES])
def test_relative_links_resolve(path: Path) -> None:
    problems = [why for t in targets(path) if (why := broken(path, t))]
    assert not problems, "\n".join(problems)


READMES = [p for p in FILES if p.name == "README.md"]


@pytest.mark.parametrize("path", READMES, ids=[str(p.relative_to(ROOT)) for p in READMES])
def test_readme_within_its_line_budget(path: Path) -> None:
    budget = TOP_README_LINES if path.parent == ROOT else PART_README_LINES
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= budget, f"{path.relative_to(ROOT)}: {lines} lines, budget {budget}"


def test_anchor_rules() -> None:
    """The slug rule on headings like ours."""
    assert slug("The spool") == "the-spool"
    assert slug("Settings (environment, prefix `MALLARD_RUNNER_`)") == \
        "settings-environment-prefix-mallard_runner_"
    assert slug("Pages (`/ui`)") == "pages-ui"
    assert slug("Speed x memory: one label") == "speed-x-memory-one-label"


def test_broken_links_are_found(tmp_path: Path) -> None:
    """The checker itself: a missing file and a missing anchor are reported, a good
    file, anchor, directory, URL and code span are not."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "other.md").write_text(
        "# Other\n\n## A `code` heading (x)\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md) [ok](other.md#a-code-heading-x) [ok](other.md#twice-1) "
        "[ok](#page) [ok](sub) [ok](https://example.org/x.md) `[no](missing.md)`\n\n"
        "[bad](missing.md) [bad](other.md#nowhere) ![bad](img/none.png)\n")
    problems = [why for t in targets(page) if (why := broken(page, t))]
    assert len(problems) == 3, problems
    assert "missing.md" in problems[0] and "#nowhere" in problems[1] and "none.png" in problems[2]
