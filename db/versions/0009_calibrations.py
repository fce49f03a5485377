"""Calibrations (issue 11 item 6): A/A and canary comparisons on one testbed, and what they
measured per workload x params x measure (false-alarm rate, detection rate per injected
size, CV, the SAME band it sets). A calibration's comparisons run as `calibrate` jobs.
Views for Grafana: v_calibration_power (detection rate vs injected size) and
v_calibration_false_alarms (false-alarm rate per finished calibration, over time).

Revision ID: 0009
Revises: 0007
Create Date: 2026-11-23
"""

from alembic import op

revision = "0009"
down_revision = "0011"
branch_labels = None
depends_on = None

JOB_KINDS_OLD = "('commit', 'comparison')"
JOB_KINDS_NEW = "('commit', 'comparison', 'calibrate')"


def upgrade() -> None:
    op.execute(f"""
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN {JOB_KINDS_NEW});

CREATE TABLE calibrations (
    id              serial PRIMARY KEY,
    project_id      integer REFERENCES projects(id) ON DELETE CASCADE,
    project         text NOT NULL,
    arch            text NOT NULL,
    testbed_id      integer REFERENCES testbeds(id),
    commit_sha      text NOT NULL,
    variant         text NOT NULL DEFAULT '',
    suite           text NOT NULL,
    workloads       jsonb NOT NULL,
    threads         jsonb NOT NULL,
    trials          integer NOT NULL CHECK (trials >= 2),
    aa_comparisons  integer NOT NULL CHECK (aa_comparisons >= 0),
    canary_comparisons integer NOT NULL CHECK (canary_comparisons >= 0),
    sizes_pct       jsonb NOT NULL,
    state           text NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'aa', 'canary', 'done', 'failed')),
    canary_ns       jsonb NOT NULL DEFAULT '{{}}',
    note            text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

ALTER TABLE comparisons ADD COLUMN calibration_id integer
    REFERENCES calibrations(id) ON DELETE CASCADE;
ALTER TABLE comparisons ADD COLUMN canary_pct double precision;
CREATE INDEX comparisons_calibration ON comparisons (calibration_id)
    WHERE calibration_id IS NOT NULL;

CREATE TABLE calibration_results (
    id              bigserial PRIMARY KEY,
    calibration_id  integer NOT NULL REFERENCES calibrations(id) ON DELETE CASCADE,
    testbed_id      integer REFERENCES testbeds(id),
    testbed_fingerprint text NOT NULL,
    workload        text NOT NULL,
    params          jsonb NOT NULL,
    threads         integer,
    measure         text NOT NULL,
    cv_pct          double precision,
    aa_comparisons  integer NOT NULL,
    false_alarms    integer NOT NULL,
    aa_unknown      integer NOT NULL,
    false_alarm_rate double precision,
    detection       jsonb NOT NULL DEFAULT '[]',
    band_pct        double precision,
    created_at      timestamptz NOT NULL DEFAULT now(),
    UNIQUE (calibration_id, testbed_fingerprint, workload, params, measure)
);
CREATE INDEX calibration_results_testbed ON calibration_results (testbed_fingerprint, measure);

CREATE VIEW v_calibration_power AS
SELECT r.calibration_id, c.finished_at, c.project, r.testbed_fingerprint, r.workload,
       r.params, r.threads, r.measure, (d ->> 'size_pct')::float8 AS injected_pct,
       (d ->> 'measured_pct')::float8 AS measured_pct,
       (d ->> 'comparisons')::int AS comparisons, (d ->> 'detected')::int AS detected,
       (d ->> 'rate')::float8 AS detection_rate
FROM calibration_results r
JOIN calibrations c ON c.id = r.calibration_id
CROSS JOIN LATERAL jsonb_array_elements(r.detection) AS d
WHERE c.state = 'done';

CREATE VIEW v_calibration_false_alarms AS
SELECT r.calibration_id, c.finished_at, c.project, r.testbed_fingerprint, r.workload,
       r.params, r.threads, r.measure, r.aa_comparisons, r.false_alarms,
       r.false_alarm_rate, r.cv_pct, r.band_pct
FROM calibration_results r
JOIN calibrations c ON c.id = r.calibration_id
WHERE c.state = 'done';
""")
    op.execute("SELECT mallard_grant_reader()")


def downgrade() -> None:
    op.execute(f"""
DROP VIEW IF EXISTS v_calibration_false_alarms;
DROP VIEW IF EXISTS v_calibration_power;
DROP TABLE calibration_results;
ALTER TABLE comparisons DROP COLUMN canary_pct;
ALTER TABLE comparisons DROP COLUMN calibration_id;
DROP TABLE calibrations;
DELETE FROM jobs WHERE kind = 'calibrate';
ALTER TABLE jobs DROP CONSTRAINT IF EXISTS jobs_kind_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_kind_check CHECK (kind IN {JOB_KINDS_OLD});
""")
