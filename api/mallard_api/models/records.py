"""Typed records the JSON columns hold, and the column type that keeps them typed: a
column declared `Record(Model)` (or `Record(list[Model])`) is validated by the model when
it is written and again when it is read, so code sees the model, never a bare dict."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from mallard_wire.fields import GitRef, InModel, Variant
from pydantic import BaseModel, TypeAdapter
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
    variant of known keys (None: the default configuration)."""

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
    params: dict[str, Any]  # the workload's params object, as its trials carry it
    allocator: str
    median: float
