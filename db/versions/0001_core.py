"""Core schema: projects, branches, commits, runners, tokens, jobs, normalised results,
trials, and the views v_measurements, v_series, v_jobs, v_runners (contracts §7).

Revision ID: 0001_core
Revises:
Create Date: 2026-11-21
"""

from alembic import op

revision = "0001_core"
down_revision = None
branch_labels = None
depends_on = None

TABLES = """
CREATE TABLE projects (
    id               serial PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    repo_url         text NOT NULL,
    allocator_dir    text NOT NULL DEFAULT 'allocator',
    default_branch   text NOT NULL DEFAULT 'main',
    tracked_branches text[] NOT NULL DEFAULT '{}',
    webhook_secret   text,
    created_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE branches (
    id         serial PRIMARY KEY,
    project_id integer NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    name       text NOT NULL,
    head_sha   text,
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, name)
);

CREATE TABLE commits (
    id           bigserial PRIMARY KEY,
    project_id   integer NOT NULL REFERENCES projects(id) ON DELETE CASCADE,
    sha          text NOT NULL,
    parent_sha   text,
    message      text,
    author       text,
    committed_at timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (project_id, sha)
);

CREATE TABLE branch_commits (
    branch_id integer NOT NULL REFERENCES branches(id) ON DELETE CASCADE,
    commit_id bigint  NOT NULL REFERENCES commits(id) ON DELETE CASCADE,
    position  integer NOT NULL,
    PRIMARY KEY (branch_id, commit_id)
);
CREATE INDEX branch_commits_position_idx ON branch_commits (branch_id, position);
CREATE INDEX branch_commits_commit_idx ON branch_commits (commit_id);

CREATE TABLE testbeds (
    id          serial PRIMARY KEY,
    fingerprint text NOT NULL UNIQUE,
    arch        text NOT NULL,
    cpu_model   text,
    fields      jsonb NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE runners (
    id            serial PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    arch          text NOT NULL,
    cpus          text,
    testbed       jsonb,
    testbed_id    integer REFERENCES testbeds(id),
    registered_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE api_tokens (
    id           serial PRIMARY KEY,
    token_sha256 varchar(64) NOT NULL UNIQUE,
    role         text NOT NULL CHECK (role IN ('runner', 'user', 'admin')),
    runner_name  text,
    description  text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    revoked_at   timestamptz,
    CHECK (role <> 'runner' OR runner_name IS NOT NULL)
);

CREATE TABLE jobs (
    id               bigserial PRIMARY KEY,
    kind             text NOT NULL CHECK (kind IN ('commit', 'comparison')),
    state            text NOT NULL DEFAULT 'queued'
                     CHECK (state IN ('queued', 'running', 'done', 'failed', 'cancelled')),
    arch             text NOT NULL,
    spec             jsonb NOT NULL,
    project_id       integer REFERENCES projects(id) ON DELETE SET NULL,
    attempt          integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    runner_id        integer REFERENCES runners(id) ON DELETE SET NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    lease_expires_at timestamptz,
    finished_at      timestamptz
);
-- the claim: oldest queued job of an arch
CREATE INDEX jobs_queued_idx ON jobs (arch, created_at, id) WHERE state = 'queued';
-- the sweep: running jobs whose lease expired
CREATE INDEX jobs_running_lease_idx ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_state_idx ON jobs (state, arch);

CREATE TABLE job_attempts (
    id         bigserial PRIMARY KEY,
    job_id     bigint NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt    integer NOT NULL,
    runner_id  integer REFERENCES runners(id) ON DELETE SET NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    ended_at   timestamptz,
    outcome    text CHECK (outcome IN ('done', 'failed', 'expired')),
    log        text
);
CREATE INDEX job_attempts_job_idx ON job_attempts (job_id, attempt);

CREATE TABLE allocators (
    id             serial PRIMARY KEY,
    name           text NOT NULL,
    commit_sha     text NOT NULL DEFAULT '',
    variant        text NOT NULL DEFAULT '',
    build_flags    text NOT NULL DEFAULT '',
    compiler       text NOT NULL DEFAULT '',
    library_sha256 text NOT NULL DEFAULT '',
    UNIQUE (name, commit_sha, variant, build_flags, compiler, library_sha256)
);
CREATE INDEX allocators_name_variant_idx ON allocators (name, variant);

CREATE TABLE workloads (
    id            serial PRIMARY KEY,
    name          text NOT NULL,
    params        jsonb NOT NULL,
    params_sha256 varchar(64) NOT NULL,
    threads       integer,
    UNIQUE (name, params_sha256)
);
CREATE INDEX workloads_threads_idx ON workloads (name, threads);

CREATE TABLE measures (
    id               smallserial PRIMARY KEY,
    name             text NOT NULL UNIQUE,
    unit             text NOT NULL DEFAULT '',
    higher_is_better boolean
);
INSERT INTO measures (name, unit, higher_is_better) VALUES
    ('ops_per_sec', 'ops/s', true),
    ('wall_seconds', 's', false),
    ('user_seconds', 's', false),
    ('sys_seconds', 's', false),
    ('max_rss_bytes', 'bytes', false),
    ('final_rss_bytes', 'bytes', false),
    ('peak_rss_bytes', 'bytes', false),
    ('instructions', 'count', false),
    ('ns_per_op', 'ns', false),
    ('transfer_insert_hit_ratio', 'ratio', true),
    ('transfer_remove_hit_ratio', 'ratio', true);

CREATE TABLE trials (
    id           bigserial PRIMARY KEY,
    uid          text NOT NULL UNIQUE,
    job_id       bigint REFERENCES jobs(id) ON DELETE SET NULL,
    runner_id    integer REFERENCES runners(id) ON DELETE SET NULL,
    project_id   integer REFERENCES projects(id) ON DELETE CASCADE,
    branch_id    integer REFERENCES branches(id) ON DELETE SET NULL,
    commit_id    bigint REFERENCES commits(id) ON DELETE SET NULL,
    testbed_id   integer NOT NULL REFERENCES testbeds(id),
    allocator_id integer NOT NULL REFERENCES allocators(id),
    workload_id  integer NOT NULL REFERENCES workloads(id),
    label        text NOT NULL,
    seq          integer NOT NULL DEFAULT 0,
    warmup       boolean NOT NULL DEFAULT false,
    ok           boolean NOT NULL DEFAULT true,
    exit_code    integer,
    signal       integer,
    stderr_tail  text,
    started_at   timestamptz,
    ingested_at  timestamptz NOT NULL DEFAULT now(),
    measures     jsonb NOT NULL DEFAULT '{}',
    counters     jsonb
);
-- the series query: one workload (params) x testbed x allocator along a branch's commits.
-- Covering (INCLUDE ... measures): the query is an index-only scan over the cell's
-- entries, which lie together, instead of one heap page per trial.
CREATE INDEX trials_series_idx ON trials (workload_id, testbed_id, allocator_id, commit_id)
    INCLUDE (ok, warmup, id, measures);
CREATE INDEX trials_commit_idx ON trials (commit_id);
CREATE INDEX trials_job_idx ON trials (job_id);
CREATE INDEX trials_ingested_idx ON trials (ingested_at);
"""

