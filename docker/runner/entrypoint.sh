#!/bin/sh
# Entrypoint of the mallard/runner image. The runner's API token comes from
# MALLARD_RUNNER_TOKEN when set; otherwise from the file MALLARD_RUNNER_TOKEN_FILE
# (default /run/mallard/runner.token), which compose's one-shot `token` service writes
# with `mallard-api token create --role runner --runner $MALLARD_RUNNER_NAME`.
set -eu
if [ -z "${MALLARD_RUNNER_TOKEN:-}" ]; then
  file="${MALLARD_RUNNER_TOKEN_FILE:-/run/mallard/runner.token}"
  waited=0
  while [ ! -s "$file" ]; do
    if [ "$waited" -ge "${MALLARD_RUNNER_TOKEN_WAIT:-60}" ]; then
      echo "entrypoint: no runner token: set MALLARD_RUNNER_TOKEN or provide $file" >&2
      exit 64
    fi
    sleep 1; waited=$((waited + 1))
  done
  MALLARD_RUNNER_TOKEN=$(tr -d ' \n\r' <"$file")
  export MALLARD_RUNNER_TOKEN
fi
if [ $# -eq 0 ]; then set -- agent; fi
exec mallard-runner "$@"
