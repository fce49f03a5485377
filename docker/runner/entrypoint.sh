#!/bin/sh
# Entrypoint of the mallard/runner image. The agent reads its API token from a file only
# it may read (MALLARD_RUNNER_TOKEN_FILE, default /run/mallard/runner.token, which
# compose's one-shot `token` service writes, root's and mode 0600, with
# `mallard-api token create --role runner --runner $MALLARD_RUNNER_NAME`), never from its
# environment: what it starts could read that. A token made by hand and given as
# MALLARD_RUNNER_TOKEN is written to such a file here and taken out of the environment
# before the agent starts.
set -eu
umask 077
state="${MALLARD_RUNNER_STATE_DIR:-/var/lib/mallard-runner}"
# a state folder of an image whose agent was uid 10001: root's now (CAP_CHOWN), links
# not followed
if [ -d "$state" ] && [ "$(stat -c %u "$state")" != 0 ]; then
  chown -R -h 0:0 "$state"
  chmod 0711 "$state"
fi
if [ -n "${MALLARD_RUNNER_TOKEN:-}" ]; then
  file="$state/runner.token"
  printf '%s\n' "$MALLARD_RUNNER_TOKEN" >"$file"
  chmod 0600 "$file"
else
  file="${MALLARD_RUNNER_TOKEN_FILE:-/run/mallard/runner.token}"
  waited=0
  while [ ! -s "$file" ]; do
    if [ "$waited" -ge "${MALLARD_RUNNER_TOKEN_WAIT:-60}" ]; then
      echo "entrypoint: no runner token: provide $file (or set MALLARD_RUNNER_TOKEN)" >&2
      exit 64
    fi
    sleep 1; waited=$((waited + 1))
  done
fi
unset MALLARD_RUNNER_TOKEN
MALLARD_RUNNER_TOKEN_FILE=$file
export MALLARD_RUNNER_TOKEN_FILE
# the token is written: the agent's own folders (cache, builds) must stay searchable by the
# work user, which reaches its build and trial folders through them (the agent closes them
# to writes by others itself)
umask 022
if [ $# -eq 0 ]; then set -- agent; fi
exec mallard-runner "$@"
