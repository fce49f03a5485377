#!/usr/bin/env bash
# Builds the offline stand-ins for the upstream images the compose stack uses, from
# debian:bookworm-slim and Debian packages (no container registry needed):
#   mallard/postgres:offline      (Debian's PostgreSQL, official-image contract)
#   mallard/prometheus:offline    (Debian's prometheus)
#   mallard/alertmanager:offline  (Debian's prometheus-alertmanager)
# Grafana has no Debian package: the offline stack runs without it.
# Needs a Docker engine and the local base image (../shared/tools/docker-engine makes both).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "images-offline: $*" >&2; }
command -v docker >/dev/null && docker info >/dev/null 2>&1 \
  || { log "no Docker engine answers (run ../shared/tools/docker-engine)"; exit 1; }
docker image inspect debian:bookworm-slim >/dev/null 2>&1 \
  || { log "base image debian:bookworm-slim is missing (../shared/tools/docker-engine creates it)"; exit 1; }
for name in postgres prometheus alertmanager; do
  start=$(date +%s)
  log "building mallard/$name:offline from docker/$name"
  docker build -q -t "mallard/$name:offline" "docker/$name" >/dev/null
  log "mallard/$name:offline ready in $(( $(date +%s) - start ))s ($(docker image inspect -f '{{.Size}}' "mallard/$name:offline" | awk '{printf "%d MB", $1/1e6}'))"
done
