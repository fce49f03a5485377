"""A callgrind output file read into per-function costs and call edges, and the call tree a
flame graph draws (pure: no processes).

Attribution: callgrind charges every instruction to the function its `fn=` record names,
so code the compiler inlined counts as the function it was inlined into (the one that is
really running); GCC's clones (`spin.constprop.0`, `f.isra.1`, `f.part.0`, `f.cold`) and
callgrind's recursion levels (`f'2`) are folded into the function they came from. A
function without a symbol (a stripped library) shows as its address (`0x...`).

The call tree is expanded from the entry points (the instructions of a function that no
caller's edge accounts for: the program's start, a new thread's `clone`) along the edges:
a function reached from a caller gets the share of its own callees' costs that this edge
carries (callgrind keeps edges, not whole stacks), so each frame's children and its own
instructions sum to its width exactly, and the root's width is the program's total.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_CLONE = re.compile(r"(\.(constprop|isra|part|cold|lto_priv|llvm)(\.\d+)*|'\d+)+$")
_NAME = re.compile(r"^\((\d+)\)(?: (.*))?$")
UNNAMED = re.compile(r"^0x[0-9a-fA-F]+$")
ROOT = "all"

Key = tuple[str, str]  # (function, object basename)


def fold(name: str) -> str:
    """A function's name with GCC's clone suffixes and callgrind's recursion level cut."""
    return _CLONE.sub("", name) or name


@dataclass
class Edge:
    calls: int = 0
    inclusive: int = 0


@dataclass
class Callgrind:
    """What one callgrind run counted: the total, each function's own instructions and the
    calls it received, and the call edges with their inclusive cost."""

    total: int = 0
    exclusive: dict[Key, int] = field(default_factory=dict)
    calls: dict[Key, int] = field(default_factory=dict)
    edges: dict[tuple[Key, Key], Edge] = field(default_factory=dict)

    def inclusive(self, key: Key) -> int:
        """Own instructions plus what its calls cost (recursive calls counted once)."""
        out = self.exclusive.get(key, 0)
        out += sum(e.inclusive for (a, b), e in self.edges.items() if a == key and b != key)
        return min(out, self.total) if self.total else out

    def inclusive_all(self) -> dict[Key, int]:
        out = dict(self.exclusive)
        for (a, b), e in self.edges.items():
            if a != b:
                out[a] = out.get(a, 0) + e.inclusive
        return {k: min(v, self.total) if self.total else v for k, v in out.items()}


class _Reader:
    """The parser's state: the compressed name tables and the current records."""

    def __init__(self) -> None:
        self.names: dict[str, dict[str, str]] = {"fn": {}, "ob": {}}
        self.ob = self.cob = ""
        self.fn: Key = ("", "")
        self.callee: Key | None = None
        self.call_count: int | None = None
        self.ir = 0  # the index of Ir among the cost line's numbers
        self.out = Callgrind()

    def name(self, table: str, value: str) -> str:
        m = _NAME.match(value.strip())
        if m is None:
            return value.strip()
        ident, text = m.group(1), m.group(2)
        if text is not None:
            self.names[table][ident] = text
            return text
        return self.names[table].get(ident, f"({ident})")

    def spec(self, key: str, value: str) -> None:
        if key == "events":
            events = value.split()
            self.ir = events.index("Ir") if "Ir" in events else 0
        elif key in ("summary", "totals") and value.split():
            self.out.total = max(self.out.total, int(value.split()[self.ir]))
        elif key == "ob":
            self.ob = self.cob = base(self.name("ob", value))
        elif key == "cob":
            self.cob = base(self.name("ob", value))
        elif key == "fn":
            self.fn = (fold(self.name("fn", value)), self.ob)
            self.cob = self.ob
        elif key == "cfn":
            self.callee = (fold(self.name("fn", value)), self.cob)
        elif key == "calls":
            self.call_count = int(value.split()[0])

    def cost(self, line: str) -> None:
        parts = line.split()
        ir = int(parts[1 + self.ir]) if len(parts) > 1 + self.ir else 0
        if self.call_count is not None and self.callee is not None:
            edge = self.out.edges.setdefault((self.fn, self.callee), Edge())
            edge.calls += self.call_count
            edge.inclusive += ir
            self.out.calls[self.callee] = self.out.calls.get(self.callee, 0) + self.call_count
            self.call_count, self.callee, self.cob = None, None, self.ob
            return
        self.out.exclusive[self.fn] = self.out.exclusive.get(self.fn, 0) + ir


def base(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def parse(text: str) -> Callgrind:
    """A callgrind output file (`--dump-instr=no`, any compression) -> `Callgrind`."""
    r = _Reader()
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line[0].isdigit() or line[0] in "+-*":
            r.cost(line)
            continue
        key, sep, value = line.partition("=") if "=" in line.split(":", 1)[0] else \
            line.partition(":")
        if sep:
            r.spec(key.strip(), value)
    if not r.out.total:
        r.out.total = sum(r.out.exclusive.values())
    return r.out


@dataclass
class _Tree:
    cg: Callgrind
    inclusive: dict[Key, int]
    children: dict[Key, list[tuple[Key, int]]]
    min_width: int
    widths: dict[tuple[str, ...], int] = field(default_factory=dict)


def tree(cg: Callgrind, min_share: float = 0.001, max_frames: int = 2000
         ) -> dict[tuple[str, ...], int]:
    """The call tree as {path of function names from the root: inclusive width}; frames
    narrower than `min_share` of the total are left in their parent's own width, and the
    share doubles until at most `max_frames` frames remain."""
    inclusive = cg.inclusive_all()
    children: dict[Key, list[tuple[Key, int]]] = {}
    covered: dict[Key, int] = {}
    for (a, b), e in cg.edges.items():
        if a != b:
            children.setdefault(a, []).append((b, e.inclusive))
            covered[b] = covered.get(b, 0) + e.inclusive
    # entry points: what no caller's edge covers (the program's start, a thread's clone)
    roots = sorted(((k, v - covered.get(k, 0)) for k, v in inclusive.items()
                    if v > covered.get(k, 0)), key=lambda kv: -kv[1])
    share = min_share
    while True:
        t = _Tree(cg, inclusive, children, max(1, int(cg.total * share)))
        t.widths[(ROOT,)] = cg.total
        scale = min(1.0, cg.total / max(1, sum(v for _, v in roots)))
        for key, width in roots:
            _expand(t, (ROOT,), (), key, int(width * scale))
        if len(t.widths) <= max_frames:
            return t.widths
        share *= 2


def _expand(t: _Tree, parent: tuple[str, ...], keys: tuple[Key, ...], key: Key,
            width: int) -> None:
    if width < t.min_width or key in keys:
        return  # too narrow, or recursion: stays in the parent's own width
    path = (*parent, key[0])
    keys = (*keys, key)
    t.widths[path] = t.widths.get(path, 0) + width
    full = t.inclusive.get(key, 0)
    if full <= 0:
        return
    scale = min(1.0, width / full)
    for callee, cost in t.children.get(key, []):
        _expand(t, path, keys, callee, int(cost * scale))
