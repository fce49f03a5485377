/* xmalloc: producer/consumer allocation, after Lever & Boreham's
 * xmalloc-test ("malloc() Performance in a Multithreaded Linux
 * Environment", USENIX 2000). Producer threads allocate batches of `batch`
 * blocks with sizes in [min, max), tag them, and queue each batch (itself a
 * heap block) to a consumer thread, which checks and frees every block. All
 * frees are remote. threads=1 produces and consumes alternately in one
 * thread. `ops` counts blocks allocated (and freed) in total. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct item {
    unsigned char *p;
    uint32_t size;
    uint64_t tag;
} item;

typedef struct batch {
    uint32_t n;
    item items[];
} batch;

typedef struct producer {
    long index;
    uint64_t blocks;    /* this producer's share of ops */
    wl_rng rng;
    uint64_t digest;
} producer;

static uint64_t g_min, g_max, g_batch;
static long g_producers, g_consumers;
static wl_queue *g_queues; /* one per consumer */

static batch *produce(producer *pr, uint64_t n)
{
    batch *b = malloc(sizeof(batch) + n * sizeof(item));
    if (!b)
        wl_fail("malloc of a batch returned NULL");
    b->n = (uint32_t)n;
    uint64_t d = WL_DIGEST_INIT;
    for (uint64_t i = 0; i < n; i++) {
        item *it = &b->items[i];
        it->size = (uint32_t)wl_rng_range(&pr->rng, g_min, g_max);
        it->p = malloc(it->size);
        if (!it->p)
            wl_fail("malloc(%u) returned NULL", it->size);
        it->tag = wl_rng_next(&pr->rng);
        wl_tag_block(it->p, it->size, it->tag);
        d = wl_digest_add(d, it->size);
    }
    pr->digest += d; /* a sum: independent of which consumer frees what when */
    return b;
}

static void consume(batch *b)
{
    for (uint32_t i = 0; i < b->n; i++) {
        item *it = &b->items[i];
        if (!wl_check_block(it->p, it->size, it->tag))
            wl_fail("block %p (size %u) was corrupted between producer and consumer",
                    (void *)it->p, it->size);
        free(it->p);
    }
    free(b);
}

static void *producer_thread(void *arg)
{
    producer *pr = arg;
    uint64_t done = 0, k = 0;
    while (done < pr->blocks) {
        uint64_t n = pr->blocks - done < g_batch ? pr->blocks - done : g_batch;
        wl_queue_push(&g_queues[(pr->index + k++) % g_consumers], produce(pr, n));
        done += n;
    }
    return NULL;
}

static void *consumer_thread(void *arg)
{
    wl_queue *q = arg;
    batch *b;
    while ((b = wl_queue_pop(q)) != NULL)
        consume(b);
    return NULL;
}

int main(int argc, char **argv)
{
    wl_param params[] = {
        {"threads", 2, 1, "total threads: (threads+1)/2 producers, threads/2 consumers"},
        {"ops", 5000000, 1, "blocks allocated by producers and freed by consumers"},
        {"batch", 64, 1, "blocks per batch handed over"},
        {"min", 8, 1, "smallest block size in bytes"},
        {"max", 256, 2, "block sizes are below this"},
        {"seed", 42, 0, "PRNG seed"},
    };
    size_t np = WL_NPARAMS(params);
    wl_parse_args(argc, argv, "xmalloc", "Producers allocate batches, consumers free them.",
                  params, np);
    long threads = (long)wl_param_get(params, np, "threads");
    uint64_t ops = (uint64_t)wl_param_get(params, np, "ops");
    g_batch = (uint64_t)wl_param_get(params, np, "batch");
    g_min = (uint64_t)wl_param_get(params, np, "min");
    g_max = (uint64_t)wl_param_get(params, np, "max");
    uint64_t seed = (uint64_t)wl_param_get(params, np, "seed");
    if (g_max <= g_min || g_max > UINT32_MAX || g_batch > UINT32_MAX)
        wl_fail("need min < max <= 2^32-1 and batch <= 2^32-1");
    g_producers = threads == 1 ? 1 : (threads + 1) / 2;
    g_consumers = threads == 1 ? 1 : threads / 2;

    g_queues = wl_xmalloc(sizeof(wl_queue) * (size_t)g_consumers);
    for (long c = 0; c < g_consumers; c++) /* bounded: memory in flight stays small */
        wl_queue_init(&g_queues[c], (size_t)(4 * g_producers));
    producer *prods = wl_xmalloc(sizeof(producer) * (size_t)g_producers);
    for (long p = 0; p < g_producers; p++) {
        prods[p].index = p;
        prods[p].blocks = ops / (uint64_t)g_producers + ((uint64_t)p < ops % (uint64_t)g_producers);
        wl_rng_init(&prods[p].rng, seed, (uint64_t)p);
        prods[p].digest = 0;
    }

    double start = wl_now(), cpu_start = wl_cpu_now();
    if (threads == 1) {
        uint64_t done = 0;
        while (done < prods[0].blocks) {
            uint64_t n = prods[0].blocks - done < g_batch ? prods[0].blocks - done : g_batch;
            consume(produce(&prods[0], n));
            done += n;
        }
    } else {
        pthread_t *pt = wl_xmalloc(sizeof(pthread_t) * (size_t)g_producers);
        pthread_t *ct = wl_xmalloc(sizeof(pthread_t) * (size_t)g_consumers);
        for (long c = 0; c < g_consumers; c++)
            wl_thread_create(&ct[c], consumer_thread, &g_queues[c]);
        for (long p = 0; p < g_producers; p++)
            wl_thread_create(&pt[p], producer_thread, &prods[p]);
        for (long p = 0; p < g_producers; p++)
            wl_thread_join(pt[p]);
        for (long c = 0; c < g_consumers; c++)
            wl_queue_push(&g_queues[c], NULL);
        for (long c = 0; c < g_consumers; c++)
            wl_thread_join(ct[c]);
        free(pt);
        free(ct);
    }
    double seconds = wl_now() - start, cpu_seconds = wl_cpu_now() - cpu_start;

    uint64_t digest = WL_DIGEST_INIT;
    for (long p = 0; p < g_producers; p++)
        digest = wl_digest_add(digest, prods[p].digest);
    for (long c = 0; c < g_consumers; c++)
        wl_queue_destroy(&g_queues[c]);
    free(g_queues);
    free(prods);

    char hex[17];
    snprintf(hex, sizeof hex, "%016llx", (unsigned long long)digest);
    wl_extra extras[] = {{"cpu_seconds", cpu_seconds, 0, NULL}, {"digest", 0, 0, hex}};
    wl_report("xmalloc", params, np, ops, seconds, extras, WL_NPARAMS(extras));
    return 0;
}
