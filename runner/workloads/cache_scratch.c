/* cache-scratch: passive false sharing, after Berger et al.'s cache-scratch
 * benchmark (Hoard, ASPLOS 2000). The main thread allocates one small object
 * per thread, back to back, and hands object t to thread t. Each thread
 * writes its object `repetitions` times and frees it, then repeats
 * (allocate an object of `objsize` bytes, write it `repetitions` times,
 * free it) for its share of `iterations`. An allocator that gives threads
 * pieces of the same cache line (by reusing the freed, adjacent objects)
 * makes the writes ping-pong between cores. `iterations` is the total over
 * all threads (the operations), so the work is fixed as threads vary. */
#include "common.h"

#include <stdio.h>
#include <stdlib.h>

typedef struct worker {
    unsigned char *object;  /* handed over by main */
    uint64_t iterations;
    wl_rng rng;
} worker;

static uint64_t g_objsize, g_reps;

static void scribble(worker *w, unsigned char *obj)
{
    unsigned char base = (unsigned char)wl_rng_next(&w->rng);
    for (uint64_t r = 0; r < g_reps; r++) {
        for (uint64_t k = 0; k < g_objsize; k++) {
            obj[k] = (unsigned char)(base + r + k);
            volatile unsigned char ch = obj[k];
            ch++;
            (void)ch;
        }
    }
    for (uint64_t k = 0; k < g_objsize; k++)
        if (obj[k] != (unsigned char)(base + g_reps - 1 + k))
            wl_fail("object %p byte %llu changed under its writer", (void *)obj,
                    (unsigned long long)k);
}

static void *worker_thread(void *arg)
{
    worker *w = arg;
    scribble(w, w->object);
    free(w->object);
    for (uint64_t i = 0; i < w->iterations; i++) {
        unsigned char *obj = malloc(g_objsize);
        if (!obj)
            wl_fail("malloc(%llu) returned NULL", (unsigned long long)g_objsize);
        scribble(w, obj);
        free(obj);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    wl_param params[] = {
        {"threads", 2, 1, "worker threads"},
        {"iterations", 1000, 1, "objects allocated, written and freed, over all threads"},
        {"objsize", 8, 1, "object size in bytes"},
        {"repetitions", 20000, 1, "times each object is written in full"},
        {"seed", 42, 0, "PRNG seed (the values written)"},
    };
    size_t np = WL_NPARAMS(params);
    wl_parse_args(argc, argv, "cache-scratch", "Passive false sharing (Hoard's cache-scratch).",
                  params, np);
    long threads = (long)wl_param_get(params, np, "threads");
    uint64_t iterations = (uint64_t)wl_param_get(params, np, "iterations");
    g_objsize = (uint64_t)wl_param_get(params, np, "objsize");
    g_reps = (uint64_t)wl_param_get(params, np, "repetitions");
    uint64_t seed = (uint64_t)wl_param_get(params, np, "seed");

    worker *w = wl_xmalloc(sizeof(worker) * (size_t)threads);
    pthread_t *th = wl_xmalloc(sizeof(pthread_t) * (size_t)threads);
    for (long t = 0; t < threads; t++) { /* back to back: likely one cache line */
        w[t].object = wl_xmalloc(g_objsize);
        w[t].iterations = iterations / (uint64_t)threads + ((uint64_t)t < iterations % (uint64_t)threads);
        wl_rng_init(&w[t].rng, seed, (uint64_t)t);
    }

    double start = wl_now(), cpu_start = wl_cpu_now();
    for (long t = 0; t < threads; t++)
        wl_thread_create(&th[t], worker_thread, &w[t]);
    for (long t = 0; t < threads; t++)
        wl_thread_join(th[t]);
    double seconds = wl_now() - start, cpu_seconds = wl_cpu_now() - cpu_start;
    free(w);
    free(th);

    wl_extra extras[] = {{"cpu_seconds", cpu_seconds, 0, NULL}};
    wl_report("cache-scratch", params, np, iterations, seconds, extras, WL_NPARAMS(extras));
    return 0;
}
