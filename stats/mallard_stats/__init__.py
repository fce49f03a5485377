"""The pure statistics of Mallard: no database, no web framework, no settings; the API and
the benches import them (docs/statistics.md explains each rule and number).

- `policy`       the tunable numbers (`Policy`, `ChangePolicy`) and their defaults
- `measures`     unit and direction of each measure; primary, diagnostic, deterministic
- `stats`        one comparison cell: outliers, ratio of medians, interval, p-value, verdict
- `paired`       one cell whose trials are paired by round, blocks of rounds counted
- `power`        the minimum detectable effect of a cell and the trials a target needs
- `spending`     alpha spent over a cell's looks (its first job and each follow-up)
- `changepoints` change points on a branch's per-commit medians (Apache Otava)
- `hypothesis`   a comparison's hypothesis and whether a cell bore it out
"""
