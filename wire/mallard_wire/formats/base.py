"""What every reader shares: the `Sample` it returns, the `FormatError` it raises, and the
checks that keep a file's names and numbers within what a results post may carry (a
workload name, a measure name, at most `MAX_MEASURES` measures and `MAX_PARAMS` params
a trial), so a file a reader accepts is one the API can store whole."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

Scalar = str | int | float | bool

# as mallard_wire.results says (WorkloadIn, TrialIn); repeated here, not imported: results
# imports nothing of formats, and a test checks both agree
WORKLOAD_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
MEASURE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]{0,63}$")
MAX_MEASURES = 32
MAX_PARAMS = 64
MAX_PARAM_TEXT = 200  # characters of a param's key or text value


class FormatError(ValueError):
    """A malformed file: `where` is a JSON path or line (`benchmarks[3].real_time`)."""

    def __init__(self, where: str, problem: str):
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class Sample:
    """One run of one case: a workload name, its params, and its measures."""

    workload: str
    params: dict[str, Scalar] = field(default_factory=dict)
    measures: dict[str, float] = field(default_factory=dict)
    seq: int = 0  # the run's index within its case (a repetition, a hyperfine run)


class Samples(list[Sample]):
    """A reader's samples, in file order, and what the reader wants said about them
    (`notes`: e.g. that a file held summaries, not raw runs)."""

    def __init__(self, samples: Iterable[Sample] = (), notes: Iterable[str] = ()):
        super().__init__(samples)
        self.notes: list[str] = list(notes)


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def load_json(text: str) -> Any:
    """The document, or FormatError naming the line (NaN and Infinity are not JSON)."""
    if not text.strip():
        raise FormatError("line 1", "the file is empty")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise FormatError(f"line {e.lineno}", f"not JSON: {e.msg}") from e
    except ValueError as e:  # NaN, Infinity
        raise FormatError("document", f"not JSON: {e}") from e
    except RecursionError as e:
        raise FormatError("document", "nested too deeply") from e


def number(value: Any, where: str) -> float:
    """A finite number (never a boolean nor a numeric string)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not math.isfinite(float(value)):
        raise FormatError(where, f"must be a finite number, got {_show(value)}")
    return float(value)


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise FormatError(where, f"must be an object, got {_kind(value)}")
    return value


def array(value: Any, where: str, *, nonempty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise FormatError(where, f"must be an array, got {_kind(value)}")
    if nonempty and not value:
        raise FormatError(where, "is empty")
    return value


def string(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise FormatError(where, f"must be a non-empty string, got {_show(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), "a number")


def _show(value: Any) -> str:
    shown = repr(value)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def slug(name: str, allowed: str = r"A-Za-z0-9_.", sep: str = "-", limit: int = 100) -> str:
    """`name` with each run of characters outside `allowed` made one `sep`, trimmed of
    separators and dots at its ends (`./bench --size 10` -> `bench-size-10`)."""
    out = re.sub(f"[^{allowed}]+", sep, name).strip(sep + ".")
    return out[:limit].rstrip(sep + ".")


def workload_name(name: str, where: str) -> str:
    """A workload name for `name` (kept when it is one already)."""
    out = name if WORKLOAD_NAME.match(name) else slug(name)
    if not WORKLOAD_NAME.match(out):
        raise FormatError(where, f"{_show(name)} makes no workload name (letters, digits, "
                          "'_', '.', '-')")
    return out


def measure_name(name: str, where: str) -> str:
    """A measure name for `name`: `-`, spaces and the like become `_`."""
    out = slug(name, r"A-Za-z0-9_.", "_", 64)
    if out[:1].isdigit():
        out = ("_" + out)[:64]
    if not MEASURE_NAME.match(out):
        raise FormatError(where, f"{_show(name)} makes no measure name (letters, digits, "
                          "'_', '.')")
    return out


def param_value(value: Any, where: str) -> Scalar:
    """A param as a scalar: numbers, booleans and short text kept; anything else as its
    JSON text."""
    if isinstance(value, float) and not math.isfinite(value):
        raise FormatError(where, "must be a finite number")
    if isinstance(value, (bool, int, float)):
        return value
    shown = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    if len(shown) > MAX_PARAM_TEXT or "\x00" in shown:
        raise FormatError(where, f"must be at most {MAX_PARAM_TEXT} characters, no NUL")
    return shown


def check(sample: Sample, where: str) -> Sample:
    """FormatError unless the sample fits in one trial (measure and param counts)."""
    if not sample.measures:
        raise FormatError(where, "has no measure")
    if len(sample.measures) > MAX_MEASURES:
        raise FormatError(where, f"has {len(sample.measures)} measures; a trial holds at "
                          f"most {MAX_MEASURES}")
    if len(sample.params) > MAX_PARAMS:
        raise FormatError(where, f"has {len(sample.params)} params; a workload has at most "
                          f"{MAX_PARAMS}")
    for key, value in sample.params.items():
        if not key or len(key) > MAX_PARAM_TEXT or "\x00" in key:
            raise FormatError(where, f"param name {_show(key)} must be 1 to "
                              f"{MAX_PARAM_TEXT} characters, no NUL")
        if isinstance(value, str) and (len(value) > MAX_PARAM_TEXT or "\x00" in value) \
                or isinstance(value, int) and abs(value) > 10**300:
            raise FormatError(where, f"param {key!r}: {_show(value)} is too long")
    return sample


def unique_cells(cells: dict[tuple[str, str], str], workload: str, params: dict[str, Scalar],
                 source: str, where: str) -> None:
    """FormatError when two different names of the file make the same cell (a slug
    collision): `cells` maps (workload, params) to the name that made it."""
    key = (workload, json.dumps(params, sort_keys=True))
    seen = cells.setdefault(key, source)
    if seen != source:
        raise FormatError(where, f"{_show(source)} and {_show(seen)} both make workload "
                          f"{workload!r} with the same params: name them apart")
