/* direct.c: frees straight to the page while a class's transfer cache is
 * full (mld_bin_t.direct; heap.c, _mld_heap_flush).
 *
 *   direct [threads] [rounds]
 *
 * burst: for sizes across the small and medium classes, one thread
 *   allocates more blocks than its bin and the class's transfer cache
 *   hold, tags them, frees them all (the transfer cache fills, then the
 *   blocks go to their pages one by one: direct_frees grows), allocates
 *   them again (no block handed out twice, every tag of the survivors
 *   intact), and frees them again: that second burst's first batches are
 *   taken by the transfer cache again (insert hits grow: the refill from it
 *   ended direct mode). A burst that fits the bin and the transfer
 *   cache goes there whole (burst_fits).
 * threads: threads free bursts of their own and of each other's blocks
 *   (remote blocks into a full bin go to their pages with one CAS), malloc
 *   in between and exit with direct mode on; every block's contents are
 *   checked when it is freed. Built twice, like stress.c: preloaded, and
 *   with -DMLD_TEST_TSAN against mallard_tsan under ThreadSanitizer. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

static long n_threads = 4, n_rounds = 40;

static int cmp_ptr(const void* a, const void* b) {
  uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

/* ---- burst ----------------------------------------------------------------- */

enum { BURST_MAX = 20000 };
static void* blocks[BURST_MAX];
static void* sorted[BURST_MAX];

static void tag(void* p, size_t size, int i) {
  memset(p, (int)(i & 0xff), size < 32 ? size : 32);
}

static int tagged(const void* p, size_t size, int i) {
  const unsigned char* c = p;
  for (size_t j = 0; j < (size < 32 ? size : 32); j++)
    if (c[j] != (unsigned char)(i & 0xff)) return 0;
  return 1;
}

/* Allocate n blocks of size into blocks[] and tag them; none may be
 * handed out twice. */
static void alloc_all(size_t size, int n) {
  for (int i = 0; i < n; i++) {
    REQUIRE((blocks[i] = MALLOC(size)) != NULL);
    tag(blocks[i], size, i);
  }
  memcpy(sorted, blocks, (size_t)n * sizeof(void*));
  qsort(sorted, (size_t)n, sizeof(void*), cmp_ptr);
  for (int i = 1; i < n; i++)
    if (sorted[i] == sorted[i - 1]) {
      fprintf(stderr, "size %zu: block %p handed out twice\n", size, sorted[i]);
      atomic_fetch_add(&failures, 1);
      break;
    }
}

/* A burst that fits the bin and the transfer cache (16384 slots for the
 * classes below 128 bytes: 4096 until the fifth speed round, 1024 before)
 * goes there whole: no direct free, every block handed out again, none
 * twice. */
static void burst_fits(void) {
  const size_t size = 16;
  const int n = 15000;
  for (int i = 0; i < n; i++) {
    REQUIRE((blocks[i] = MALLOC(size)) != NULL);
    tag(blocks[i], size, i);
  }
  long long direct0 = STAT_GET("direct_frees");
  for (int i = 0; i < n; i++) FREE(blocks[i]);
  long long direct1 = STAT_GET("direct_frees");
  if (direct1 != direct0) {
    fprintf(stderr, "size %zu: %d frees fit bin + transfer cache, yet %lld direct frees\n", size, n,
            direct1 - direct0);
    atomic_fetch_add(&failures, 1);
  }
  alloc_all(size, n);
  for (int i = 0; i < n; i++) {
    if (!tagged(blocks[i], size, i)) {
      fprintf(stderr, "size %zu: block %d corrupted\n", size, i);
      atomic_fetch_add(&failures, 1);
    }
    FREE(blocks[i]);
  }
}

static void burst(void) {
  /* counts above bin + transfer cache of each class (16384 slots at most,
   * 4 MiB of blocks: 4096 of 1 KiB, 1365 of 3 KiB, 204 of 20 KiB) */
  static const struct { size_t size; int n; } cases[] = {
      {16, 20000}, {64, 20000}, {250, 20000}, {1000, 6000}, {3000, 2000}, {20000, 300}};
  for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
    size_t size = cases[k].size;
    int n = cases[k].n;
    for (int i = 0; i < n; i++) {
      REQUIRE((blocks[i] = MALLOC(size)) != NULL);
      tag(blocks[i], size, i);
    }
    long long direct0 = STAT_GET("direct_frees");
    for (int i = 0; i < n; i++) {
      if (!tagged(blocks[i], size, i)) {
        fprintf(stderr, "size %zu: block %d corrupted before its free\n", size, i);
        atomic_fetch_add(&failures, 1);
      }
      FREE(blocks[i]);
    }
    long long direct1 = STAT_GET("direct_frees");
    if (direct1 <= direct0) {
      fprintf(stderr, "size %zu: %d frees in a burst, no direct free (%lld -> %lld)\n", size, n,
              direct0, direct1);
      atomic_fetch_add(&failures, 1);
    }
    /* again: blocks come from the bin, the transfer cache and the pages'
     * free lists; none twice, and writing them all corrupts nothing */
    alloc_all(size, n);
    long long hits0 = STAT_GET("transfer_insert_hits");
    for (int i = 0; i < n; i++) {
      if (!tagged(blocks[i], size, i)) {
        fprintf(stderr, "size %zu: block %d corrupted\n", size, i);
        atomic_fetch_add(&failures, 1);
      }
      FREE(blocks[i]);
    }
    if (STAT_GET("transfer_insert_hits") <= hits0) {
      fprintf(stderr, "size %zu: direct mode did not end (no insert hit in the second burst)\n", size);
      atomic_fetch_add(&failures, 1);
    }
  }
}

/* ---- threads ----------------------------------------------------------- */

enum { SLOTS = 8192, PER = 8000 };
static _Atomic(blk*) slots[SLOTS];

static blk* make(uint64_t* rng) {
  /* few classes, so bursts overflow their transfer caches */
  return make_sized(rng, (uint32_t)(16 + 16 * (next_rand(rng) % 2)));
}

static void* worker(void* arg) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
  blk* own[PER];
  for (long r = 0; r < n_rounds; r++) {
    for (int i = 0; i < PER; i++) own[i] = make(&rng);
    /* a quarter published (others free them), the rest freed here at once */
    for (int i = 0; i < PER / 4; i++) {
      blk* old = atomic_exchange(&slots[next_rand(&rng) % SLOTS], own[i]);
      own[i] = NULL;
      if (old) drop(old);
    }
    for (int i = 0; i < PER; i++)
      if (own[i]) drop(own[i]);
    if (r % 8 == 7) sched_yield();
  }
  return NULL;   /* exits with direct mode on in some bins */
}

static void threads(void) {
  long long direct0 = STAT_GET("direct_frees");
  run_generations(worker, 2, n_threads);
  drain_slots(slots, SLOTS);
  CHECK(STAT_GET("direct_frees") > direct0);
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  REQUIRE(n_threads >= 1 && n_threads <= 64 && n_rounds > 0);
#ifndef MLD_TEST_TSAN
  mallard_require_active("direct");
#endif
  burst_fits();
  burst();
  threads();
  CHECK(atomic_load(&failures) == 0);
  return check_report("direct");
}
