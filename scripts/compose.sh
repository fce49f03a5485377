#!/usr/bin/env bash
# The compose stack's front door (make up / make down).
#   scripts/compose.sh up [--offline] [--grafana] [--no-build]
#   scripts/compose.sh down [-v]          (-v also removes the volumes: database, spool, ...)
#   scripts/compose.sh <anything else>    passed to `docker compose` with the same settings
#                                         (ps, logs -f api, exec api mallard-api token create ...)
# Settings come from .env (copy .env.example), then the environment. Offline mode selects
# the images `make images-offline` builds from debian:bookworm-slim (building them when
# missing): chosen by --offline or MALLARD_OFFLINE=1, and automatically when an upstream
# image is neither present nor pullable. The offline stack has no Grafana.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "compose: $*" >&2; }
die() { log "$*"; exit 1; }

cmd="${1:-up}"; [ $# -eq 0 ] || shift
offline="${MALLARD_OFFLINE:-0}"; grafana=0; build=1; down_args=()
if [ "$cmd" = up ] || [ "$cmd" = down ]; then
  for a in "$@"; do
    case "$a" in
      --offline) offline=1 ;;
      --grafana) grafana=1 ;;
      --no-build) build=0 ;;
      -v|--volumes) down_args+=(--volumes) ;;
      *) die "unknown option $a (up [--offline] [--grafana] [--no-build] | down [-v])" ;;
    esac
  done
  set --
fi

command -v docker >/dev/null && docker info >/dev/null 2>&1 \
  || die "no Docker engine answers (on these machines: ../shared/tools/docker-engine)"
docker compose version >/dev/null 2>&1 || die "the docker compose v2 plugin is missing"

# .env first (compose reads it too; we need the values for the choices below)
if [ -f "${MALLARD_ENV_FILE:-.env}" ]; then
  set -a; . "${MALLARD_ENV_FILE:-.env}"; set +a
fi
# earlier versions named the reader's password GRAFANA_DB_PASSWORD
export MALLARD_READER_PASSWORD="${MALLARD_READER_PASSWORD:-${GRAFANA_DB_PASSWORD:-}}"
MALLARD_SECRETS_LIB=1 . docker/secrets.sh  # secret_problem: the containers' own rule
check_secret() {  # check_secret NAME: set, not a CHANGE-ME placeholder, 16 bytes or more
  local value="${!1:-}" why
  [ -n "$value" ] || die "$1 is not set: cp .env.example .env and set the secrets in it"
  why=$(secret_problem "$value")
  [ -z "$why" ] || die "$1 $why (in .env)"
}
if [ "$cmd" = up ]; then
  check_secret POSTGRES_PASSWORD
  check_secret MALLARD_DB_PASSWORD
  [ -z "$MALLARD_READER_PASSWORD" ] || check_secret MALLARD_READER_PASSWORD
fi
# `down`, `ps`, `logs` do not use the secrets, but compose checks every ${VAR:?}
export POSTGRES_PASSWORD="${POSTGRES_PASSWORD:-unused-by-$cmd}"
export MALLARD_DB_PASSWORD="${MALLARD_DB_PASSWORD:-unused-by-$cmd}"

