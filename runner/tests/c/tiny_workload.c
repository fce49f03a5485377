/* A tiny fixed-work workload for the runner's tests (not a benchmark).
 *
 * Follows the workload contract (docs/contracts.md §1): `--key value` params,
 * mallocs and frees `ops` blocks across `threads` threads, prints the CPUs it
 * may run on (from /proc/self/status) and then one JSON object as the last
 * line of stdout. `--fail 1` exits 3 with a message on stderr.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static long ops = 20000;
static long nthreads = 1;

static void *work(void *arg) {
    unsigned long seed = (unsigned long)(size_t)arg + 42;
    void *slots[64] = {0};
    for (long i = 0; i < ops / nthreads; i++) {
        seed = seed * 6364136223846793005UL + 1442695040888963407UL;
        int s = (int)((seed >> 33) % 64);
        free(slots[s]);
        slots[s] = malloc(8 + (seed >> 40) % 512);
        if (slots[s]) memset(slots[s], 1, 8);
    }
    for (int s = 0; s < 64; s++) free(slots[s]);
    return NULL;
}

int main(int argc, char **argv) {
    long seed = 42, fail = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ops")) ops = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--threads")) nthreads = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--seed")) seed = atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--fail")) fail = atol(argv[i + 1]);
    }
    if (fail) {
        fprintf(stderr, "tiny: asked to fail\n");
        return 3;
    }
    FILE *f = fopen("/proc/self/status", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18)) fputs(line, stdout);
    if (f) fclose(f);
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    pthread_t t[64];
    if (nthreads < 1 || nthreads > 64) nthreads = 1;
    for (long i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, work, (void *)(size_t)i);
    for (long i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
    clock_gettime(CLOCK_MONOTONIC, &b);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double secs = (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_nsec - a.tv_nsec) / 1e9;
    printf("{\"workload\": \"tiny\", \"params\": {\"threads\": %ld, \"ops\": %ld, \"seed\": %ld}, "
           "\"operations\": %ld, \"seconds\": %.9f, \"max_rss_bytes\": %ld}\n",
           nthreads, ops, seed, (ops / nthreads) * nthreads, secs, ru.ru_maxrss * 1024L);
    return 0;
}
