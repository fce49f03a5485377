/* transfer_hold.c: what a ring transfer cache does when it meets a claim in
 * flight, checked with the test hooks (src/testhooks.h) against the counters.
 *
 *   transfer_hold    (MALLARD_TRANSFER=naive or ring; mutex has no claims)
 *
 * remove side: a holder thread claims an insert of one batch into the empty
 * transfer cache of 64-byte blocks and holds it open; the main thread then
 * mallocs 64 bytes with an empty bin, so its refill meets the in-flight insert.
 *   naive: the remove misses, counted as a remove miss AND an in-flight miss,
 *          and the refill falls through to the pages (central_refills);
 *   ring:  the remove waits (transfer_waits) until the holder commits, then
 *          hits.
 * insert side: the holder fills the 128-byte cache to capacity and holds a
 * remove claim open; the main thread frees more blocks than its bin holds,
 * so a flush meets the full cache with the remove in flight.
 *   naive: insert miss + in-flight miss, the batch goes back to its pages;
 *   ring:  the insert waits until the holder commits, then hits.
 * No timing anywhere: the holder commits when the main thread has either
 * finished (naive) or is counted as waiting (ring), which it polls. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "mallard.h"
#include "testhooks.h"

enum { S_REMOVE = 64, S_INSERT = 128, MAX_OBJS = 16384 };

static bool naive;
static _Atomic int stage;        /* main -> holder: 1 claim made, 2 main done */
static _Atomic int held;         /* holder -> main: the claim is open */
static long long waits_before;

typedef struct { long long insert_hits, insert_misses, remove_hits, remove_misses, insert_inflight,
                 remove_inflight, central_refills, waits; } snap;

static snap take(void) {
  snap s = {mld_stat_get("transfer_insert_hits"), mld_stat_get("transfer_insert_misses"),
            mld_stat_get("transfer_remove_hits"), mld_stat_get("transfer_remove_misses"),
            mld_stat_get("transfer_insert_inflight_misses"),
            mld_stat_get("transfer_remove_inflight_misses"), mld_stat_get("central_refills"),
            mld_stat_get("transfer_waits")};
  return s;
}

/* Commit only once the main thread has run into the claim: finished (naive)
 * or counted as waiting for it (ring). */
static void wait_for_main(void) {
  while (atomic_load(&stage) != 2 && mld_stat_get("transfer_waits") <= waits_before) sched_yield();
}

static void* hold_insert(void* arg) {
  (void)arg;
  unsigned n = mld_test_transfer_batch(S_REMOVE);
  void* objs[64];
  for (unsigned i = 0; i < n; i++) REQUIRE((objs[i] = mld_malloc(S_REMOVE)) != NULL);
  uint64_t ticket;
  REQUIRE(mld_test_transfer_claim(S_REMOVE, 1, n, &ticket) == (int)n);
  atomic_store(&held, 1);
  wait_for_main();
  mld_test_transfer_commit(S_REMOVE, 1, objs, n, ticket);
  return NULL;
}

static void* objs_fill[MAX_OBJS];
static void* hold_remove(void* arg) {
  (void)arg;
  unsigned n = mld_test_transfer_batch(S_INSERT), cap = mld_test_transfer_capacity(S_INSERT);
  REQUIRE(cap <= MAX_OBJS);
  for (unsigned i = 0; i < cap; i++) REQUIRE((objs_fill[i] = mld_malloc(S_INSERT)) != NULL);
  for (unsigned i = 0; i < cap; i += n) {   /* fill the cache to capacity */
    uint64_t ticket;
    REQUIRE(mld_test_transfer_claim(S_INSERT, 1, n, &ticket) == (int)n);
    mld_test_transfer_commit(S_INSERT, 1, &objs_fill[i], n, ticket);
  }
  uint64_t t2;
  CHECK(mld_test_transfer_claim(S_INSERT, 1, n, &t2) == 0);   /* full */
  uint64_t ticket;
  void* out[64];
  REQUIRE(mld_test_transfer_claim(S_INSERT, 0, n, &ticket) == (int)n);
  atomic_store(&held, 1);
  wait_for_main();
  mld_test_transfer_commit(S_INSERT, 0, out, n, ticket);
  return NULL;
}

