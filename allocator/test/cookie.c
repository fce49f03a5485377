/* cookie.c: the mark a freed block carries (internal.h, mld_block_cookie:
 * the address of the block's page struct, in the block's second word; the
 * free-list link in its first).
 *
 *   cookie [threads] [rounds]
 *
 * lookalikes: live blocks of every small class whose first two words hold
 *   what programs keep there (their own address twice: an empty circular
 *   list head; zero; all ones; the address of another block) are freed in
 *   LIFO, FIFO and scattered order, enough of them to go through the bins,
 *   the transfer cache and the pages' free lists: no report (one would
 *   abort the test).
 * stress: threads allocate blocks of every small class holding their own
 *   address in both words (list heads) and a tag at their end, free half
 *   of them and hand the other half to the next thread, which frees them
 *   (remote frees: into bins, or with MALLARD_REMOTE=page onto the pages'
 *   thread-free lists, linked through the first word); every block is
 *   checked before its free: no free of another block wrote into a live
 *   one, and no block was handed out twice while live.
 * Built twice: preloaded (malloc, free), and with -DMLD_TEST_TSAN against
 * mallard_tsan under ThreadSanitizer. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "tagged.h"

static long n_threads = 4, n_rounds = 20;

enum { N = 3000 };
static const size_t SIZES[] = {16, 32, 48, 64, 96, 128, 160, 256, 320, 512, 640, 1024, 2560, 8192};
#define N_SIZES (sizeof SIZES / sizeof SIZES[0])

/* what a live block's first two words may hold */
static void fill(void** w, int kind, void* other) {
  switch (kind) {
    case 0: w[0] = w[1] = (void*)w; break;            /* empty circular list head */
    case 1: w[0] = w[1] = NULL; break;
    case 2: w[0] = w[1] = (void*)UINTPTR_MAX; break;
    default: w[0] = other; w[1] = (void*)w; break;    /* a link to another block */
  }
}

static void lookalikes(void) {
  static void* blocks[N];
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  for (size_t k = 0; k < N_SIZES; k++) {
    for (int kind = 0; kind < 4; kind++) {
      for (int order = 0; order < 3; order++) {
        for (int i = 0; i < N; i++) {
          REQUIRE((blocks[i] = MALLOC(SIZES[k])) != NULL);
          fill((void**)blocks[i], kind, i ? blocks[i - 1] : NULL);
        }
        if (order == 2)  /* scattered: a shuffle */
          for (int i = N - 1; i > 0; i--) {
            int j = (int)(next_rand(&rng) % (uint64_t)(i + 1));
            void* t = blocks[i];
            blocks[i] = blocks[j];
            blocks[j] = t;
          }
        for (int i = 0; i < N; i++) FREE(blocks[order == 0 ? N - 1 - i : i]);
      }
    }
  }
}

/* ---- stress ------------------------------------------------------------- */

enum { PER_ROUND = 400 };
typedef struct hand {
  void* _Atomic slot[PER_ROUND];
} hand;
static hand* hands;   /* hands[i]: blocks thread i passes to thread i + 1 */
static pthread_barrier_t barrier;

typedef struct head {
  void* w[2];          /* the block's own address, twice */
  uint64_t tag;
  uint32_t size;
} head;

static head* make(uint64_t* rng, size_t size) {
  head* b = MALLOC(size);
  if (!b) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  b->w[0] = b->w[1] = b;
  b->tag = next_rand(rng);
  b->size = (uint32_t)size;
  ((unsigned char*)b)[size - 1] = (unsigned char)b->tag;
  return b;
}

static void check_free(head* b) {
  if (b->w[0] != b || b->w[1] != b || ((unsigned char*)b)[b->size - 1] != (unsigned char)b->tag) {
    fprintf(stderr, "live block %p (size %u) was written while live\n", (void*)b, b->size);
    atomic_fetch_add(&failures, 1);
  }
  FREE(b);
}

static void* worker(void* arg) {
  long me = (long)arg;
  uint64_t rng = 0x2545f4914f6cdd1dull ^ (uint64_t)(me + 1) * 0x9e3779b97f4a7c15ull;
  static _Thread_local head* mine[PER_ROUND];
  for (long r = 0; r < n_rounds; r++) {
    for (int i = 0; i < PER_ROUND; i++) {
      size_t size = SIZES[next_rand(&rng) % N_SIZES];
      mine[i] = make(&rng, size < sizeof(head) + 1 ? sizeof(head) + 1 : size);
    }
    for (int i = 0; i < PER_ROUND; i++)
      for (int j = i + 1; j < PER_ROUND; j++)
        if (mine[i] == mine[j]) {
          fprintf(stderr, "block %p handed out twice while live\n", (void*)mine[i]);
          atomic_fetch_add(&failures, 1);
        }
    for (int i = 0; i < PER_ROUND; i++) {
      if (i % 2) atomic_store(&hands[me].slot[i], mine[i]);
      else check_free(mine[i]);
    }
    pthread_barrier_wait(&barrier);
    long from = (me + n_threads - 1) % n_threads;
    for (int i = 1; i < PER_ROUND; i += 2) {
      head* b = atomic_exchange(&hands[from].slot[i], NULL);
      if (b) check_free(b);
    }
    pthread_barrier_wait(&barrier);
  }
  return NULL;
}

int main(int argc, char** argv) {
#ifndef MLD_TEST_TSAN
  mallard_require_active("cookie");
#endif
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
  REQUIRE(n_threads >= 2 && n_rounds >= 1);
  lookalikes();
  hands = calloc((size_t)n_threads, sizeof(hand));
  REQUIRE(hands != NULL);
  REQUIRE(pthread_barrier_init(&barrier, NULL, (unsigned)n_threads) == 0);
  pthread_t t[64];
  REQUIRE(n_threads <= 64);
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)i) == 0);
  for (long i = 0; i < n_threads; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&barrier);
  free(hands);
  check_failures += (int)atomic_load(&failures);
  return check_report("cookie");
}
