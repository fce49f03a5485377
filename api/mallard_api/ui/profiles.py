"""The differential-profile section of the comparison, commit and bisection pages: per
profiled case its state, totals, the `why:`, the functions that moved most (by absolute
and by relative change, instructions per call on each side) and its flame graph
(`flame.py`). Self-contained: its own template partial (`_profiles.html`)."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup
from sqlalchemy.orm import Session

from mallard_api.analysis import differential
from mallard_api.analysis.differential import Moved, per_call
from mallard_api.sql import profiles as sql
from mallard_api.ui.flame import flame_svg


@dataclass(frozen=True)
class FunctionView:
    name: str
    object: str
    base_excl: str
    head_excl: str
    delta: str
    base_per_call: str
    head_per_call: str
    base_incl_per_call: str
    head_incl_per_call: str
    relative: str


@dataclass(frozen=True)
class ProfileView:
    id: int
    comparison_id: int
    case: str
    state: str
    requested: bool
    totals: str
    why: str | None
    notes: list[str]
    seconds: str
    absolute: list[FunctionView]
    relative: list[FunctionView]
    flame: Markup | None


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:,.1f}" if v % 1 else f"{int(v):,}"


def function_view(m: Moved) -> FunctionView:
    f = m.f
    rel = m.relative_pct
    return FunctionView(
        name=f.name, object=f.object, base_excl=f"{f.base.exclusive:,}",
        head_excl=f"{f.head.exclusive:,}", delta=f"{m.delta:+,}",
        base_per_call=_num(per_call(f.base)), head_per_call=_num(per_call(f.head)),
        base_incl_per_call=_num(per_call(f.base, True)),
        head_incl_per_call=_num(per_call(f.head, True)),
        relative="–" if rel is None else f"{rel:+.1f}%")


def view(row: sql.ProfileRow) -> ProfileView:
    threads = f" threads={row.threads}" if row.threads is not None else ""
    case = f"{row.workload}{threads}"
    p = row.body
    if p is None:
        return ProfileView(row.id, row.comparison_id, case, row.state, row.requested, "",
                           None, [], "", [], [], None)
    tot = differential.total_pct(p)
    totals = f"{p.base_total:,} → {p.head_total:,} instructions" + (
        f" ({tot:+.1f}%)" if tot is not None else "")
    return ProfileView(
        row.id, row.comparison_id, case, row.state, row.requested, totals,
        differential.why(p), p.notes, f"{p.seconds:.1f}",
        [function_view(m) for m in differential.by_absolute(p)],
        [function_view(m) for m in differential.by_relative(p)], flame_svg(p))


def views(session: Session, comparison_ids: list[int]) -> list[ProfileView]:
    return [view(r) for r in sql.of_comparisons(session, comparison_ids)]