static void remove_side(void) {
  atomic_store(&stage, 0);
  atomic_store(&held, 0);
  waits_before = mld_stat_get("transfer_waits");
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, hold_insert, NULL) == 0);
  while (!atomic_load(&held)) sched_yield();
  snap a = take();
  void* p = mld_malloc(S_REMOVE);   /* bin empty: the refill meets the in-flight insert */
  REQUIRE(p != NULL);
  snap b = take();
  atomic_store(&stage, 2);
  REQUIRE(pthread_join(t, NULL) == 0);
  printf("remove side: remove hits +%lld misses +%lld in-flight misses +%lld central refills +%lld waits +%lld\n",
         b.remove_hits - a.remove_hits, b.remove_misses - a.remove_misses, b.remove_inflight - a.remove_inflight,
         b.central_refills - a.central_refills, b.waits - a.waits);
  if (naive) {
    CHECK(b.remove_misses - a.remove_misses == 1);
    CHECK(b.remove_inflight - a.remove_inflight == 1);
    CHECK(b.central_refills - a.central_refills == 1);
    CHECK(b.remove_hits == a.remove_hits);
    CHECK(b.waits == a.waits);
  } else {
    CHECK(b.remove_hits - a.remove_hits == 1);
    CHECK(b.remove_misses == a.remove_misses);
    CHECK(b.remove_inflight == a.remove_inflight);
    CHECK(b.central_refills == a.central_refills);
    CHECK(b.waits - a.waits == 1);
  }
  mld_free(p);
}

static void insert_side(void) {
  /* blocks to free later, allocated before the cache is filled (a refill
   * from a full cache would empty it) */
  enum { K = 600 };
  static void* mine[K];
  for (int i = 0; i < K; i++) REQUIRE((mine[i] = mld_malloc(S_INSERT)) != NULL);
  atomic_store(&stage, 0);
  atomic_store(&held, 0);
  waits_before = mld_stat_get("transfer_waits");
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, hold_remove, NULL) == 0);
  while (!atomic_load(&held)) sched_yield();
  snap a = take();
  for (int i = 0; i < K; i++) mld_free(mine[i]);   /* the bin overflows: flushes */
  snap b = take();
  atomic_store(&stage, 2);
  REQUIRE(pthread_join(t, NULL) == 0);
  printf("insert side: insert hits +%lld misses +%lld in-flight misses +%lld waits +%lld\n",
         b.insert_hits - a.insert_hits, b.insert_misses - a.insert_misses,
         b.insert_inflight - a.insert_inflight, b.waits - a.waits);
  if (naive) {
    CHECK(b.insert_inflight - a.insert_inflight >= 1);
    CHECK(b.insert_misses - a.insert_misses >= b.insert_inflight - a.insert_inflight);
    CHECK(b.insert_hits == a.insert_hits);   /* the claim stays open: every flush misses */
    CHECK(b.waits == a.waits);
  } else {
    CHECK(b.waits - a.waits >= 1);
    CHECK(b.insert_inflight == a.insert_inflight);
    CHECK(b.insert_hits - a.insert_hits >= 1);  /* the first flush, after the remove committed */
  }
}

int main(void) {
  const char* mode = mld_transfer_mode();
  if (strcmp(mode, "naive") != 0 && strcmp(mode, "ring") != 0) {
    fprintf(stderr, "transfer_hold: run with MALLARD_TRANSFER=naive or ring (got %s)\n", mode);
    return 1;
  }
  naive = strcmp(mode, "naive") == 0;
  mld_free(mld_malloc(1000));   /* the main thread's heap exists (another class) */
  remove_side();
  insert_side();
  return check_report(naive ? "transfer_hold (naive)" : "transfer_hold (ring)");
}
