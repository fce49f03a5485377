/* Toy libmallard.so for the runner's tests: forwards malloc/free to glibc,
 * counts them, and writes the counters to MALLARD_STATS_FILE (%p = pid) at
 * exit. Transfer counters are zero: this toy has no transfer cache. */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);

static atomic_long allocs, frees;

__attribute__((visibility("default"))) void *malloc(size_t n) {
    atomic_fetch_add(&allocs, 1);
    return __libc_malloc(n);
}

__attribute__((visibility("default"))) void free(void *p) {
    if (p) atomic_fetch_add(&frees, 1);
    __libc_free(p);
}

__attribute__((destructor)) static void write_stats(void) {
    const char *path = getenv("MALLARD_STATS_FILE");
    if (!path) return;
    char buf[4096];
    size_t o = 0;
    for (const char *c = path; *c && o + 24 < sizeof buf; c++) {
        if (c[0] == '%' && c[1] == 'p') {
            o += (size_t)snprintf(buf + o, sizeof buf - o, "%d", (int)getpid());
            c++;
        } else {
            buf[o++] = *c;
        }
    }
    buf[o] = 0;
    FILE *f = fopen(buf, "w");
    if (!f) return;
    const char *t = getenv("MALLARD_TRANSFER");
    fprintf(f, "{\"version\": 1, \"allocator\": \"mallard\", \"transfer\": \"%s\", \"pid\": %d, "
               "\"allocs\": %ld, \"frees\": %ld, \"remote_frees\": 0, "
               "\"transfer_insert_hits\": 0, \"transfer_insert_misses\": 0, "
               "\"transfer_remove_hits\": 0, \"transfer_remove_misses\": 0, "
               "\"central_refills\": 0, \"bytes_mapped\": 0, \"peak_bytes_mapped\": 0}\n",
            t ? t : "default", (int)getpid(), (long)allocs, (long)frees);
    fclose(f);
}
