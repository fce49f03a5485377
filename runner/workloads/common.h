/* common.h: what every Mallard workload shares. The harness every main goes
 * through (wl_run: its options table parsed from --key value arguments, its
 * threads started, timed and joined, the one-line JSON result of
 * docs/contracts.md §1), a per-thread PRNG (splitmix64-seeded xorshift64*),
 * getrusage/statm memory readings, block tagging for content checks and a
 * bounded blocking queue. A workload file keeps only its own work. */
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

/* ---- the harness: options, threads, timing, the result line ----------- */

/* One run of a workload: its name (as in the result line), its options table
 * and the seconds its timed section took. A main declares one with WL_RUN,
 * parses its arguments with wl_start, times its work with one of the
 * wl_time_* runners (or wl_timer_start/stop around work of its own shape) and
 * ends with wl_finish. */
typedef struct wl_run {
    const char *name;
    const char *about;   /* one line for --help */
    wl_param *params;    /* the options table: --name value replaces a default */
    size_t nparams;
    double started, seconds;         /* wall clock of the timed section */
    double cpu_started, cpu_seconds; /* the process's CPU time over it (`cpu_seconds`) */
} wl_run;

#define WL_RUN(name, about, params) \
    {(name), (about), (params), WL_NPARAMS(params), 0, 0, 0, 0}

/* Parses argv into the run's options table (exits 2 on a bad argument, 0
 * after --help). */
void wl_start(wl_run *r, int argc, char **argv);
/* The value of an option by name; aborts on a name not in the table. */
long long wl_opt(const wl_run *r, const char *name);
/* `total` split over `n` parts: part i's share (the first total % n get one more). */
static inline uint64_t wl_share(uint64_t total, uint64_t n, uint64_t i)
{
    return total / n + (i < total % n);
}

void wl_timer_start(wl_run *r);
void wl_timer_stop(wl_run *r);

/* A group of threads: thread i runs fn(args + i * size). `ids` is allocated by
 * wl_threads_new where the workload wants it (allocations are part of what an
 * allocator is measured on: their order stays the workload's choice). */
typedef struct wl_threads {
    void *(*fn)(void *);
    void *args;
    size_t size;
    long n;
    pthread_t *ids;
} wl_threads;

wl_threads wl_threads_new(void *(*fn)(void *), void *args, size_t size, long n);
void wl_threads_free(wl_threads *g);
void wl_threads_start(wl_threads *g, long first);  /* threads first..n-1 */
void wl_threads_join(wl_threads *g, long first);

/* Times fn(arg) on the main thread alone. */
void wl_time_call(wl_run *r, void *(*fn)(void *), void *arg);
/* Times the group: every thread started, then joined. With `main_too`, the
 * main thread runs part 0 itself between the two (no thread is created for
 * it: one part is the main thread alone). */
void wl_time_threads(wl_run *r, wl_threads *g, int main_too);
/* Times feeders and the workers they feed: worker i runs worker(&queues[i])
 * until it pops NULL. Workers start first, then feeders; when every feeder is
 * joined, each worker is sent NULL and joined. */
void wl_time_pipeline(wl_run *r, void *(*worker)(void *), wl_queue *queues, long nworkers,
                      void *(*feeder)(void *), void *feeders, size_t size, long nfeeders);

/* A value of the result line beside operations and seconds. Numbers become
 * measures (contract §1); counts and digests are printed as JSON strings, so
 * that they do not. */
typedef enum wl_extra_kind {
    WL_NUMBER,   /* %.6g */
    WL_INTEGER,  /* an integer measure */
    WL_COUNT,    /* an unsigned count, as a string: "12" */
    WL_DIGEST,   /* 16 hex digits, as a string */
} wl_extra_kind;

typedef struct wl_extra {
    const char *name;
    wl_extra_kind kind;
    double value;              /* WL_NUMBER, WL_INTEGER */
    unsigned long long count;  /* WL_COUNT, WL_DIGEST */
} wl_extra;

#define WL_EXTRA_NUMBER(n, v) {(n), WL_NUMBER, (double)(v), 0}
#define WL_EXTRA_INTEGER(n, v) {(n), WL_INTEGER, (double)(v), 0}
#define WL_EXTRA_COUNT(n, v) {(n), WL_COUNT, 0, (unsigned long long)(v)}
#define WL_EXTRA_DIGEST(n, v) {(n), WL_DIGEST, 0, (unsigned long long)(v)}

/* Prints the one JSON result line on stdout (contract §1: the workload, its
 * options, operations, the timed section's seconds, max_rss_bytes, extras). */
void wl_finish(const wl_run *r, unsigned long long operations, const wl_extra *extras,
               size_t nextras);

#endif
