/* common.c: shared plumbing for the workloads (see common.h). Nothing here
 * allocates on a measured path except wl_xmalloc, which is plain malloc. */
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

void wl_parse_args(int argc, char **argv, const char *workload, const char *about,
                   wl_param *params, size_t nparams)
{
    wl_name = workload;
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

long long wl_param_get(const wl_param *params, size_t nparams, const char *name)
{
    for (size_t i = 0; i < nparams; i++)
        if (!strcmp(params[i].name, name))
            return params[i].value;
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

void wl_report(const char *workload, const wl_param *params, size_t nparams,
               unsigned long long operations, double seconds,
               const wl_extra *extras, size_t nextras)
{
    long long rss = wl_max_rss_bytes();
    printf("{\"workload\": \"%s\", \"params\": {", workload);
    for (size_t i = 0; i < nparams; i++)
        printf("%s\"%s\": %lld", i ? ", " : "", params[i].name, params[i].value);
    printf("}, \"operations\": %llu, \"seconds\": %.9f, \"max_rss_bytes\": %lld",
           operations, seconds, rss);
    for (size_t i = 0; i < nextras; i++) {
        if (extras[i].text)
            printf(", \"%s\": \"%s\"", extras[i].name, extras[i].text);
        else if (extras[i].integer)
            printf(", \"%s\": %lld", extras[i].name, (long long)extras[i].value);
        else
            printf(", \"%s\": %.6g", extras[i].name, extras[i].value);
    }
    printf("}\n");
    fflush(stdout);
}
