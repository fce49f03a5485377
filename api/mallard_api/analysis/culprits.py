"""What a bisection says of its comparisons and its culprit, read from the stored cells:
the judged cell of a comparison (`evidence`), the cell the culprit line quotes
(`culprit_evidence`), a commit's subject and the culprit line itself, with the `why:` of
the differential profile of that comparison once its profile job has posted it. Bisections
(`bisections`) classify probes with it; the comparison report and the pages quote it."""

from __future__ import annotations

from mallard_stats.measures import SPEEDS
from mallard_wire.profiles import ProfileIn
from sqlalchemy.orm import Session

from mallard_api.analysis import differential, report
from mallard_api.analysis.cells import CellRow
from mallard_api.models.bisections import Bisection
from mallard_api.models.commits import Commit
from mallard_api.models.comparisons import Comparison
from mallard_api.models.records import Evidence
from mallard_api.sql import comparisons as comparison_sql
from mallard_api.sql import profiles as profile_sql


def evidence(session: Session, comp: Comparison | None, b: Bisection,
             measure: str | None = None, cells: list[CellRow] | None = None
             ) -> Evidence | None:
    """The judged cell of a comparison, or its `measure` cell (None when it failed or has
    no such cell); of its stored cells, or of `cells` when a settle just computed them."""
    if comp is None or comp.state == "failed":
        return None
    for c in comparison_sql.cells(session, comp.id) if cells is None else cells:
        if c.workload == b.workload and c.measure == (measure or b.measure) \
                and (b.threads is None or c.threads == b.threads):
            return Evidence(comparison_id=comp.id, base=comp.base.commit,
                            head=comp.head.commit, diff_pct=c.diff_pct,
                            ci_low_pct=c.ci_low_pct, ci_high_pct=c.ci_high_pct,
                            verdict=c.verdict, higher_is_better=c.higher_is_better,
                            measure=c.measure, threads=c.threads, line=c.line)
    return None


def culprit_evidence(session: Session, b: Bisection) -> Evidence | None:
    """What the culprit line quotes: a throughput cell (ops_per_sec, else ops_per_cpu_sec
    where the wall clock is not judged) of the narrowest comparison across the culprit (only
    the culprit's change lies inside it) that judged it REGRESSED, which is the slowdown a
    reader expects; else the judged cell of the narrowest comparison across it."""
    if b.culprit is None:
        return None
    at = b.commits.index(b.culprit)
    spans = []
    for st in b.steps:
        for (lo, hi), cid in zip(st.spans(), st.comparisons, strict=False):
            if lo < at <= hi:
                spans.append((hi - lo, -st.round, cid))
    comps = [comparison_sql.get(session, cid) for _, _, cid in sorted(spans)]
    for comp in comps:
        for speed in (m for m in SPEEDS if m != b.measure):
            e = evidence(session, comp, b, speed)
            if e is not None and e.verdict == "regressed":
                return e
    for comp in comps:
        e = evidence(session, comp, b)
        if e is not None:
            return e
    return None


def subject(session: Session, project_id: int, sha: str) -> str:
    c = session.query(Commit).filter_by(project_id=project_id, sha=sha).one_or_none()
    msg = (c.message or "") if c is not None else ""
    return msg.strip().splitlines()[0][:120] if msg.strip() else ""


def culprit_line(session: Session, b: Bisection) -> str | None:
    """`culprit: <sha7> <subject> (<workload> threads=N <measure> -X% ±Y%, bisected in K
    builds)`, or None before the culprit is named."""
    if b.culprit is None:
        return None
    e = culprit_evidence(session, b)
    change = ""
    if e is not None and e.diff_pct is not None:
        interval = report.interval_text(e.diff_pct, e.ci_low_pct, e.ci_high_pct) or "±0.0%"
        change = f" {e.diff_pct:+.1f}% {interval}"
    threads = f" threads={b.threads}" if b.threads is not None else ""
    measure = (e.measure if e is not None else None) or b.measure
    reason = culprit_why(session, b, e)
    return (f"culprit: {b.culprit[:7]} {subject(session, b.project_id, b.culprit)} "
            f"({b.workload}{threads} {measure}{change}, bisected in {b.builds} builds)"
            + (f"; why: {reason}" if reason else ""))


def case_profile(session: Session, comparison_ids: list[int], workload: str,
                 threads: int | None) -> ProfileIn | None:
    """The stored differential profile of a case in the first of these comparisons that
    has one (the settle-queued profile of the case, else one asked for)."""
    rows = [r for r in profile_sql.of_comparisons(session, comparison_ids)
            if r.body is not None and r.workload == workload
            and (threads is None or r.threads in (None, threads))]
    for cid in comparison_ids:
        for r in sorted(rows, key=lambda r: (r.requested, r.id)):
            if r.comparison_id == cid:
                return r.body
    return None


def culprit_why(session: Session, b: Bisection, e: Evidence | None) -> str | None:
    """The `why:` of the culprit line: the function that moved most in the profile of the
    comparison the line quotes (else of any comparison across the culprit)."""
    ids = [e.comparison_id] if e is not None else []
    if b.culprit is not None:
        at = b.commits.index(b.culprit)
        ids += [cid for st in b.steps
                for (lo, hi), cid in zip(st.spans(), st.comparisons, strict=False)
                if lo < at <= hi and cid not in ids]
    p = case_profile(session, ids, b.workload, b.threads)
    return differential.why(p) if p is not None else None
