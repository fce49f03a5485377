#!/bin/sh
# Runs once, on an empty data directory (official postgres image and mallard/postgres:offline).
# Creates the read-only role `grafana` that Grafana's datasource uses, when
# GRAFANA_DB_PASSWORD is set: it may SELECT what POSTGRES_USER creates (the v_* views that
# migrations make later), nothing else.
set -eu
if [ -z "${GRAFANA_DB_PASSWORD:-}" ]; then
  echo "initdb: GRAFANA_DB_PASSWORD not set; no grafana role"
  return 0 2>/dev/null || exit 0
fi
psql -v ON_ERROR_STOP=1 -U "$POSTGRES_USER" -d "$POSTGRES_DB" -q \
  -v pw="$GRAFANA_DB_PASSWORD" -v owner="$POSTGRES_USER" <<'SQL'
CREATE ROLE grafana LOGIN PASSWORD :'pw';
GRANT CONNECT ON DATABASE :"DBNAME" TO grafana;
GRANT USAGE ON SCHEMA public TO grafana;
ALTER DEFAULT PRIVILEGES FOR ROLE :"owner" IN SCHEMA public GRANT SELECT ON TABLES TO grafana;
SQL
echo "initdb: read-only role grafana created"