ALLOCATOR_LABEL = """(CASE WHEN a.commit_sha <> '' THEN a.name || '@' || left(a.commit_sha, 7)
          ELSE a.name END
     || CASE WHEN a.variant <> '' THEN ' ' || a.variant ELSE '' END)"""

VIEWS = f"""
CREATE VIEW v_measurements AS
SELECT t.id AS trial_id, t.started_at, t.ingested_at,
       p.name AS project,
       c.sha AS commit_sha, left(c.sha, 7) AS commit_short, c.committed_at AS commit_time,
       b.name AS branch,
       a.name AS allocator, COALESCE(NULLIF(a.variant, ''), 'default') AS variant,
       {ALLOCATOR_LABEL} AS allocator_label,
       t.label, w.name AS workload, w.params, w.threads,
       tb.arch, tb.fingerprint AS testbed_fingerprint, tb.cpu_model,
       m.key AS measure, COALESCE(ms.unit, '') AS unit, ms.higher_is_better,
       (m.value #>> '{{}}')::double precision AS value,
       t.ok, t.warmup, t.job_id
FROM trials t
JOIN testbeds tb ON tb.id = t.testbed_id
JOIN allocators a ON a.id = t.allocator_id
JOIN workloads w ON w.id = t.workload_id
LEFT JOIN projects p ON p.id = t.project_id
LEFT JOIN commits c ON c.id = t.commit_id
LEFT JOIN branches b ON b.id = t.branch_id
CROSS JOIN LATERAL jsonb_each(t.measures) AS m(key, value)
LEFT JOIN measures ms ON ms.name = m.key;

CREATE VIEW v_series AS
SELECT p.name AS project, b.name AS branch,
       c.sha AS commit_sha, left(c.sha, 7) AS commit_short, c.committed_at AS commit_time,
       bc.position AS commit_position,
       a.name AS allocator, COALESCE(NULLIF(a.variant, ''), 'default') AS variant,
       {ALLOCATOR_LABEL} AS allocator_label,
       w.name AS workload, w.params, w.threads,
       tb.arch, tb.fingerprint AS testbed_fingerprint,
       m.key AS measure,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY (m.value #>> '{{}}')::double precision)
           AS median,
       percentile_cont(0.25) WITHIN GROUP (ORDER BY (m.value #>> '{{}}')::double precision)
           AS p25,
       percentile_cont(0.75) WITHIN GROUP (ORDER BY (m.value #>> '{{}}')::double precision)
           AS p75,
       count(*) AS n
FROM branch_commits bc
JOIN branches b ON b.id = bc.branch_id
JOIN projects p ON p.id = b.project_id
JOIN commits c ON c.id = bc.commit_id
JOIN trials t ON t.commit_id = c.id AND t.ok AND NOT t.warmup
JOIN allocators a ON a.id = t.allocator_id
JOIN workloads w ON w.id = t.workload_id
JOIN testbeds tb ON tb.id = t.testbed_id
CROSS JOIN LATERAL jsonb_each(t.measures) AS m(key, value)
GROUP BY p.id, b.id, c.id, bc.position, a.name, a.variant, a.commit_sha, w.id, tb.id, m.key;

CREATE VIEW v_jobs AS
SELECT j.id AS job_id, j.kind, j.state, j.arch, r.name AS runner, j.attempt,
       j.created_at, j.claimed_at, j.finished_at,
       EXTRACT(EPOCH FROM (COALESCE(j.claimed_at, now()) - j.created_at))::double precision
           AS queue_seconds,
       CASE WHEN j.claimed_at IS NULL THEN NULL
            ELSE EXTRACT(EPOCH FROM (COALESCE(j.finished_at, now()) - j.claimed_at))
                 ::double precision END AS run_seconds
FROM jobs j
LEFT JOIN runners r ON r.id = j.runner_id;

CREATE VIEW v_runners AS
SELECT r.id AS runner_id, r.name, r.arch, r.cpus, r.last_seen_at,
       EXTRACT(EPOCH FROM (now() - r.last_seen_at))::double precision AS seconds_since_seen,
       tb.fingerprint AS testbed_fingerprint,
       COALESCE(tb.cpu_model, r.testbed ->> 'cpu_model') AS cpu_model
FROM runners r
LEFT JOIN testbeds tb ON tb.id = r.testbed_id;
"""


def upgrade() -> None:
    op.execute(TABLES)
    op.execute(VIEWS)


def downgrade() -> None:
    op.execute("DROP VIEW IF EXISTS v_runners, v_jobs, v_series, v_measurements")
    op.execute(
        "DROP TABLE IF EXISTS trials, measures, workloads, allocators, job_attempts, jobs, "
        "api_tokens, runners, testbeds, branch_commits, commits, branches, projects"
    )
