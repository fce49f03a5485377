/* common.h: what every Mallard workload shares: --key value parameters,
 * a per-thread PRNG (splitmix64-seeded xorshift64*), monotonic timing,
 * getrusage/statm memory readings, block tagging for content checks, a
 * bounded blocking queue, and the one-line JSON result (docs/contracts.md §1). */
#ifndef MALLARD_WORKLOAD_COMMON_H
#define MALLARD_WORKLOAD_COMMON_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- parameters ------------------------------------------------------- */

typedef struct wl_param {
    const char *name;
    long long value;   /* default, replaced by --name value */
    long long min;     /* smallest accepted value */
    const char *help;
} wl_param;

/* Parses argv (--key value or --key=value, --help). Exits 2 on a bad
 * argument and 0 after --help. */
void wl_parse_args(int argc, char **argv, const char *workload, const char *about,
                   wl_param *params, size_t nparams);
/* The value of a parameter by name; aborts on a name not in the table. */
long long wl_param_get(const wl_param *params, size_t nparams, const char *name);
#define WL_NPARAMS(a) (sizeof(a) / sizeof((a)[0]))

/* ---- PRNG ------------------------------------------------------------- */

typedef struct wl_rng { uint64_t s; } wl_rng;

uint64_t wl_splitmix64(uint64_t *state);
/* A generator for stream `stream` (thread index, slice index...) of `seed`. */
void wl_rng_init(wl_rng *r, uint64_t seed, uint64_t stream);
static inline uint64_t wl_rng_next(wl_rng *r)
{
    uint64_t x = r->s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    r->s = x;
    return x * 0x2545F4914F6CDD1DULL;
}
/* Uniform in [0, n) (n > 0). */
static inline uint64_t wl_rng_below(wl_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)wl_rng_next(r) * n) >> 64);
}
/* Uniform in [lo, hi) (hi > lo), or lo when hi <= lo. */
static inline uint64_t wl_rng_range(wl_rng *r, uint64_t lo, uint64_t hi)
{
    return hi > lo ? lo + wl_rng_below(r, hi - lo) : lo;
}

/* A running digest of the operation sequence (FNV-style over 64-bit words):
 * reported as the string key "digest" so that runs can be compared. */
static inline uint64_t wl_digest_add(uint64_t d, uint64_t v)
{
    d = (d ^ v) * 0x100000001b3ULL;
    return d ^ (d >> 29);
}
#define WL_DIGEST_INIT 0xcbf29ce484222325ULL

/* ---- block contents ---------------------------------------------------- */

/* Writes a tag into the first (up to 8) and the last byte of a block. */
void wl_tag_block(void *p, size_t size, uint64_t tag);
/* 1 when the block still holds what wl_tag_block wrote. */
int wl_check_block(const void *p, size_t size, uint64_t tag);

/* ---- time and memory ------------------------------------------------- */

double wl_now(void);                 /* CLOCK_MONOTONIC seconds */
/* CPU seconds of the whole process (CLOCK_PROCESS_CPUTIME_ID): over the measured phase
 * it is the time the workload itself ran, whoever else shared its CPU (`cpu_seconds`) */
double wl_cpu_now(void);
long long wl_max_rss_bytes(void);    /* getrusage(RUSAGE_SELF) ru_maxrss * 1024 */
long long wl_current_rss_bytes(void);/* /proc/self/statm resident * page size */

/* ---- errors ---------------------------------------------------------- */

/* Prints "workload: message" on stderr and exits 1 (an invalid run). */
void wl_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
void *wl_xmalloc(size_t size);       /* malloc or wl_fail */
void wl_thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
void wl_thread_join(pthread_t t);

/* ---- bounded blocking queue (mutex + condvars) ------------------------ */

typedef struct wl_queue {
    pthread_mutex_t lock;
    pthread_cond_t not_empty, not_full;
    void **items;
    size_t cap, head, count;
} wl_queue;

void wl_queue_init(wl_queue *q, size_t cap);
void wl_queue_destroy(wl_queue *q);
void wl_queue_push(wl_queue *q, void *item);      /* blocks while full */
void *wl_queue_pop(wl_queue *q);                  /* blocks while empty */
int wl_queue_try_pop(wl_queue *q, void **item);   /* 1 if an item was taken */

/* ---- result line ------------------------------------------------------ */

typedef struct wl_extra {
    const char *name;
    double value;      /* numeric extra (becomes a measure) */
    int integer;       /* print value as an integer */
    const char *text;  /* when not NULL: a string extra instead of value */
} wl_extra;

/* Prints the one JSON result line on stdout (contract §1) and flushes. */
void wl_report(const char *workload, const wl_param *params, size_t nparams,
               unsigned long long operations, double seconds,
               const wl_extra *extras, size_t nextras);

#endif
