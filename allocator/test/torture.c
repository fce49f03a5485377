/* torture.c: random sequences of every allocation call on several threads,
 * with every block's contents checked. Each thread keeps a table of live
 * blocks filled with a pattern of their own; a random step allocates
 * (malloc, calloc: checked zero, aligned_alloc / posix_memalign / memalign
 * with alignments 8 B .. 4 MiB), reallocs (the kept prefix is checked),
 * frees (the whole pattern is checked first), or swaps a block with another
 * thread through shared slots, so blocks are realloc'ed and freed by threads
 * that did not allocate them. Overlapping blocks, lost contents, bad
 * alignment or usable sizes, and non-zero calloc memory are all caught.
 *
 *   torture [threads] [steps per thread] [seed]
 *
 * Built against the standard API (LD_PRELOAD=libmallard.so) and, with
 * -DTORTURE_DIRECT, against mld_* of mallard_tsan. */
#include "check.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#ifdef TORTURE_DIRECT
#include "mallard.h"
#ifndef __SANITIZE_THREAD__
#error "the direct (mallard_tsan) build must be compiled with -fsanitize=thread"
#endif
#define MALLOC mld_malloc
#define CALLOC mld_calloc
#define REALLOC mld_realloc
#define FREE mld_free
#define ALIGNED_ALLOC mld_aligned_alloc
#define POSIX_MEMALIGN mld_posix_memalign
#define MEMALIGN mld_memalign
#define USABLE mld_usable_size
#else
#include <malloc.h>
#define MALLOC malloc
#define CALLOC calloc
#define REALLOC realloc
#define FREE free
#define ALIGNED_ALLOC aligned_alloc
#define POSIX_MEMALIGN posix_memalign
#define MEMALIGN memalign
#define USABLE malloc_usable_size
#endif

typedef struct entry {
  unsigned char* p;
  size_t size;
  size_t align;
  uint32_t seed;
} entry;

enum { LIVE = 192, SHARED = 64, DENSE = 65536, STEP = 4096 };

static _Atomic(entry*) shared[SHARED];
static long n_threads = 4, n_steps = 30000;
static uint64_t base_seed = 1;
static atomic_long errors;

#define FAIL(...)                              \
  do {                                         \
    fprintf(stderr, "torture: " __VA_ARGS__);  \
    fputc('\n', stderr);                       \
    atomic_fetch_add(&errors, 1);              \
  } while (0)

