/* A preload "allocator" for the runner's tests: forwards to glibc and raises
 * SIGSEGV on the Nth call to malloc (N = CRASH_AFTER_MALLOCS, default 1000),
 * after saying so on stderr. The runner must turn that into a failed trial. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);

static atomic_long calls;
static long limit = -1;

void *malloc(size_t n) {
    if (limit < 0) {
        const char *e = getenv("CRASH_AFTER_MALLOCS");
        limit = e ? atol(e) : 1000;
    }
    if (atomic_fetch_add(&calls, 1) + 1 == limit) {
        static const char msg[] = "crash_lib: raising SIGSEGV on malloc number N\n";
        write(2, msg, sizeof msg - 1);
        raise(SIGSEGV);
    }
    return __libc_malloc(n);
}
