"""A trial's timelines as the wire carries them (timelines.py): the bucket rule both ways,
percentiles, and what a results post may not send."""

from __future__ import annotations

import pytest
from mallard_wire.jobs import JobSpec
from mallard_wire.timelines import (
    LATENCY_BUCKETS,
    MAX_TIMELINE_POINTS,
    LatencyHistogram,
    MemoryTimeline,
    bucket_bounds,
    bucket_of,
    latency_measures,
    percentile,
)
from pydantic import ValidationError


def test_buckets_tile_the_line_and_are_at_most_an_eighth_wide():
    previous_high = 0
    for index in range(LATENCY_BUCKETS):
        low, high = bucket_bounds(index)
        assert low == previous_high  # no gap, no overlap
        assert (high - low) * 8 <= max(low, 8)
        assert bucket_of(low) == index and bucket_of(high - 1) == index
        previous_high = high
    assert bucket_of(2**62) == LATENCY_BUCKETS - 1


def test_percentiles_of_a_uniform_histogram():
    buckets = [(bucket_of(v), 1) for v in range(8)]  # 0..7 ns, one call each
    assert percentile(buckets, 0.5) == 4.0
    assert percentile([], 0.5) is None
    hist = LatencyHistogram(sample_every=64, malloc=[(10, 99), (100, 1)])
    m = latency_measures(hist)
    assert set(m) == {"malloc_p50_ns", "malloc_p99_ns", "malloc_p999_ns"}  # free: none sampled
    assert m["malloc_p50_ns"] < 11 <= bucket_bounds(100)[0] <= m["malloc_p999_ns"]


@pytest.mark.parametrize(("body", "where"), [
    ({"interval_ms": 0, "rss_bytes": [1]}, ("interval_ms",)),
    ({"interval_ms": 10, "rss_bytes": []}, ("rss_bytes",)),
    ({"interval_ms": 10, "rss_bytes": [1] * (MAX_TIMELINE_POINTS + 1)}, ("rss_bytes",)),
    ({"interval_ms": 10, "rss_bytes": [-1]}, ("rss_bytes", 0)),
    ({"interval_ms": 10, "rss_bytes": [1], "extra": 1}, ("extra",)),
])
def test_a_bad_timeline_names_its_field(body, where):
    with pytest.raises(ValidationError) as e:
        MemoryTimeline.model_validate(body)
    assert e.value.errors()[0]["loc"] == where


@pytest.mark.parametrize("malloc", [[[LATENCY_BUCKETS, 1]], [[3, 0]], [[5, 1], [4, 1]],
                                    [[5, 1], [5, 1]]])
def test_a_bad_histogram_is_refused(malloc):
    with pytest.raises(ValidationError):
        LatencyHistogram.model_validate({"sample_every": 64, "malloc": malloc})


def test_a_job_asks_for_what_it_records():
    spec = {"repo_url": "file:///srv/a.git", "allocators": [{"label": "head", "name": "glibc"}]}
    assert JobSpec.model_validate(spec).record is None  # the suite's
    assert JobSpec.model_validate({**spec, "record": ["latency"]}).record == ["latency"]
    with pytest.raises(ValidationError) as e:
        JobSpec.model_validate({**spec, "record": ["cpu"]})
    assert e.value.errors()[0]["loc"] == ("record", 0)
