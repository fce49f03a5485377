"""Per-cell statistics and the exporters, on hand-made trials."""

from __future__ import annotations

import csv
import io

import pytest
from mallard_runner import export
from mallard_runner.summary import quantile, summarize
from mallard_wire.results import AllocatorIn, ResultsIn, TrialIn, WorkloadIn
from mallard_wire.results import TestbedIn as Fingerprint

TB = Fingerprint(arch="x86_64", cpu_model="cpu", cpus="1", kernel="k", governor="unknown",
             smt=False, thp="madvise", compiler="gcc 12.2.0", libc="glibc 2.36", page_size=4096)


def trial(name: str, ops: float, seq: int, *, ok: bool = True, warmup: bool = False,
          variant: str | None = None) -> TrialIn:
    return TrialIn(uid=f"{name}-{variant}-{seq}-{warmup}", label="peer" if name != "mallard"
                 else "head", allocator=AllocatorIn(name=name, commit="a" * 40 if
                                                      name == "mallard" else None,
                                                      variant=variant),
                 workload=WorkloadIn(name="larson", params={"threads": 2}), seq=seq,
                 warmup=warmup, started_at="2026-11-21T00:00:00Z", ok=ok,
                 exit_code=0 if ok else None, signal=None if ok else 11,
                 stderr_tail="" if ok else "boom", measures={"ops_per_sec": ops} if ok else {},
                 counters=None)


def test_median_iqr_cv_ratio_and_failures():
    trials = [trial("glibc", v, i) for i, v in enumerate([100, 110, 90, 100])]
    trials += [trial("glibc", 10_000, 0, warmup=True)]  # warm-up: never counted
    trials += [trial("mallard", v, i, variant="transfer=ring") for i, v in enumerate([150, 160])]
    trials += [trial("mallard", 0, 2, ok=False, variant="transfer=ring")]
    rows = {s.allocator: s for s in summarize(trials, baseline="glibc")}
    g, m = rows["glibc"], rows["mallard@aaaaaaa transfer=ring"]
    assert (g.n, g.n_ok, g.median("ops_per_sec"), g.ratio) == (4, 4, 100, 1.0)
    assert g.iqr("ops_per_sec") == pytest.approx(quantile([90, 100, 100, 110], 0.75) - 97.5)
    assert g.cv("ops_per_sec") == pytest.approx(8.16496580927726 / 100)
    assert (m.n, m.n_ok, m.median("ops_per_sec"), m.ratio) == (3, 2, 155, 1.55)
    assert m.failures and "signal 11" in m.failures[0] and "boom" in m.failures[0]
    by_variant = {s.allocator: s.ratio for s in summarize(trials, "mallard:transfer=ring")}
    assert by_variant["glibc"] == pytest.approx(100 / 155)


def test_exporters():
    res = ResultsIn(testbed=TB, trials=[trial("glibc", 100, 0), trial("jemalloc", 120, 0)])
    md = export.to_markdown(res, "glibc")
    assert "| larson threads=2 | jemalloc | peer | 120 |" in md and "1.200" in md
    rows = list(csv.DictReader(io.StringIO(export.to_csv(res))))
    assert [r["allocator"] for r in rows] == ["glibc", "jemalloc"]
    assert float(rows[1]["ops_per_sec"]) == 120
    assert ResultsIn.model_validate_json(export.to_json(res)) == res
