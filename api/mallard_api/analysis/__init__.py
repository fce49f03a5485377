"""The analysis side of the API: what the core's data means (contracts §8).

Nothing here runs inside a request, and a read never writes: the core queues work
(`ingest`), the analysis worker (`worker`) runs it, each queued item in its own
transaction (a failure is logged and the item retried later; the ingest is never lost:
it was committed before).

- `ingest`       the hooks the core calls when results arrive or jobs end: they queue work
- `comparisons`  the comparison lifecycle: cells, state, follow-ups, the text report
- `alerts`       branch history: change points, alerts opened and resolved
- `worker`       the analysis worker and the service that runs it in a process

Pure functions (no database, no settings), docs/statistics.md explains them:

- `policy`       the tunable numbers (`Policy`, `ChangePolicy`) and how settings fill them
- `measures`     unit and direction of each measure; primary, diagnostic, deterministic
- `stats`        one comparison cell: outliers, ratio of medians, interval, p-value, verdict
- `power`        the minimum detectable effect of a cell and the trials a target needs
- `changepoints` change points on a branch's per-commit medians (Apache Otava)
- `report`       the text lines and the comparison report
- `hypothesis`   a comparison's hypothesis and whether a cell bore it out
- `joint`        speed x memory: one label per (ops_per_sec, max_rss_bytes) pair of cells
- `moved`        the allocator counters that moved most under each cell
- `curves`       thread-scaling curves: points, moved thread counts, area, curve verdict
- `explain`      the three above for the report and the JSON answer, from the same cells
"""
