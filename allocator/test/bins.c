/* bins.c: the adaptive bin limit (heap.c: mld_heap_grow, mld_heap_flushed).
 * A bin that flushed a batch since its last refill grows by a batch at the
 * next refill, up to its class's cap; one that flushes more than three
 * batches without a refill shrinks by a batch, down to its base limit.
 *
 *   bins [threads] [rounds]
 *
 * grow: one thread allocates 128 blocks of 1 KiB and frees them all, over
 *   and over (the transfer workload at one thread): bin_grows counts, and
 *   after a few rounds the bursts stay in the bin (no transfer-cache insert
 *   or remove, no further growth); no block is handed out while live,
 *   every block intact when freed.
 * shrink: the same thread then frees 2,000 blocks it allocated first (a
 *   burst far larger than the bin, no refill in between): bin_shrinks
 *   counts, and the 128-block rounds grow the bin again.
 * threads: threads run bursts of random sizes (32 B .. 6 KiB) and lengths,
 *   free their own blocks and each other's (remote frees into an empty bin
 *   wait on its foreign stack, and the two stacks trade places: their
 *   limits follow the bin's), exit and are replaced (a recycled heap starts
 *   at the base limit); every block is checked when freed and is never
 *   handed out while live. Built twice, like direct.c: preloaded, and with
 *   -DMLD_TEST_TSAN against mallard_tsan under ThreadSanitizer. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

static long n_threads = 4, n_rounds = 40;

/* A live block: a header (tag, size) and, in its last 8 bytes, its
 * address xor LIVE: a block handed out while live still carries it
 * (the allocator writes only a free block's first two words). */
#define LIVE 0x6c69766562696e73ull

typedef struct hdr {
  uint64_t tag;
  uint64_t size;
  uint64_t pad;   /* the live mark never overlaps the allocator's two words */
} hdr;

static uint64_t* live_mark(hdr* h) { return (uint64_t*)((char*)h + h->size - 8); }

static hdr* get(size_t size, uint64_t tag) {
  hdr* h = MALLOC(size);
  REQUIRE(h != NULL);
  uint64_t* mark = (uint64_t*)((char*)h + size - 8);
  if (*mark == ((uintptr_t)h ^ LIVE)) {
    fprintf(stderr, "block %p (size %zu) handed out while live\n", (void*)h, size);
    atomic_fetch_add(&failures, 1);
  }
  h->tag = tag;
  h->size = size;
  *mark = (uintptr_t)h ^ LIVE;
  return h;
}

static void put(hdr* h, uint64_t tag) {
  if (h->tag != tag || *live_mark(h) != ((uintptr_t)h ^ LIVE)) {
    fprintf(stderr, "block %p (size %llu) corrupted\n", (void*)h, (unsigned long long)h->size);
    atomic_fetch_add(&failures, 1);
  }
  *live_mark(h) = 0;
  FREE(h);
}

/* ---- one thread ------------------------------------------------------------ */

enum { BURST = 128, BIG = 2000 };
static hdr* blocks[BIG];

static void round_trip(size_t size, int n) {
  for (int i = 0; i < n; i++) blocks[i] = get(size, (uint64_t)i * 2654435761u);
  for (int i = 0; i < n; i++) put(blocks[i], (uint64_t)i * 2654435761u);
}

static void grow_and_shrink(void) {
  long long grows0 = STAT_GET("bin_grows");
  for (int r = 0; r < 8; r++) round_trip(1024, BURST);
  long long grows1 = STAT_GET("bin_grows");
  CHECKF(grows1 > grows0, "128-block rounds of 1 KiB: no bin growth (%lld)", grows1 - grows0);
  /* grown: the rounds stay in the bin */
  long long ins = STAT_GET("transfer_insert_hits"), rem = STAT_GET("transfer_remove_hits");
  for (int r = 0; r < 20; r++) round_trip(1024, BURST);
  CHECKF(STAT_GET("transfer_insert_hits") == ins && STAT_GET("transfer_remove_hits") == rem,
         "a grown bin still sent its rounds through the transfer cache (%lld inserts, %lld removes)",
         STAT_GET("transfer_insert_hits") - ins, STAT_GET("transfer_remove_hits") - rem);
  CHECKF(STAT_GET("bin_grows") == grows1, "the bin kept growing in its steady state");

  /* a burst far larger than the bin, freed without a refill: shrinks */
  long long shrinks0 = STAT_GET("bin_shrinks");
  round_trip(1024, BIG);
  long long shrinks = STAT_GET("bin_shrinks") - shrinks0;
  CHECKF(shrinks >= 1, "a %d-block burst freed at once: no shrink", BIG);
  CHECKF(shrinks <= grows1 - grows0, "shrank %lld times after %lld growths: below the base limit", shrinks,
         grows1 - grows0);
  long long grows2 = STAT_GET("bin_grows");
  for (int r = 0; r < 8; r++) round_trip(1024, BURST);
  CHECKF(STAT_GET("bin_grows") > grows2, "no growth after the shrink");
  /* other classes, each up to its cap and back */
  static const size_t sizes[] = {32, 320, 700, 1500, 2048, 3000, 4096, 6000, 20000, 100000};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    for (int r = 0; r < 8; r++) round_trip(sizes[k], BURST);
    round_trip(sizes[k], sizes[k] > 8192 ? 200 : BIG);
  }
}

/* ---- threads ------------------------------------------------------------- */

enum { SLOTS = 4096, PER = 600 };
static _Atomic(hdr*) slots[SLOTS];

static void* worker(void* arg) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
  hdr* own[PER];
  for (long r = 0; r < n_rounds; r++) {
    size_t size = 32 + (size_t)(next_rand(&rng) % 6144);
    int n = 1 + (int)(next_rand(&rng) % PER);
    for (int i = 0; i < n; i++) own[i] = get(size, (uintptr_t)&own[i]);
    /* some go to other threads (they free them: remote frees), some
     * rounds repeat to grow the bin, the rest are freed here at once */
    for (int i = 0; i < n; i++) {
      if (next_rand(&rng) % 4 != 0) continue;
      own[i]->tag = 0;
      hdr* old = atomic_exchange(&slots[next_rand(&rng) % SLOTS], own[i]);
      own[i] = NULL;
      if (old) put(old, 0);
    }
    for (int i = 0; i < n; i++)
      if (own[i]) put(own[i], (uintptr_t)&own[i]);
    if (r % 8 == 7) sched_yield();
  }
  return NULL;
}

static void threads(void) {
  run_generations(worker, 3, n_threads);
  for (int i = 0; i < SLOTS; i++) {
    hdr* b = atomic_exchange(&slots[i], NULL);
    if (b) put(b, 0);
  }
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  REQUIRE(n_threads >= 1 && n_threads <= 64 && n_rounds > 0);
#ifndef MLD_TEST_TSAN
  mallard_require_active("bins");
#endif
  grow_and_shrink();
  threads();
  CHECK(atomic_load(&failures) == 0);
  return check_report("bins");
}
