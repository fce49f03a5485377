"""Table models, one file per entity; the schema is created only by the migrations
(`db/versions/`), these classes mirror it. `base` holds the declarative Base and the
timestamp type, `records` the typed JSON values stored in jsonb columns."""

# every table module, so Base.metadata knows every table
from mallard_api.models import (
    alerts,
    analysis_queue,
    baselines,
    bisections,
    calibrations,
    commits,
    comparisons,
    forges,
    jobs,
    outbox,
    profiles,
    projects,
    records,
    results,
    runners,
    testbeds,
    tokens,
    triage,
    verdicts,
    webhooks,
)
from mallard_api.models.base import Base

__all__ = [
    "Base", "alerts", "analysis_queue", "baselines", "bisections", "calibrations", "commits",
    "comparisons", "forges", "jobs", "outbox", "profiles", "projects", "records", "results",
    "runners", "testbeds", "tokens", "triage", "verdicts", "webhooks",
]
