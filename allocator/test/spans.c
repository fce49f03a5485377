/* spans.c: the span cache of huge blocks (segment.c, "huge blocks and the
 * span cache"): freed spans kept for reuse, split, coalesced, assembled
 * from several spans by moving their pages (mremap), bounded.
 *
 *   spans [threads] [rounds]
 *
 * layout: (one thread; only with MALLARD_DECAY_MS >= 10000, as ctest sets, so no
 *   span is purged under it) a freed 20 MiB block serves two 6 MiB mallocs
 *   from its own address on (split at 4 MiB multiples); freed again, the two
 *   coalesce and a 19 MiB malloc gets the start back; two separate used
 *   spans serve one 16 MiB malloc (assembled: writing it grows resident
 *   memory by under 8 MiB, not 16), then an 18 MiB calloc (assembled from used
 *   pages: it must read zero); 40 freed 10 MiB blocks leave at most the
 *   cache's bound mapped.
 * threads: threads allocate huge blocks of random sizes (130 KiB..12 MiB,
 *   calloc now and then: zero), tag them, and free their own and each
 *   other's (through shared slots): every tag intact, no block handed out
 *   twice. Also run with MALLARD_DECAY_MS=0 (nothing cached) and under
 *   ThreadSanitizer (-DMLD_TEST_TSAN, mallard_tsan). */
#include "entry.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define SEG (4 * MIB)

static uintptr_t base_of(const void* p) { return (uintptr_t)p & ~(uintptr_t)(SEG - 1); }

static long resident_bytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long size = 0, res = 0;
  if (f != NULL) {
    if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
    fclose(f);
  }
  return res * sysconf(_SC_PAGESIZE);
}

static void fill(unsigned char* p, size_t n, unsigned char v) { memset(p, v, n); }

static void test_split_coalesce(void) {
  unsigned char* p = MALLOC(20 * MIB);
  REQUIRE(p != NULL);
  fill(p, 20 * MIB, 0x11);
  uintptr_t base = base_of(p);
  FREE(p);
  unsigned char* q = MALLOC(6 * MIB);
  unsigned char* r = MALLOC(6 * MIB);
  REQUIRE(q != NULL && r != NULL);
  CHECKF(base_of(q) == base, "6 MiB after a freed 20 MiB: %p, span at %#lx", (void*)q, (unsigned long)base);
  CHECKF(base_of(r) == base + 2 * SEG, "the split's rest: %p, expected span at %#lx", (void*)r,
         (unsigned long)(base + 2 * SEG));
  fill(q, 6 * MIB, 0x22);
  fill(r, 6 * MIB, 0x33);
  CHECK(q[6 * MIB - 1] == 0x22 && r[0] == 0x33);
  FREE(q);
  FREE(r);
  unsigned char* s = MALLOC(19 * MIB);
  REQUIRE(s != NULL);
  CHECKF(base_of(s) == base, "19 MiB after the pieces coalesced: %p, span at %#lx", (void*)s,
         (unsigned long)base);
  fill(s, 19 * MIB, 0x44);
  FREE(s);
}

static void test_assemble(void) {
  unsigned char* a = MALLOC(8 * MIB);
  void* gap = MALLOC(5 * MIB);   /* keeps a and b apart: no coalescing */
  unsigned char* b = MALLOC(8 * MIB);
  REQUIRE(a != NULL && gap != NULL && b != NULL);
  fill(a, 8 * MIB, 0xa5);
  fill(b, 8 * MIB, 0x5a);
  FREE(a);
  FREE(b);
  long before = resident_bytes();
  unsigned char* c = MALLOC(16 * MIB);   /* no cached span holds it: assembled from both */
  REQUIRE(c != NULL);
  fill(c, 16 * MIB, 0x77);
  long grown = resident_bytes() - before;
#ifndef MLD_TEST_TSAN   /* there writing grows TSan's shadow memory too */
  /* a fresh mapping grows by 16 MiB; under qemu the emulator's own memory grows too (3 MiB seen) */
  CHECKF(grown < (long)(8 * MIB), "writing 16 MiB assembled from cached spans faulted in %ld bytes", grown);
#else
  (void)grown;
#endif
  CHECK(c[0] == 0x77 && c[16 * MIB - 1] == 0x77);
  FREE(c);
  unsigned char* d = CALLOC(1, 18 * MIB);   /* assembled again, from used pages */
  REQUIRE(d != NULL);
  size_t nonzero = 0;
  for (size_t i = 0; i < 18 * MIB; i += 512) nonzero += d[i] != 0;
  CHECKF(nonzero == 0, "calloc of spans assembled from used ones: %zu nonzero samples", nonzero);
  FREE(d);
  FREE(gap);
}

