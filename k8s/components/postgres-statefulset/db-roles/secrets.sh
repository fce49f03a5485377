#!/bin/sh
# secrets.sh: refuse placeholder and short secrets before a container starts its program.
#   secrets.sh VAR [VAR...] [--optional VAR...] -- program [args...]
# Each named variable must be set, must not hold the CHANGE-ME placeholder of the
# *.example files, and must be at least 16 bytes long; --optional ones are checked only
# when set. Then the program is exec'd. The message names the variable, never its value.
# Sourced with MALLARD_SECRETS_LIB=1 (scripts/compose.sh), it only defines secret_problem.
# POSIX sh: the official postgres image's and the Debian images' /bin/sh.

# secret_problem VALUE: prints why VALUE is not a usable secret; nothing when it is
secret_problem() {
  case $(printf '%s' "$1" | tr '[:lower:]' '[:upper:]') in
    *CHANGE-ME* | *CHANGEME*) echo "is the CHANGE-ME placeholder of an example file: set a real secret"; return ;;
  esac
  if [ "$(printf '%s' "$1" | wc -c)" -lt 16 ]; then
    echo "is shorter than 16 bytes"
  fi
}

if [ "${MALLARD_SECRETS_LIB:-0}" = 1 ]; then
  return 0 2>/dev/null || exit 0
fi

failed=0
optional=0
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; break ;;
    --optional) optional=1; shift; continue ;;
  esac
  name=$1
  shift
  case $name in
    "" | [0-9]* | *[!A-Za-z0-9_]*) echo "secrets: bad variable name '$name'" >&2; exit 64 ;;
  esac
  eval "value=\${$name:-}"
  if [ -z "$value" ]; then
    if [ "$optional" = 0 ]; then
      echo "secrets: $name is not set (see .env.example)" >&2
      failed=1
    fi
    continue
  fi
  why=$(secret_problem "$value")
  if [ -n "$why" ]; then
    echo "secrets: $name $why" >&2
    failed=1
  fi
done
[ "$failed" = 0 ] || exit 78  # EX_CONFIG
[ $# -gt 0 ] || exit 0
exec "$@"
