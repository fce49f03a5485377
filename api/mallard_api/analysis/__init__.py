"""The analysis side of the API: what the core's data means (contracts §8).

Nothing here runs inside a request, and a read never writes: the core queues work
(`ingest`), the analysis worker (`worker`) runs it, each queued item in its own
transaction (a failure is logged and the item retried later; the ingest is never lost:
it was committed before).

- `ingest`       the hooks the core calls when results arrive or jobs end: they queue work
- `comparisons`  the comparison lifecycle: cells, state, follow-ups, the text report
- `alerts`       branch history: change points, alerts opened and resolved
- `worker`       the analysis worker and the service that runs it in a process
- `policy`       how the settings fill the statistics' `Policy` and `ChangePolicy`

The statistics themselves (the verdict rule, power, change points, measures, hypotheses)
are the pure package `mallard_stats` (stats/). Pure functions here (no database, no
settings):

- `report`       the text lines and the comparison report
- `joint`        speed x memory: one label per (ops_per_sec, max_rss_bytes) pair of cells
- `moved`        the allocator counters that moved most under each cell
- `curves`       thread-scaling curves: points, moved thread counts, area, curve verdict
- `explain`      the three above for the report and the JSON answer, from the same cells
"""
