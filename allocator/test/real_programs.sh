#!/usr/bin/env bash
# Real programs under LD_PRELOAD=libmallard.so: python3 running an
# allocation-heavy script, git on a real repository (commits, log, diff, gc,
# fsck), and a multithreaded C++ program. Each must exit 0 and print the same
# output as without Mallard; MALLARD_STATS_FILE proves Mallard was loaded in
# each of them (allocs > 0 in the file it writes at exit).
# usage: real_programs.sh LIBMALLARD CXX_CHURN
set -uo pipefail
lib=$1
churn=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0; passes=0

# run NAME CMD...: runs CMD without and with Mallard in the current directory
run() {
  local name=$1; shift
  local base="$tmp/$name"
  "$@" >"$base.glibc.out" 2>"$base.glibc.err"; local rc0=$?
  rm -f "$tmp"/stats-*.json
  MALLARD_STATS_FILE="$tmp/stats-%p.json" LD_PRELOAD="$lib" "$@" >"$base.mallard.out" 2>"$base.mallard.err"
  local rc1=$?
  local ok=1
  if [ $rc0 -ne 0 ]; then echo "FAIL $name: exits $rc0 even without Mallard"; ok=0; fi
  if [ $rc1 -ne 0 ]; then echo "FAIL $name: exit $rc1 with Mallard"; sed 's/^/  | /' "$base.mallard.err" | tail -20; ok=0; fi
  if ! cmp -s "$base.glibc.out" "$base.mallard.out"; then
    echo "FAIL $name: output differs with Mallard"; diff "$base.glibc.out" "$base.mallard.out" | head -20; ok=0
  fi
  # every stats file written (one per process) must show allocations
  local files=("$tmp"/stats-*.json)
  if [ ! -e "${files[0]}" ]; then echo "FAIL $name: Mallard wrote no stats file (not loaded?)"; ok=0
  elif ! grep -qE '"allocs": *[1-9]' "${files[@]}"; then echo "FAIL $name: stats show no allocations"; ok=0
  fi
  if [ $ok = 1 ]; then
    echo "ok   $name ($(wc -l <"$base.mallard.out") lines of identical output, ${#files[@]} stats file(s))"
    passes=$((passes + 1))
  else
    fails=$((fails + 1))
  fi
}

# 1. python3: dicts, lists, strings, sorting, json
cat >"$tmp/alloc_heavy.py" <<'PY'
import json, hashlib, random
r = random.Random(42)
d = {}
for i in range(120000):
    d[f"k{r.randrange(50000)}-{i % 97}"] = [r.random() for _ in range(i % 7)]
items = sorted(d.items(), key=lambda kv: (len(kv[1]), kv[0]))
blob = json.dumps(items[:5000])
objs = [bytearray(r.randrange(1, 5000)) for _ in range(20000)]
words = " ".join(str(r.randrange(10**9)) for _ in range(100000)).split()
print(len(d), len(blob), sum(map(len, objs)), len(set(words)))
print(hashlib.sha256(blob.encode()).hexdigest())
# threads: objects built on one thread are dropped on another
from concurrent.futures import ThreadPoolExecutor
def build(seed):
    rr = random.Random(seed)
    return {rr.randrange(10**6): "x" * rr.randrange(1, 300) for _ in range(20000)}
with ThreadPoolExecutor(max_workers=4) as ex:
    maps = list(ex.map(build, range(16)))
    sizes = list(ex.map(lambda m: sum(map(len, m.values())), maps))
del maps
print(sum(sizes))
PY
py=$(command -v /usr/bin/python3 || command -v python3)  # not a pyenv shim
run python3 "$py" "$tmp/alloc_heavy.py"

# 2. git on a real repository with history
if command -v git >/dev/null; then
  export GIT_AUTHOR_NAME=t GIT_AUTHOR_EMAIL=t@example.com GIT_COMMITTER_NAME=t GIT_COMMITTER_EMAIL=t@example.com
  export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
  export GIT_CONFIG_NOSYSTEM=1 HOME="$tmp"
  mkdir "$tmp/repo" && cd "$tmp/repo" && git init -q -b main . && git config gc.auto 0
  for i in $(seq 1 25); do
    seq $((i * 40)) | sed "s/^/line $i /" >"file$((i % 6)).txt"
    "$py" -c "import random; r=random.Random($i); print('\n'.join(str(r.random()) for _ in range(300)))" >"data$((i % 3)).txt"
    git add -A && git commit -q -m "commit $i"
  done
  run git-log git log --stat --format='%H %s'
  run git-diff git diff HEAD~10 HEAD
  run git-show git show HEAD~3
  run git-blame git blame file1.txt
  # commits made with Mallard produce the same object ids
  cp -r "$tmp/repo" "$tmp/repo2"
  run git-commit sh -c 'cd "$0" && git checkout -q -B side HEAD~5 && echo x >> file0.txt && git commit -q -am side && git rev-parse HEAD && git reset -q --hard main' "$tmp/repo2"
  run git-gc sh -c 'cp -r "$0" "$0.$$" && cd "$0.$$" && git gc -q --aggressive && git count-objects -v | grep -v size && git fsck --no-progress 2>&1 && rm -rf "$0.$$"' "$tmp/repo"
  cd "$tmp"
else
  echo "FAIL git: git is not installed"; fails=$((fails + 1))
fi

# 3. a multithreaded C++ program
run cxx-churn "$churn"

echo "real programs: $passes passed, $fails failed"
[ $fails -eq 0 ]