static uint64_t rnd(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

static inline unsigned char pat(uint32_t seed, size_t i) { return (unsigned char)(seed + i * 7u + (i >> 8)); }

/* The offsets a pattern covers: all of a small block; the first and last
 * 4 KiB and one byte per 4 KiB of a large one. */
#define FOR_PATTERN(size, i, body)                                            \
  do {                                                                        \
    if ((size) <= DENSE) {                                                    \
      for (size_t i = 0; i < (size); i++) body;                               \
    } else {                                                                  \
      for (size_t i = 0; i < STEP; i++) body;                                 \
      for (size_t i = STEP; i < (size) - STEP; i += STEP) body;               \
      for (size_t i = (size) - STEP; i < (size); i++) body;                   \
    }                                                                         \
  } while (0)

static void fill(entry* e) { FOR_PATTERN(e->size, i, e->p[i] = pat(e->seed, i)); }

/* The pattern written over e->size bytes, checked below `upto`. */
static int intact(const entry* e, size_t upto) {
  int ok = 1;
  FOR_PATTERN(e->size, i, ok &= i >= upto || e->p[i] == pat(e->seed, i));
  return ok;
}

static size_t pick_size(uint64_t* r) {
  uint64_t x = rnd(r);
  unsigned kind = (unsigned)(x % 1000);
  x >>= 10;
  if (kind < 700) return 1 + x % 256;
  if (kind < 930) return 257 + x % 16000;
  if (kind < 995) return 16384 + x % 300000;
  return (size_t)(1 << 20) + x % (5u << 20);
}

static size_t pick_align(uint64_t* r) {
  uint64_t x = rnd(r);
  if (x % 100 == 0) return (size_t)1 << (21 + (x >> 8) % 2); /* 2 or 4 MiB */
  return (size_t)1 << (3 + (x >> 8) % 14);                   /* 8 B .. 64 KiB */
}

static void check_new(entry* e, const char* how) {
  if (!e->p) {
    FAIL("%s(%zu, align %zu) returned NULL", how, e->size, e->align);
    return;
  }
  if ((uintptr_t)e->p % e->align) FAIL("%s: %p is not %zu-aligned", how, (void*)e->p, e->align);
  if (USABLE(e->p) < e->size) FAIL("%s: usable %zu < %zu", how, USABLE(e->p), e->size);
}

static void release(entry* e) {
  if (!intact(e, e->size))
    FAIL("block %p (size %zu, align %zu) was overwritten while live", (void*)e->p, e->size,
         e->align);
  FREE(e->p);
  e->p = NULL;
}

static void* worker(void* arg) {
  uint64_t r = base_seed * 0x9E3779B97F4A7C15ULL + (uintptr_t)arg * 0xD1B54A32D192ED03ULL + 1;
  entry live[LIVE];
  memset(live, 0, sizeof live);
  for (long step = 0; step < n_steps; step++) {
    entry* e = &live[rnd(&r) % LIVE];
    unsigned op = (unsigned)(rnd(&r) % 100);
    if (!e->p) { /* an empty slot: allocate */
      e->size = pick_size(&r);
      e->seed = (uint32_t)rnd(&r);
      e->align = 16;
      if (op < 60) {
        e->p = MALLOC(e->size);
        check_new(e, "malloc");
      } else if (op < 75) {
        e->p = CALLOC(1, e->size);
        check_new(e, "calloc");
        if (e->p) {
          int zero = 1;
          FOR_PATTERN(e->size, i, zero &= e->p[i] == 0);
          if (!zero) FAIL("calloc(1, %zu) = %p is not zeroed", e->size, (void*)e->p);
        }
      } else {
        e->align = pick_align(&r);
        if (e->size > (1u << 20) && e->align > 65536) e->size = 1 << 16;
        if (op < 85) {
          e->p = ALIGNED_ALLOC(e->align, e->size);
        } else if (op < 93) {
          void* out = NULL;
          int rc = POSIX_MEMALIGN(&out, e->align < sizeof(void*) ? sizeof(void*) : e->align, e->size);
          if (rc) FAIL("posix_memalign(%zu, %zu) = %d", e->align, e->size, rc);
          e->p = out;
        } else {
          e->p = MEMALIGN(e->align, e->size);
        }
        check_new(e, "aligned");
      }
      if (e->p) fill(e); else memset(e, 0, sizeof *e);
    } else if (op < 40) {
      release(e);
    } else if (op < 70) { /* realloc: the prefix survives */
      size_t nsize = pick_size(&r);
      unsigned char* q = REALLOC(e->p, nsize);
      if (!q) {
        FAIL("realloc(%p, %zu) returned NULL", (void*)e->p, nsize);
        continue;
      }
      entry old = *e;
      old.p = q;
      if (!intact(&old, nsize)) FAIL("realloc %zu -> %zu lost contents", e->size, nsize);
      e->p = q;
      e->size = nsize;
      e->align = 16;
      check_new(e, "realloc");
      e->seed = (uint32_t)rnd(&r);
      fill(e);
    } else if (op < 85) { /* swap with another thread */
      entry* box = MALLOC(sizeof *box);
      if (!box) {
        FAIL("malloc of a box failed");
        continue;
      }
      *box = *e;
      entry* got = atomic_exchange(&shared[rnd(&r) % SHARED], box);
      if (got) {
        *e = *got;
        FREE(got);
        if (!intact(e, e->size)) FAIL("block %p changed hands corrupted", (void*)e->p);
      } else {
        memset(e, 0, sizeof *e);
      }
    } else if (!intact(e, e->size)) {
      FAIL("block %p (size %zu) overwritten", (void*)e->p, e->size);
    }
  }
  for (int i = 0; i < LIVE; i++)
    if (live[i].p) release(&live[i]);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_steps = atol(argv[2]);
  if (argc > 3) base_seed = strtoull(argv[3], NULL, 10);
  REQUIRE(n_threads >= 1 && n_threads <= 64 && n_steps > 0);
#ifdef TORTURE_DIRECT
  long long a0 = mld_stat_get("allocs");
  check_sink = MALLOC(40);
  FREE(check_sink);
  REQUIRE(mld_stat_get("allocs") > a0);
  REQUIRE(dlsym(RTLD_DEFAULT, "__tsan_init") != NULL); /* the TSan runtime is really there */
#else
  mallard_require_active("torture");
#endif
  pthread_t t[64];
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)i) == 0);
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  for (int i = 0; i < SHARED; i++) {
    entry* e = atomic_exchange(&shared[i], NULL);
    if (e) {
      release(e);
      FREE(e);
    }
  }
  CHECKF(atomic_load(&errors) == 0, "%ld errors", atomic_load(&errors));
  printf("torture: %ld threads x %ld steps, seed %llu\n", n_threads, n_steps,
         (unsigned long long)base_seed);
  return check_report("torture");
}
