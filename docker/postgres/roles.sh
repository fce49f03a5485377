#!/bin/sh
# roles.sh: the database roles Mallard runs with, set up (or brought up to date) by the
# superuser, idempotently. Run at every start by compose's one-shot `db-init` service and
# by the Kubernetes migration Job's init container (postgres-statefulset component); the
# superuser is used for nothing else.
#
#   owner (user of DATABASE_URL, default mallard): LOGIN, not a superuser, no CREATEROLE
#     or CREATEDB; owns the database, schema public and everything in it (objects a
#     superuser made, in a volume from before, are handed over). The API and its
#     migrations connect as it.
#   mallard_reader: what Grafana connects as; SELECT on the v_* views only (granted by
#     migration 0006). LOGIN with MALLARD_READER_PASSWORD when set, else NOLOGIN.
#   grafana: the read-only role of earlier versions (it could read every table) is
#     dropped.
#
# Environment: PGHOST, PGPORT, PGUSER, PGPASSWORD (the superuser, libpq's variables);
# DATABASE_URL (postgresql://owner:password@host:port/database, the API's URL: its user,
# password and database are used; the password in URL-safe characters, no %-escapes);
# MALLARD_READER_PASSWORD (optional); MALLARD_DB_WAIT_SECONDS (default 120: how long to
# wait for a server that is still starting). Passwords reach psql through its
# environment (\getenv), never its command line.
set -eu

die() { echo "db-init: $*" >&2; exit 1; }

