"""Modes: whether a sample of one cell's trials falls into two separate speeds, and, for a
comparison, whether base and head share them (docs/statistics.md, "Modes").

A trial of some workloads runs at one of two speeds, chosen per process (larson's two
throughput modes; an allocator's speed set by where the stack falls). The median of such a
sample moves with the share of trials that drew the fast mode, and its spread is the gap
between the modes, not noise: the two-sample and the paired forms then see a wide interval
or a change that is only a different draw of modes.

``find_modes`` fits one and two normal components to the log values (EM, in numpy) and
calls the sample two-modal only when all of these hold, each a clear threshold:

* at least ``MIN_N`` values (10): below that a mixture fits anything;
* the two-component fit wins by the Bayesian information criterion by ``MIN_BIC_GAIN``;
* Ashman's D of the two components, sqrt(2) |mu1 - mu2| / sqrt(s1^2 + s2^2), is at least
  ``MIN_SEPARATION`` (2.5; D > 2 is the usual bound for a clean separation);
* each component holds at least ``MIN_SHARE`` (15%) of the values and 3 of them.

``compare_modes`` sets two sides' modes side by side: the modes ``moved`` when one side has
two and the other one, or when the shares of the fast mode differ by Fisher's exact test
at ``SHARE_ALPHA`` (0.05); otherwise the sides share them, and ``same_mode_rounds`` keeps
the rounds whose base and head trials fell into the same mode, for the paired statistic.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats as sps  # type: ignore[import-untyped]

MIN_N = 10
MIN_BIC_GAIN = 10.0
# no component narrower than this share of the whole sample's spread: EM's spike on a
# few close values is not a mode
VARIANCE_FLOOR = 0.2
MIN_SEPARATION = 2.5
MIN_SHARE = 0.15
MIN_MEMBERS = 3
SHARE_ALPHA = 0.05
_EM_ITERATIONS = 200
_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True)
class Mode:
    """One mode of a sample: its share of the values and its location (their median)."""

    share: float
    location: float
    n: int


@dataclass(frozen=True)
class Modes:
    """A sample's modes, slowest location first: one when the sample is one-modal; two
    with ``cut`` the value between them (a value above it is in the upper mode) and
    ``separation`` the components' Ashman's D."""

    modes: tuple[Mode, ...]
    cut: float | None = None
    separation: float = 0.0

    @property
    def multimodal(self) -> bool:
        return len(self.modes) > 1

    def mode_of(self, value: float) -> int:
        """The index into ``modes`` of the mode `value` falls in."""
        return 0 if self.cut is None or value <= self.cut else 1

    def text(self, fmt: Callable[[float], str] = "{:.3g}".format) -> str:
        """``62% at 28.1M, 38% at 21.4M`` (`fmt` shows a location): the larger share
        first."""
        ordered = sorted(self.modes, key=lambda m: -m.share)
        return ", ".join(f"{round(100 * m.share)}% at {fmt(m.location)}" for m in ordered)


def _positive(values: Sequence[float | None]) -> NDArray[np.float64]:
    kept = [float(v) for v in values if v is not None and math.isfinite(v) and v > 0.0]
    return np.asarray(kept, dtype=np.float64)


def _normal_logpdf(x: NDArray[np.float64], mu: float, var: float) -> NDArray[np.float64]:
    return np.asarray(-0.5 * (_LOG_2PI + math.log(var) + (x - mu) ** 2 / var),
                      dtype=np.float64)


def _starts(x: NDArray[np.float64]) -> list[float]:
    """Where EM starts: the largest gap between sorted values among the splits that leave
    a mode's minimum on each side (the largest gap of all is often one between two low
    stragglers, and EM started there folds the mixture into one component), and the
    median."""
    xs = np.sort(x)
    least = max(MIN_MEMBERS, math.ceil(MIN_SHARE * xs.size))
    inner = np.diff(xs)[least - 1:xs.size - least]
    out = [float(np.median(xs))]
    if inner.size:
        out.append(float(xs[least - 1 + int(np.argmax(inner))]))
    return out


def _fit_two(x: NDArray[np.float64], floor: float) -> tuple[NDArray[np.float64], float]:
    """EM for a two-component normal mixture of `x` from each of ``_starts``, the fit of
    the highest likelihood: (responsibility of the upper component, log-likelihood)."""
    fits = [_em(x, floor, (x > split).astype(np.float64)) for split in _starts(x)]
    return max(fits, key=lambda fit: fit[1])


def _em(x: NDArray[np.float64], floor: float, resp: NDArray[np.float64]
        ) -> tuple[NDArray[np.float64], float]:
    loglik = -math.inf
    for _ in range(_EM_ITERATIONS):
        w1 = float(np.clip(resp.mean(), 1e-6, 1 - 1e-6))
        r0, r1 = 1.0 - resp, resp
        mu0 = float((r0 * x).sum() / r0.sum())
        mu1 = float((r1 * x).sum() / r1.sum())
        v0 = max(float((r0 * (x - mu0) ** 2).sum() / r0.sum()), floor)
        v1 = max(float((r1 * (x - mu1) ** 2).sum() / r1.sum()), floor)
        a = math.log(1 - w1) + _normal_logpdf(x, mu0, v0)
        b = math.log(w1) + _normal_logpdf(x, mu1, v1)
        total = np.logaddexp(a, b)
        resp = np.asarray(np.exp(b - total), dtype=np.float64)
        new = float(total.sum())
        if abs(new - loglik) < 1e-9:
            break
        loglik = new
    return resp, loglik


def _ashman_d(lo: NDArray[np.float64], hi: NDArray[np.float64], floor: float) -> float:
    var = max(float(lo.var()), floor) + max(float(hi.var()), floor)
    return math.sqrt(2.0) * abs(float(hi.mean()) - float(lo.mean())) / math.sqrt(var)


def _one(x: NDArray[np.float64]) -> Modes:
    if x.size == 0:
        return Modes(modes=())
    return Modes(modes=(Mode(share=1.0, location=float(np.median(np.exp(x))), n=int(x.size)),))


def find_modes(values: Sequence[float | None]) -> Modes:
    """The modes of one side's values (positive and finite ones; others left out)."""
    x = np.log(_positive(values))
    n = int(x.size)
    if n < MIN_N or float(np.ptp(x)) == 0.0:
        return _one(x)
    floor = (VARIANCE_FLOOR * float(x.std())) ** 2
    one = float(_normal_logpdf(x, float(x.mean()), max(float(x.var()), floor)).sum())
    resp, two = _fit_two(x, floor)
    upper = resp > 0.5
    lo, hi = x[~upper], x[upper]
    gain = (-2.0 * one + 2.0 * math.log(n)) - (-2.0 * two + 5.0 * math.log(n))
    if (min(lo.size, hi.size) < max(MIN_MEMBERS, math.ceil(MIN_SHARE * n))
            or gain < MIN_BIC_GAIN or (d := _ashman_d(lo, hi, floor)) < MIN_SEPARATION):
        return _one(x)
    cut = math.exp((float(lo.max()) + float(hi.min())) / 2.0)
    modes = tuple(Mode(share=part.size / n, location=float(np.median(np.exp(part))),
                       n=int(part.size)) for part in (lo, hi))
    return Modes(modes=modes, cut=cut, separation=d)


