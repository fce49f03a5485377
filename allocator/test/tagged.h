/* tagged.h: for tests built twice, preloaded (malloc, free) and with
 * -DMLD_TEST_TSAN against mld_* of mallard_tsan (foreign.c, direct.c):
 * MALLOC, FREE and STAT_GET for either build, a failure count, blocks that
 * carry their size and a tag checked when freed, and the threads that pass
 * them around. Include after check.h. */
#ifndef MALLARD_TEST_TAGGED_H
#define MALLARD_TEST_TAGGED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>

#ifdef MLD_TEST_TSAN
#include "mallard.h"
#ifndef __SANITIZE_THREAD__
#error "the mallard_tsan build must be compiled with -fsanitize=thread"
#endif
#define MALLOC mld_malloc
#define FREE mld_free
#define STAT_GET mld_stat_get
#else
#define MALLOC malloc
#define FREE free
static inline long long STAT_GET(const char* name) { return mallard_stat_fn()(name); }
#endif

static _Atomic long failures;

typedef struct blk {
  uint64_t tag;
  uint32_t size;
} blk;

/* A block of size bytes (>= sizeof(blk)), its last byte tagged. */
static inline blk* make_sized(uint64_t* rng, uint32_t size) {
  blk* b = MALLOC(size);
  if (!b) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  b->size = size;
  b->tag = next_rand(rng);
  ((unsigned char*)b)[size - 1] = (unsigned char)b->tag;
  return b;
}

/* Check the tag, then free. */
static inline void drop(blk* b) {
  if (((unsigned char*)b)[b->size - 1] != (unsigned char)b->tag) {
    fprintf(stderr, "block %p (size %u) corrupted\n", (void*)b, b->size);
    atomic_fetch_add(&failures, 1);
  }
  FREE(b);
}

/* gens generations of n threads running fn (argument: gen * 64 + i), each
 * generation joined before the next: heaps that exit and new ones. */
static inline void run_generations(void* (*fn)(void*), long gens, long n) {
  for (long gen = 0; gen < gens; gen++) {
    pthread_t t[64];
    for (long i = 0; i < n; i++)
      REQUIRE(pthread_create(&t[i], NULL, fn, (void*)(uintptr_t)(gen * 64 + i)) == 0);
    for (long i = 0; i < n; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  }
}

/* Free (checked) whatever the threads left in a slot array. */
static inline void drain_slots(_Atomic(blk*)* slots, int n) {
  for (int i = 0; i < n; i++) {
    blk* b = atomic_exchange(&slots[i], NULL);
    if (b) drop(b);
  }
}

#endif
