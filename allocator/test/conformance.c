/* conformance.c: the C allocation API as users get it from libmallard.so
 * (run with LD_PRELOAD): every entry point, alignments 1 B .. 64 KiB, size
 * 0, impossible sizes (NULL + ENOMEM), overflow in calloc/reallocarray,
 * errno kept by free, EINVAL from posix_memalign, realloc keeping contents
 * across size classes and into huge blocks, usable sizes, zeroed calloc
 * memory (also when the memory is reused). */
#include "check.h"

#include <link.h>
#include <malloc.h>
#include <string.h>
#include <stdint.h>
#include <unistd.h>

/* A failed realloc leaves the old block valid: using it after is the point. */
#pragma GCC diagnostic ignored "-Wuse-after-free"

/* volatile: no compile-time folding of impossible sizes */
static volatile size_t v_size_max = SIZE_MAX;
static volatile size_t v_2_33 = (size_t)1 << 33, v_2_40 = (size_t)1 << 40;
static const size_t SIZES[] = {1,    7,    8,     15,    16,    17,     24,     31,    32,
                               48,   63,   64,    100,   128,   255,    256,    500,   512,
                               1000, 1024, 1025,  2047,  4096,  5000,   8192,   8193,  12000,
                               16384, 32768, 65535, 65536, 100000, 131072, 131073, 262144,
                               1 << 20, (4 << 20) + 1};
#define NSIZES (sizeof SIZES / sizeof SIZES[0])

