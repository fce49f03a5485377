#!/usr/bin/env python3
"""MALLARD_STATS_FILE (docs/contracts.md section 2): run stats_child with the
variable set (with %p, and without), then check that the file is one valid
JSON object with "version" first, every contract field, and plausible values.

usage: stats_check.py LIBMALLARD STATS_CHILD [EMULATOR ARGS...]
With an emulator (qemu-aarch64 -L ...), LD_PRELOAD goes to the guest through
QEMU_SET_ENV instead of being applied to qemu itself.
"""

import json
import os
import subprocess
import sys
import tempfile

FIELDS = [
    "version",
    "allocator",
    "transfer",
    "pid",
    "allocs",
    "frees",
    "remote_frees",
    "transfer_insert_hits",
    "transfer_insert_misses",
    "transfer_remove_hits",
    "transfer_remove_misses",
    "central_refills",
    "transfer_insert_inflight_misses",
    "transfer_remove_inflight_misses",
    "transfer_waits",
    "transfer_commit_waits",
    "transfer_yields",
    "transfer_sleeps",
    "pages_fresh",
    "pages_reclaimed",
    "bytes_mapped",
    "peak_bytes_mapped",
]
failures = []


def check(cond, msg):
    if not cond:
        failures.append(msg)
        print(f"FAIL: {msg}", file=sys.stderr)


def run_preloaded(lib, child, emulator, extra_env):
    """Runs child with lib preloaded (into the guest, under an emulator)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLARD_")}
    env.pop("LD_PRELOAD", None)
    env.update(extra_env)
    if emulator:
        env["QEMU_SET_ENV"] = f"LD_PRELOAD={lib}"
    else:
        env["LD_PRELOAD"] = lib
    return subprocess.run([*emulator, child], env=env, capture_output=True, text=True, timeout=120)


def run(lib, child, emulator, path, transfer):
    extra = {"MALLARD_STATS_FILE": path}
    if transfer:
        extra["MALLARD_TRANSFER"] = transfer
    proc = run_preloaded(lib, child, emulator, extra)
    check(proc.returncode == 0, f"stats_child exited {proc.returncode}: {proc.stderr}")
    pid, n, m = (int(x) for x in proc.stdout.split())
    return pid, n, m


def validate(path, pid, n, m, transfer):
    check(os.path.exists(path), f"no stats file at {path}")
    if not os.path.exists(path):
        return
    text = open(path).read()
    try:
        pairs = json.loads(text, object_pairs_hook=lambda kv: kv)
        data = dict(pairs)
    except json.JSONDecodeError as e:
        check(False, f"{path} is not valid JSON ({e}): {text[:300]!r}")
        return
    check(isinstance(pairs, list) and pairs and pairs[0][0] == "version", "version is not first")
    for f in FIELDS:
        check(f in data, f"missing field {f}")
    if any(f not in data for f in FIELDS):
        return
    check(data["version"] == 1, f"version {data['version']}")
    check(data["allocator"] == "mallard", f"allocator {data['allocator']!r}")
    check(data["transfer"] in ("mutex", "ring", "naive"), f"transfer {data['transfer']!r}")
    if transfer:
        check(data["transfer"] == transfer, f"transfer {data['transfer']} != {transfer}")
    check(data["pid"] == pid, f"pid {data['pid']} != {pid}")
    for f in FIELDS[4:]:
        check(isinstance(data[f], int) and data[f] >= 0, f"{f} = {data[f]!r}")
    check(data["allocs"] >= n + m, f"allocs {data['allocs']} < {n + m} after {n + m} mallocs")
    check(data["frees"] + data["remote_frees"] >= n + m, "fewer frees than the program made")
    check(data["remote_frees"] >= m, f"remote_frees {data['remote_frees']} after {m} remote frees")
    check(data["peak_bytes_mapped"] >= data["bytes_mapped"], "peak_bytes_mapped < bytes_mapped")
    # n frees of one size overflow the thread bin into the transfer cache
    inserts = data["transfer_insert_hits"] + data["transfer_insert_misses"]
    check(inserts > 0, f"no transfer cache inserts after {n} frees of one size")
    check(data["central_refills"] > 0, "central_refills is 0 after the first allocations")
    check(data["peak_bytes_mapped"] >= n * 64 // 2, "peak_bytes_mapped implausibly small")
    # one thread at a time touches the cache: nobody meets a claim in flight
    quiet = ("transfer_insert_inflight_misses", "transfer_remove_inflight_misses", "transfer_waits")
    for f in quiet:
        check(data[f] == 0, f"{f} = {data[f]} in a program where no two threads overlap")
    if data["transfer"] == "mutex":
        check(data["transfer_commit_waits"] == 0 and data["transfer_yields"] == 0
              and data["transfer_sleeps"] == 0,
              "mutex variant counted ring waits")
    print(f"{os.path.basename(path)}: " + json.dumps({k: data[k] for k in FIELDS}))


def main():
    lib, child, *emulator = sys.argv[1:]
    with tempfile.TemporaryDirectory() as d:
        for transfer in (None, "mutex", "ring", "naive"):
            pattern = os.path.join(d, f"stats-{transfer or 'default'}-%p.json")
            pid, n, m = run(lib, child, emulator, pattern, transfer)
            validate(pattern.replace("%p", str(pid)), pid, n, m, transfer)
        plain = os.path.join(d, "plain.json")  # no %p: exactly this path
        pid, n, m = run(lib, child, emulator, plain, None)
        validate(plain, pid, n, m, None)
    if failures:
        print(f"stats: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("stats: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
