/* latency_hist.c: writing the latency histogram (latency.h) as one JSON object, with
 * write(2) and a stack buffer only: it runs at exit inside the malloc shim (latency.c),
 * where calling malloc would time itself. */
#define _GNU_SOURCE
#include "latency.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static size_t expand_pid(char *out, size_t cap, const char *path)
{
    const char *p = strstr(path, "%p");
    if (p == NULL)
        return (size_t)snprintf(out, cap, "%s", path);
    return (size_t)snprintf(out, cap, "%.*s%ld%s", (int)(p - path), path, (long)getpid(),
                            p + 2);
}

static int flush(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n <= 0)
            return -1;
        buf += n;
        len -= (size_t)n;
    }
    return 0;
}

int lat_write(const lat_hist *h, unsigned sample_every, const char *path)
{
    char name[4096];
    if (expand_pid(name, sizeof name, path) >= sizeof name)
        return -1;
    int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    static const char *const calls[LAT_CALLS] = {"malloc", "free"};
    char buf[LAT_BUCKETS * 32 + 64];
    size_t len = (size_t)snprintf(buf, sizeof buf, "{\"version\": 1, \"sample_every\": %u",
                                  sample_every);
    int rc = 0;
    for (int c = 0; c < LAT_CALLS && rc == 0; c++) {
        len += (size_t)snprintf(buf + len, sizeof buf - len, ", \"%s\": [", calls[c]);
        const char *sep = "";
        for (unsigned i = 0; i < LAT_BUCKETS; i++) {
            uint64_t n = atomic_load_explicit(&h->count[c][i], memory_order_relaxed);
            if (n == 0)
                continue;
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s[%u, %llu]", sep, i,
                                    (unsigned long long)n);
            sep = ", ";
        }
        len += (size_t)snprintf(buf + len, sizeof buf - len, "]");
        rc = flush(fd, buf, len);
        len = 0;
    }
    if (rc == 0)
        rc = flush(fd, "}\n", 2);
    return close(fd) == 0 ? rc : -1;
}
