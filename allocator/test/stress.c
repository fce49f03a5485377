/* stress.c: multi-threaded stress with cross-thread frees and thread churn.
 *
 *   stress [threads] [ops per thread] [generations]
 *
 * exchange phase: every thread allocates blocks of mixed sizes (small,
 * medium, some huge), tags them, and swaps them into a shared array of
 * slots; whatever it swaps out was allocated by some thread, and is
 * checked, sometimes realloc'ed, and freed: most frees are remote.
 * churn phase (Larson-like): generations of threads each allocate blocks
 * into a shared pool and exit while those blocks live on; the next
 * generation checks and frees them, so pages of dead threads are reclaimed.
 *
 * Built twice: against the standard API (run with LD_PRELOAD=libmallard.so)
 * and, with -DSTRESS_DIRECT, against mld_* of the mallard_tsan library. */
#include "check.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

#ifdef STRESS_DIRECT
#include "mallard.h"
#ifndef __SANITIZE_THREAD__
#error "the direct (mallard_tsan) build must be compiled with -fsanitize=thread"
#endif
#define MALLOC mld_malloc
#define FREE mld_free
#define REALLOC mld_realloc
#define USABLE mld_usable_size
#define STAT_GET mld_stat_get
#define TRANSFER_MODE mld_transfer_mode
#else
#include <malloc.h>
#define MALLOC malloc
#define FREE free
#define REALLOC realloc
#define USABLE malloc_usable_size
static long long STAT_GET(const char* name) { return mallard_stat_fn()(name); }
static const char* TRANSFER_MODE(void) {
  const char* (*f)(void) = (const char* (*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_transfer_mode");
  return f ? f() : "(no mld_transfer_mode)";
}
#endif

enum { SLOTS = 512, POOL_PER_THREAD = 600 };

typedef struct hdr {
  uint32_t size;
  uint32_t magic;
  uint64_t tag;
} hdr;
#define MAGIC 0x4d4c4453u

static _Atomic(hdr*) slots[SLOTS];
static long n_threads = 4, n_ops = 20000, n_generations = 6;
static _Atomic long failures;
static pthread_barrier_t start_line; /* the exchangers start together */

static size_t pick_size(uint64_t* rng) {
  uint64_t r = next_rand(rng), pct = r % 1000;
  if (pct < 900) return 16 + (r >> 10) % 500;          /* small */
  if (pct < 995) return 512 + (r >> 10) % 32000;       /* medium */
  return 65536 + (r >> 10) % (1 << 20);                /* huge */
}

static hdr* make(size_t size, uint64_t tag) {
  hdr* h = MALLOC(size);
  if (!h) {
    fprintf(stderr, "malloc(%zu) failed\n", size);
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  h->size = (uint32_t)size;
  h->magic = MAGIC;
  h->tag = tag;
  ((unsigned char*)h)[size - 1] = (unsigned char)tag;
  return h;
}

static int intact(const hdr* h) {
  return h->magic == MAGIC && ((const unsigned char*)h)[h->size - 1] == (unsigned char)h->tag &&
         USABLE((void*)h) >= h->size;
}

static void drop(hdr* h, uint64_t* rng) {
  if (!intact(h)) {
    fprintf(stderr, "block %p (size %u) corrupted\n", (void*)h, h->size);
    atomic_fetch_add(&failures, 1);
    return;
  }
  if (next_rand(rng) % 16 == 0) { /* realloc a block another thread allocated */
    size_t old = h->size, nsize = pick_size(rng);
    uint64_t tag = h->tag;
    hdr* r = REALLOC(h, nsize);
    if (!r || r->magic != MAGIC || r->tag != tag || r->size != old) {
      fprintf(stderr, "realloc %zu -> %zu lost the header\n", old, nsize);
      atomic_fetch_add(&failures, 1);
      if (r) FREE(r);
      return;
    }
    h = r;
  }
  FREE(h);
}

static void* exchanger(void* arg) {
  uint64_t rng = 0x9e3779b97f4a7c15ULL * ((uintptr_t)arg + 1);
  pthread_barrier_wait(&start_line);
  for (long i = 0; i < n_ops; i++) {
    size_t size = pick_size(&rng);
    hdr* h = make(size, next_rand(&rng));
    if (!h) continue;
    hdr* old = atomic_exchange_explicit(&slots[next_rand(&rng) % SLOTS], h, memory_order_acq_rel);
    if (old) drop(old, &rng);
    if (i % 512 == 511) sched_yield(); /* interleave threads even on few cores */
    if (i % 8 == 0) { /* some purely local traffic too */
      hdr* a = make(pick_size(&rng), 1);
      hdr* b = make(24, 2);
      if (b) drop(b, &rng);
      if (a) drop(a, &rng);
    }
  }
  return NULL;
}

/* churn: pool[g % 2] holds what generation g allocated */
static hdr* pool[2][64 * POOL_PER_THREAD];

typedef struct churn_arg {
  long gen, index;
} churn_arg;

static void* churner(void* arg) {
  churn_arg* a = arg;
  uint64_t rng = 0x2545F4914F6CDD1DULL * (uint64_t)(a->gen * 131 + a->index + 1);
  hdr** mine = &pool[a->gen % 2][a->index * POOL_PER_THREAD];
  hdr** theirs = &pool[(a->gen + 1) % 2][((a->index + 1) % n_threads) * POOL_PER_THREAD];
  for (int i = 0; i < POOL_PER_THREAD; i++) {
    if (theirs[i]) {
      drop(theirs[i], &rng); /* allocated by a thread that has exited */
      theirs[i] = NULL;
    }
    mine[i] = make(pick_size(&rng) % 4000 + 16, next_rand(&rng));
  }
  return NULL; /* exits while its blocks live on */
}

static void run_threads(void* (*fn)(void*), void** args) {
  pthread_t* t = calloc((size_t)n_threads, sizeof *t);
  REQUIRE(t);
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_create(&t[i], NULL, fn, args[i]) == 0);
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  free(t);
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_ops = atol(argv[2]);
  if (argc > 3) n_generations = atol(argv[3]);
  REQUIRE(n_threads >= 2 && n_threads <= 64 && n_ops > 0 && n_generations >= 2);
#ifndef STRESS_DIRECT
  mallard_require_active("stress");
#else
  long long a0 = STAT_GET("allocs");
  check_sink = MALLOC(40);
  FREE(check_sink);
  REQUIRE(STAT_GET("allocs") > a0);
  REQUIRE(dlsym(RTLD_DEFAULT, "__tsan_init") != NULL); /* the TSan runtime is really there */
#endif
  long long remote_before = STAT_GET("remote_frees");
  const char* want = getenv("MALLARD_TRANSFER"); /* unset: the default, mutex */
  const char* mode = TRANSFER_MODE();
  CHECKF(!strcmp(mode, want ? want : "mutex"),
         "mld_transfer_mode() = %s, MALLARD_TRANSFER = %s", mode, want ? want : "(unset)");

  void* args[64];
  for (long i = 0; i < n_threads; i++) args[i] = (void*)(uintptr_t)i;
  REQUIRE(pthread_barrier_init(&start_line, NULL, (unsigned)n_threads) == 0);
  run_threads(exchanger, args);
  pthread_barrier_destroy(&start_line);
  uint64_t rng = 1;
  for (int i = 0; i < SLOTS; i++) {
    hdr* h = atomic_exchange(&slots[i], NULL);
    if (h) drop(h, &rng);
  }

  churn_arg cargs[64];
  for (long g = 0; g < n_generations; g++) {
    for (long i = 0; i < n_threads; i++) {
      cargs[i].gen = g;
      cargs[i].index = i;
      args[i] = &cargs[i];
    }
    run_threads(churner, args);
  }
  for (int k = 0; k < 2; k++)
    for (size_t i = 0; i < sizeof pool[k] / sizeof pool[k][0]; i++)
      if (pool[k][i]) drop(pool[k][i], &rng);

  CHECKF(atomic_load(&failures) == 0, "%ld corrupted or failed blocks", atomic_load(&failures));
  long long remote = STAT_GET("remote_frees") - remote_before;
  CHECKF(remote > 0, "no remote frees counted after cross-thread frees (%lld)", remote);
  printf("stress: %ld threads x %ld ops, %ld generations, transfer=%s remote=%s, remote_frees %lld\n",
         n_threads, n_ops, n_generations, mode,
         getenv("MALLARD_REMOTE") ? getenv("MALLARD_REMOTE") : "default", remote);
  return check_report("stress");
}
