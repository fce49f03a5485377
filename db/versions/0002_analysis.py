"""Analysis schema: comparisons (with their jobs and cells), change points, alerts,
webhook endpoints and the webhook outbox; views v_comparisons, v_comparison_cells,
v_alerts (contracts §7).

Revision ID: 0002_analysis
Revises: 0001_core
Create Date: 2026-11-21
"""

from alembic import op

revision = "0002_analysis"
down_revision = "0001_core"
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE comparisons (
    id                  serial PRIMARY KEY,
    project_id          integer REFERENCES projects(id) ON DELETE CASCADE,
    project             text NOT NULL,
    arch                text NOT NULL,
    base                jsonb NOT NULL,          -- {"commit", "variant"}
    head                jsonb NOT NULL,
    base_label          text NOT NULL,           -- mallard@abc1234 transfer=mutex
    head_label          text NOT NULL,
    workloads           jsonb,                   -- null: the whole suite
    threads             jsonb,
    suite               text NOT NULL DEFAULT 'quick',
    trials              integer NOT NULL,
    warmup              integer NOT NULL DEFAULT 1,
    peers               jsonb NOT NULL DEFAULT '[]',
    hypothesis          text,
    hypothesis_low_pct  double precision,
    hypothesis_high_pct double precision,
    hypothesis_measure  text,
    state               text NOT NULL DEFAULT 'queued',  -- queued|running|done|failed
    follow_ups          integer NOT NULL DEFAULT 0,
    max_follow_ups      integer NOT NULL DEFAULT 2,
    peer_medians        jsonb NOT NULL DEFAULT '[]',
    testbed_fingerprint text,
    cpu_model           text,
    note                text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    finished_at         timestamptz
);
CREATE INDEX comparisons_created_idx ON comparisons (created_at);

CREATE TABLE comparison_jobs (
    comparison_id integer NOT NULL REFERENCES comparisons(id) ON DELETE CASCADE,
    job_id        bigint NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    round         integer NOT NULL DEFAULT 0,    -- 0: the first job, n: follow-up n
    trials        integer NOT NULL,
    PRIMARY KEY (comparison_id, job_id)
);
CREATE UNIQUE INDEX comparison_jobs_job_idx ON comparison_jobs (job_id);

CREATE TABLE comparison_cells (
    id               bigserial PRIMARY KEY,
    comparison_id    integer NOT NULL REFERENCES comparisons(id) ON DELETE CASCADE,
    workload         text NOT NULL,
    params           jsonb NOT NULL,
    threads          integer,
    measure          text NOT NULL,
    higher_is_better boolean NOT NULL,
    base_median      double precision,
    head_median      double precision,
    ratio            double precision,
    diff_pct         double precision,
    ci_low_pct       double precision,
    ci_high_pct      double precision,
    p_value          double precision,
    p_adjusted       double precision,
    n_base           integer NOT NULL,
    n_head           integer NOT NULL,
    robust_base      integer NOT NULL,
    robust_head      integer NOT NULL,
    verdict          text NOT NULL,             -- same|improved|regressed|unknown
    line             text NOT NULL,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (comparison_id, workload, params, measure)
);

CREATE TABLE alerts (
    id                  serial PRIMARY KEY,
    series_key          text NOT NULL,           -- sha256 of the series identity
    project_id          integer REFERENCES projects(id) ON DELETE CASCADE,
    project             text NOT NULL,
    branch              text NOT NULL,
    workload            text NOT NULL,
    params              jsonb NOT NULL,
    threads             integer,
    arch                text NOT NULL,
    testbed_fingerprint text NOT NULL,
    allocator           text NOT NULL,
    variant             text NOT NULL,
    measure             text NOT NULL,
    first_bad_commit    text NOT NULL,
    last_good_commit    text,
    change_pct          double precision NOT NULL,
    ci_low_pct          double precision,
    ci_high_pct         double precision,
    p_value             double precision,
    before_median       double precision,
    after_median        double precision,
    state               text NOT NULL DEFAULT 'open',  -- open|acknowledged|resolved
    label               text,                          -- true_positive|false_positive|null
    text                text NOT NULL,
    opened_at           timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    acknowledged_at     timestamptz,
    resolved_at         timestamptz,
    UNIQUE (series_key, first_bad_commit),
    CHECK (state IN ('open', 'acknowledged', 'resolved')),
    CHECK (label IS NULL OR label IN ('true_positive', 'false_positive'))
);
CREATE INDEX alerts_state_idx ON alerts (state);

