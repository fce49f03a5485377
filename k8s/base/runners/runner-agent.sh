#!/bin/sh
# runner-agent.sh: the runner container's entrypoint on Kubernetes (mounted from the
# ConfigMap mallard-runner-entrypoint). It is not told its CPUs: it reads the set the
# kubelet pinned it to (Cpus_allowed_list of its own process; with the static CPU
# manager and Guaranteed QoS that is the container's exclusive cpuset), checks that
# the set has as many CPUs as the container's CPU limit, checks this node's runner
# token in the file the node's admin installed, and execs
#   mallard-runner agent --api URL --name NODE --cpus SET --token-file FILE
# The token stays in its file (root's, mode 0600): never in an environment variable or
# on a command line, which what the agent starts (the commits under test) could read.
# POSIX sh only (dash in the image); no awk, no coreutils.
#
# Environment:
#   MALLARD_RUNNER_API            the API URL (ConfigMap mallard-runner-config)
#   MALLARD_RUNNER_NAME           the runner's name: the node name (downward API)
#   MALLARD_RUNNER_CPU_LIMIT      the container's CPU limit in whole CPUs (downward API)
#   MALLARD_RUNNER_TOKEN_FILE     default /etc/mallard/runner-token (hostPath, per node)
#   MALLARD_RUNNER_ALLOW_UNPINNED "1": run even when the CPU set does not match the
#                                 limit (dev clusters without the static CPU manager)
#   MALLARD_PROC_STATUS           default /proc/self/status (tests point it elsewhere)
set -eu

status_file=${MALLARD_PROC_STATUS:-/proc/self/status}
token_file=${MALLARD_RUNNER_TOKEN_FILE:-/etc/mallard/runner-token}

die() {
  echo "runner-agent: $*" >&2
  exit 1
}

[ -n "${MALLARD_RUNNER_API:-}" ] || die "MALLARD_RUNNER_API is not set"
[ -n "${MALLARD_RUNNER_NAME:-}" ] || die "MALLARD_RUNNER_NAME is not set"

cpus=""
while IFS= read -r line; do
  case $line in
    Cpus_allowed_list:*) cpus=${line#Cpus_allowed_list:} ;;
  esac
done <"$status_file"
# strip the tab and spaces around the value
cpus=${cpus#"${cpus%%[![:space:]]*}"}
cpus=${cpus%"${cpus##*[![:space:]]}"}
[ -n "$cpus" ] || die "no Cpus_allowed_list in $status_file"

count=0
old_ifs=$IFS
IFS=,
for part in $cpus; do
  case $part in
    *-*) lo=${part%-*}; hi=${part#*-}; count=$((count + hi - lo + 1)) ;;
    *) count=$((count + 1)) ;;
  esac
done
IFS=$old_ifs

if [ -n "${MALLARD_RUNNER_CPU_LIMIT:-}" ] && [ "$count" -ne "$MALLARD_RUNNER_CPU_LIMIT" ]; then
  msg="pinned to CPUs $cpus ($count CPUs) but the CPU limit is $MALLARD_RUNNER_CPU_LIMIT:"
  msg="$msg the kubelet did not give this container exclusive cores (cpuManagerPolicy static?)"
  if [ "${MALLARD_RUNNER_ALLOW_UNPINNED:-0}" = "1" ]; then
    echo "runner-agent: WARNING: $msg; running anyway (MALLARD_RUNNER_ALLOW_UNPINNED=1)" >&2
  else
    die "$msg; refusing to benchmark on shared cores"
  fi
fi

[ -r "$token_file" ] || die "cannot read the runner token $token_file (see k8s/README.md, node preparation)"
token=""
IFS= read -r token <"$token_file" || [ -n "$token" ] || die "the runner token file $token_file is empty"
[ -n "$token" ] || die "the runner token file $token_file is empty"
# a placeholder from an example file, or a token too short to be one the API made
case $token in
  *[Cc][Hh][Aa][Nn][Gg][Ee]-[Mm][Ee]* | *[Cc][Hh][Aa][Nn][Gg][Ee][Mm][Ee]*)
    die "the runner token in $token_file is a placeholder: create one with mallard-api token create (see k8s/README.md)" ;;
esac
[ "${#token}" -ge 16 ] || die "the runner token in $token_file is shorter than 16 bytes: not a token from mallard-api token create"

token=""
unset MALLARD_RUNNER_TOKEN
echo "runner-agent: runner $MALLARD_RUNNER_NAME on CPUs $cpus, API $MALLARD_RUNNER_API" >&2
exec mallard-runner agent --api "$MALLARD_RUNNER_API" --name "$MALLARD_RUNNER_NAME" --cpus "$cpus" \
  --token-file "$token_file"
