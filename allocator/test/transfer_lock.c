/* transfer_lock.c: the mutex variant's lock (src/transfer.c, mld_lock) when
 * its holder does not let go: a waiter spins, yields, then sleeps, and the
 * unlock wakes it. Checked with the test hooks (src/testhooks.h).
 *
 *   transfer_lock    (MALLARD_TRANSFER=mutex)
 *
 * The main thread fills the transfer cache of 64-byte blocks (frees past
 * its bin), takes the class's lock and lets a worker start: the worker's
 * first malloc finds its bin empty and the cache not, so its refill waits
 * on the lock. The main thread releases it only once the lock's word says a
 * waiter went to sleep (2), so the test takes no timing and a lost wake-up
 * would hang it (ctest's timeout fails it). Then the worker's malloc came
 * from the cache, and the counters show one wait of 16 yields and a sleep. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#include "mallard.h"
#include "testhooks.h"

enum { SIZE = 64, FILL = 20000 };

static _Atomic int go;
static void* got;

static void* worker(void* arg) {
  (void)arg;
  while (!atomic_load(&go)) sched_yield();
  got = mld_malloc(SIZE);   /* an empty bin: a refill from the locked cache */
  return NULL;
}

int main(void) {
  static void* blocks[FILL];
  for (int i = 0; i < FILL; i++) REQUIRE((blocks[i] = mld_malloc(SIZE)) != NULL);
  for (int i = 0; i < FILL; i++) mld_free(blocks[i]);
  REQUIRE(mld_stat_get("transfer_insert_hits") > 0);
  long long hits = mld_stat_get("transfer_remove_hits");
  long long waits = mld_stat_get("transfer_waits"), sleeps = mld_stat_get("transfer_sleeps");
  long long yields = mld_stat_get("transfer_yields");

  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, worker, NULL) == 0);
  mld_test_transfer_lock(SIZE, 1);
  CHECKF(mld_test_transfer_lock_word(SIZE) == 1, "held, nobody waiting: %u", mld_test_transfer_lock_word(SIZE));
  atomic_store(&go, 1);
  while (mld_test_transfer_lock_word(SIZE) != 2) sched_yield();   /* the worker sleeps on it */
  mld_test_transfer_lock(SIZE, 0);
  REQUIRE(pthread_join(t, NULL) == 0);

  CHECKF(got != NULL, "the worker's malloc returned NULL");
  CHECKF(mld_stat_get("transfer_remove_hits") > hits, "the worker's refill did not come from the cache");
  CHECKF(mld_stat_get("transfer_waits") == waits + 1, "waits %lld -> %lld", waits, mld_stat_get("transfer_waits"));
  CHECKF(mld_stat_get("transfer_yields") >= yields + 16, "yields %lld -> %lld", yields, mld_stat_get("transfer_yields"));
  CHECKF(mld_stat_get("transfer_sleeps") >= sleeps + 1, "sleeps %lld -> %lld", sleeps, mld_stat_get("transfer_sleeps"));
  CHECKF(mld_test_transfer_lock_word(SIZE) == 0, "left held: %u", mld_test_transfer_lock_word(SIZE));
  mld_free(got);
  return check_report("transfer_lock");
}