CREATE TABLE change_points (
    id                  bigserial PRIMARY KEY,
    series_key          text NOT NULL,
    project             text NOT NULL,
    branch              text NOT NULL,
    workload            text NOT NULL,
    params              jsonb NOT NULL,
    arch                text NOT NULL,
    testbed_fingerprint text NOT NULL,
    allocator           text NOT NULL,
    variant             text NOT NULL,
    measure             text NOT NULL,
    commit_sha          text NOT NULL,           -- first commit after the change
    prev_commit_sha     text,
    change_pct          double precision NOT NULL,
    ci_low_pct          double precision,
    ci_high_pct         double precision,
    p_value             double precision,
    direction           text NOT NULL,           -- regression|improvement
    alert_id            integer REFERENCES alerts(id) ON DELETE SET NULL,
    detected_at         timestamptz NOT NULL DEFAULT now(),
    UNIQUE (series_key, commit_sha)
);

CREATE TABLE webhook_endpoints (
    id         serial PRIMARY KEY,
    kind       text NOT NULL DEFAULT 'generic',  -- generic|slack
    url        text NOT NULL,
    enabled    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (kind, url),
    CHECK (kind IN ('generic', 'slack'))
);

CREATE TABLE webhook_outbox (
    id              bigserial PRIMARY KEY,
    event           text NOT NULL,               -- alert.opened|alert.resolved
    alert_id        integer REFERENCES alerts(id) ON DELETE SET NULL,
    kind            text NOT NULL,
    url             text NOT NULL,
    payload         jsonb NOT NULL,
    state           text NOT NULL DEFAULT 'pending',  -- pending|delivered|failed
    attempts        integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX webhook_outbox_due_idx ON webhook_outbox (next_attempt_at) WHERE state = 'pending';
"""

VIEWS = """
CREATE VIEW v_comparisons AS
SELECT c.id AS comparison_id, c.created_at, c.state, c.project, c.arch,
       c.base_label, c.head_label, c.hypothesis,
       count(cc.id)::integer AS cells,
       (count(cc.id) FILTER (WHERE cc.verdict = 'improved'))::integer AS improved,
       (count(cc.id) FILTER (WHERE cc.verdict = 'regressed'))::integer AS regressed,
       (count(cc.id) FILTER (WHERE cc.verdict = 'same'))::integer AS same,
       (count(cc.id) FILTER (WHERE cc.verdict = 'unknown'))::integer AS unknown
FROM comparisons c
LEFT JOIN comparison_cells cc ON cc.comparison_id = c.id
GROUP BY c.id;

CREATE VIEW v_comparison_cells AS
SELECT comparison_id, workload, params, threads, measure, base_median, head_median,
       ratio, diff_pct, ci_low_pct, ci_high_pct, p_value, p_adjusted,
       n_base, n_head, robust_base, robust_head, verdict, line
FROM comparison_cells;

CREATE VIEW v_alerts AS
SELECT id AS alert_id, opened_at, updated_at, resolved_at, state, label,
       project, branch, workload, params, threads, arch, measure,
       allocator || CASE WHEN variant <> '' AND variant <> 'default' THEN ' ' || variant
                         ELSE '' END AS allocator,
       first_bad_commit, last_good_commit, change_pct, ci_low_pct, ci_high_pct, text
FROM alerts;
"""


def upgrade() -> None:
    op.execute(TABLES)
    op.execute(VIEWS)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_alerts, v_comparison_cells, v_comparisons")
    op.execute(
        "DROP TABLE IF EXISTS webhook_outbox, webhook_endpoints, change_points, alerts, "
        "comparison_cells, comparison_jobs, comparisons"
    )