static void fill(unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 31u + seed);
}
static int same(const unsigned char* p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 31u + seed)) return 0;
  return 1;
}
static int all_zero(const unsigned char* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

static void test_malloc_free_usable(void) {
  void* ps[NSIZES];
  for (size_t i = 0; i < NSIZES; i++) {
    ps[i] = malloc(SIZES[i]);
    CHECKF(ps[i] != NULL, "malloc(%zu)", SIZES[i]);
    if (!ps[i]) continue;
    CHECKF((uintptr_t)ps[i] % 16 == 0, "malloc(%zu) = %p not 16-aligned", SIZES[i], ps[i]);
    size_t u = malloc_usable_size(ps[i]);
    CHECKF(u >= SIZES[i], "usable %zu < %zu", u, SIZES[i]);
    fill(ps[i], u, (unsigned)i); /* the whole usable size is ours to write */
  }
  for (size_t i = 0; i < NSIZES; i++) {
    if (!ps[i]) continue;
    CHECKF(same(ps[i], malloc_usable_size(ps[i]), (unsigned)i), "block of %zu bytes changed",
           SIZES[i]);
    free(ps[i]);
  }
  CHECK(malloc_usable_size(NULL) == 0);
  free(NULL);
}

static void test_size_zero(void) {
  void* a = malloc(0);
  void* b = malloc(0);
  if (a && b) CHECK(a != b); /* distinct live objects */
  free(a);
  free(b);
  void* c = calloc(0, 16);
  free(c);
  void* d = aligned_alloc(64, 0);
  if (d) CHECK((uintptr_t)d % 64 == 0);
  free(d);
  void* r = malloc(32);
  REQUIRE(r);
  r = realloc(r, 0); /* frees (glibc: returns NULL) or returns a minimum block */
  free(r);
}

static void test_huge_fails(void) {
  size_t huge[] = {v_size_max, v_size_max / 2, (size_t)1 << 60, v_size_max - 4096};
  for (size_t i = 0; i < sizeof huge / sizeof huge[0]; i++) {
    errno = 0;
    void* p = malloc(huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "malloc(%zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = calloc(1, huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "calloc(1, %zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = aligned_alloc(64, huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "aligned_alloc(64, %zu) = %p errno %d", huge[i], p,
           errno);
    errno = 0;
    p = memalign(4096, huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "memalign(4096, %zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = valloc(huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "valloc(%zu) = %p errno %d", huge[i], p, errno);
    errno = 0;
    p = pvalloc(huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "pvalloc(%zu) = %p errno %d", huge[i], p, errno);
    void* out = (void*)1;
    int rc = posix_memalign(&out, 64, huge[i]);
    CHECKF(rc == ENOMEM, "posix_memalign(64, %zu) = %d", huge[i], rc);
    /* realloc failing leaves the old block alone */
    unsigned char* old = malloc(100);
    REQUIRE(old);
    fill(old, 100, 9);
    errno = 0;
    p = realloc(old, huge[i]);
    CHECKF(p == NULL && errno == ENOMEM, "realloc(p, %zu) = %p errno %d", huge[i], p, errno);
    CHECK(same(old, 100, 9));
    free(old);
  }
}

static void test_overflow(void) {
  size_t half = v_size_max / 2 + 2;
  errno = 0;
  void* p = calloc(half, 2);
  CHECKF(p == NULL && errno == ENOMEM, "calloc overflow: %p errno %d", p, errno);
  errno = 0;
  p = calloc(v_2_33, v_2_33);
  CHECKF(p == NULL && errno == ENOMEM, "calloc 2^33 x 2^33: %p errno %d", p, errno);
  errno = 0;
  p = calloc(v_size_max, v_size_max);
  CHECKF(p == NULL && errno == ENOMEM, "calloc max x max: %p errno %d", p, errno);
  errno = 0;
  p = reallocarray(NULL, half, 2);
  CHECKF(p == NULL && errno == ENOMEM, "reallocarray(NULL) overflow: %p errno %d", p, errno);
  unsigned char* q = reallocarray(NULL, 10, 10);
  REQUIRE(q);
  fill(q, 100, 3);
  errno = 0;
  p = reallocarray(q, v_2_40, v_2_40);
  CHECKF(p == NULL && errno == ENOMEM, "reallocarray(p) overflow: %p errno %d", p, errno);
  CHECK(same(q, 100, 3));
  q = reallocarray(q, 100, 30);
  REQUIRE(q);
  CHECK(same(q, 100, 3));
  CHECK(malloc_usable_size(q) >= 3000);
  free(q);
}

static void test_free_keeps_errno(void) {
  for (size_t i = 0; i < NSIZES; i++) {
    void* p = malloc(SIZES[i]);
    REQUIRE(p);
    errno = 4242;
    free(p);
    CHECKF(errno == 4242, "free of a %zu-byte block changed errno to %d", SIZES[i], errno);
  }
  void* a = aligned_alloc(65536, 1 << 20);
  REQUIRE(a);
  errno = 777;
  free(a);
  CHECK(errno == 777);
  errno = 778;
  free(NULL);
  CHECK(errno == 778);
}

static void test_alignment(void) {
  for (size_t align = 1; align <= 65536; align <<= 1) {
    size_t sizes[] = {1, align / 2 + 1, align, align + 1, 3 * align, 100000};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t size = sizes[k];
      void* p = aligned_alloc(align, size);
      CHECKF(p && (uintptr_t)p % align == 0, "aligned_alloc(%zu, %zu) = %p", align, size, p);
      if (p) {
        CHECK(malloc_usable_size(p) >= size);
        memset(p, 0xa5, size);
        free(p);
      }
      p = memalign(align, size);
      CHECKF(p && (uintptr_t)p % align == 0, "memalign(%zu, %zu) = %p", align, size, p);
      if (p) {
        CHECK(malloc_usable_size(p) >= size);
        memset(p, 0x5a, size);
        free(p);
      }
      void* out = NULL;
      int rc = posix_memalign(&out, align, size);
      if (align < sizeof(void*)) {
        CHECKF(rc == EINVAL, "posix_memalign(%zu) = %d, want EINVAL", align, rc);
      } else {
        CHECKF(rc == 0 && out && (uintptr_t)out % align == 0, "posix_memalign(%zu, %zu) = %d %p",
               align, size, rc, out);
        if (rc == 0) {
          CHECK(malloc_usable_size(out) >= size);
          memset(out, 0x33, size);
          free(out);
        }
      }
    }
  }
  /* many live aligned blocks at once do not overlap */
  enum { N = 64 };
  unsigned char* live[N];
  for (int i = 0; i < N; i++) {
    size_t align = (size_t)1 << (4 + i % 9);
    live[i] = aligned_alloc(align, 48 + (size_t)i * 8);
    REQUIRE(live[i]);
    fill(live[i], 48 + (size_t)i * 8, (unsigned)i);
  }
  for (int i = 0; i < N; i++) {
    CHECKF(same(live[i], 48 + (size_t)i * 8, (unsigned)i), "aligned block %d overwritten", i);
    free(live[i]);
  }
}

static void test_posix_memalign_einval(void) {
  size_t bad[] = {0, 3, 24, sizeof(void*) / 2, 48, 4097, v_size_max};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    void* out = (void*)0x1234;
    int rc = posix_memalign(&out, bad[i], 64);
    CHECKF(rc == EINVAL, "posix_memalign(alignment %zu) = %d, want EINVAL", bad[i], rc);
    CHECKF(out == (void*)0x1234, "posix_memalign(alignment %zu) wrote *out on failure", bad[i]);
  }
}

static void test_valloc_pvalloc(void) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t sizes[] = {1, 100, page - 1, page, page + 1, 5 * page + 3, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    void* p = valloc(sizes[i]);
    CHECKF(p && (uintptr_t)p % page == 0, "valloc(%zu) = %p", sizes[i], p);
    if (p) {
      CHECK(malloc_usable_size(p) >= sizes[i]);
      memset(p, 1, sizes[i]);
      free(p);
    }
    p = pvalloc(sizes[i]);
    size_t rounded = (sizes[i] + page - 1) / page * page;
    CHECKF(p && (uintptr_t)p % page == 0, "pvalloc(%zu) = %p", sizes[i], p);
    if (p) {
      CHECKF(malloc_usable_size(p) >= rounded, "pvalloc(%zu): usable %zu < %zu", sizes[i],
             malloc_usable_size(p), rounded);
      memset(p, 2, rounded);
      free(p);
    }
  }
}

static void test_realloc_keeps_contents(void) {
  /* grow through every size above, then shrink back */
  unsigned char* p = NULL;
  size_t cur = 0;
  for (size_t i = 0; i < NSIZES; i++) {
    unsigned char* q = realloc(p, SIZES[i]);
    CHECKF(q != NULL, "realloc to %zu", SIZES[i]);
    if (!q) break;
    if (cur) CHECKF(same(q, cur, 77), "realloc %zu -> %zu lost contents", cur, SIZES[i]);
    CHECK(malloc_usable_size(q) >= SIZES[i]);
    fill(q, SIZES[i], 77);
    p = q;
    cur = SIZES[i];
  }
  for (size_t i = NSIZES; i-- > 0;) {
    unsigned char* q = realloc(p, SIZES[i]);
    CHECKF(q != NULL, "realloc down to %zu", SIZES[i]);
    if (!q) break;
    size_t keep = SIZES[i] < cur ? SIZES[i] : cur;
    CHECKF(same(q, keep, 77), "realloc %zu -> %zu lost contents", cur, SIZES[i]);
    CHECK(malloc_usable_size(q) >= SIZES[i]);
    p = q;
    cur = SIZES[i];
  }
  free(p);
  /* realloc(NULL, n) is malloc; realloc of an aligned block keeps contents */
  p = realloc(NULL, 200);
  REQUIRE(p);
  free(p);
  p = aligned_alloc(4096, 5000);
  REQUIRE(p);
  fill(p, 5000, 5);
  p = realloc(p, 300000);
  REQUIRE(p);
  CHECK(same(p, 5000, 5));
  free(p);
}

static void test_calloc_zero(void) {
  /* dirty memory first, then calloc the same sizes: reused blocks must be zeroed */
  for (int round = 0; round < 3; round++) {
    void* dirty[NSIZES];
    for (size_t i = 0; i < NSIZES; i++) {
      dirty[i] = malloc(SIZES[i]);
      REQUIRE(dirty[i]);
      memset(dirty[i], 0xab, malloc_usable_size(dirty[i]));
    }
    for (size_t i = 0; i < NSIZES; i++) free(dirty[i]);
    for (size_t i = 0; i < NSIZES; i++) {
      unsigned char* c = calloc(1, SIZES[i]);
      CHECKF(c && all_zero(c, SIZES[i]), "calloc(1, %zu) not zero (round %d)", SIZES[i], round);
      unsigned char* d = calloc(SIZES[i], 1);
      CHECKF(d && all_zero(d, SIZES[i]), "calloc(%zu, 1) not zero (round %d)", SIZES[i], round);
      free(c);
      free(d);
    }
  }
  /* many small ones, reusing the blocks just freed */
  for (int round = 0; round < 4; round++) {
    void* v[500];
    for (int i = 0; i < 500; i++) {
      v[i] = malloc(40);
      REQUIRE(v[i]);
      memset(v[i], 0xcd, 40);
    }
    for (int i = 0; i < 500; i++) free(v[i]);
    for (int i = 0; i < 500; i++) {
      v[i] = calloc(5, 8);
      CHECK(v[i] && all_zero(v[i], 40));
    }
    for (int i = 0; i < 500; i++) free(v[i]);
  }
}

/* libmallard.so binds the C++ runtime weakly: preloading it into a C
 * program must not load libstdc++ (relocating it cost every process
 * ~1.3 M instructions at start-up). */
static int find_libstdcxx(struct dl_phdr_info* info, size_t size, void* found) {
  (void)size;
  if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libstdc++") != NULL) *(int*)found = 1;
  return 0;
}

static void test_no_cxx_runtime(void) {
  int found = 0;
  dl_iterate_phdr(find_libstdcxx, &found);
  CHECKF(!found, "libstdc++ is loaded into a C program (libmallard.so should not need it)");
}

int main(void) {
  mallard_require_active("conformance");
  test_malloc_free_usable();
  test_size_zero();
  test_huge_fails();
  test_overflow();
  test_free_keeps_errno();
  test_alignment();
  test_posix_memalign_einval();
  test_valloc_pvalloc();
  test_realloc_keeps_contents();
  test_calloc_zero();
  test_no_cxx_runtime();
  return check_report("conformance");
}
