/* common.c: the workloads' harness and shared plumbing (see common.h). Nothing
 * here allocates on a measured path except wl_xmalloc, which is plain malloc,
 * and wl_time_pipeline's thread ids, allocated inside the timed section where
 * the workloads always had them. */
#define _GNU_SOURCE
#include "common.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static const char *wl_name = "workload";

static void usage(FILE *out, const char *about, const wl_param *params, size_t n)
{
    fprintf(out, "usage: %s [--key value ...]\n%s\n\nparameters:\n", wl_name, about);
    for (size_t i = 0; i < n; i++)
        fprintf(out, "  --%-12s %s (default %lld)\n", params[i].name, params[i].help,
                params[i].value);
    fprintf(out, "  --help         this text\n\nPrints one JSON line (docs/contracts.md §1); "
                 "exit 0 means the run was valid.\n");
}

static void parse_args(int argc, char **argv, const char *about, wl_param *params,
                       size_t nparams)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "--help") || !strcmp(arg, "-h")) {
            usage(stdout, about, params, nparams);
            exit(0);
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s'\n", wl_name, arg);
            usage(stderr, about, params, nparams);
            exit(2);
        }
        const char *key = arg + 2, *val = NULL;
        size_t klen = strlen(key);
        const char *eq = strchr(key, '=');
        if (eq) {
            klen = (size_t)(eq - key);
            val = eq + 1;
        } else if (i + 1 < argc) {
            val = argv[++i];
        } else {
            fprintf(stderr, "%s: --%s needs a value\n", wl_name, key);
            exit(2);
        }
        wl_param *p = NULL;
        for (size_t j = 0; j < nparams; j++)
            if (strlen(params[j].name) == klen && !strncmp(params[j].name, key, klen))
                p = &params[j];
        if (!p) {
            fprintf(stderr, "%s: unknown parameter '--%.*s'\n", wl_name, (int)klen, key);
            usage(stderr, about, params, nparams);
            exit(2);
        }
        char *end;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (errno || end == val || *end) {
            fprintf(stderr, "%s: --%s: '%s' is not an integer\n", wl_name, p->name, val);
            exit(2);
        }
        if (v < p->min) {
            fprintf(stderr, "%s: --%s must be >= %lld (got %lld)\n", wl_name, p->name,
                    p->min, v);
            exit(2);
        }
        p->value = v;
    }
}

void wl_start(wl_run *r, int argc, char **argv)
{
    wl_name = r->name;
    parse_args(argc, argv, r->about, r->params, r->nparams);
}

long long wl_opt(const wl_run *r, const char *name)
{
    for (size_t i = 0; i < r->nparams; i++)
        if (!strcmp(r->params[i].name, name))
            return r->params[i].value;
    fprintf(stderr, "%s: internal error: no parameter '%s'\n", wl_name, name);
    abort();
}

uint64_t wl_splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

void wl_rng_init(wl_rng *r, uint64_t seed, uint64_t stream)
{
    uint64_t st = seed ^ (0xD1B54A32D192ED03ULL * (stream + 1));
    wl_splitmix64(&st);
    uint64_t s = wl_splitmix64(&st);
    r->s = s ? s : 0x9E3779B97F4A7C15ULL; /* xorshift state must not be 0 */
}

void wl_tag_block(void *p, size_t size, uint64_t tag)
{
    unsigned char *b = p;
    size_t n = size < 8 ? size : 8;
    memcpy(b, &tag, n);
    if (size > 8)
        b[size - 1] = (unsigned char)(tag >> 56) ^ 0x5a;
}

int wl_check_block(const void *p, size_t size, uint64_t tag)
{
    const unsigned char *b = p;
    size_t n = size < 8 ? size : 8;
    if (memcmp(b, &tag, n) != 0)
        return 0;
    if (size > 8 && b[size - 1] != ((unsigned char)(tag >> 56) ^ 0x5a))
        return 0;
    return 1;
}

double wl_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double wl_cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

long long wl_max_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return -1;
    return (long long)ru.ru_maxrss * 1024LL;
}

long long wl_current_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long long size = 0, resident = -1;
    if (fscanf(f, "%lld %lld", &size, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident < 0 ? -1 : resident * (long long)sysconf(_SC_PAGESIZE);
}

void wl_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", wl_name);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stdout);
    exit(1);
}

void *wl_xmalloc(size_t size)
{
    void *p = malloc(size);
    if (!p)
        wl_fail("out of memory allocating %zu bytes", size);
    return p;
}

void wl_thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(t, NULL, fn, arg);
    if (rc)
        wl_fail("pthread_create: %s", strerror(rc));
}

void wl_thread_join(pthread_t t)
{
    int rc = pthread_join(t, NULL);
    if (rc)
        wl_fail("pthread_join: %s", strerror(rc));
}

