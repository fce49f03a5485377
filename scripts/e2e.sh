#!/usr/bin/env bash
# The container end-to-end test (make e2e; .ci/run after ../shared/tools/docker-engine).
# Brings the compose stack up with the offline images, under its own project name, ports
# and volumes (a stack of yours from `make up` is left alone), runs tests/e2e/e2e.py
# (push -> hook -> runner -> results; a slower commit; API restart mid-job; comparison
# REGRESSED; alert by webhook and through Prometheus/Alertmanager), brings the stack down
# and prints the verdict last. E2E_KEEP=1 leaves the stack up for a look.
set -uo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
log() { echo "e2e: $*" >&2; }

if ! command -v docker >/dev/null || ! docker info >/dev/null 2>&1; then
  log "no Docker engine answers (../shared/tools/docker-engine provisions one)"
  echo "e2e: 0 passed, 1 failed"; exit 1
fi

tmp=$(mktemp -d /tmp/mallard-e2e.XXXXXX)
export COMPOSE_PROJECT_NAME=mallard-e2e
export COMPOSE_FILE=docker-compose.yml:tests/e2e/compose.e2e.yml
export MALLARD_ENV_FILE=/dev/null          # not your .env (the api's env_file)
# compose still reads ./.env for interpolation: pin every value the test depends on
export POSTGRES_USER=postgres MALLARD_DB_USER=mallard POSTGRES_DB=mallard BIND_ADDRESS=127.0.0.1
export MALLARD_RUNNER_TOKEN= MALLARD_RUNNER_REPO_ALLOW=file:///srv/git SHARED_CPUSET=
export MALLARD_ALERT_WEBHOOKS=generic:http://webhook-log:8080/api
export MALLARD_ALERT_WEBHOOK_URL=http://webhook-log:8080/alertmanager
export MALLARD_OPS_WEBHOOK_URL=http://webhook-log:8080/alertmanager-ops
export MALLARD_OFFLINE=1
secret() { echo "e2e-$(od -An -tx4 -N8 /dev/urandom | tr -d ' \n')"; }
export POSTGRES_PASSWORD="$(secret)" MALLARD_DB_PASSWORD="$(secret)" MALLARD_READER_PASSWORD="$(secret)"
export POSTGRES_OFFLINE_VOLUME=mallard-e2e_pgdata POSTGRES_VOLUME=mallard-e2e_pgdata
export API_PORT=${E2E_API_PORT:-18000} PROMETHEUS_PORT=${E2E_PROMETHEUS_PORT:-19090}
export ALERTMANAGER_PORT=${E2E_ALERTMANAGER_PORT:-19093} WEBHOOK_LOG_PORT=${E2E_WEBHOOK_LOG_PORT:-18088}
export E2E_API="http://127.0.0.1:$API_PORT" E2E_WEBHOOK_LOG="http://127.0.0.1:$WEBHOOK_LOG_PORT"
export E2E_PROMETHEUS="http://127.0.0.1:$PROMETHEUS_PORT"
export MALLARD_GIT_DIR="$tmp/git" E2E_WORK="$tmp/work"
export MALLARD_RUNNER_NAME=e2e-runner RUNNER_CPUSET=${E2E_RUNNER_CPUSET:-$(( $(nproc) - 1 ))}
# what a push queues: the e2e suite (larson + rpc, 1 thread), no peers, few trials
export MALLARD_SUITE=e2e MALLARD_TRIALS=${E2E_TRIALS:-3}
export MALLARD_WARMUP=1 MALLARD_PEERS=""
mkdir -p "$MALLARD_GIT_DIR"
chmod 0755 "$tmp" "$MALLARD_GIT_DIR"

teardown() {
  if [ "${E2E_KEEP:-0}" = 1 ]; then
    log "E2E_KEEP=1: stack left up (COMPOSE_PROJECT_NAME=$COMPOSE_PROJECT_NAME); scripts/compose.sh down -v to stop"
    return 0
  fi
  mkdir -p build/logs
  docker compose logs --no-color --timestamps >build/logs/e2e-stack.txt 2>&1 || true
  log "the containers' logs of this run: build/logs/e2e-stack.txt"
  scripts/compose.sh down -v >/dev/null 2>&1
  local left
  left=$(docker ps -aq --filter "label=com.docker.compose.project=$COMPOSE_PROJECT_NAME" | wc -l)
  [ "$left" -eq 0 ] && [ -z "$(docker volume ls -q --filter "name=mallard-e2e")" ]
}

# a stack left by an interrupted run (E2E_KEEP=1, a kill) would hold the ports
scripts/compose.sh down -v >/dev/null 2>&1 || true
log "bringing the stack up (offline images; builds what changed)"
if ! scripts/compose.sh up --offline >"$tmp/up.log" 2>&1; then
  cat "$tmp/up.log" >&2
  teardown; docker compose logs --no-color --tail 80 >&2 2>/dev/null || true
  echo "e2e: 0 passed, 1 failed (the stack did not come up; took $(( $(date +%s) - start ))s)"
  exit 1
fi
tail -n 12 "$tmp/up.log" >&2
log "stack up in $(( $(date +%s) - start ))s"

python3 tests/e2e/e2e.py | tee "$tmp/driver.txt"
driver_rc=${PIPESTATUS[0]}
summary=$(grep -E '^driver: [0-9]+ passed, [0-9]+ failed' "$tmp/driver.txt" | tail -n1)
passed=$(echo "$summary" | sed -E 's/^driver: ([0-9]+) passed.*/\1/'); passed=${passed:-0}
failed=$(echo "$summary" | sed -E 's/.* ([0-9]+) failed.*/\1/'); failed=${failed:-1}
if [ "$driver_rc" != 0 ]; then
  log "last runner and api logs:"
  docker compose logs --no-color --tail 40 runner api >&2 2>/dev/null || true
fi

if teardown; then
  passed=$((passed + 1)); log "PASS stack brought down cleanly (containers and volumes gone)"
else
  failed=$((failed + 1)); log "FAIL stack did not come down cleanly"
fi
[ "${E2E_KEEP:-0}" = 1 ] || rm -rf "$tmp"
echo "e2e: $passed passed, $failed failed (in $(( $(date +%s) - start ))s)"
[ "$failed" -eq 0 ]