# the runner's pinned core: the last one, unless chosen; every other container gets the
# rest (SHARED_CPUSET), so nothing else ever runs on the runner's core
export RUNNER_CPUSET="${RUNNER_CPUSET:-$(( $(nproc) - 1 ))}"
cpu_list() {  # "0-2,5" -> "0 1 2 5"
  local part
  for part in ${1//,/ }; do
    if [[ $part == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
if [ -z "${SHARED_CPUSET:-}" ]; then
  runner_cpus=" $(cpu_list "$RUNNER_CPUSET" | tr '\n' ' ')"
  SHARED_CPUSET=$(for c in $(seq 0 $(( $(nproc) - 1 ))); do
    [[ $runner_cpus == *" $c "* ]] || echo "$c"; done | paste -sd, -)
  if [ -z "$SHARED_CPUSET" ]; then
    [ "$cmd" != up ] || log "WARNING: $(nproc) CPU(s), all given to the runner: the other containers share its core"
    SHARED_CPUSET=$RUNNER_CPUSET
  fi
fi
export SHARED_CPUSET
export MALLARD_GIT_DIR="${MALLARD_GIT_DIR:-$PWD/.mallard/git}"
mkdir -p "$MALLARD_GIT_DIR"

image_available() {  # present locally, or pullable within a short time
  docker image inspect "$1" >/dev/null 2>&1 && return 0
  log "pulling $1"
  timeout "${MALLARD_PULL_TIMEOUT:-60}" docker pull -q "$1" >/dev/null 2>&1
}

use_offline() {
  export POSTGRES_IMAGE="${POSTGRES_OFFLINE_IMAGE:-mallard/postgres:offline}"
  export PROMETHEUS_IMAGE="${PROMETHEUS_OFFLINE_IMAGE:-mallard/prometheus:offline}"
  export ALERTMANAGER_IMAGE="${ALERTMANAGER_OFFLINE_IMAGE:-mallard/alertmanager:offline}"
  # PostgreSQL 15 (Debian) cannot open the official image's 16 data directory
  export POSTGRES_VOLUME="${POSTGRES_OFFLINE_VOLUME:-mallard_pgdata_offline}"
}

if [ "$cmd" = up ]; then
  rm -f .mallard/compose-offline
  if [ "$offline" != 1 ]; then
    for img in "${POSTGRES_IMAGE:-postgres:16}" "${PROMETHEUS_IMAGE:-prom/prometheus:v2.54.1}" \
               "${ALERTMANAGER_IMAGE:-prom/alertmanager:v0.27.0}"; do
      if ! image_available "$img"; then
        log "$img cannot be pulled: using the offline images (make images-offline)"
        offline=1; break
      fi
    done
  fi
  if [ "$offline" = 1 ]; then
    use_offline
    mkdir -p .mallard && touch .mallard/compose-offline  # later ps/logs/exec use the same images
    for img in "$POSTGRES_IMAGE" "$PROMETHEUS_IMAGE" "$ALERTMANAGER_IMAGE"; do
      docker image inspect "$img" >/dev/null 2>&1 || { scripts/images-offline.sh; break; }
    done
    if [ $grafana = 1 ]; then
      log "Grafana is not available offline (no Debian package, no image can be pulled);"
      log "starting without it. Its dashboards are tested by dashboards/tests instead."
      grafana=0
    fi
  fi
  if [ $grafana = 1 ]; then
    check_secret GRAFANA_ADMIN_PASSWORD
    check_secret MALLARD_READER_PASSWORD
    export COMPOSE_PROFILES=grafana
  fi

  if [ $build = 1 ]; then
    scripts/wheelhouse.sh
    for part in api runner; do
      var="$(echo "$part" | tr a-z A-Z)_IMAGE"; tag="${!var:-mallard/$part:latest}"
      start=$(date +%s)
      log "building $tag (layer cache: only what changed)"
      docker build -q -f "$part/Dockerfile" -t "$tag" . >/dev/null
      log "$tag built in $(( $(date +%s) - start ))s"
    done
  fi

  docker compose up -d --remove-orphans
  log "waiting for the API to be healthy"
  api=$(docker compose ps -q api)
  for _ in $(seq 1 120); do
    state=$(docker inspect -f '{{.State.Health.Status}}' "$api" 2>/dev/null || echo none)
    [ "$state" = healthy ] && break
    sleep 2
  done
  [ "$state" = healthy ] || { docker compose logs --tail 50 api >&2; die "the API is not healthy ($state)"; }
  bind="${BIND_ADDRESS:-127.0.0.1}"
  cat <<EOF
Mallard is up$([ "$offline" = 1 ] && echo " (offline images; no Grafana)"):
  API            http://$bind:${API_PORT:-8000}/docs   (REST under /api/v1, metrics at /metrics)
  Prometheus     http://$bind:${PROMETHEUS_PORT:-9090}
  Alertmanager   http://$bind:${ALERTMANAGER_PORT:-9093}
  webhook log    http://$bind:${WEBHOOK_LOG_PORT:-8088}/received   (notifications received)
  runner         ${MALLARD_RUNNER_NAME:-compose-runner}, pinned to CPU $RUNNER_CPUSET (the others: CPU $SHARED_CPUSET); bare repositories in $MALLARD_GIT_DIR (/srv/git in the runner)
EOF
  if [ $grafana = 1 ]; then
    echo "  Grafana        http://$bind:${GRAFANA_PORT:-3000}   (user ${GRAFANA_ADMIN_USER:-admin})"
  fi
  echo "Stop with: make down"
elif [ "$cmd" = down ]; then
  docker compose --profile grafana down --remove-orphans "${down_args[@]}"
  if [ ${#down_args[@]} -gt 0 ]; then
    # the database volume has a fixed name (see docker-compose.yml): remove both variants
    docker volume rm -f "${POSTGRES_VOLUME:-mallard_pgdata}" "${POSTGRES_OFFLINE_VOLUME:-mallard_pgdata_offline}" >/dev/null
  fi
  log "stopped"
else
  [ ! -f .mallard/compose-offline ] || use_offline
  exec docker compose "$cmd" "$@"
fi
