/* ring_chunks.c: a ring transfer cache's slot chunks (transfer.c): the ring
 * takes a 512-slot chunk when its indices reach one and gives it back when
 * its removes pass it, lowest free chunk first, so it holds (and touches)
 * as many chunks as its contents span, however far its indices travel.
 * Checked with the test hooks (src/testhooks.h), on the class of S-byte
 * blocks, which nothing else in this program allocates: the objects are
 * tokens (never dereferenced), so the order and the count of what comes
 * out can be checked exactly.
 *
 *   ring_chunks THREADS ROUNDS   (MALLARD_TRANSFER=ring or naive)
 *
 * 1. one thread, ROUNDS x 1000 batches through the ring at an occupancy
 *    that walks at random between 0 and 4 batches: tokens come out in
 *    order, at most two chunks in use at any time, never one above chunk 1;
 * 2. filled to capacity (an insert more is refused), then drained, from an
 *    index inside a chunk: the chunks in use never exceed capacity / 512 + 1
 *    (the bound the ring's array is sized for), tokens in order, one chunk
 *    left in use at the end;
 * 3. THREADS/2 inserters and THREADS/2 removers, ROUNDS x 200 batches of
 *    1..batch tokens each (a claim that gets nothing is retried): every
 *    token comes out exactly once, each inserter's tokens in its order at
 *    every remover, and at most capacity / 512 + 1 chunks in use.
 * No timing: the threads only meet through the ring. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mallard.h"
#include "testhooks.h"

enum { S = 64, CHUNK = 512, MAXB = 64, MAXT = 16 };

static unsigned batch, cap;
static _Atomic long failures;

static void* token(uint64_t id) { return (void*)(uintptr_t)((id + 1) << 4); }
static uint64_t id_of(void* p) { return ((uintptr_t)p >> 4) - 1; }

static unsigned popcount(uint64_t x) { return (unsigned)__builtin_popcountll(x); }

/* One insert or remove through the hooks; 0 when the claim got nothing. */
static unsigned put(void** objs, unsigned n) {
  uint64_t ticket;
  if (mld_test_transfer_claim(S, 1, n, &ticket) != (int)n) return 0;
  mld_test_transfer_commit(S, 1, objs, n, ticket);
  return n;
}

static unsigned get(void** objs, unsigned n) {
  uint64_t ticket;
  int got = mld_test_transfer_claim(S, 0, n, &ticket);
  if (got <= 0) return 0;
  mld_test_transfer_commit(S, 0, objs, (unsigned)got, ticket);
  return (unsigned)got;
}

static void low_occupancy(unsigned rounds) {
  uint64_t rng = 42, next_in = 0, next_out = 0, held = 0, moved = 0;
  uint64_t seen = 0;
  void* objs[MAXB];
  for (uint64_t step = 0; step < (uint64_t)rounds * 1000; step++) {
    bool in = held == 0 || (held < 4 * (uint64_t)batch && next_rand(&rng) % 2 == 0);
    if (in) {
      for (unsigned i = 0; i < batch; i++) objs[i] = token(next_in++);
      REQUIRE(put(objs, batch) == batch);
      held += batch;
    } else {
      unsigned got = get(objs, batch);
      REQUIRE(got == batch);
      for (unsigned i = 0; i < got; i++, next_out++)
        CHECKF(id_of(objs[i]) == next_out, "got %llu, expected %llu", (unsigned long long)id_of(objs[i]),
               (unsigned long long)next_out);
      held -= got;
      moved += got;
    }
    uint64_t used = mld_test_transfer_chunks(S);
    CHECKF(popcount(used) <= 2 && used < 4, "step %llu: chunks in use %#llx", (unsigned long long)step,
           (unsigned long long)used);
    seen |= used;
  }
  while (held != 0) held -= get(objs, batch);
  printf("low occupancy: %llu tokens through the ring (%llu chunks' worth of indices), chunks ever used %#llx\n",
         (unsigned long long)moved, (unsigned long long)(moved / CHUNK), (unsigned long long)seen);
  CHECK(moved / CHUNK >= 100 || rounds < 10);   /* the indices went round many times */
}

static void full(void) {
  static void* objs[16384];
  REQUIRE(cap <= 16384);
  void* one[MAXB];
  /* start inside a chunk */
  for (unsigned i = 0; i < batch; i++) one[i] = token(1u << 30);
  REQUIRE(put(one, batch) == batch && get(one, batch) == batch);
  unsigned limit = cap / CHUNK + 1, most = 0;
  for (unsigned i = 0; i < cap; i++) objs[i] = token(i);
  for (unsigned i = 0; i < cap; i += batch) {
    REQUIRE(put(&objs[i], batch) == batch);
    unsigned n = popcount(mld_test_transfer_chunks(S));
    if (n > most) most = n;
  }
  CHECK(put(one, batch) == 0);   /* full */
  for (unsigned i = 0; i < cap; i += batch) {
    REQUIRE(get(one, batch) == batch);
    for (unsigned j = 0; j < batch; j++) CHECK(id_of(one[j]) == i + j);
    unsigned n = popcount(mld_test_transfer_chunks(S));
    if (n > most) most = n;
  }
  CHECK(get(one, batch) == 0);   /* empty */
  printf("full: capacity %u, most chunks in use %u (bound %u), in use when empty %u\n", cap, most, limit,
         popcount(mld_test_transfer_chunks(S)));
  CHECK(most <= limit && most >= cap / CHUNK);
  CHECK(popcount(mld_test_transfer_chunks(S)) <= 1);
}

