/* override.c: interposition. In libmallard.so (MLD_OVERRIDE=1) the
 * standard allocation functions are defined here, exported, and go straight
 * to the inlined fast paths; pthread_create is wrapped so that a thread
 * gives its cached blocks away before it starts another (heap.c,
 * _mld_heap_shed). With MLD_OVERRIDE=0 this file is empty and only the
 * mld_* API exists. */
#define _GNU_SOURCE
#include "internal.h"

#if MLD_OVERRIDE
#include <dlfcn.h>
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

/* C++'s operator new and delete in their most used forms (plain and array,
 * sized delete), by their mangled names, here in C: the same inline fast
 * paths as malloc and free. In override_new.cpp each was a call through
 * the PLT to mld_malloc or mld_free, with a frame: larson (new[] and
 * delete[]) ran 17 instructions per pair more than through malloc and
 * free. A failed new goes to the new_handler loop (override_new.cpp),
 * which throws std::bad_alloc when there is no handler. The other forms
 * (nothrow, aligned) stay in C++. Without a C++ compiler there is no
 * operator new here: libstdc++'s own calls malloc. */
#if MLD_HAVE_CXX
MLD_NOINLINE void* _mld_new_slow(size_t size, mld_heap_t* h) {
  void* p = _mld_alloc_slow(size, h);
  return mld_likely(p != NULL) ? p : _mld_new_retry(size);
}
MLD_EXPORT void* _Znwm(size_t size) { return mld_malloc_with(size, _mld_new_slow); }
MLD_EXPORT void* _Znam(size_t size) { return mld_malloc_with(size, _mld_new_slow); }
MLD_EXPORT void _ZdlPv(void* p) { mld_free_inline(p); }
MLD_EXPORT void _ZdaPv(void* p) { mld_free_inline(p); }
MLD_EXPORT void _ZdlPvm(void* p, size_t size) { (void)size; mld_free_inline(p); }
MLD_EXPORT void _ZdaPvm(void* p, size_t size) { (void)size; mld_free_inline(p); }
#endif
/* glibc extension: give free memory back now */
MLD_EXPORT int malloc_trim(size_t pad) {
  (void)pad;
  mld_collect(1);
  return 1;
}

/* pthread_create: the creator's bins go to the transfer cache first (the new
 * thread often runs before its creator does again), then the next
 * definition (libc's) is called, found once with dlsym(RTLD_NEXT) as
 * jemalloc does. */
typedef int (*mld_pthread_create_t)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
static _Atomic(mld_pthread_create_t) mld_next_pthread_create;

MLD_EXPORT int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*), void* arg) {
  mld_pthread_create_t next = atomic_load_explicit(&mld_next_pthread_create, memory_order_acquire);
  if (mld_unlikely(next == NULL)) {
    next = (mld_pthread_create_t)(uintptr_t)dlsym(RTLD_NEXT, "pthread_create");
    if (next == NULL) return EAGAIN;
    atomic_store_explicit(&mld_next_pthread_create, next, memory_order_release);
  }
  _mld_heap_shed();
  return next(thread, attr, start, arg);
}
#endif
