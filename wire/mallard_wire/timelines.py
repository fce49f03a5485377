"""A trial's timelines: its memory over time (RSS sampled at a fixed interval by the
runner) and its sampled malloc/free latency histograms (recorded by the latency shim,
runner/workloads/latency.c), as a results post carries them (`TrialIn.memory`,
`TrialIn.latency`), and the percentiles a histogram gives.

Latency buckets are log-linear (HDR-style): values 0-7 ns have a bucket each, then every
power of two is cut into `SUB_BUCKETS` equal buckets, so a bucket is at most 1/8 of its
values wide (a percentile read from it is within 12.5%). The C side (latency.h) and this
module share that rule: `bucket_of` and `bucket_bounds` are its two directions.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from mallard_wire.fields import InModel

MAX_TIMELINE_POINTS = 512  # samples kept per trial: more are halved (interval doubled)
SUB_BITS = 3
SUB_BUCKETS = 1 << SUB_BITS  # buckets per power of two
LATENCY_BUCKETS = 320  # up to 2^41 ns (~37 minutes): the last bucket takes anything longer
QUANTILES = {"p50": 0.5, "p99": 0.99, "p999": 0.999}
LATENCY_CALLS = ("malloc", "free")

# What a job or suite may ask to record besides the measures (`record`): the memory
# timeline, the latency histograms; nothing unless asked.
Recording = Literal["memory", "latency"]
Record = Annotated[list[Recording], Field(max_length=2)]

Bytes = Annotated[int, Field(ge=0, le=2**50)]
Bucket = tuple[Annotated[int, Field(ge=0, lt=LATENCY_BUCKETS)], Annotated[int, Field(ge=1,
                                                                                      le=2**62)]]


class MemoryTimeline(InModel):
    """RSS every `interval_ms` from the workload's start (sample i at i x interval):
    at most MAX_TIMELINE_POINTS samples."""

    interval_ms: Annotated[float, Field(gt=0, le=3_600_000)]
    rss_bytes: Annotated[list[Bytes], Field(min_length=1, max_length=MAX_TIMELINE_POINTS)]


class LatencyHistogram(InModel):
    """Sampled per-call latency: one call in `sample_every` timed, the timings counted in
    log-linear buckets ([bucket, count] pairs, buckets ascending, counts > 0)."""

    sample_every: Annotated[int, Field(ge=1, le=1 << 20)]
    malloc: Annotated[list[Bucket], Field(max_length=LATENCY_BUCKETS)] = []
    free: Annotated[list[Bucket], Field(max_length=LATENCY_BUCKETS)] = []

    @model_validator(mode="after")
    def _ascending(self) -> LatencyHistogram:
        for name in LATENCY_CALLS:
            idx = [b for b, _ in getattr(self, name)]
            if idx != sorted(set(idx)):
                raise ValueError(f"{name}: buckets must be ascending and distinct")
        return self


def bucket_of(ns: int) -> int:
    """The bucket of a latency in nanoseconds (latency.h's `lat_bucket`)."""
    if ns < SUB_BUCKETS:
        return max(0, ns)
    e = ns.bit_length() - 1
    return min(LATENCY_BUCKETS - 1, (e - SUB_BITS + 1) * SUB_BUCKETS
               + ((ns >> (e - SUB_BITS)) & (SUB_BUCKETS - 1)))


def bucket_bounds(index: int) -> tuple[int, int]:
    """[low, high) in nanoseconds of a bucket."""
    if index < SUB_BUCKETS:
        return index, index + 1
    e = index // SUB_BUCKETS + SUB_BITS - 1
    width = 1 << (e - SUB_BITS)
    low = (SUB_BUCKETS + index % SUB_BUCKETS) * width
    return low, low + width


def percentile(buckets: list[tuple[int, int]], q: float) -> float | None:
    """The q-quantile (0 < q < 1) of a histogram, interpolated linearly inside its bucket
    (None for an empty histogram)."""
    total = sum(c for _, c in buckets)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in buckets:
        if seen + count >= rank:
            low, high = bucket_bounds(index)
            return low + (high - low) * max(0.0, rank - seen) / count
        seen += count
    return float(bucket_bounds(buckets[-1][0])[1])


def latency_measures(hist: LatencyHistogram) -> dict[str, float]:
    """malloc_p50_ns ... free_p999_ns of the calls that were sampled."""
    out: dict[str, float] = {}
    for call in LATENCY_CALLS:
        for name, q in QUANTILES.items():
            v = percentile(getattr(hist, call), q)
            if v is not None:
                out[f"{call}_{name}_ns"] = v
    return out
