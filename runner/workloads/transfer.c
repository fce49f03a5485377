/* transfer: the transfer-cache microbenchmark, after TCMalloc's
 * BM_CrossThread/BM_Draining (transfer_cache_benchmark.cc: threads remove a
 * batch from one cache and insert it into another), driven through
 * malloc/free so that every allocator can run it. Threads run in pairs: the
 * first of a pair mallocs trays of `batch` blocks of `size` bytes, tags them
 * and hands each tray to the second, which checks and frees every block.
 * The producer's mallocs keep emptying its thread cache of that size (its
 * bin), which refills from the allocator's shared cache (Mallard's transfer
 * cache); the consumer's frees keep overflowing its bin into that cache. On
 * Mallard every 32 blocks of 64 B .. 2 KiB (one transfer batch) are one
 * transfer-cache remove on the producer and one insert on the consumer, at
 * every thread count: the shared cache is the only way between the two.
 * An odd last thread (and threads=1) pairs with itself: it mallocs `depth`
 * trays, then frees them, so its blocks pass through the shared cache when
 * depth x batch exceeds its bin (on Mallard 32 blocks of 1 KiB at first,
 * growing to 128 while the thread cycles its own bursts; 128 of 64 B).
 * With two or more threads and the defaults (1 KiB, 32 a tray) every tray
 * is exactly one Mallard batch: one transfer remove and one insert. Trays
 * travel through a bounded queue per consumer (`depth` trays) and are
 * preallocated (no malloc of another size). `ops` counts blocks moved (one
 * malloc + one remote free each). */
#include "common.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define MAX_THREADS 64

typedef struct tray {
    atomic_int busy;          /* 1 from handing over until the partner freed it */
    uint32_t n;
    unsigned char **p;        /* [batch] */
    uint64_t *tag;            /* [batch] */
} tray;

typedef struct worker {
    long index, partner;      /* partner == index: pairs with itself */
    uint64_t blocks;          /* blocks this thread mallocs (producers) */
    uint64_t trays_in;        /* trays its partner hands over (consumers) */
    wl_rng rng;
    uint64_t digest;
    tray *pool;               /* depth + 2 trays, reused in turn (producers) */
    wl_queue inbox;           /* trays handed to this thread (consumers) */
} worker;

static uint64_t g_size, g_batch, g_depth;
static long g_threads;
static worker *g_workers;

static uint64_t trays_for(uint64_t blocks) { return (blocks + g_batch - 1) / g_batch; }

/* malloc a tray's blocks: on Mallard the bin empties, so this refills from
 * the transfer cache */
static tray *produce(worker *w, uint64_t round, uint64_t n)
{
    tray *t = &w->pool[round % (g_depth + 2)];
    /* at most depth trays queued + one being freed: this one is done; the
     * acquire pairs with the partner's release after its frees */
    while (atomic_load_explicit(&t->busy, memory_order_acquire))
        sched_yield();
    t->n = (uint32_t)n;
    uint64_t d = WL_DIGEST_INIT;
    for (uint64_t i = 0; i < n; i++) {
        t->p[i] = malloc(g_size);
        if (!t->p[i])
            wl_fail("malloc(%llu) returned NULL", (unsigned long long)g_size);
        t->tag[i] = wl_rng_next(&w->rng);
        wl_tag_block(t->p[i], g_size, t->tag[i]);
        d = wl_digest_add(d, t->tag[i]);
    }
    w->digest += d; /* a sum: independent of the order trays are freed in */
    atomic_store_explicit(&t->busy, 1, memory_order_relaxed);
    return t;
}

/* free the partner's blocks: on Mallard the bin overflows into the transfer cache */
static void consume(tray *t)
{
    for (uint32_t i = 0; i < t->n; i++) {
        if (!wl_check_block(t->p[i], g_size, t->tag[i]))
            wl_fail("block %p (size %llu) was corrupted between the threads of a pair",
                    (void *)t->p[i], (unsigned long long)g_size);
        free(t->p[i]);
    }
    atomic_store_explicit(&t->busy, 0, memory_order_release);
}

static void *producer_thread(void *arg)
{
    worker *w = arg;
    worker *partner = &g_workers[w->partner];
    uint64_t done = 0, round = 0;
    while (done < w->blocks) {
        uint64_t n = w->blocks - done < g_batch ? w->blocks - done : g_batch;
        wl_queue_push(&partner->inbox, produce(w, round++, n));
        done += n;
    }
    return NULL;
}

static void *consumer_thread(void *arg)
{
    worker *w = arg;
    for (uint64_t k = 0; k < w->trays_in; k++)
        consume(wl_queue_pop(&w->inbox));
    return NULL;
}

