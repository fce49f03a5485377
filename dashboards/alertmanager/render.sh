#!/bin/sh
# Renders the Alertmanager config template: replaces every ${NAME} (NAME in capitals,
# digits and _) with the environment's value. Fails, writing nothing, when a variable
# is unset or empty. Needs only POSIX sh and awk (present in the alertmanager image).
#   usage: render.sh TEMPLATE OUTPUT
set -eu
[ $# -eq 2 ] || { echo "usage: $0 TEMPLATE OUTPUT" >&2; exit 2; }
tmp="$2.tmp.$$"
awk '
  # Comment lines are copied as they are: they document the variables.
  /^[[:space:]]*#/ { print; next }
  {
    out = ""; line = $0
    while (match(line, /\$\{[A-Z_][A-Z0-9_]*\}/)) {
      name = substr(line, RSTART + 2, RLENGTH - 3)
      if (!(name in ENVIRON) || ENVIRON[name] == "") {
        printf "render.sh: %s is not set\n", name > "/dev/stderr"; failed = 1
      }
      out = out substr(line, 1, RSTART - 1) ENVIRON[name]
      line = substr(line, RSTART + RLENGTH)
    }
    print out line
  }
  END { exit failed }
' "$1" > "$tmp" || { rm -f "$tmp"; exit 1; }
mv "$tmp" "$2"