/* ---- threads ---- */
static unsigned producers, consumers, per_producer;
static _Atomic unsigned char* counts;    /* per token */
static _Atomic unsigned long long taken;
static _Atomic unsigned most_chunks;

static void* producer(void* arg) {
  unsigned p = (unsigned)(uintptr_t)arg;
  uint64_t rng = 1000 + p, base = (uint64_t)p * per_producer;
  void* objs[MAXB];
  for (unsigned i = 0; i < per_producer;) {
    unsigned n = 1 + (unsigned)(next_rand(&rng) % batch);
    if (n > per_producer - i) n = per_producer - i;
    for (unsigned j = 0; j < n; j++) objs[j] = token(base + i + j);
    if (put(objs, n) == n) i += n;
    else sched_yield();   /* full or a claim in flight: retry */
    unsigned c = popcount(mld_test_transfer_chunks(S)), m = atomic_load(&most_chunks);
    while (c > m && !atomic_compare_exchange_weak(&most_chunks, &m, c)) {}
  }
  return NULL;
}

static void* consumer(void* arg) {
  (void)arg;
  uint64_t last[MAXT];
  for (unsigned p = 0; p < MAXT; p++) last[p] = UINT64_MAX;
  uint64_t total = (uint64_t)producers * per_producer;
  void* objs[MAXB];
  while (atomic_load(&taken) < total) {
    unsigned got = get(objs, batch);
    if (got == 0) {
      sched_yield();
      continue;
    }
    atomic_fetch_add(&taken, got);
    for (unsigned j = 0; j < got; j++) {
      uint64_t id = id_of(objs[j]);
      if (id >= total) {
        atomic_fetch_add(&failures, 1);
        continue;
      }
      unsigned p = (unsigned)(id / per_producer);
      if (last[p] != UINT64_MAX && id <= last[p]) atomic_fetch_add(&failures, 1);   /* out of order */
      last[p] = id;
      atomic_fetch_add(&counts[id], 1);
    }
  }
  return NULL;
}

static void threads(unsigned n, unsigned rounds) {
  producers = n / 2 ? n / 2 : 1;
  consumers = producers;
  REQUIRE(producers <= MAXT);
  per_producer = rounds * 200 * batch / 2 / producers;
  uint64_t total = (uint64_t)producers * per_producer;
  counts = calloc(total, 1);
  REQUIRE(counts != NULL);
  pthread_t t[2 * MAXT];
  for (unsigned i = 0; i < producers; i++)
    REQUIRE(pthread_create(&t[i], NULL, producer, (void*)(uintptr_t)i) == 0);
  for (unsigned i = 0; i < consumers; i++) REQUIRE(pthread_create(&t[producers + i], NULL, consumer, NULL) == 0);
  for (unsigned i = 0; i < producers + consumers; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  uint64_t wrong = 0;
  for (uint64_t i = 0; i < total; i++) wrong += atomic_load(&counts[i]) != 1;
  printf("threads: %u inserters, %u removers, %llu tokens, %llu not seen exactly once, %ld out of order, "
         "most chunks in use %u, in use at the end %u\n",
         producers, consumers, (unsigned long long)total, (unsigned long long)wrong, atomic_load(&failures),
         atomic_load(&most_chunks), popcount(mld_test_transfer_chunks(S)));
  CHECK(wrong == 0);
  CHECK(atomic_load(&failures) == 0);
  CHECK(atomic_load(&taken) == total);
  CHECK(atomic_load(&most_chunks) <= cap / CHUNK + 1);
  CHECK(popcount(mld_test_transfer_chunks(S)) <= 1);
  free((void*)counts);
}

int main(int argc, char** argv) {
  const char* mode = mld_transfer_mode();
  if (argc != 3 || (strcmp(mode, "naive") != 0 && strcmp(mode, "ring") != 0)) {
    fprintf(stderr, "usage: ring_chunks THREADS ROUNDS, with MALLARD_TRANSFER=naive or ring (got %s)\n", mode);
    return 1;
  }
  unsigned n = (unsigned)atoi(argv[1]), rounds = (unsigned)atoi(argv[2]);
  REQUIRE(n >= 1 && rounds >= 1);
  batch = mld_test_transfer_batch(S);
  cap = mld_test_transfer_capacity(S);
  REQUIRE(batch <= MAXB && cap >= 4 * batch);
  low_occupancy(rounds);
  full();
  threads(n, rounds);
  return check_report("ring_chunks");
}