@dataclass(frozen=True)
class ModeComparison:
    """Two sides' modes: ``moved`` when they do not share them (``why`` says how)."""

    base: Modes
    head: Modes
    moved: bool
    why: str = ""

    @property
    def multimodal(self) -> bool:
        return self.base.multimodal or self.head.multimodal

    def text(self, fmt: Callable[[float], str] = "{:.3g}".format) -> str:
        """``modes: base 62% at 28.1M, 38% at 21.4M; head ...`` (``modes moved`` first)."""
        line = f"modes: base {self.base.text(fmt)}; head {self.head.text(fmt)}"
        return f"modes moved ({self.why}); {line}" if self.moved else line


def compare_modes(base: Sequence[float | None], head: Sequence[float | None]) -> ModeComparison:
    """Whether base and head share their modes (same count; upper-mode shares equal by
    Fisher's exact test at ``SHARE_ALPHA``)."""
    mb, mh = find_modes(base), find_modes(head)
    if mb.multimodal != mh.multimodal:
        side = "base" if mb.multimodal else "head"
        return ModeComparison(mb, mh, moved=True, why=f"only {side} has two modes")
    if not mb.multimodal:
        return ModeComparison(mb, mh, moved=False)
    table = [[mb.modes[1].n, mb.modes[0].n], [mh.modes[1].n, mh.modes[0].n]]
    p = float(sps.fisher_exact(table).pvalue)
    if p < SHARE_ALPHA:
        return ModeComparison(mb, mh, moved=True,
                              why=f"upper-mode share {round(100 * mb.modes[1].share)}% -> "
                                  f"{round(100 * mh.modes[1].share)}%, p={p:.3f}")
    return ModeComparison(mb, mh, moved=False)


def same_mode_rounds(comparison: ModeComparison, base: Sequence[float | None],
                     head: Sequence[float | None]) -> list[int]:
    """The indices of the rounds (``base[i]``, ``head[i]``) whose trials fell into the same
    mode of their own side, for ``paired.compare_paired`` (with their blocks); every round
    when neither side has two."""
    if not comparison.multimodal or comparison.moved:
        return list(range(len(base)))
    return [i for i, (b, h) in enumerate(zip(base, head, strict=True))
            if b is not None and h is not None
            and comparison.base.mode_of(b) == comparison.head.mode_of(h)]
