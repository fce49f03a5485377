/* take.c: refills that walk several pages' free lists side by side
 * (heap.c, mld_heap_refill_pages; page.c, _mld_page_take_lists).
 *
 *   take [threads] [rounds]
 *
 * scatter: one thread allocates blocks of one class over ~15 pages, frees
 *   a random 60% in random order (past the bin and the transfer cache, so
 *   the pages' free lists fill: direct_frees grows), allocates as many
 *   again (refills from several pages' lists at once): no block handed out
 *   twice, none that is still live, every survivor's contents intact. The
 *   scattered ones freed again and collected, another class's blocks
 *   allocated: the survivors are still intact (no page given back under
 *   them). Then everything is freed and mld_collect(1) must give the pages back
 *   (pages_released grows by at least the pages used): a page's count of
 *   live blocks stayed exact through the refills.
 * threads: threads allocate, hand a third of their blocks to the others
 *   through a slot array (remote frees, collected by the refills), free a
 *   random half of the rest at once, allocate again, and check every block
 *   when it is freed. Built twice: preloaded, and with -DMLD_TEST_TSAN
 *   against mallard_tsan under ThreadSanitizer. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

#ifdef MLD_TEST_TSAN
#define COLLECT mld_collect
#else
static void COLLECT(int force) {
  void (*collect)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(collect != NULL);
  collect(force);
}
#endif

static long n_threads = 4, n_rounds = 20;

static int cmp_ptr(const void* a, const void* b) {
  uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

/* ---- scatter ------------------------------------------------------------- */

enum { N = 20000, SIZE = 48 };
static unsigned char* blocks[N];
static void* sorted[N];
static int order[N];

static void fill(unsigned char* p, int i) { memset(p, (int)(i * 7 + 1) & 0xff, SIZE); }

static int intact(const unsigned char* p, int i) {
  for (int j = 0; j < SIZE; j++)
    if (p[j] != (unsigned char)((i * 7 + 1) & 0xff)) return 0;
  return 1;
}

static void scatter(void) {
  uint64_t rng = 0x2545f4914f6cdd1dULL;
  for (int i = 0; i < N; i++) {
    REQUIRE((blocks[i] = MALLOC(SIZE)) != NULL);
    fill(blocks[i], i);
    order[i] = i;
  }
  for (int i = N - 1; i > 0; i--) {
    int k = (int)(next_rand(&rng) % (uint64_t)(i + 1));
    int t = order[i];
    order[i] = order[k];
    order[k] = t;
  }
  const int nfree = N * 97 / 100;
  long long direct0 = STAT_GET("direct_frees");
  for (int i = 0; i < nfree; i++) {
    FREE(blocks[order[i]]);
    blocks[order[i]] = NULL;
  }
  CHECKF(STAT_GET("direct_frees") > direct0, "%d scattered frees sent none to the pages", nfree);
  /* again: from the bin, the transfer cache and the pages' lists */
  for (int i = 0; i < nfree; i++) {
    REQUIRE((blocks[order[i]] = MALLOC(SIZE)) != NULL);
    fill(blocks[order[i]], order[i]);
  }
  memcpy(sorted, blocks, sizeof blocks);
  qsort(sorted, N, sizeof(void*), cmp_ptr);
  for (int i = 1; i < N; i++)
    if (sorted[i] == sorted[i - 1]) {
      fprintf(stderr, "block %p handed out twice (or while live)\n", sorted[i]);
      atomic_fetch_add(&failures, 1);
      break;
    }
  for (int i = 0; i < N; i++)
    if (!intact(blocks[i], i)) {
      fprintf(stderr, "block %d (%p) corrupted\n", i, (void*)blocks[i]);
      atomic_fetch_add(&failures, 1);
      break;
    }
  /* the scattered ones freed again and everything collected: a page whose
   * count of live blocks fell short would be given back with survivors on
   * it and reused by the blocks of another class allocated next */
  for (int i = 0; i < nfree; i++) {
    FREE(blocks[order[i]]);
    blocks[order[i]] = NULL;
  }
  COLLECT(1);
  enum { OTHER = 64 };
  static void* other[N];
  for (int i = 0; i < N; i++) {
    REQUIRE((other[i] = MALLOC(OTHER)) != NULL);
    memset(other[i], 0xee, OTHER);
  }
  for (int i = nfree; i < N; i++)
    if (!intact(blocks[order[i]], order[i])) {
      fprintf(stderr, "survivor %d (%p) overwritten after a collect\n", order[i], (void*)blocks[order[i]]);
      atomic_fetch_add(&failures, 1);
      break;
    }
  for (int i = 0; i < N; i++) FREE(other[i]);
  for (int i = 0; i < nfree; i++) REQUIRE((blocks[order[i]] = MALLOC(SIZE)) != NULL);
  long long released0 = STAT_GET("pages_released");
  for (int i = 0; i < N; i++) FREE(blocks[i]);
  COLLECT(1);
  long long released = STAT_GET("pages_released") - released0;
  /* 20000 blocks of 48 bytes fill at least 14 pages of 64 KiB */
  CHECKF(released >= 14, "all %d blocks freed and collected, but only %lld pages given back", N, released);
}

/* ---- threads ------------------------------------------------------------- */

enum { SLOTS = 4096, PER = 6000 };
static _Atomic(blk*) slots[SLOTS];

static void* worker(void* arg) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
  static _Thread_local blk* own[PER];
  for (long r = 0; r < n_rounds; r++) {
    for (int i = 0; i < PER; i++) own[i] = make_sized(&rng, (uint32_t)(16 + 16 * (next_rand(&rng) % 3)));
    for (int i = 0; i < PER / 3; i++) {
      blk* old = atomic_exchange(&slots[next_rand(&rng) % SLOTS], own[i]);
      own[i] = NULL;
      if (old) drop(old);
    }
    for (int i = PER / 3; i < PER; i++)
      if (next_rand(&rng) % 2) {
        drop(own[i]);
        own[i] = NULL;
      }
    for (int i = 0; i < PER; i++)
      if (!own[i]) own[i] = make_sized(&rng, (uint32_t)(16 + 16 * (next_rand(&rng) % 3)));
    for (int i = 0; i < PER; i++) drop(own[i]);
    if (r % 4 == 3) sched_yield();
  }
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  REQUIRE(n_threads >= 1 && n_threads <= 64 && n_rounds > 0);
#ifndef MLD_TEST_TSAN
  mallard_require_active("take");
#endif
  scatter();
  run_generations(worker, 2, n_threads);
  drain_slots(slots, SLOTS);
  CHECK(atomic_load(&failures) == 0);
  return check_report("take");
}
