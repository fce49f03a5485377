"""A comparison's hypothesis: what the engineer expects the change to do, and whether a
cell bore it out.

A hypothesis (``"+15%"``, ``"expected +15%"``, ``"+15-25%"``, ``"expected -3% wall_seconds"``)
is a change of one measure (``ops_per_sec`` unless named), in percent, as a value or a range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from mallard_stats.measures import THROUGHPUT
from mallard_stats.stats import CellStats


@dataclass
class Hypothesis:
    low_pct: float
    high_pct: float
    measure: str = THROUGHPUT
    text: str = ""

    def describe(self) -> str:
        if self.low_pct == self.high_pct:
            return f"expected {self.low_pct:+g}% {self.measure}"
        return f"expected {self.low_pct:+g}..{self.high_pct:+g}% {self.measure}"


_HYP = re.compile(
    r"^\s*(?:expected\s*:?\s*)?"
    r"(?P<a>[+-]?\d+(?:\.\d+)?)\s*"
    r"(?:\s*(?:-|\.\.|to)\s*(?P<b>[+-]?\d+(?:\.\d+)?)\s*)?%"
    r"(?:\s+(?P<measure>[a-z_][a-z0-9_]*))?\s*$",
    re.IGNORECASE,
)


def parse_hypothesis(text: str | None) -> Hypothesis | None:
    """Parse a hypothesis; ``None``/empty gives ``None``; malformed raises ``ValueError``.

    In a range the sign of the first number carries to the second (``+15-25%`` is
    +15..+25, ``-3-5%`` is -3..-5); a signed second number keeps its own sign.
    """
    if text is None or not text.strip():
        return None
    m = _HYP.match(text)
    if not m:
        raise ValueError(
            "hypothesis must look like '+15%', 'expected +15%', '+15-25%' or "
            "'expected -3% wall_seconds'"
        )
    a = float(m.group("a"))
    b_text = m.group("b")
    if b_text is None:
        b = a
    else:
        b = float(b_text)
        if b_text[0] not in "+-" and m.group("a")[0] == "-":
            b = -b
    measure = (m.group("measure") or THROUGHPUT).lower()
    return Hypothesis(min(a, b), max(a, b), measure, text.strip())


def hypothesis_outcome(h: Hypothesis, s: CellStats) -> str:
    """``held`` when the interval reaches the expected value/range; ``undecided`` while the
    verdict is unknown; otherwise ``not held`` with how it missed."""
    if s.diff_pct is None or s.ci_low_pct is None or s.ci_high_pct is None:
        return "undecided"
    if s.ci_low_pct <= h.high_pct and s.ci_high_pct >= h.low_pct:
        return "held"
    if s.verdict == "unknown":
        return "undecided"
    expected_sign = 1 if (h.low_pct + h.high_pct) >= 0 else -1
    if (s.diff_pct > 0) != (expected_sign > 0) or s.verdict == "same":
        return "not held (wrong direction)" if s.verdict != "same" else "not held (no change)"
    if abs(s.diff_pct) < min(abs(h.low_pct), abs(h.high_pct)):
        return "not held (smaller than expected)"
    return "not held (larger than expected)"
