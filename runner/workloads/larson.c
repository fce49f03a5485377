/* larson: the Larson & Krishnan server workload ("Memory allocation for
 * long-running server applications", ISMM 1998), as in Hoard's larson.cpp.
 * Each of `threads` slices holds `blocks` live blocks of sizes in [min, max).
 * A step frees a random slot of the slice and allocates a new block of a
 * random size there. After `rounds` steps a thread hands its slice back and
 * exits; main joins it and hands the slice to a freshly created thread, so
 * later generations free blocks that dead threads allocated. Generations
 * continue until `ops` steps are done across all slices. The slices are
 * filled by the main thread, untimed.
 *
 * Hoard's larson has each thread create its successor before it exits. Then
 * whether the successor starts allocating before its creator has finished
 * exiting (the allocator's thread-exit hook: heap abandoned, arena returned)
 * is up to the scheduler, and it changes what the allocator does: between
 * runs, 2 to 36 generations were alive at once and instruction counts under
 * valgrind moved by up to 10% (runner/README.md). Joining first (`handoff`
 * 0) makes the hand-over the same in every run: exactly `threads` generations
 * alive, what the deterministic counts need. `handoff` 1 is Hoard's (and
 * mimalloc-bench's): the finishing thread creates its successor (detached)
 * and exits, so the successor frees its predecessor's blocks while that
 * thread's exit hook runs and after it is gone: the server pattern the
 * standard larson is quoted for. */
#include "common.h"

#include <stdlib.h>

typedef struct slot {
    unsigned char *p;
    uint32_t size;
    uint64_t tag;
} slot;

typedef struct slice {
    slot *slots;
    size_t nblocks;
    wl_rng rng;
    uint64_t remaining;  /* steps this slice still has to do */
    uint64_t digest;
    uint64_t generations;
    pthread_t thread;    /* the generation working on it (set by main) */
} slice;

static uint64_t g_min, g_max, g_rounds, g_handoff;
/* Finished generations post their slice here; main joins the thread and
 * starts the slice's next generation. */
static wl_queue g_reap;

static void new_block(slice *s, slot *sl)
{
    uint32_t size = (uint32_t)wl_rng_range(&s->rng, g_min, g_max);
    unsigned char *p = malloc(size);
    if (!p)
        wl_fail("malloc(%u) returned NULL", size);
    sl->p = p;
    sl->size = size;
    sl->tag = wl_rng_next(&s->rng);
    wl_tag_block(p, size, sl->tag);
    s->digest = wl_digest_add(s->digest, size);
}

static void free_block(slot *sl)
{
    if (!wl_check_block(sl->p, sl->size, sl->tag))
        wl_fail("block %p (size %u) was corrupted while live", (void *)sl->p, sl->size);
    free(sl->p);
}

static void *generation(void *arg)
{
    slice *s = arg;
    uint64_t steps = s->remaining < g_rounds ? s->remaining : g_rounds;
    for (uint64_t i = 0; i < steps; i++) {
        size_t victim = (size_t)wl_rng_below(&s->rng, s->nblocks);
        free_block(&s->slots[victim]);
        new_block(s, &s->slots[victim]);
        s->digest = wl_digest_add(s->digest, victim);
    }
    s->remaining -= steps;
    s->generations++;
    if (g_handoff && s->remaining) { /* Hoard's: the successor starts as this one exits */
        pthread_t next;
        wl_thread_create(&next, generation, s);
        pthread_detach(next);
        return NULL;
    }
    wl_queue_push(&g_reap, s);
    return NULL;
}

static wl_param params[] = {
    {"threads", 2, 1, "concurrent threads (one slice each)"},
    {"min", 8, 1, "smallest block size in bytes"},
    {"max", 1000, 2, "block sizes are below this"},
    {"blocks", 5000, 1, "live blocks per slice"},
    {"rounds", 10000, 1, "steps a thread does before handing its slice to a new thread"},
    {"ops", 5000000, 1, "total steps (free + malloc) across all threads"},
    {"seed", 42, 0, "PRNG seed"},
    {"handoff", 0, 0, "0: main joins a thread, then starts its successor; 1: a thread starts its own successor as it exits (Hoard's)"},
};

int main(int argc, char **argv)
{
    wl_run run = WL_RUN("larson", "Larson & Krishnan server workload with thread churn.", params);
    wl_start(&run, argc, argv);
    long threads = (long)wl_opt(&run, "threads");
    g_min = (uint64_t)wl_opt(&run, "min");
    g_max = (uint64_t)wl_opt(&run, "max");
    size_t blocks = (size_t)wl_opt(&run, "blocks");
    g_rounds = (uint64_t)wl_opt(&run, "rounds");
    uint64_t ops = (uint64_t)wl_opt(&run, "ops");
    uint64_t seed = (uint64_t)wl_opt(&run, "seed");
    g_handoff = (uint64_t)wl_opt(&run, "handoff");
    if (g_max <= g_min || g_max > UINT32_MAX)
        wl_fail("need min < max <= 2^32-1 (min %llu, max %llu)", (unsigned long long)g_min,
                (unsigned long long)g_max);

    slice *slices = wl_xmalloc(sizeof(slice) * (size_t)threads);
    for (long t = 0; t < threads; t++) {
        slice *s = &slices[t];
        s->slots = wl_xmalloc(sizeof(slot) * blocks);
        s->nblocks = blocks;
        wl_rng_init(&s->rng, seed, (uint64_t)t);
        s->remaining = wl_share(ops, (uint64_t)threads, (uint64_t)t);
        s->digest = WL_DIGEST_INIT;
        s->generations = 0;
        for (size_t i = 0; i < blocks; i++)
            new_block(s, &s->slots[i]);
    }

    uint64_t expected = 0; /* threads main joins: all generations, or (handoff) the first */
    for (long t = 0; t < threads; t++)
        expected += g_handoff ? (slices[t].remaining > 0)
                              : (slices[t].remaining + g_rounds - 1) / g_rounds;
    /* One entry per slice is ever queued: a finished thread never blocks on a
     * full reap queue (alive, holding its allocator state). */
    wl_queue_init(&g_reap, (size_t)threads + 1);

    /* the thread churn is the work: its own shape, timed around it */
    wl_timer_start(&run);
    for (long t = 0; t < threads; t++) {
        if (slices[t].remaining == 0)
            continue;
        wl_thread_create(&slices[t].thread, generation, &slices[t]);
        if (g_handoff) /* its generations run on by themselves; the last one posts it */
            pthread_detach(slices[t].thread);
    }
    for (uint64_t i = 0; i < expected; i++) {
        slice *s = wl_queue_pop(&g_reap);
        if (g_handoff)
            continue;
        wl_thread_join(s->thread);
        if (s->remaining)
            wl_thread_create(&s->thread, generation, s);
    }
    wl_timer_stop(&run);
    wl_queue_destroy(&g_reap);

    uint64_t digest = WL_DIGEST_INIT, generations = 0;
    for (long t = 0; t < threads; t++) {
        slice *s = &slices[t];
        digest = wl_digest_add(digest, s->digest);
        generations += s->generations;
        for (size_t i = 0; i < s->nblocks; i++)
            free_block(&s->slots[i]);
        free(s->slots);
    }
    free(slices);

    wl_extra extras[] = {
        WL_EXTRA_COUNT("thread_generations", generations),
        WL_EXTRA_DIGEST("digest", digest),
    };
    wl_finish(&run, ops, extras, WL_NPARAMS(extras));
    return 0;
}
