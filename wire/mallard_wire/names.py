"""The names a job may use, in one place for the API and the runner."""

from __future__ import annotations

# The peer allocators a runner finds on its node (LD_PRELOAD), compared beside mallard.
PEERS = ("glibc", "jemalloc", "mimalloc", "tcmalloc")
# The allocator's runtime options (`allocator/src/options.c`, without the `MALLARD_`
# prefix, lower case) that a variant may set. `stats_file` is left out on purpose: it is
# a path the allocator writes to.
VARIANT_KEYS = ("transfer", "decay_ms", "on_misuse", "verbose", "remote", "canary_ns",
                "canary_loops_per_us")
