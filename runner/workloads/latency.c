/* latency.c: libmallard_latency.so, the latency shim. Preloaded before the allocator under
 * test (LD_PRELOAD="libmallard_latency.so <allocator>"), it interposes malloc and free,
 * forwards every call to the next definition (the allocator's, or libc's), and times one
 * call in MALLARD_LATENCY_EVERY (a power of two, default 64) per thread with
 * clock_gettime(CLOCK_MONOTONIC), minus the clock's own cost measured at start. The
 * timings go into log-linear buckets (latency.h), written at exit as JSON to
 * MALLARD_LATENCY_FILE (%p: the process id).
 *
 * Off means not preloaded: a trial that did not ask for latency runs exactly the command
 * it ran before (docs/timelines.md states the cost when on, in instructions). Only malloc
 * and free are wrapped: calloc, realloc and the aligned calls go straight to the
 * allocator, which also owns what they return. A forked child starts its histogram
 * empty. */
#define _GNU_SOURCE
#include "latency.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static void *(*next_malloc)(size_t);
static void (*next_free)(void *);
static lat_hist hist;
static uint32_t mask = 63;
static uint64_t clock_cost;
static const char *out_path;
static _Atomic int recording;
/* a count per call and thread: with one shared count, calls that alternate would always
 * sample the same one */
static __thread uint32_t tick[LAT_CALLS] __attribute__((tls_model("initial-exec")));

/* dlsym may allocate before next_malloc is known: a small arena that is never freed */
static char boot[4096] __attribute__((aligned(16)));
static size_t boot_used;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void resolve(void)
{
    static _Atomic int resolving;
    if (atomic_exchange(&resolving, 1))
        return;
    next_free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
    next_malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
}

static void *boot_malloc(size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (boot_used + n > sizeof boot)
        return NULL;
    void *p = boot + boot_used;
    boot_used += n;
    return p;
}

/* a forked child counts its own calls only (its file is named by its own pid) */
static void lat_forked(void)
{
    memset(&hist, 0, sizeof hist);
}

__attribute__((constructor)) static void lat_start(void)
{
    if (next_malloc == NULL)
        resolve();
    pthread_atfork(NULL, NULL, lat_forked);
    const char *every = getenv("MALLARD_LATENCY_EVERY");
    if (every != NULL) {
        unsigned long v = strtoul(every, NULL, 10);
        if (v >= 1 && v <= (1u << 20) && (v & (v - 1)) == 0)
            mask = (uint32_t)v - 1;
    }
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 64; i++) {
        uint64_t t0 = now_ns(), t1 = now_ns();
        if (t1 - t0 < best)
            best = t1 - t0;
    }
    clock_cost = best;
    out_path = getenv("MALLARD_LATENCY_FILE");
    atomic_store(&recording, out_path != NULL);
}

__attribute__((destructor)) static void lat_stop(void)
{
    if (atomic_exchange(&recording, 0))
        lat_write(&hist, mask + 1, out_path);
}

static inline void record(int call, uint64_t t0, uint64_t t1)
{
    uint64_t ns = t1 - t0;
    lat_record(&hist, call, ns > clock_cost ? ns - clock_cost : 0);
}

/* The slow paths, out of line so that the fast ones save no registers: the call that is
 * timed, a call before the next allocator is known, and (free) a block of the boot arena. */
__attribute__((noinline)) static void *malloc_slow(size_t n)
{
    if (next_malloc == NULL) {
        resolve();
        if (next_malloc == NULL)
            return boot_malloc(n);
    }
    if (!recording)
        return next_malloc(n);
    uint64_t t0 = now_ns();
    void *p = next_malloc(n);
    record(LAT_MALLOC, t0, now_ns());
    return p;
}

__attribute__((noinline)) static void free_slow(void *p)
{
    if ((char *)p >= boot && (char *)p < boot + sizeof boot)
        return;
    if (next_free == NULL) {
        resolve();
        if (next_free == NULL)
            return;
    }
    if (!recording) {
        next_free(p);
        return;
    }
    uint64_t t0 = now_ns();
    next_free(p);
    record(LAT_FREE, t0, now_ns());
}

static int in_boot(const void *p)
{
    return (const char *)p >= boot && (const char *)p < boot + sizeof boot;
}

void *malloc(size_t n)
{
    void *(*next)(size_t) = next_malloc;
    if (__builtin_expect(next != NULL && (++tick[LAT_MALLOC] & mask) != 0, 1))
        return next(n);
    return malloc_slow(n);
}

void free(void *p)
{
    void (*next)(void *) = next_free;
    if (__builtin_expect(next != NULL && (++tick[LAT_FREE] & mask) != 0 && !in_boot(p), 1)) {
        next(p);
        return;
    }
    free_slow(p);
}
