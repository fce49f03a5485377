/* fragmentation: how much memory an allocator keeps when live data is
 * scattered, in the spirit of Johnstone & Wilson ("The Memory Fragmentation
 * Problem: Solved?", ISMM 1998) and of mimalloc-bench's fragmentation
 * tests. Each of `phases` phases allocates `small` blocks of [small_min,
 * small_max) bytes, frees `free_pct` percent of them chosen at random (the
 * rest survive to the end, pinning the pages they sit on), frees the large
 * blocks of the previous phase, and allocates `large` blocks of
 * [large_min, large_max) bytes, which the small holes cannot hold. At the
 * end the last large blocks are freed and only the survivors are live.
 * threads > 1 runs independent copies, counts split between them.
 * Extra keys: peak_rss_bytes (largest current RSS sampled after every step),
 * final_rss_bytes (current RSS at the end, survivors still live), both from
 * /proc/self/statm. `operations` is the number of blocks allocated. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct block {
    unsigned char *p;
    uint32_t size;
    uint64_t tag;
} block;

typedef struct job {
    wl_rng rng;
    uint64_t small, large;      /* per phase, this job's share */
    block *survivors;
    uint64_t nsurvivors;
    uint64_t allocations;
    uint64_t digest;
} job;

static uint64_t g_phases, g_small_min, g_small_max, g_large_min, g_large_max, g_free_pct;
static pthread_mutex_t g_rss_lock = PTHREAD_MUTEX_INITIALIZER;
static long long g_peak_rss;

static void sample_rss(void)
{
    long long rss = wl_current_rss_bytes();
    pthread_mutex_lock(&g_rss_lock);
    if (rss > g_peak_rss)
        g_peak_rss = rss;
    pthread_mutex_unlock(&g_rss_lock);
}

static void alloc_block(job *j, block *b, uint64_t lo, uint64_t hi)
{
    b->size = (uint32_t)wl_rng_range(&j->rng, lo, hi);
    b->p = malloc(b->size);
    if (!b->p)
        wl_fail("malloc(%u) returned NULL", b->size);
    b->tag = wl_rng_next(&j->rng);
    wl_tag_block(b->p, b->size, b->tag);
    j->allocations++;
    j->digest = wl_digest_add(j->digest, b->size);
}

static void free_block(block *b)
{
    if (!wl_check_block(b->p, b->size, b->tag))
        wl_fail("block %p (size %u) was corrupted while live", (void *)b->p, b->size);
    free(b->p);
}

