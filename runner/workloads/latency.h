/* latency.h: the sampled latency histogram the latency shim (latency.c) keeps for
 * malloc and free. Buckets are log-linear (HDR-style): 0-7 ns one bucket each, then every
 * power of two cut into 8 equal buckets (a bucket is at most 1/8 of its values wide).
 * mallard_wire/timelines.py reads the same rule back (`bucket_of`, `bucket_bounds`).
 * The file written at exit is one JSON object:
 *   {"version": 1, "sample_every": 64, "malloc": [[bucket, count], ...], "free": [...]} */
#ifndef MALLARD_WORKLOAD_LATENCY_H
#define MALLARD_WORKLOAD_LATENCY_H

#include <stdatomic.h>
#include <stdint.h>

#define LAT_SUB_BITS 3
#define LAT_SUB (1u << LAT_SUB_BITS)
#define LAT_BUCKETS 320u

enum { LAT_MALLOC = 0, LAT_FREE = 1, LAT_CALLS = 2 };

typedef struct lat_hist {
    _Atomic uint64_t count[LAT_CALLS][LAT_BUCKETS];
} lat_hist;

static inline unsigned lat_bucket(uint64_t ns)
{
    if (ns < LAT_SUB)
        return (unsigned)ns;
    unsigned e = 63u - (unsigned)__builtin_clzll(ns);
    unsigned i = (e - LAT_SUB_BITS + 1) * LAT_SUB
                 + (unsigned)((ns >> (e - LAT_SUB_BITS)) & (LAT_SUB - 1));
    return i < LAT_BUCKETS ? i : LAT_BUCKETS - 1;
}

static inline void lat_record(lat_hist *h, int call, uint64_t ns)
{
    atomic_fetch_add_explicit(&h->count[call][lat_bucket(ns)], 1, memory_order_relaxed);
}

/* Writes the histogram as JSON to `path` with write(2) only (no malloc: it runs inside the
 * shim at exit). `path` may hold one %p, replaced by the process id. 0 on success. */
int lat_write(const lat_hist *h, unsigned sample_every, const char *path);

#endif
