/* A workload for the runner's memory-timeline test (not a benchmark): grows its RSS by
 * `--steps` blocks of 1 MiB (touched), one every `--step_ms` milliseconds, holds them
 * `--hold_ms`, frees them all (each is an mmap of its own under glibc: freed at once),
 * stays small for `--hold_ms` more and prints the contract's JSON line. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv)
{
    long steps = 40, step_ms = 5, hold_ms = 150;
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = atol(argv[i + 1]);
        if (!strcmp(argv[i], "--steps")) steps = v;
        else if (!strcmp(argv[i], "--step_ms")) step_ms = v;
        else if (!strcmp(argv[i], "--hold_ms")) hold_ms = v;
    }
    char **blocks = calloc((size_t)steps, sizeof *blocks);
    for (long i = 0; i < steps; i++) {
        blocks[i] = malloc(1 << 20);
        memset(blocks[i], (int)i, 1 << 20);
        sleep_ms(step_ms);
    }
    sleep_ms(hold_ms);
    for (long i = 0; i < steps; i++)
        free(blocks[i]);
    sleep_ms(hold_ms);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"workload\": \"grow_free\", \"params\": {\"steps\": %ld}, \"operations\": %ld, "
           "\"seconds\": 0.001, \"max_rss_bytes\": %ld}\n", steps, steps, ru.ru_maxrss * 1024L);
    return 0;
}
