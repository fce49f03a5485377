"""The analysis side of the API: what the core's data means (contracts §8).

A request only opens comparisons and queues work (`ingest`); the analysis worker
(`worker`) does the rest outside any request, each queued item in its own transaction (a
failure is logged and the item retried later; the ingest is never lost: it was committed
before), and a read never writes. Each module imports only modules listed below it
(api/tests/test_layering.py holds the layers):

The worker, the settle and its listeners:

- `worker`        the analysis worker and the service that runs it in a process
- `triage`        what people decide: triage, acknowledge, baselines, broken ranges
- `settle`        one settle of a comparison, told once to its listeners below
- `alerts`        branch history: change points, alerts opened and resolved
- `why`           a stored profile's `why:` told to its alerts and pull requests
- `verdicts`      commit verdicts: a commit against its branch's last measured one
- `pull_requests` a pull/merge request's head against its merge base, status and comment
- `calibrations`  a testbed's calibration: A/A comparisons, canaries, its SAME bands
- `profiles`      differential profiles: a profile job per moved case, or one asked for
- `bisections`    the culprit of a regression, bisected on the job queue

The comparison lifecycle and what it reads and builds:

- `comparisons`   the lifecycle: open, compute the cells, settle or follow up, the report
- `specs`         the job spec of every job the API queues itself (one builder)
- `culprits`      a bisection's evidence cells and culprit line, read from stored cells
- `noise`         a testbed's calibrated SAME bands and its calibration table
- `followups`     the follow-up round that settles the most unknown cells in a budget
- `ingest`        the hooks the core calls when results arrive or jobs end: they queue work
- `policy`        the statistics' tunable numbers filled from the settings
- `pairs`         a cell's trials by round, judged on pairs (or as two samples)

Pure functions (no database, no settings); the statistics themselves are `mallard_stats`
(stats/), which docs/statistics.md explains:

- `explain`       the next three for the report and the JSON answer, from the same cells
- `moved`         the allocator counters that moved most under each cell
- `joint`         speed x memory: one label per (ops_per_sec, max_rss_bytes) pair of cells
- `curves`        thread-scaling curves: points, moved thread counts, area, curve verdict
- `modes`         a cell of two-mode trials: judged within its modes, or "modes moved"
- `report`        the text lines and the comparison report
- `extras`        what a report prints beyond its cells (counters, joint labels, curves)
- `cells`         one comparison cell as one record (`CellRow`), stored and answered as is
- `canaries`      canary sizing: the nanoseconds per free that inject a given slowdown
- `bisect_search` the bisection search over a range of commits (good, bad, skip)
- `differential`  a differential profile read: functions that moved most, the `why:`
"""
