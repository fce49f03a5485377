/* mallard.h: the public API of the Mallard allocator.
 *
 * Every function here is available in both builds:
 *  - libmallard.so (MLD_OVERRIDE=1) also interposes malloc, free, ... and the
 *    C++ operators new/delete, so these mld_* names are just direct entry points;
 *  - the static library built with MLD_OVERRIDE=0 exports only mld_* (for unit
 *    tests and for programs that want Mallard next to the system allocator).
 */
#ifndef MALLARD_H
#define MALLARD_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MLD_API __attribute__((visibility("default")))
#else
#define MLD_API
#endif

#define MALLARD_VERSION 1

MLD_API void*  mld_malloc(size_t size);
MLD_API void   mld_free(void* p);
MLD_API void*  mld_calloc(size_t count, size_t size);
MLD_API void*  mld_realloc(void* p, size_t size);
MLD_API void*  mld_reallocarray(void* p, size_t count, size_t size);
MLD_API void*  mld_aligned_alloc(size_t alignment, size_t size);
MLD_API int    mld_posix_memalign(void** out, size_t alignment, size_t size);
MLD_API void*  mld_memalign(size_t alignment, size_t size);
MLD_API void*  mld_valloc(size_t size);
MLD_API void*  mld_pvalloc(size_t size);
MLD_API size_t mld_usable_size(const void* p);

/* Statistics: the same JSON object MALLARD_STATS_FILE receives at exit. */
MLD_API void   mld_stats_print(void);               /* to stderr */
MLD_API int    mld_stats_write(const char* path);   /* 0 on success, -1 + errno */
/* One counter by its JSON name ("allocs", "remote_frees", "bytes_mapped", ...),
 * summed over all threads; returns -1 for an unknown name. */
MLD_API long long mld_stat_get(const char* name);

/* The transfer cache variant in use: "mutex" or "ring". */
MLD_API const char* mld_transfer_mode(void);

/* Give this thread's heap back now (as at thread exit): its cached blocks
 * are returned and its pages abandoned for other threads to reclaim. The
 * thread may keep allocating; it then gets a fresh heap. */
MLD_API void   mld_thread_done(void);

/* Return free pages of this thread's heap and purge memory whose decay
 * expired (force: purge every free page now). */
MLD_API void   mld_collect(int force);

#ifdef __cplusplus
}
#endif
#endif /* MALLARD_H */
