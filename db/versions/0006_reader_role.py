"""The read-only role mallard_reader: SELECT on the v_* views, nothing else.

Dashboards read only the SQL views (the contract between the database and Grafana),
so the role they connect as may read only those: never a table (projects hold webhook
secrets, webhook_endpoints Slack URLs, tokens their hashes).

- The role is created NOLOGIN when it does not exist yet, so no role without a
  password can ever log in. A deployment that lets Grafana connect as it gives it
  LOGIN and a password outside the migrations (compose: docker/postgres/roles.sh,
  Kubernetes: the database component; see k8s/README.md). When the migrating user
  may not create roles, the role must exist beforehand; the error says so.
- Privileges are per database: CONNECT on this one, USAGE on schema public, SELECT
  on every view named v_*; no default privileges (PostgreSQL's default privileges
  cannot tell a view from a table, and tables must stay closed).
- Views created later: `mallard_grant_reader()` grants SELECT on every v_* view
  again. A migration that creates (or drops and re-creates) a v_* view ends with
  `op.execute("SELECT mallard_grant_reader()")`; `CREATE OR REPLACE VIEW` keeps the
  grant. api/tests/test_reader_role.py fails when a view at head is not readable.
- Downgrade revokes what upgrade granted and drops the function; the role itself is
  cluster-wide (other databases, its password) and is left in place.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-22
"""

from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

ROLE = "mallard_reader"


def upgrade() -> None:
    op.execute(f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
        BEGIN
            CREATE ROLE {ROLE} NOLOGIN;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role {ROLE} does not exist and % may not create it', current_user
                USING HINT = 'create it when the database is set up (CREATE ROLE {ROLE} '
                             'LOGIN PASSWORD ...): see docker/postgres/roles.sh';
        END;
    END IF;
END
$$;
""")
    op.execute(f"""
CREATE FUNCTION mallard_grant_reader() RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v record;
BEGIN
    EXECUTE format('GRANT CONNECT ON DATABASE %I TO {ROLE}', current_database());
    GRANT USAGE ON SCHEMA public TO {ROLE};
    FOR v IN SELECT viewname FROM pg_views
             WHERE schemaname = 'public' AND viewname LIKE 'v\\_%'
    LOOP
        EXECUTE format('GRANT SELECT ON public.%I TO {ROLE}', v.viewname);
    END LOOP;
END
$$;
""")
    op.execute("REVOKE ALL ON FUNCTION mallard_grant_reader() FROM PUBLIC")
    op.execute("SELECT mallard_grant_reader()")


def downgrade() -> None:
    op.execute(f"""
DO $$
DECLARE
    v record;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{ROLE}') THEN
        RETURN;
    END IF;
    FOR v IN SELECT viewname FROM pg_views
             WHERE schemaname = 'public' AND viewname LIKE 'v\\_%'
    LOOP
        EXECUTE format('REVOKE SELECT ON public.%I FROM {ROLE}', v.viewname);
    END LOOP;
    REVOKE USAGE ON SCHEMA public FROM {ROLE};
    EXECUTE format('REVOKE CONNECT ON DATABASE %I FROM {ROLE}', current_database());
END
$$;
""")
    op.execute("DROP FUNCTION mallard_grant_reader()")