void wl_queue_init(wl_queue *q, size_t cap)
{
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->not_full, NULL);
    q->cap = cap ? cap : 1;
    q->items = wl_xmalloc(q->cap * sizeof(void *));
    q->head = q->count = 0;
}

void wl_queue_destroy(wl_queue *q)
{
    free(q->items);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->not_full);
    pthread_mutex_destroy(&q->lock);
}

void wl_queue_push(wl_queue *q, void *item)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == q->cap)
        pthread_cond_wait(&q->not_full, &q->lock);
    q->items[(q->head + q->count) % q->cap] = item;
    q->count++;
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->lock);
}

static void *take_locked(wl_queue *q)
{
    void *item = q->items[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    pthread_cond_signal(&q->not_full);
    return item;
}

void *wl_queue_pop(wl_queue *q)
{
    pthread_mutex_lock(&q->lock);
    while (q->count == 0)
        pthread_cond_wait(&q->not_empty, &q->lock);
    void *item = take_locked(q);
    pthread_mutex_unlock(&q->lock);
    return item;
}

int wl_queue_try_pop(wl_queue *q, void **item)
{
    int got = 0;
    pthread_mutex_lock(&q->lock);
    if (q->count) {
        *item = take_locked(q);
        got = 1;
    }
    pthread_mutex_unlock(&q->lock);
    return got;
}

/* ---- threads and timing ---------------------------------------------- */

void wl_timer_start(wl_run *r)
{
    r->started = wl_now();
    r->cpu_started = wl_cpu_now();
}

void wl_timer_stop(wl_run *r)
{
    r->seconds = wl_now() - r->started;
    r->cpu_seconds = wl_cpu_now() - r->cpu_started;
}

wl_threads wl_threads_new(void *(*fn)(void *), void *args, size_t size, long n)
{
    wl_threads g = {fn, args, size, n, wl_xmalloc(sizeof(pthread_t) * (size_t)n)};
    return g;
}

void wl_threads_free(wl_threads *g)
{
    free(g->ids);
    g->ids = NULL;
}

static void *part(const wl_threads *g, long i)
{
    return (char *)g->args + (size_t)i * g->size;
}

void wl_threads_start(wl_threads *g, long first)
{
    for (long i = first; i < g->n; i++)
        wl_thread_create(&g->ids[i], g->fn, part(g, i));
}

void wl_threads_join(wl_threads *g, long first)
{
    for (long i = first; i < g->n; i++)
        wl_thread_join(g->ids[i]);
}

void wl_time_call(wl_run *r, void *(*fn)(void *), void *arg)
{
    wl_timer_start(r);
    fn(arg);
    wl_timer_stop(r);
}

void wl_time_threads(wl_run *r, wl_threads *g, int main_too)
{
    long first = main_too ? 1 : 0;
    wl_timer_start(r);
    wl_threads_start(g, first);
    if (main_too)
        g->fn(part(g, 0));
    wl_threads_join(g, first);
    wl_timer_stop(r);
}

void wl_time_pipeline(wl_run *r, void *(*worker)(void *), wl_queue *queues, long nworkers,
                      void *(*feeder)(void *), void *feeders, size_t size, long nfeeders)
{
    wl_timer_start(r);
    wl_threads w = wl_threads_new(worker, queues, sizeof(wl_queue), nworkers);
    wl_threads f = wl_threads_new(feeder, feeders, size, nfeeders);
    wl_threads_start(&w, 0);
    wl_threads_start(&f, 0);
    wl_threads_join(&f, 0);
    for (long i = 0; i < nworkers; i++)
        wl_queue_push(&queues[i], NULL); /* stop */
    wl_threads_join(&w, 0);
    wl_threads_free(&w);
    wl_threads_free(&f);
    wl_timer_stop(r);
}

/* ---- the result line ------------------------------------------------------ */

void wl_finish(const wl_run *r, unsigned long long operations, const wl_extra *extras,
               size_t nextras)
{
    long long rss = wl_max_rss_bytes();
    printf("{\"workload\": \"%s\", \"params\": {", r->name);
    for (size_t i = 0; i < r->nparams; i++)
        printf("%s\"%s\": %lld", i ? ", " : "", r->params[i].name, r->params[i].value);
    printf("}, \"operations\": %llu, \"seconds\": %.9f, \"max_rss_bytes\": %lld, "
           "\"cpu_seconds\": %.9f", operations, r->seconds, rss, r->cpu_seconds);
    for (size_t i = 0; i < nextras; i++) {
        const wl_extra *x = &extras[i];
        switch (x->kind) {
        case WL_COUNT:
            printf(", \"%s\": \"%llu\"", x->name, x->count);
            break;
        case WL_DIGEST:
            printf(", \"%s\": \"%016llx\"", x->name, x->count);
            break;
        case WL_INTEGER:
            printf(", \"%s\": %lld", x->name, (long long)x->value);
            break;
        default:
            printf(", \"%s\": %.6g", x->name, x->value);
        }
    }
    printf("}\n");
    fflush(stdout);
}
