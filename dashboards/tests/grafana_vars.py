"""Grafana's interpolation of dashboard queries, as far as Mallard's dashboards use it.

Substitutes the macros and template variables the way Grafana does before it sends a
query to a datasource, so the tests run exactly the text Grafana would run:

- SQL macros of the PostgreSQL datasource: `$__timeFilter(expr)` becomes
  `expr BETWEEN '<from>' AND '<to>'`, `$__timeFrom()` / `$__timeTo()` the quoted times.
- Prometheus interval variables: `$__rate_interval`, `$__interval`, `$__range`.
- `${name:format}` / `${name}` / `$name` / `[[name]]` with formats `sqlstring`
  (each value single-quoted with quotes doubled, joined by commas), `raw`/`csv` (joined
  by commas), `regex` (one value escaped, several as `(a|b)`).
  No format: a single value raw, several as `sqlstring` for SQL and `regex` for PromQL.

Anything else starting with `$` that is not a defined variable is an error: the test
that calls this fails, which is the point.
"""

from __future__ import annotations

import re
from datetime import datetime

# Grafana's escapeRegex (the `regex` format) escapes these characters.
_REGEX_SPECIALS = re.compile(r"[\\^$*+?.()|{}\[\]/]")

VAR_RE = re.compile(r"\$\{(\w+)(?::(\w+))?\}|\$(\w+)|\[\[(\w+)\]\]")
TIME_FILTER = re.compile(r"\$__timeFilter\(((?:[^()]|\([^()]*\))*)\)")

PROM_INTERVALS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}


class UndefinedVariable(KeyError):
    pass


def variables_used(text: str) -> set[str]:
    """Names of the template variables (not macros) a text refers to."""
    names = set()
    for m in VAR_RE.finditer(TIME_FILTER.sub("", text)):
        name = m.group(1) or m.group(3) or m.group(4)
        if not name.startswith("__"):
            names.add(name)
    return names


def macros_used(text: str) -> set[str]:
    names = set()
    for m in VAR_RE.finditer(text):
        name = m.group(1) or m.group(3) or m.group(4)
        if name.startswith("__"):
            names.add(name)
    return names


def _quote(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _format(values: list[str], fmt: str | None, dialect: str) -> str:
    if fmt is None:
        if len(values) == 1:
            return values[0]
        fmt = "sqlstring" if dialect == "sql" else "regex"
    if fmt == "sqlstring":
        return ",".join(_quote(v) for v in values)
    if fmt in ("raw", "csv"):
        return ",".join(values)
    if fmt == "regex":
        escaped = [_REGEX_SPECIALS.sub(lambda m: "\\" + m.group(0), v) for v in values]
        return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
    raise ValueError(f"variable format {fmt!r} is not supported by these tests")


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def interpolate(
    text: str,
    values: dict[str, list[str]],
    *,
    dialect: str,
    time_from: datetime | None = None,
    time_to: datetime | None = None,
) -> str:
    """The query text Grafana sends, for variables set to `values` (name -> values)."""
    if dialect == "sql":
        assert time_from is not None and time_to is not None
        frm, to = _iso(time_from), _iso(time_to)
        text = TIME_FILTER.sub(lambda m: f"{m.group(1)} BETWEEN '{frm}' AND '{to}'", text)
        text = text.replace("$__timeFrom()", f"'{frm}'").replace("$__timeTo()", f"'{to}'")

    def sub(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3) or m.group(4)
        if dialect == "promql" and name in PROM_INTERVALS:
            return PROM_INTERVALS[name]
        if name not in values:
            raise UndefinedVariable(f"${name} is not defined (in: {text[:80]!r}...)")
        if not values[name]:
            raise UndefinedVariable(f"${name} has no value")
        return _format(values[name], m.group(2), dialect)

    return VAR_RE.sub(sub, text)
