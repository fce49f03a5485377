"""A differential profile (`mallard_wire.profiles.ProfileIn`) read for people: per function
instructions per call on each side, the functions that moved most by absolute and by
relative change, and the `why:` phrase the culprit line, the report, the alert and the
forge comment quote (the function whose own instructions moved most)."""

from __future__ import annotations

from dataclasses import dataclass

from mallard_wire.profiles import FunctionDiff, ProfileIn, SideCost

RELATIVE_MIN_SHARE = 0.005  # a function ranked by relative change holds >= 0.5% of a side


def per_call(side: SideCost, inclusive: bool = False) -> float | None:
    if side.calls == 0:
        return None
    return (side.inclusive if inclusive else side.exclusive) / side.calls


def pct(base: float | None, head: float | None) -> float | None:
    if base is None or head is None or base == 0:
        return None
    return 100.0 * (head - base) / base


@dataclass(frozen=True)
class Moved:
    """One function's change: totals and per call, exclusive and inclusive."""

    f: FunctionDiff

    @property
    def delta(self) -> int:
        return self.f.head.exclusive - self.f.base.exclusive

    @property
    def delta_inclusive(self) -> int:
        return self.f.head.inclusive - self.f.base.inclusive

    @property
    def per_call_delta(self) -> float | None:
        b, h = per_call(self.f.base), per_call(self.f.head)
        return None if b is None or h is None else h - b

    @property
    def relative_pct(self) -> float | None:
        """Change of own instructions per call (of the totals when it has no calls)."""
        b, h = per_call(self.f.base), per_call(self.f.head)
        if b is None or h is None:
            return pct(float(self.f.base.exclusive), float(self.f.head.exclusive))
        return pct(b, h)


def by_absolute(p: ProfileIn, n: int = 10) -> list[Moved]:
    rows = [Moved(f) for f in p.functions if f.head.exclusive != f.base.exclusive
            or f.head.inclusive != f.base.inclusive]
    rows.sort(key=lambda m: (-abs(m.delta), -abs(m.delta_inclusive), m.f.name))
    return rows[:n]


def by_relative(p: ProfileIn, n: int = 10) -> list[Moved]:
    floor = RELATIVE_MIN_SHARE * max(p.base_total, p.head_total, 1)
    rows = [Moved(f) for f in p.functions
            if max(f.base.exclusive, f.head.exclusive) >= floor and f.base.exclusive > 0]
    rows = [m for m in rows if m.relative_pct not in (None, 0.0)]
    rows.sort(key=lambda m: (-abs(m.relative_pct or 0.0), m.f.name))
    return rows[:n]


def total_pct(p: ProfileIn) -> float | None:
    return pct(float(p.base_total), float(p.head_total))


def why(p: ProfileIn) -> str | None:
    """`mld_free +312 instructions per call (+540%)`: the function whose own instructions
    moved most (per call when it was called on both sides, else in total); None when
    nothing moved."""
    top = by_absolute(p, 1)
    if not top or top[0].delta == 0:
        return None
    m = top[0]
    rel = m.relative_pct
    change = f" ({rel:+.0f}%)" if rel is not None else " (new)"
    if m.per_call_delta is not None:
        return f"{m.f.name} {m.per_call_delta:+.0f} instructions per call{change}"
    return f"{m.f.name} {m.delta:+,} instructions{change}"


def summary(p: ProfileIn) -> str:
    """One line: the case, the totals and the why (for the report and the alert)."""
    threads = f" threads={p.case.threads}" if p.case.threads is not None else ""
    tot = total_pct(p)
    total = f"{p.base_total:,} -> {p.head_total:,} instructions" + (
        f" ({tot:+.1f}%)" if tot is not None else "")
    reason = why(p)
    notes = f"; {'; '.join(p.notes)}" if p.notes else ""
    return f"profile {p.case.workload}{threads}: {total}" + (
        f"; why: {reason}" if reason else "") + notes
