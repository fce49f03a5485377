/* fastpath: the allocator's fast path, single-threaded: malloc/free pairs
 * over a size mix, the way mimalloc-bench's and TCMalloc's microbenchmarks
 * time them. Work comes in windows of `window` pairs; each window is one of:
 * immediate pairs (malloc then free at once), a LIFO window (allocate all,
 * free newest first) or a FIFO window (allocate all, free oldest first),
 * chosen by the PRNG with `lifo_pct` and `fifo_pct` percent. Sizes are
 * uniform in [min, max), drawn ahead of time into a table so the PRNG stays
 * off the measured path. threads > 1 runs independent copies (no sharing),
 * `ops` split between them. Extra key: ns_per_op (thread time per pair). */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

enum { SIZE_TABLE = 4096, KIND_TABLE = 1024 };
enum { PAIRS = 0, LIFO = 1, FIFO = 2 };

typedef struct job {
    uint64_t ops;
    uint32_t sizes[SIZE_TABLE];
    unsigned char kinds[KIND_TABLE];
    double seconds;
} job;

static uint64_t g_window;

static inline void *get(uint32_t size, uint64_t tag)
{
    void *p = malloc(size);
    if (!p)
        wl_fail("malloc(%u) returned NULL", size);
    wl_tag_block(p, size, tag);
    return p;
}

static inline void put(void *p, uint32_t size, uint64_t tag)
{
    if (!wl_check_block(p, size, tag))
        wl_fail("block %p (size %u) was corrupted while live", p, size);
    free(p);
}

static void *run(void *arg)
{
    job *j = arg;
    void **live = wl_xmalloc(sizeof(void *) * g_window);
    uint64_t done = 0, s = 0, w = 0;
    double start = wl_now();
    while (done < j->ops) {
        uint64_t n = j->ops - done < g_window ? j->ops - done : g_window;
        int kind = j->kinds[w++ % KIND_TABLE];
        if (kind == PAIRS) {
            for (uint64_t i = 0; i < n; i++, s++) {
                uint32_t size = j->sizes[s % SIZE_TABLE];
                put(get(size, s), size, s);
            }
        } else {
            uint64_t s0 = s;
            for (uint64_t i = 0; i < n; i++, s++)
                live[i] = get(j->sizes[s % SIZE_TABLE], s);
            for (uint64_t i = 0; i < n; i++) {
                uint64_t k = kind == FIFO ? i : n - 1 - i;
                put(live[k], j->sizes[(s0 + k) % SIZE_TABLE], s0 + k);
            }
        }
        done += n;
    }
    j->seconds = wl_now() - start;
    free(live);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_param params[] = {
        {"threads", 1, 1, "independent copies (1 = the main thread alone)"},
        {"ops", 10000000, 1, "malloc/free pairs in total"},
        {"min", 8, 1, "smallest size in bytes"},
        {"max", 512, 2, "sizes are below this"},
        {"window", 32, 1, "pairs per window"},
        {"lifo_pct", 25, 0, "percent of windows freed newest first"},
        {"fifo_pct", 25, 0, "percent of windows freed oldest first"},
        {"seed", 42, 0, "PRNG seed"},
    };
    size_t np = WL_NPARAMS(params);
    wl_parse_args(argc, argv, "fastpath", "Single-thread malloc/free pairs over a size mix.",
                  params, np);
    long threads = (long)wl_param_get(params, np, "threads");
    uint64_t ops = (uint64_t)wl_param_get(params, np, "ops");
    uint64_t min = (uint64_t)wl_param_get(params, np, "min");
    uint64_t max = (uint64_t)wl_param_get(params, np, "max");
    g_window = (uint64_t)wl_param_get(params, np, "window");
    uint64_t lifo = (uint64_t)wl_param_get(params, np, "lifo_pct");
    uint64_t fifo = (uint64_t)wl_param_get(params, np, "fifo_pct");
    uint64_t seed = (uint64_t)wl_param_get(params, np, "seed");
    if (max <= min || max > UINT32_MAX)
        wl_fail("need min < max <= 2^32-1");
    if (lifo + fifo > 100)
        wl_fail("lifo_pct + fifo_pct must be <= 100");

    job *jobs = wl_xmalloc(sizeof(job) * (size_t)threads);
    uint64_t digest = WL_DIGEST_INIT;
    for (long t = 0; t < threads; t++) {
        job *j = &jobs[t];
        wl_rng r;
        wl_rng_init(&r, seed, (uint64_t)t);
        j->ops = ops / (uint64_t)threads + ((uint64_t)t < ops % (uint64_t)threads);
        for (int i = 0; i < SIZE_TABLE; i++) {
            j->sizes[i] = (uint32_t)wl_rng_range(&r, min, max);
            digest = wl_digest_add(digest, j->sizes[i]);
        }
        for (int i = 0; i < KIND_TABLE; i++) {
            uint64_t pct = wl_rng_below(&r, 100);
            j->kinds[i] = pct < lifo ? LIFO : pct < lifo + fifo ? FIFO : PAIRS;
            digest = wl_digest_add(digest, j->kinds[i]);
        }
    }

    pthread_t *th = wl_xmalloc(sizeof(pthread_t) * (size_t)threads);
    double start = wl_now(), cpu_start = wl_cpu_now();
    for (long t = 1; t < threads; t++)
        wl_thread_create(&th[t], run, &jobs[t]);
    run(&jobs[0]);
    for (long t = 1; t < threads; t++)
        wl_thread_join(th[t]);
    double seconds = wl_now() - start, cpu_seconds = wl_cpu_now() - cpu_start;

    double thread_seconds = 0;
    for (long t = 0; t < threads; t++)
        thread_seconds += jobs[t].seconds;
    free(th);
    free(jobs);

    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digest);
    wl_extra extras[] = {
        {"cpu_seconds", cpu_seconds, 0, NULL},
        {"ns_per_op", thread_seconds * 1e9 / (double)ops, 0, NULL},
        {"digest", 0, 0, hex},
    };
    wl_report("fastpath", params, np, ops, seconds, extras, WL_NPARAMS(extras));
    return 0;
}
