"""Triage, baselines and sharing.

- `alerts.triage` (untriaged | acknowledged | investigating | fixed | wont_fix | invalid),
  `alerts.assignee`, `alerts.bug_url`: what people decided about an alert (its `state`,
  open | acknowledged | resolved, stays the detector's lifecycle; `label` stays the
  true/false positive).
- `alert_notes`: notes on an alert, with their author and time.
- `alert_audit`: one row per triage change (who, when, which field, old and new value).
- `baselines`: a commit of a branch accepted as intended; every series of the branch starts
  a new segment there (change detection and commit verdicts look no further back).
- `broken_ranges`: a range of a branch's commits left out of analysis (shown greyed).
- `projects.public`: the project's pages are readable without a token.
- `api_tokens.role` may be `reader`: reads every page and GET, changes nothing.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-02
"""

from alembic import op

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

TRIAGE = ("untriaged", "acknowledged", "investigating", "fixed", "wont_fix", "invalid")


def upgrade() -> None:
    states = ", ".join(f"'{s}'" for s in TRIAGE)
    op.execute(f"""
ALTER TABLE alerts
    ADD COLUMN triage text NOT NULL DEFAULT 'untriaged' CHECK (triage IN ({states})),
    ADD COLUMN assignee text,
    ADD COLUMN bug_url text;
UPDATE alerts SET triage = 'acknowledged' WHERE state = 'acknowledged';
CREATE TABLE alert_notes (
    id         bigserial PRIMARY KEY,
    alert_id   integer NOT NULL REFERENCES alerts(id) ON DELETE CASCADE,
    author     text NOT NULL,
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_notes_alert ON alert_notes (alert_id, id);
CREATE TABLE alert_audit (
    id        bigserial PRIMARY KEY,
    alert_id  integer NOT NULL REFERENCES alerts(id) ON DELETE CASCADE,
    actor     text NOT NULL,
    field     text NOT NULL,
    old_value text,
    new_value text,
    at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX alert_audit_alert ON alert_audit (alert_id, id);
CREATE TABLE baselines (
    id         bigserial PRIMARY KEY,
    branch_id  integer NOT NULL REFERENCES branches(id) ON DELETE CASCADE,
    commit_id  bigint NOT NULL REFERENCES commits(id) ON DELETE CASCADE,
    alert_id   integer REFERENCES alerts(id) ON DELETE SET NULL,
    note       text NOT NULL DEFAULT '',
    actor      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (branch_id, commit_id)
);
CREATE TABLE broken_ranges (
    id              bigserial PRIMARY KEY,
    branch_id       integer NOT NULL REFERENCES branches(id) ON DELETE CASCADE,
    first_commit_id bigint NOT NULL REFERENCES commits(id) ON DELETE CASCADE,
    last_commit_id  bigint NOT NULL REFERENCES commits(id) ON DELETE CASCADE,
    reason          text NOT NULL DEFAULT '',
    actor           text NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX broken_ranges_branch ON broken_ranges (branch_id);
ALTER TABLE projects ADD COLUMN public boolean NOT NULL DEFAULT false;
ALTER TABLE api_tokens DROP CONSTRAINT IF EXISTS api_tokens_role_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_role_check
    CHECK (role IN ('runner', 'user', 'admin', 'reader'));
""")


def downgrade() -> None:
    op.execute("""
DELETE FROM api_tokens WHERE role = 'reader';
ALTER TABLE api_tokens DROP CONSTRAINT IF EXISTS api_tokens_role_check;
ALTER TABLE api_tokens ADD CONSTRAINT api_tokens_role_check
    CHECK (role IN ('runner', 'user', 'admin'));
ALTER TABLE projects DROP COLUMN public;
DROP TABLE broken_ranges;
DROP TABLE baselines;
DROP TABLE alert_audit;
DROP TABLE alert_notes;
ALTER TABLE alerts DROP COLUMN triage, DROP COLUMN assignee, DROP COLUMN bug_url;
""")
