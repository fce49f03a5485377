/* foreign.c: the bins (stacks of pointers) and their foreign stacks
 * (blocks of other threads' pages freed into an empty bin,
 * MALLARD_REMOTE=bin; internal.h, mld_bin_take_foreign).
 *
 *   foreign [threads] [rounds]
 *
 * stacks: for sizes across the classes, pushes and pops across every flush
 *   and refill boundary (3 bins' worth freed and allocated again, in
 *   several orders): every block comes back intact, and no block is handed
 *   out twice while live.
 * no_false_sharing: the main thread allocates 16-byte blocks back to back
 *   and hands one to a fresh thread, which frees it and then mallocs the
 *   same size a few times: it must never get the freed block back (a block
 *   on the cache line of blocks other threads use: cache-scratch), while
 *   its own blocks do come back to it (local reuse).
 * reuse: a thread that frees 64 blocks of another thread and then mallocs
 *   64 of that size gets some of them back (reuse of remote frees kept).
 * stress: threads free bursts of each other's blocks of every small size
 *   (into empty bins too, so foreign stacks fill and overflow to the
 *   transfer cache), malloc in between (taking foreign stacks), and exit
 *   with full stacks (drained at exit); every block's contents are
 *   checked. Built twice, like stress.c: preloaded, and with
 *   -DMLD_TEST_TSAN against mallard_tsan under ThreadSanitizer. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

static long n_threads = 4, n_rounds = 200;

/* ---- stacks --------------------------------------------------------------- */

enum { LIVE = 600 };
static void* live[LIVE];

static int seen_twice(void** v, int n) {
  for (int i = 0; i < n; i++)
    for (int j = i + 1; j < n; j++)
      if (v[i] == v[j]) return 1;
  return 0;
}

static void stacks(void) {
  static const size_t sizes[] = {16, 48, 112, 300, 1000, 3000, 9000, 40000, 120000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t size = sizes[k];
    for (int round = 0; round < 3; round++) {
      for (int i = 0; i < LIVE; i++) {
        REQUIRE((live[i] = MALLOC(size)) != NULL);
        memset(live[i], (int)(i + round), size < 64 ? size : 64);
      }
      if (seen_twice(live, LIVE)) {
        fprintf(stderr, "size %zu round %d: a block handed out twice\n", size, round);
        atomic_fetch_add(&failures, 1);
      }
      for (int i = 0; i < LIVE; i++) {
        unsigned char* p = live[i];
        for (size_t j = 0; j < (size < 64 ? size : 64); j++)
          if (p[j] != (unsigned char)(i + round)) {
            fprintf(stderr, "size %zu block %d corrupted\n", size, i);
            atomic_fetch_add(&failures, 1);
            break;
          }
      }
      /* free in three orders: newest first, oldest first, interleaved */
      for (int i = 0; i < LIVE; i++) {
        int j = round == 0 ? LIVE - 1 - i : round == 1 ? i : (i * 7) % LIVE;
        FREE(live[j]);
      }
    }
  }
}

/* ---- no_false_sharing ------------------------------------------------- */

enum { NEIGHBOURS = 8, OWN = 12 };
static void* neighbours[NEIGHBOURS];

static void* lone_freer(void* arg) {
  void* foreign = arg;
  FREE(foreign);
  void* mine[OWN];
  for (int i = 0; i < OWN; i++) {
    mine[i] = MALLOC(16);
    if (mine[i] == foreign) {
      fprintf(stderr, "malloc %d handed back the foreign block %p just freed\n", i, foreign);
      atomic_fetch_add(&failures, 1);
    }
    memset(mine[i], 0x5a, 16);
  }
  for (int i = 0; i < OWN; i++) FREE(mine[i]);
  /* a block of this thread's own page (a size nobody else used), freed, is
   * reused at once */
  void* again = MALLOC(5000);
  FREE(again);
  void* back = MALLOC(5000);
  if (back != again) {
    fprintf(stderr, "own block %p not reused (got %p)\n", again, back);
    atomic_fetch_add(&failures, 1);
  }
  FREE(back);
  return NULL;
}

static void no_false_sharing(void) {
  for (int i = 0; i < NEIGHBOURS; i++) REQUIRE((neighbours[i] = MALLOC(16)) != NULL);
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, lone_freer, neighbours[3]) == 0);
  REQUIRE(pthread_join(t, NULL) == 0);
  neighbours[3] = NULL;
  for (int i = 0; i < NEIGHBOURS; i++) FREE(neighbours[i]);
}

/* ---- reuse ---------------------------------------------------------------- */

enum { REUSE = 64 };
static void* handed[REUSE];

static void* reuser(void* arg) {
  (void)arg;
  void* first = MALLOC(48);   /* the bin gets a page's batch of this thread's own blocks */
  for (int i = 0; i < REUSE; i++) FREE(handed[i]);   /* 64 foreign blocks: a foreign list */
  int found = 0;   /* once its own blocks are used up, the empty bin takes the foreign list */
  void* got[REUSE];
  for (int i = 0; i < REUSE; i++) {
    got[i] = MALLOC(48);
    for (int j = 0; j < REUSE; j++) found += got[i] == handed[j];
  }
  if (found == 0) {
    fprintf(stderr, "none of %d foreign blocks freed here was reused by this thread\n", REUSE);
    atomic_fetch_add(&failures, 1);
  }
  for (int i = 0; i < REUSE; i++) FREE(got[i]);
  FREE(first);
  return NULL;
}

static void reuse(void) {
  for (int i = 0; i < REUSE; i++) REQUIRE((handed[i] = MALLOC(48)) != NULL);
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, reuser, NULL) == 0);
  REQUIRE(pthread_join(t, NULL) == 0);
}

/* ---- stress -------------------------------------------------------------- */

enum { SLOTS = 4096, BURST = 300 };
static _Atomic(blk*) slots[SLOTS];

static blk* make(uint64_t* rng) {
  return make_sized(rng, (uint32_t)(16 + next_rand(rng) % 1024));
}

static void* stresser(void* arg) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
  for (long r = 0; r < n_rounds; r++) {
    /* a burst of frees of whatever other threads left in the slots */
    for (int i = 0; i < BURST; i++) {
      blk* old = atomic_exchange(&slots[next_rand(&rng) % SLOTS], NULL);
      if (old) drop(old);
    }
    /* then mallocs (taking foreign lists), published for the others */
    for (int i = 0; i < BURST; i++) {
      blk* b = make(&rng);
      if (!b) continue;
      blk* old = atomic_exchange(&slots[next_rand(&rng) % SLOTS], b);
      if (old) drop(old);
    }
    if (r % 16 == 15) sched_yield();
  }
  return NULL;   /* exits with its foreign lists full: drained at exit */
}

static void stress(void) {
  long long remote0 = STAT_GET("remote_frees");
  run_generations(stresser, 3, n_threads);   /* heaps that exit and new ones */
  drain_slots(slots, SLOTS);
  CHECK(STAT_GET("remote_frees") > remote0);
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  REQUIRE(n_threads >= 2 && n_threads <= 64 && n_rounds > 0);
#ifndef MLD_TEST_TSAN
  mallard_require_active("foreign");
#endif
  stacks();
  no_false_sharing();
  reuse();
  stress();
  CHECK(atomic_load(&failures) == 0);
  return check_report("foreign");
}
