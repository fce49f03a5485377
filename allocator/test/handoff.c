/* handoff.c: Larson's server pattern (mimalloc-bench's larson): each
 * thread starts its successor as it exits and hands it its blocks, which
 * the successor frees after their owner is gone (alloc.c,
 * _mld_alloc_free_remote: a free into an abandoned page takes the page
 * over; internal.h, mld_free_block_at: other remote frees go into the bin).
 *
 *   handoff [chains] [generations]
 *
 * Each chain's first thread allocates 2,000 blocks of 8..1000 B (its own
 * pages); every generation replaces random blocks 20,000 times (free the
 * victim, allocate a new one), then starts its successor (detached) and
 * exits. Each block carries its tag (chain, slot, serial) in its first and
 * last word, and the array the tag it was given: a block handed out twice
 * (to two slots or two chains) or damaged is found when it is freed. The
 * pages the generations leave behind must be taken over by their
 * successors' frees (pages_reclaimed grows by at least one a generation),
 * and when the last generation of every chain has freed everything and it
 * is collected, the pages are given back but for a few. Also built with
 * -DMLD_TEST_TSAN against mallard_tsan, and run with MALLARD_REMOTE=page. */
#include "entry.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

enum { K = 2000, OPS = 20000, MAX_CHAINS = 4, MIN_SIZE = 8, MAX_SIZE = 1000 };

typedef struct chain_s {
  uint64_t* blocks[K];
  size_t sizes[K];
  uint64_t tags[K];
  uint64_t rng, serial;
  unsigned id;
  long generations_left;
} chain_t;

static atomic_int failures, chains_done;
static pthread_attr_t detached;

static void put(chain_t* c, int i) {
  size_t size = MIN_SIZE + (size_t)(next_rand(&c->rng) % (MAX_SIZE - MIN_SIZE));
  uint64_t* b = MALLOC(size);
  if (b == NULL) {
    atomic_fetch_add(&failures, 1);
    c->blocks[i] = NULL;
    return;
  }
  uint64_t tag = ((uint64_t)c->id << 56) | ((uint64_t)i << 32) | (++c->serial & 0xffffffffu);
  b[0] = tag;
  b[size / 8 - 1] = tag;
  c->blocks[i] = b;
  c->sizes[i] = size;
  c->tags[i] = tag;
}

static void drop(chain_t* c, int i) {
  uint64_t* b = c->blocks[i];
  if (b == NULL) return;
  if (b[0] != c->tags[i] || b[c->sizes[i] / 8 - 1] != c->tags[i]) {
    fprintf(stderr, "chain %u slot %d: block %p handed out twice or damaged (%#llx / %#llx, want %#llx)\n",
            c->id, i, (void*)b, (unsigned long long)b[0], (unsigned long long)b[c->sizes[i] / 8 - 1],
            (unsigned long long)c->tags[i]);
    atomic_fetch_add(&failures, 1);
  }
  FREE(b);
  c->blocks[i] = NULL;
}

static void* generation(void* arg) {
  chain_t* c = arg;
  for (int n = 0; n < OPS; n++) {
    int i = (int)(next_rand(&c->rng) % K);
    drop(c, i);
    put(c, i);
  }
  if (--c->generations_left > 0) {
    pthread_t t;
    if (pthread_create(&t, &detached, generation, c) == 0) return NULL;
    atomic_fetch_add(&failures, 1);
  }
  for (int i = 0; i < K; i++) drop(c, i);   /* the last one frees everything */
  atomic_fetch_add(&chains_done, 1);
  return NULL;
}

static void* first(void* arg) {
  chain_t* c = arg;
  for (int i = 0; i < K; i++) put(c, i);
  return generation(c);
}

int main(int argc, char** argv) {
  long chains = argc > 1 ? atol(argv[1]) : 2, generations = argc > 2 ? atol(argv[2]) : 50;
  if (chains < 1) chains = 1;
  if (chains > MAX_CHAINS) chains = MAX_CHAINS;
  if (generations < 2) generations = 2;
#ifndef MLD_TEST_TSAN
  mallard_require_active("handoff");
#endif
  REQUIRE(pthread_attr_init(&detached) == 0);
  REQUIRE(pthread_attr_setdetachstate(&detached, PTHREAD_CREATE_DETACHED) == 0);
  static chain_t c[MAX_CHAINS];
  FREE(MALLOC(16));   /* main's own heap: the one heap left when the chains are done */
  long long held0 = STAT("pages_fresh") - STAT("pages_released");
  long long reclaimed0 = STAT("pages_reclaimed");
  for (long k = 0; k < chains; k++) {
    c[k].id = (unsigned)k + 1;
    c[k].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(k + 1);
    c[k].generations_left = generations;
    pthread_t t;
    REQUIRE(pthread_create(&t, &detached, first, &c[k]) == 0);
  }
  while (atomic_load(&chains_done) < chains) sched_yield();
  /* the last generations may still be exiting: wait until their heaps are gone */
  while (STAT("threads_ended") < STAT("threads_started") - 1) sched_yield();
  COLLECT(1);
  long long reclaimed = STAT("pages_reclaimed") - reclaimed0;
  long long held = STAT("pages_fresh") - STAT("pages_released") - held0;
  CHECKF(atomic_load(&failures) == 0, "%d blocks handed out twice, damaged or failed", atomic_load(&failures));
  CHECKF(reclaimed >= chains * (generations - 1), "%lld pages taken over in %ld generations", reclaimed,
         chains * (generations - 1));
  CHECKF(held <= 4 * chains, "%lld pages still held after everything was freed and collected", held);
  printf("handoff: %ld chains x %ld generations, %lld pages taken over, %lld held at the end\n", chains,
         generations, reclaimed, held);
  return check_report("handoff");
}
