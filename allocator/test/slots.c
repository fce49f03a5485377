/* slots.c: free's slot tables (a segment's per-64 KiB size class, which
 * free reads instead of the page struct: internal.h, mld_free_block_at)
 * follow pages that change size class.
 *
 *   slots [threads] [rounds]
 *
 * recycle: one thread, round after round, fills several pages with blocks
 *   of one size (small, medium, and now and then a huge block), checks each
 *   block's usable size against the size asked for (a block pushed into
 *   the wrong bin by a stale slot comes back to a malloc of another size:
 *   its usable size gives it away), frees them all and gives the pages
 *   back (mld_collect(1), MALLARD_DECAY_MS=0 in ctest), so the next round's
 *   size gets the same pages and slots with another class.
 * threads: threads do the same with sizes of their own, each freeing half
 *   of its blocks and half of another thread's (remote frees), every tag
 *   checked when freed.
 * Built twice: preloaded, and with -DMLD_TEST_TSAN against mallard_tsan
 * under ThreadSanitizer (the slot bytes are written by the thread that
 * gives a page its class and read by every thread that frees into it). */
#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

#ifdef MLD_TEST_TSAN
#define USABLE mld_usable_size
#define COLLECT mld_collect
#else
#define USABLE malloc_usable_size
static void COLLECT(int force) {
  void (*fn)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(fn != NULL);
  fn(force);
}
#endif

static long n_threads = 4, n_rounds = 60;

/* sizes that walk through small classes, medium ones and back, so pages
 * are handed from class to class */
static const uint32_t sizes[] = {24,  5000, 100,   40000, 16,   1000, 130000, 300,  8192,
                                 48,  9000, 2048,  64,    600,  20000, 160,    3000, 128};
enum { N_SIZES = sizeof sizes / sizeof sizes[0], MAX_BLOCKS = 2048, HUGE_SIZE = 300000 };

/* A block of this size from a bin of the right class: usable size within
 * the classes' 25% (+16 B) of what was asked. */
static blk* take(uint64_t* rng, uint32_t size) {
  blk* b = make_sized(rng, size);
  if (b == NULL) return NULL;
  size_t u = USABLE(b);
  if (u < size || u > size + size / 4 + 16) {
    fprintf(stderr, "malloc(%u) returned %p of usable size %zu: another class's block\n", size,
            (void*)b, u);
    atomic_fetch_add(&failures, 1);
  }
  return b;
}

/* Enough blocks of size to fill two pages or more. */
static int count_for(uint32_t size) {
  uint32_t page = size > 8192 ? (1u << 20) : (1u << 16);
  uint32_t n = 2 * page / size + 4;
  return n > MAX_BLOCKS ? MAX_BLOCKS : (int)n;
}

static void recycle(void) {
  static blk* live[MAX_BLOCKS];
  uint64_t rng = 0x5107ull;
  for (long r = 0; r < n_rounds; r++) {
    uint32_t size = sizes[r % N_SIZES];
    int n = count_for(size);
    for (int i = 0; i < n; i++) live[i] = take(&rng, size);
    blk* huge = r % 5 == 0 ? take(&rng, HUGE_SIZE) : NULL;
    for (int i = 0; i < n; i++)
      if (live[i]) drop(live[i]);
    if (huge) drop(huge);
    COLLECT(1);
  }
  CHECK(STAT_GET("pages_released") > 0);   /* the pages did go back to their segments */
}

/* ---- threads ------------------------------------------------------------------ */

enum { SHARED = 64 * 1024 };
static _Atomic(blk*) shared[SHARED];

static void* worker(void* arg) {
  long id = (long)(uintptr_t)arg % 64;
  uint64_t rng = 0x9e3779b97f4a7c15ull * (uint64_t)(id + 1);
  blk** live = MALLOC(sizeof(blk*) * MAX_BLOCKS);
  REQUIRE(live != NULL);
  for (long r = 0; r < n_rounds; r++) {
    uint32_t size = sizes[(r + (unsigned long)id * 5) % N_SIZES];
    int n = count_for(size) / 2;
    for (int i = 0; i < n; i++) live[i] = take(&rng, size);
    /* half to the shared slots (another thread frees them), half freed here;
     * blocks found in the slots are another thread's: remote frees */
    for (int i = 0; i < n; i++) {
      if (live[i] == NULL) continue;
      if (i % 2 == 0) {
        blk* old = atomic_exchange(&shared[(next_rand(&rng) % SHARED)], live[i]);
        if (old) drop(old);
      } else {
        drop(live[i]);
      }
    }
    for (int k = 0; k < 64; k++) {
      blk* old = atomic_exchange(&shared[(next_rand(&rng) % SHARED)], NULL);
      if (old) drop(old);
    }
    COLLECT(1);
  }
  FREE(live);
  return NULL;
}

int main(int argc, char** argv) {
#ifndef MLD_TEST_TSAN
  mallard_require_active("slots");
#endif
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  if (n_threads < 1 || n_threads > 64 || n_rounds < 1) {
    fprintf(stderr, "usage: slots [threads 1..64] [rounds]\n");
    return 2;
  }
  recycle();
  run_generations(worker, 2, n_threads);
  drain_slots(shared, SHARED);
  CHECKF(atomic_load(&failures) == 0, "%ld failure(s)", atomic_load(&failures));
  return check_report("slots");
}
