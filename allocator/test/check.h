/* check.h: the few helpers every allocator test shares: CHECK macros that
 * name the failing line, a xorshift generator (next_rand), and
 * mallard_require_active(), which makes a test
 * fail (not pass) when malloc is not Mallard's, e.g. when LD_PRELOAD was
 * lost and the test would otherwise be testing glibc. Header-only. */
#ifndef MALLARD_TEST_CHECK_H
#define MALLARD_TEST_CHECK_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

static int check_failures;

#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);       \
      check_failures++;                                                              \
    }                                                                                \
  } while (0)

#define CHECKF(cond, ...)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);       \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fputc('\n', stderr);                                                           \
      check_failures++;                                                              \
    }                                                                                \
  } while (0)

#define REQUIRE(cond)                                                                \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);     \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

/* xorshift64: the tests' own deterministic random numbers (never rand()). */
static inline uint64_t next_rand(uint64_t* s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

/* Keeps the compiler from pairing away a malloc/free it can see. */
static void* volatile check_sink;

typedef long long (*mld_stat_get_fn)(const char*);

/* The running process's mld_stat_get, or NULL when Mallard is not loaded. */
static inline mld_stat_get_fn mallard_stat_fn(void) {
  return (mld_stat_get_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "mld_stat_get");
}

/* Exits 1 unless malloc, free and friends of this process are Mallard's:
 * mld_stat_get must resolve and a plain malloc must bump Mallard's "allocs". */
static inline void mallard_require_active(const char* test) {
  mld_stat_get_fn get = mallard_stat_fn();
  if (!get) {
    fprintf(stderr, "%s: Mallard is not loaded (no mld_stat_get; LD_PRELOAD lost?)\n", test);
    exit(1);
  }
  long long before = get("allocs");
  check_sink = malloc(40);
  long long after = get("allocs");
  free(check_sink);
  if (before < 0 || after <= before) {
    fprintf(stderr, "%s: malloc does not go through Mallard (allocs %lld -> %lld)\n", test,
            before, after);
    exit(1);
  }
}

static inline int check_report(const char* test) {
  if (check_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", test, check_failures);
    return 1;
  }
  printf("%s: all checks passed\n", test);
  return 0;
}

#ifdef __cplusplus
}
#endif
#endif
