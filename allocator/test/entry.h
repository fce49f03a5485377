/* entry.h: the allocator's entry points for a stress test built twice: preloaded
 * (malloc/free, the stats and collect found at run time) and, with
 * -DMLD_TEST_TSAN, linked against mallard_tsan (mld_* called directly). */
#ifndef MALLARD_TEST_ENTRY_H
#define MALLARD_TEST_ENTRY_H

#include "check.h"

#ifdef MLD_TEST_TSAN
#include "mallard.h"
#define MALLOC mld_malloc
#define CALLOC mld_calloc
#define FREE mld_free
#define STAT mld_stat_get
#define COLLECT mld_collect
#else
#define MALLOC malloc
#define CALLOC calloc
#define FREE free
static inline long long STAT(const char* name) {
  mld_stat_get_fn get = mallard_stat_fn();
  REQUIRE(get != NULL);
  return get(name);
}
static inline void COLLECT(int force) {
  void (*fn)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(fn != NULL);
  fn(force);
}
#endif

#endif
