#!/usr/bin/env python3
"""MALLARD_* options (src/options.c): a bad value stops the program at start
with a message naming the variable and the value (a benchmark must not run a
configuration it was not asked for); good values run normally; a stats file
that cannot be written is reported but does not change the program's exit.

usage: options_check.py LIBMALLARD STATS_CHILD [EMULATOR ARGS...]
"""

import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from stats_check import check, failures, run_preloaded  # noqa: E402

BAD = [
    ("MALLARD_TRANSFER", "bogus"),
    ("MALLARD_ON_MISUSE", "sometimes"),
    ("MALLARD_REMOTE", "nowhere"),
    ("MALLARD_DECAY_MS", "abc"),
    ("MALLARD_DECAY_MS", "-5"),
    ("MALLARD_CANARY_NS", "-1"),
    ("MALLARD_CANARY_NS", "10us"),
    ("MALLARD_CANARY_LOOPS_PER_US", "fast"),
    ("MALLARD_STATS_FILE", "/tmp/" + "a" * 5000),
]
GOOD = [
    {"MALLARD_TRANSFER": "mutex"},
    {"MALLARD_TRANSFER": "ring"},
    {"MALLARD_TRANSFER": "naive"},
    {"MALLARD_DECAY_MS": "0"},
    {"MALLARD_DECAY_MS": "5000"},
    {"MALLARD_ON_MISUSE": "ignore"},
    {"MALLARD_REMOTE": "bin"},
    {"MALLARD_REMOTE": "page"},
    {"MALLARD_VERBOSE": "0"},
    {"MALLARD_CANARY_NS": "0"},
    {"MALLARD_CANARY_NS": "50"},
    {"MALLARD_CANARY_NS": "20", "MALLARD_CANARY_LOOPS_PER_US": "300"},
]


def main():
    lib, child, *emulator = sys.argv[1:]
    for name, value in BAD:
        proc = run_preloaded(lib, child, emulator, {name: value})
        shown = value if len(value) < 40 else "(too long)"
        check(
            proc.returncode == -signal.SIGABRT,
            f"{name}={shown[:40]}: exit {proc.returncode}, want SIGABRT",
        )
        check(
            name in proc.stderr and shown in proc.stderr,
            f"{name}={shown[:40]}: stderr does not name the variable and value: {proc.stderr!r}",
        )
        check(proc.stdout == "", f"{name}={shown[:40]}: the program ran anyway")
        print(f"bad  {name}={shown[:40]}: exit {proc.returncode}, {proc.stderr.strip()[:100]}")
    for env in GOOD:
        proc = run_preloaded(lib, child, emulator, env)
        check(proc.returncode == 0 and proc.stdout.strip(), f"{env}: exit {proc.returncode}")
        print(f"good {env}: exit {proc.returncode}")
    proc = run_preloaded(lib, child, emulator, {"MALLARD_STATS_FILE": "/nonexistent-dir/s.json"})
    check(
        proc.returncode == 0 and proc.stdout.strip(),
        f"unwritable stats file changed the exit: {proc.returncode}",
    )
    check(
        "MALLARD_STATS_FILE" in proc.stderr, f"unwritable stats file not reported: {proc.stderr!r}"
    )
    if failures:
        print(f"options: {len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("options: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
