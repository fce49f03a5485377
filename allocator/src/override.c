/* override.c: interposition. In libmallard.so (MLD_OVERRIDE=1) the
 * standard allocation functions are defined here, exported, and go straight
 * to the inlined fast paths; with MLD_OVERRIDE=0 this file is empty and only
 * the mld_* API exists. */
#include "internal.h"

#if MLD_OVERRIDE
#include <errno.h>

#define MLD_EXPORT __attribute__((visibility("default")))

MLD_EXPORT void* malloc(size_t size) { return mld_malloc_inline(size); }
MLD_EXPORT void free(void* p) { mld_free_inline(p); }
MLD_EXPORT void* calloc(size_t count, size_t size) { return _mld_alloc_calloc(count, size); }
MLD_EXPORT void* realloc(void* p, size_t size) { return _mld_alloc_realloc(p, size); }
MLD_EXPORT void* reallocarray(void* p, size_t count, size_t size) { return mld_reallocarray(p, count, size); }
MLD_EXPORT void* aligned_alloc(size_t alignment, size_t size) { return mld_aligned_alloc(alignment, size); }
MLD_EXPORT int posix_memalign(void** out, size_t alignment, size_t size) {
  return mld_posix_memalign(out, alignment, size);
}
MLD_EXPORT void* memalign(size_t alignment, size_t size) { return mld_memalign(alignment, size); }
MLD_EXPORT void* valloc(size_t size) { return mld_valloc(size); }
MLD_EXPORT void* pvalloc(size_t size) { return mld_pvalloc(size); }
MLD_EXPORT size_t malloc_usable_size(void* p) { return _mld_alloc_usable_size(p); }
MLD_EXPORT void cfree(void* p) { mld_free_inline(p); }
/* glibc extension: give free memory back now */
MLD_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  mld_collect(1);
  return 1;
}
#endif