static void *run(void *arg)
{
    job *j = arg;
    block *smalls = wl_xmalloc(sizeof(block) * (j->small ? j->small : 1));
    block *larges = wl_xmalloc(sizeof(block) * (j->large ? j->large : 1));
    uint64_t keep = j->small - j->small * g_free_pct / 100, nlarge = 0;
    j->survivors = wl_xmalloc(sizeof(block) * (keep * g_phases + 1));
    for (uint64_t ph = 0; ph < g_phases; ph++) {
        for (uint64_t i = 0; i < j->small; i++)
            alloc_block(j, &smalls[i], g_small_min, g_small_max);
        sample_rss();
        /* Shuffle (Fisher-Yates), free the front, keep the tail. */
        for (uint64_t i = j->small; i > 1; i--) {
            uint64_t k = wl_rng_below(&j->rng, i);
            block t = smalls[i - 1];
            smalls[i - 1] = smalls[k];
            smalls[k] = t;
        }
        for (uint64_t i = 0; i < j->small - keep; i++)
            free_block(&smalls[i]);
        for (uint64_t i = j->small - keep; i < j->small; i++)
            j->survivors[j->nsurvivors++] = smalls[i];
        for (uint64_t i = 0; i < nlarge; i++)
            free_block(&larges[i]);
        sample_rss();
        for (nlarge = 0; nlarge < j->large; nlarge++)
            alloc_block(j, &larges[nlarge], g_large_min, g_large_max);
        sample_rss();
    }
    for (uint64_t i = 0; i < nlarge; i++)
        free_block(&larges[i]);
    free(smalls);
    free(larges);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_param params[] = {
        {"threads", 1, 1, "independent copies, counts split between them"},
        {"phases", 4, 1, "allocate-small / free-most / allocate-large rounds"},
        {"small", 100000, 1, "small blocks allocated per phase"},
        {"small_min", 16, 1, "smallest small block"},
        {"small_max", 256, 2, "small blocks are below this"},
        {"free_pct", 90, 0, "percent of each phase's small blocks freed at once"},
        {"large", 400, 0, "large blocks allocated per phase"},
        {"large_min", 16384, 1, "smallest large block"},
        {"large_max", 65536, 2, "large blocks are below this"},
        {"seed", 42, 0, "PRNG seed"},
    };
    size_t np = WL_NPARAMS(params);
    wl_parse_args(argc, argv, "fragmentation",
                  "Scattered survivors, then large blocks: peak and final RSS.", params, np);
    long threads = (long)wl_param_get(params, np, "threads");
    g_phases = (uint64_t)wl_param_get(params, np, "phases");
    uint64_t small = (uint64_t)wl_param_get(params, np, "small");
    g_small_min = (uint64_t)wl_param_get(params, np, "small_min");
    g_small_max = (uint64_t)wl_param_get(params, np, "small_max");
    g_free_pct = (uint64_t)wl_param_get(params, np, "free_pct");
    uint64_t large = (uint64_t)wl_param_get(params, np, "large");
    g_large_min = (uint64_t)wl_param_get(params, np, "large_min");
    g_large_max = (uint64_t)wl_param_get(params, np, "large_max");
    uint64_t seed = (uint64_t)wl_param_get(params, np, "seed");
    if (g_small_max <= g_small_min || g_large_max <= g_large_min || g_large_max > UINT32_MAX ||
        g_small_max > UINT32_MAX || g_free_pct > 100)
        wl_fail("need small_min < small_max, large_min < large_max (<= 2^32-1), free_pct <= 100");

    job *jobs = wl_xmalloc(sizeof(job) * (size_t)threads);
    for (long t = 0; t < threads; t++) {
        job *j = &jobs[t];
        wl_rng_init(&j->rng, seed, (uint64_t)t);
        j->small = small / (uint64_t)threads + ((uint64_t)t < small % (uint64_t)threads);
        j->large = large / (uint64_t)threads + ((uint64_t)t < large % (uint64_t)threads);
        j->nsurvivors = j->allocations = 0;
        j->digest = WL_DIGEST_INIT;
    }
    pthread_t *th = wl_xmalloc(sizeof(pthread_t) * (size_t)threads);
    sample_rss();

    double start = wl_now(), cpu_start = wl_cpu_now();
    for (long t = 1; t < threads; t++)
        wl_thread_create(&th[t], run, &jobs[t]);
    run(&jobs[0]);
    for (long t = 1; t < threads; t++)
        wl_thread_join(th[t]);
    double seconds = wl_now() - start, cpu_seconds = wl_cpu_now() - cpu_start;

    long long final_rss = wl_current_rss_bytes();
    sample_rss();
    uint64_t operations = 0, digest = WL_DIGEST_INIT;
    for (long t = 0; t < threads; t++) {
        job *j = &jobs[t];
        operations += j->allocations;
        digest = wl_digest_add(digest, j->digest);
        for (uint64_t i = 0; i < j->nsurvivors; i++)
            free_block(&j->survivors[i]);
        free(j->survivors);
    }
    free(jobs);
    free(th);

    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digest);
    wl_extra extras[] = {
        {"cpu_seconds", cpu_seconds, 0, NULL},
        {"peak_rss_bytes", (double)g_peak_rss, 1, NULL},
        {"final_rss_bytes", (double)final_rss, 1, NULL},
        {"digest", 0, 0, hex},
    };
    wl_report("fragmentation", params, np, operations, seconds, extras, WL_NPARAMS(extras));
    return 0;
}