[ -n "${DATABASE_URL:-}" ] || die "DATABASE_URL is not set"
rest=${DATABASE_URL#*://}
creds=${rest%%@*}
[ "$creds" != "$rest" ] || die "DATABASE_URL has no user:password@ part"
MALLARD_OWNER=${creds%%:*}
MALLARD_OWNER_PASSWORD=${creds#*:}
[ "$MALLARD_OWNER_PASSWORD" != "$creds" ] || die "DATABASE_URL has no password"
db=${rest#*@}
db=${db#*/}
MALLARD_DB=${db%%\?*}
case $MALLARD_OWNER_PASSWORD in
  *%*) die "the password in DATABASE_URL is %-escaped: use URL-safe characters (letters, digits, - _ . ~)" ;;
esac
[ -n "$MALLARD_OWNER" ] && [ -n "$MALLARD_DB" ] || die "DATABASE_URL needs a user and a database"
[ "$MALLARD_OWNER" != "${PGUSER:-postgres}" ] ||
  die "DATABASE_URL's user is the superuser ($MALLARD_OWNER): give the API a role of its own"
MALLARD_READER_PASSWORD=${MALLARD_READER_PASSWORD:-}
export MALLARD_OWNER MALLARD_OWNER_PASSWORD MALLARD_DB MALLARD_READER_PASSWORD

# the server may still be starting (a first start restarts it after initdb): wait for it
err=${TMPDIR:-/tmp}/db-init.err
tries=0
until psql -d postgres -Atqc "SELECT 1" >/dev/null 2>"$err"; do
  if grep -qE 'password authentication failed|role ".*" does not exist' "$err"; then
    cat "$err" >&2
    die "cannot connect as the superuser ${PGUSER:-postgres}. A database volume made before \
the API had a role of its own has the superuser that POSTGRES_USER named then (mallard): \
set POSTGRES_USER=mallard and MALLARD_DB_USER=mallard_app in .env (see docker/README.md)"
  fi
  tries=$((tries + 1))
  if [ "$tries" -ge "${MALLARD_DB_WAIT_SECONDS:-120}" ]; then
    cat "$err" >&2
    die "PostgreSQL at ${PGHOST:-localhost} did not accept connections"
  fi
  sleep 1
done

# roles and the database, from the maintenance database
psql -v ON_ERROR_STOP=1 -d postgres -q <<'SQL'
\getenv owner MALLARD_OWNER
\getenv owner_pw MALLARD_OWNER_PASSWORD
\getenv reader_pw MALLARD_READER_PASSWORD
\getenv db MALLARD_DB
SELECT set_config('mallard.owner', :'owner', false),
       set_config('mallard.owner_pw', :'owner_pw', false),
       set_config('mallard.reader_pw', :'reader_pw', false) \g /dev/null
DO $$
DECLARE
    o text := current_setting('mallard.owner');
    r pg_roles%ROWTYPE;
BEGIN
    SELECT * INTO r FROM pg_roles WHERE rolname = o;
    IF FOUND AND r.rolsuper THEN
        RAISE EXCEPTION 'role % is a superuser: the API must not connect as one', o
            USING HINT = 'a volume made before: set POSTGRES_USER to that superuser and '
                         'MALLARD_DB_USER to a new name (see docker/README.md)';
    END IF;
    IF NOT FOUND THEN
        EXECUTE format('CREATE ROLE %I', o);
    END IF;
    EXECUTE format('ALTER ROLE %I LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION '
                   'NOBYPASSRLS PASSWORD %L', o, current_setting('mallard.owner_pw'));
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'mallard_reader') THEN
        CREATE ROLE mallard_reader NOLOGIN;
    END IF;
    IF current_setting('mallard.reader_pw') <> '' THEN
        EXECUTE format('ALTER ROLE mallard_reader LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE '
                       'NOREPLICATION NOBYPASSRLS PASSWORD %L',
                       current_setting('mallard.reader_pw'));
    ELSE
        ALTER ROLE mallard_reader NOLOGIN PASSWORD NULL;
    END IF;
END
$$;
SELECT set_config('mallard.owner_pw', '', false), set_config('mallard.reader_pw', '', false) \g /dev/null
SELECT format('CREATE DATABASE %I OWNER %I', :'db', :'owner')
WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = :'db') \gexec
SELECT format('ALTER DATABASE %I OWNER TO %I', :'db', :'owner') \gexec
SQL

# inside the database: schema public and every object in it belong to the owner
psql -v ON_ERROR_STOP=1 -d "$MALLARD_DB" -q <<'SQL'
\getenv owner MALLARD_OWNER
SELECT set_config('mallard.owner', :'owner', false) \g /dev/null
SELECT format('ALTER SCHEMA public OWNER TO %I', :'owner') \gexec
DO $$
DECLARE
    o text := current_setting('mallard.owner');
    obj record;
BEGIN
    -- tables first (their serial sequences follow them), then views, then the rest
    FOR obj IN
        SELECT c.oid, c.relname, c.relkind FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p', 'f', 'm', 'v', 'S')
          AND pg_get_userbyid(c.relowner) <> o
        ORDER BY CASE c.relkind WHEN 'v' THEN 2 WHEN 'S' THEN 3 ELSE 1 END, c.relname
    LOOP
        CONTINUE WHEN pg_get_userbyid((SELECT relowner FROM pg_class WHERE oid = obj.oid)) = o;
        EXECUTE format('ALTER %s public.%I OWNER TO %I',
                       CASE obj.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                                        WHEN 'S' THEN 'SEQUENCE' ELSE 'TABLE' END,
                       obj.relname, o);
    END LOOP;
    FOR obj IN
        SELECT p.oid::regprocedure AS sig FROM pg_proc p
        JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = 'public' AND pg_get_userbyid(p.proowner) <> o
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', obj.sig, o);
    END LOOP;
    -- the role of earlier versions that could read every table
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'grafana') THEN
        DROP OWNED BY grafana;
        BEGIN
            DROP ROLE grafana;
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE WARNING 'role grafana still has privileges in another database: '
                          'its privileges here are gone; drop it there too';
        END;
    END IF;
END
$$;
SQL
echo "db-init: owner ${MALLARD_OWNER} (not a superuser) owns database ${MALLARD_DB}; mallard_reader $( [ -n "$MALLARD_READER_PASSWORD" ] && echo "may log in" || echo "is NOLOGIN (no MALLARD_READER_PASSWORD)")"
