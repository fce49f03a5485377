/* remote_runs.c: remote frees pushed a run at a time onto a page's
 * thread-free list with their count in the same word, and collects that
 * take the count from it instead of walking the list (page.c, heap.c:
 * mld_heap_return_blocks).
 *
 *   remote_runs [pairs] [rounds]
 *
 * Pairs of threads: a producer allocates 60,000 blocks of 64 B (80 B,
 * 96 B, 112 B: a size class for each pair) a round
 * (far past bins and transfer cache, so the consumer's frees overflow to
 * the producer's pages as runs), tags each with the round and its index
 * (a block handed out twice in a round finds its own round's tag), and
 * hands them over; the consumer frees them, in order (long runs of one
 * page) in even rounds and shuffled (runs of one) in odd ones, then
 * collects. At the end everything is freed and collected: the pages the
 * producers took are given back (a used count left above zero keeps a
 * page forever; one below it would have handed out live blocks again).
 * Also built with -DMLD_TEST_TSAN against mallard_tsan. */
#include "entry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

enum { N = 60000, MAX_PAIRS = 4 };

typedef struct pair_s {
  uint64_t** blocks;
  long rounds;
  unsigned id;
  size_t size;   /* a class of the pair's own: no block crosses to another pair through a transfer cache */
  atomic_int turn;   /* 0: producer's, 1: consumer's, 2: done */
} pair_t;

static atomic_int failures;

static void* producer(void* arg) {
  pair_t* p = arg;
  for (long r = 0; r < p->rounds; r++) {
    while (atomic_load(&p->turn) != 0) sched_yield();
    uint64_t tag_base = ((uint64_t)p->id << 56) | ((uint64_t)(r + 1) << 24);
    for (uint32_t i = 0; i < N; i++) {
      uint64_t* b = MALLOC(p->size);
      if (b == NULL) {
        atomic_fetch_add(&failures, 1);
        continue;
      }
      if ((b[2] & ~(uint64_t)0xffffff) == tag_base) {
        fprintf(stderr, "round %ld: block %p handed out twice (index %llu and %u)\n", r, (void*)b,
                (unsigned long long)(b[2] & 0xffffff), i);
        atomic_fetch_add(&failures, 1);
      }
      b[2] = tag_base | i;
      b[p->size / 8 - 1] = tag_base | i;
      p->blocks[i] = b;
    }
    atomic_store(&p->turn, 1);
  }
  while (atomic_load(&p->turn) != 0) sched_yield();
  COLLECT(1);   /* the consumer's frees collected: every page empty */
  atomic_store(&p->turn, 2);
  return NULL;
}

static void* consumer(void* arg) {
  pair_t* p = arg;
  uint64_t rng = 0x2545f4914f6cdd1dull + p->id;
  for (long r = 0; r < p->rounds; r++) {
    while (atomic_load(&p->turn) != 1) sched_yield();
    if (r % 2 == 1) {
      for (uint32_t i = N - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(next_rand(&rng) % (i + 1));
        uint64_t* t = p->blocks[i];
        p->blocks[i] = p->blocks[j];
        p->blocks[j] = t;
      }
    }
    for (uint32_t i = 0; i < N; i++) {
      uint64_t* b = p->blocks[i];
      if (b == NULL) continue;
      if (b[2] != b[p->size / 8 - 1]) {
        fprintf(stderr, "block %p damaged: %#llx / %#llx\n", (void*)b, (unsigned long long)b[2],
                (unsigned long long)b[p->size / 8 - 1]);
        atomic_fetch_add(&failures, 1);
      }
      FREE(b);
    }
    COLLECT(1);
    atomic_store(&p->turn, 0);
  }
  return NULL;
}

int main(int argc, char** argv) {
  long pairs = argc > 1 ? atol(argv[1]) : 2, rounds = argc > 2 ? atol(argv[2]) : 10;
  if (pairs < 1) pairs = 1;
  if (pairs > MAX_PAIRS) pairs = MAX_PAIRS;
#ifndef MLD_TEST_TSAN
  mallard_require_active("remote_runs");
#endif
  static uint64_t* arrays[MAX_PAIRS][N];
  pair_t p[MAX_PAIRS];
  pthread_t t[2 * MAX_PAIRS];
  long long held0 = STAT("pages_fresh") - STAT("pages_released");
  for (long k = 0; k < pairs; k++) {
    p[k].blocks = arrays[k];
    p[k].rounds = rounds;
    p[k].id = (unsigned)k + 1;
    p[k].size = 64 + 16 * (size_t)k;
    atomic_init(&p[k].turn, 0);
    REQUIRE(pthread_create(&t[2 * k], NULL, producer, &p[k]) == 0);
    REQUIRE(pthread_create(&t[2 * k + 1], NULL, consumer, &p[k]) == 0);
  }
  for (long k = 0; k < 2 * pairs; k++) pthread_join(t[k], NULL);
  COLLECT(1);
  long long held = STAT("pages_fresh") - STAT("pages_released") - held0;
  CHECKF(atomic_load(&failures) == 0, "%d blocks handed out twice, damaged or failed", atomic_load(&failures));
  /* 60,000 x 64 B is 59 pages a producer; their pages all given back but
   * for a page or two a pair */
  CHECKF(held <= 2 * pairs, "%lld pages still held after everything was freed and collected", held);
  return check_report("remote_runs");
}
