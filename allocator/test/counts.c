/* counts.c: the allocs and frees counters are exact. malloc's fast path
 * counts nothing: allocs is a balance of the bins kept by the slow paths
 * (heap.c, _mld_heap_publish), so every path that moves blocks into or
 * out of a bin must keep it. Calls mld_* directly (mallard_nooverride or
 * mallard_tsan: nothing else in the process allocates through Mallard),
 * counts its own calls and compares after each phase: pairs, LIFO and
 * FIFO bursts that flush (transfer cache, then full: direct frees),
 * remote frees (foreign stacks and their flushes, or CAS with
 * MALLARD_REMOTE=page), blocks of exited threads (abandon, adoption),
 * forced collects, huge and aligned blocks, calloc and realloc.
 * Usage: counts [rounds] */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mallard.h"

static _Atomic long long made, freed;
static int failures;

static void* get(size_t size) {
  void* p = mld_malloc(size);
  if (p == NULL) {
    fprintf(stderr, "counts: mld_malloc(%zu) failed\n", size);
    exit(1);
  }
  memset(p, 0x5a, size < 64 ? size : 64);
  atomic_fetch_add(&made, 1);
  return p;
}

static void put(void* p) {
  mld_free(p);
  atomic_fetch_add(&freed, 1);
}

static long long a0, f0;

/* Compare the counters with our own counts since the start. */
static void check(const char* phase) {
  long long a = mld_stat_get("allocs") - a0, f = mld_stat_get("frees") - f0;
  long long m = atomic_load(&made), d = atomic_load(&freed);
  if (a != m || f != d) {
    fprintf(stderr, "counts: after %s: allocs +%lld (made %lld), frees +%lld (freed %lld)\n", phase, a,
            m, f, d);
    failures++;
  }
}

static uint64_t rng = 88172645463325252ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

static size_t some_size(void) { return 8 + next_rand() % 2048; }

enum { BURST = 6000, FULL = 120000, HANDED = 4000 };
static void* blocks[FULL];

static void pairs(int n) {
  for (int i = 0; i < n; i++) put(get(some_size()));
}

static void bursts(int n, size_t size, int fifo) {
  for (int i = 0; i < n; i++) blocks[i] = get(size ? size : some_size());
  if (fifo)
    for (int i = 0; i < n; i++) put(blocks[i]);
  else
    for (int i = n - 1; i >= 0; i--) put(blocks[i]);
}

/* another thread frees what this one made, then allocates */
static void* handed[HANDED];
static void* free_handed(void* arg) {
  (void)arg;
  for (int i = 0; i < HANDED; i++) put(handed[i]);
  for (int r = 0; r < 4; r++) bursts(BURST / 4, 64, r & 1);
  pairs(2000);
  return NULL;
}

/* a thread that exits holding blocks in its bins and leaving live blocks
 * on its pages, which the main thread frees afterwards */
static void* leave_live(void* arg) {
  (void)arg;
  for (int i = 0; i < HANDED; i++) handed[i] = get(16 + (size_t)(i % 32) * 16);
  for (int i = 0; i < HANDED; i += 2) put(handed[i]);
  pairs(3000);
  return NULL;
}

static void run(void* (*fn)(void*)) {
  pthread_t t;
  if (pthread_create(&t, NULL, fn, NULL) != 0 || pthread_join(t, NULL) != 0) {
    fprintf(stderr, "counts: thread failed\n");
    exit(1);
  }
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 3;
  a0 = mld_stat_get("allocs");
  f0 = mld_stat_get("frees");
  if (a0 < 0 || f0 < 0) {
    fprintf(stderr, "counts: no allocs/frees counters\n");
    return 1;
  }
  for (int r = 0; r < rounds; r++) {
    pairs(20000);
    check("pairs");
    bursts(BURST, 0, 0);
    bursts(BURST, 64, 1);
    check("bursts");
    void* live = get(48);   /* exact with blocks live and bins part full */
    check("a live block");
    put(live);
    /* past the transfer cache: direct frees, then refills from pages */
    bursts(FULL, 128, r & 1);
    check("full transfer cache");
    bursts(FULL, 128, 0);   /* refills from the pages' free lists, side by side */
    check("refills from free lists");
    for (int i = 0; i < HANDED; i++) handed[i] = get(16 + (size_t)(i % 64) * 16);
    run(free_handed);
    check("remote frees");
    run(leave_live);
    for (int i = 1; i < HANDED; i += 2) put(handed[i]);   /* blocks of an exited thread */
    pairs(5000);
    check("thread exit");
    for (int i = 0; i < 64; i++) blocks[i] = get(some_size());
    mld_collect(1);
    for (int i = 0; i < 64; i++) put(blocks[i]);
    mld_collect(0);
    check("collect");
    void* huge = get(1 << 20);
    void* aligned = mld_aligned_alloc(4096, 100);
    void* giant = mld_aligned_alloc((size_t)8 << 20, 1000);
    void* zeroed = mld_calloc(100, 10);
    if (!aligned || !giant || !zeroed) {
      fprintf(stderr, "counts: aligned/calloc failed\n");
      return 1;
    }
    atomic_fetch_add(&made, 3);
    void* grown = mld_realloc(zeroed, 5000);   /* moves: a malloc and a free */
    if (grown == NULL) return 1;
    if (grown != zeroed) {
      atomic_fetch_add(&made, 1);
      atomic_fetch_add(&freed, 1);
    }
    put(huge);
    put(aligned);
    put(giant);
    put(grown);
    check("huge, aligned, calloc, realloc");
  }
  if (failures) {
    fprintf(stderr, "counts: %d check(s) failed\n", failures);
    return 1;
  }
  printf("counts: allocs %lld and frees %lld exact\n", atomic_load(&made), atomic_load(&freed));
  return 0;
}