/* A thread paired with itself: `depth` trays out, then all of them back. */
static void *alone_thread(void *arg)
{
    worker *w = arg;
    uint64_t done = 0, round = 0;
    tray *out[1024];
    while (done < w->blocks) {
        uint64_t k = 0;
        for (; k < g_depth && done < w->blocks; k++) {
            uint64_t n = w->blocks - done < g_batch ? w->blocks - done : g_batch;
            out[k] = produce(w, round++, n);
            done += n;
        }
        for (uint64_t i = 0; i < k; i++)
            consume(out[i]);
    }
    return NULL;
}

/* A thread's part: the producer (even) or consumer (odd) of its pair, or both
 * when it pairs with itself. */
static void *pair_thread(void *arg)
{
    worker *w = arg;
    if (w->partner == w->index)
        return alone_thread(w);
    return w->index % 2 ? consumer_thread(w) : producer_thread(w);
}

static wl_param params[] = {
    {"threads", 2, 1, "threads, in pairs (an odd last one pairs with itself); at most 64"},
    {"ops", 2000000, 1, "blocks moved in total (each: one malloc, one remote free)"},
    {"batch", 32, 1, "blocks per tray handed to the partner"},
    {"size", 1024, 1, "block size in bytes (one size class)"},
    {"depth", 4, 2, "trays queued per consumer at most"},
    {"seed", 42, 0, "PRNG seed (block tags)"},
};

int main(int argc, char **argv)
{
    wl_run r = WL_RUN("transfer",
                      "Thread pairs: one mallocs trays of blocks, the other frees them; the "
                      "mallocs drain the shared cache, the frees refill it.",
                      params);
    wl_start(&r, argc, argv);
    g_threads = (long)wl_opt(&r, "threads");
    uint64_t ops = (uint64_t)wl_opt(&r, "ops");
    g_batch = (uint64_t)wl_opt(&r, "batch");
    g_size = (uint64_t)wl_opt(&r, "size");
    g_depth = (uint64_t)wl_opt(&r, "depth");
    uint64_t seed = (uint64_t)wl_opt(&r, "seed");
    if (g_threads > MAX_THREADS) {
        fprintf(stderr, "transfer: --threads %ld: at most %d\n", g_threads, MAX_THREADS);
        return 2;
    }
    if (g_batch > 4096 || g_size > (1u << 20) || g_depth > 1024) {
        fprintf(stderr, "transfer: need batch <= 4096, size <= 1 MiB, depth <= 1024\n");
        return 2;
    }

    long producers = (g_threads + 1) / 2;
    g_workers = wl_xmalloc(sizeof(worker) * (size_t)g_threads);
    for (long t = 0; t < g_threads; t++) {
        worker *w = &g_workers[t];
        w->index = t;
        w->partner = (t ^ 1) < g_threads ? (t ^ 1) : t;
        /* ops split over the producers (the first thread of each pair) */
        w->blocks = t % 2 == 0 ? wl_share(ops, (uint64_t)producers, (uint64_t)(t / 2)) : 0;
        w->digest = 0;
        wl_rng_init(&w->rng, seed, (uint64_t)t);
        wl_queue_init(&w->inbox, (size_t)g_depth);
        w->pool = wl_xmalloc(sizeof(tray) * (size_t)(g_depth + 2));
        for (uint64_t k = 0; k < g_depth + 2; k++) {
            atomic_init(&w->pool[k].busy, 0);
            w->pool[k].p = wl_xmalloc(sizeof(unsigned char *) * (size_t)g_batch);
            w->pool[k].tag = wl_xmalloc(sizeof(uint64_t) * (size_t)g_batch);
        }
    }
    for (long t = 1; t < g_threads; t += 2)
        g_workers[t].trays_in = trays_for(g_workers[t - 1].blocks);

    pthread_t ids[MAX_THREADS];
    wl_threads th = {pair_thread, g_workers, sizeof(worker), g_threads, ids};
    wl_time_threads(&r, &th, 0);

    uint64_t digest = WL_DIGEST_INIT;
    for (long t = 0; t < g_threads; t++) {
        worker *w = &g_workers[t];
        digest = wl_digest_add(digest, w->digest);
        wl_queue_destroy(&w->inbox);
        for (uint64_t k = 0; k < g_depth + 2; k++) {
            free(w->pool[k].p);
            free(w->pool[k].tag);
        }
        free(w->pool);
    }
    free(g_workers);

    wl_extra extras[] = {WL_EXTRA_DIGEST("digest", digest), WL_EXTRA_COUNT("pairs", producers)};
    wl_finish(&r, ops, extras, WL_NPARAMS(extras));
    return 0;
}
