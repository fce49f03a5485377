"""Typed records the JSON columns hold, and the column type that keeps them typed: a
column declared `Record(Model)` (or `Record(list[Model])`) is validated by the model when
it is written and again when it is read, so code sees the model, never a bare dict."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from mallard_wire.fields import GitRef, InModel, JsonDict
from mallard_wire.recipes import Variant
from pydantic import BaseModel, Field, TypeAdapter
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator

T = TypeVar("T")


class Record(TypeDecorator[T], Generic[T]):
    """JSONB holding `model` (a pydantic model, or a list of them)."""

    impl = JSONB
    cache_ok = True

    def __init__(self, model: type[T] | Any) -> None:
        super().__init__()
        self.model = model
        self._adapter: TypeAdapter[T] = TypeAdapter(model)

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None:
            return None
        return self._adapter.dump_python(self._adapter.validate_python(value), mode="json")

    def process_result_value(self, value: Any, dialect: Dialect) -> T | None:
        return None if value is None else self._adapter.validate_python(value)


class Side(InModel):
    """One side of a comparison: a full sha or a git ref name (never an option), and a
    variant (None: the default configuration; its keys are the recipe's options, checked
    when its job is built: analysis/specs.py)."""

    commit: GitRef
    variant: Variant | None = None


class Detection(BaseModel):
    """How often a calibration's canaries of one injected size were caught in one series."""

    size_pct: float
    comparisons: int
    detected: int
    rate: float
    measured_pct: float | None  # the median measured change of its comparisons


# A testbed's fingerprinted fields (testbeds.fields; sql/runners.py FINGERPRINT_FIELDS).
FingerprintFields = dict[str, str | int | bool | None]

# A calibration's canary sizes: workload -> injected size ("3") -> ns per free.
CanaryNs = dict[str, dict[str, int]]


class PeerMedian(BaseModel):
    """A peer allocator's median throughput in one workload x params of a comparison."""

    workload: str
    params: JsonDict  # the workload's params object, as its trials carry it
    allocator: str
    median: float


def _absent(v: object) -> bool:
    """An optional key written only when it has a value (the stored JSON keeps its shape)."""
    return v is None


class CellMove(BaseModel):
    """A judged comparison cell as a commit verdict or its alert quotes it."""

    workload: str
    params: JsonDict  # the workload's params object, as its trials carry it
    threads: int | None
    measure: str
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    line: str


class MovedCell(CellMove):
    """A commit verdict's primary cell that moved (`CommitVerdict.moved`)."""

    verdict: str  # regressed | improved


class AlertCell(CellMove):
    """A regressed cell a verdict alert groups (`Alert.cells`), with its series key."""

    series_key: str


class Evidence(BaseModel):
    """The judged cell of one comparison of a bisection step."""

    comparison_id: int
    base: str
    head: str
    diff_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    verdict: str
    higher_is_better: bool
    measure: str | None = Field(default=None, exclude_if=_absent)  # absent in older rows
    threads: int | None
    line: str


class StepEvidence(BaseModel):
    good_vs_probe: Evidence | None
    probe_vs_bad: Evidence | None


class BisectionStep(BaseModel):
    """One step of a bisection (`Bisection.steps`): round 0 is the commit verdict that found
    the regression (its one comparison spans the range, with a `note`); each later round
    probes commit `index` with two comparisons (good end vs probe, probe vs bad end) and
    carries their `evidence` once both settled."""

    round: int
    index: int
    sha: str
    good_end: str
    bad_end: str
    good_index: int
    bad_index: int
    comparisons: list[int]
    outcome: str | None  # good | bad | skip; None while measuring
    note: str | None = Field(default=None, exclude_if=_absent)
    evidence: StepEvidence | None = Field(default=None, exclude_if=_absent)

    def spans(self) -> list[tuple[int, int]]:
        """The (good, bad) index range each of its comparisons spans, in their order."""
        if self.round == 0:
            return [(self.good_index, self.bad_index)]
        return [(self.good_index, self.index), (self.index, self.bad_index)]