static void test_bound(void) {
  enum { N = 40 };
  void* blocks[N];
  long long mapped0 = STAT("bytes_mapped");
  for (int i = 0; i < N; i++) {
    blocks[i] = MALLOC(10 * MIB);
    REQUIRE(blocks[i] != NULL);
    memset(blocks[i], i, 4096);
  }
  for (int i = 0; i < N; i++) FREE(blocks[i]);
  long long kept = STAT("bytes_mapped") - mapped0;
  CHECKF(kept <= (long long)(128 * MIB + 2 * SEG), "400 MiB freed, %lld bytes still mapped", kept);
}

/* ---- threads -------------------------------------------------------------- */

enum { SLOTS = 16 };
static _Atomic(uint64_t*) shared[SLOTS];
static atomic_int failures;
static long n_threads = 4, n_rounds = 200;

/* a block: words 0 and 1 hold its tag and size, repeated in its last word and its middle */
static uint64_t* take_block(uint64_t* rng, uint64_t tag) {
  size_t size = 130 * 1024 + (size_t)(next_rand(rng) % (12 * MIB));
  size &= ~(size_t)7;
  bool zero = next_rand(rng) % 4 == 0;
  uint64_t* b = zero ? CALLOC(1, size) : MALLOC(size);
  if (b == NULL) {
    atomic_fetch_add(&failures, 1);
    return NULL;
  }
  size_t n = size / 8;
  if (zero && (b[0] != 0 || b[n / 2] != 0 || b[n - 1] != 0 || b[n / 3] != 0)) {
    fprintf(stderr, "calloc(%zu) = %p not zero\n", size, (void*)b);
    atomic_fetch_add(&failures, 1);
  }
  b[0] = tag;
  b[1] = n;
  b[n / 2] = tag;
  b[n - 1] = tag;
  return b;
}

static void drop_block(uint64_t* b) {
  uint64_t n = b[1];
  if (n < 2 || n > 13 * MIB / 8 || b[n / 2] != b[0] || b[n - 1] != b[0]) {
    fprintf(stderr, "block %p damaged: tag %#llx size %llu\n", (void*)b, (unsigned long long)b[0],
            (unsigned long long)n);
    atomic_fetch_add(&failures, 1);
  }
  FREE(b);
}

static void* worker(void* arg) {
  uint64_t id = (uint64_t)(uintptr_t)arg;
  uint64_t rng = 0x9e3779b97f4a7c15ull * (id + 1);
  uint64_t* own[4] = {NULL, NULL, NULL, NULL};
  for (long r = 0; r < n_rounds; r++) {
    unsigned k = (unsigned)(next_rand(&rng) % 4);
    if (own[k] != NULL) drop_block(own[k]);
    own[k] = take_block(&rng, (id << 32) | (uint64_t)r);
    uint64_t* mine = take_block(&rng, (id << 32) | (uint64_t)r | 1u << 31);
    uint64_t* other = atomic_exchange(&shared[next_rand(&rng) % SLOTS], mine);
    if (other != NULL) drop_block(other);
  }
  for (int k = 0; k < 4; k++)
    if (own[k] != NULL) drop_block(own[k]);
  return NULL;
}

static void test_threads(void) {
  pthread_t t[16];
  if (n_threads > 16) n_threads = 16;
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)i) == 0);
  for (long i = 0; i < n_threads; i++) pthread_join(t[i], NULL);
  for (int s = 0; s < SLOTS; s++) {
    uint64_t* b = atomic_exchange(&shared[s], NULL);
    if (b != NULL) drop_block(b);
  }
  CHECKF(atomic_load(&failures) == 0, "%d damaged, unzeroed or failed blocks", atomic_load(&failures));
}

int main(int argc, char** argv) {
  if (argc > 1) n_threads = atol(argv[1]);
  if (argc > 2) n_rounds = atol(argv[2]);
#ifndef MLD_TEST_TSAN
  mallard_require_active("spans");
#endif
  const char* decay = getenv("MALLARD_DECAY_MS");
  if (decay != NULL && atol(decay) >= 10000) {   /* the layout checks need spans to stay cached */
    test_split_coalesce();
    test_assemble();
    test_bound();
  }
  test_threads();
  return check_report("spans");
}
