"""Numbers as an allocator engineer reads them: 1.23M ops/s, 10.0 MiB, 412 ms, 0.988."""

from __future__ import annotations

import math

from mallard_wire.fields import JsonDict

_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BIN = ((2.0**40, "TiB"), (2.0**30, "GiB"), (2.0**20, "MiB"), (2.0**10, "KiB"))


def kind(measure: str, unit: str = "") -> str:
    """How a measure's values are written: bytes, byte-seconds, seconds, ratio, rate or
    count."""
    if unit == "byte·s" or measure.endswith("_byte_seconds"):
        return "byte_seconds"
    if unit == "bytes" or measure.endswith("_bytes"):
        return "bytes"
    if unit == "s" or measure.endswith("_seconds"):
        return "seconds"
    if unit == "ratio" or measure.endswith("_ratio"):
        return "ratio"
    if unit == "ns" or measure.endswith("_ns") or measure.endswith("_per_op"):
        return "ns"
    return "count"


def _sig(v: float, digits: int = 3) -> str:
    """`digits` significant digits, no exponent, no trailing zeros after rounding."""
    if v == 0:
        return "0"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{decimals}f}"


def value(v: float | None, measure: str = "", unit: str = "", digits: int = 3) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    k = kind(measure, unit)
    a = abs(v)
    if k == "byte_seconds":  # the area under an RSS curve
        return value(v, "bytes", digits=digits) + "·s"
    if k == "bytes":
        for size, name in _BIN:
            if a >= size:
                return f"{_sig(v / size, digits)} {name}"
        return f"{_sig(v, digits)} B"
    if k == "seconds":
        if a >= 1 or a == 0:
            return f"{_sig(v, digits)} s"
        if a >= 1e-3:
            return f"{_sig(v * 1e3, digits)} ms"
        return f"{_sig(v * 1e6, digits)} µs"
    if k == "ratio":
        return f"{v:.3f}"
    if k == "ns":
        return f"{_sig(v, digits)} ns"
    for size, name in _SI:
        if a >= size:
            return f"{_sig(v / size, digits)}{name}"
    return _sig(v, digits)


def pct(v: float | None, decimals: int = 1) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return f"{v:+.{decimals}f}%"


def pvalue(v: float | None) -> str:
    if v is None or not math.isfinite(v):
        return "n/a"
    return "<0.001" if v < 0.001 else f"{v:.3f}"


def params(p: JsonDict | None, skip: tuple[str, ...] = ("seed",)) -> str:
    """Workload params as `threads=2 ops=1000` (threads first, seed left out)."""
    if not p:
        return ""
    keys = sorted(p, key=lambda k: (k != "threads", k))
    return " ".join(f"{k}={p[k]}" for k in keys if k not in skip)
