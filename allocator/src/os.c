/* os.c: the operating system layer. Maps, unmaps and purges memory
 * (mmap/munmap/madvise), reads the page size at run time (arm64 nodes may
 * use 64 KiB pages), and keeps the bytes_mapped / peak_bytes_mapped counters. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <sched.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

MLD_HIDDEN size_t _mld_os_page_size = 4096;
MLD_HIDDEN _Atomic(uint64_t) _mld_gstats[MLD_GSTAT_COUNT];
static _Atomic(uintptr_t) mld_os_hint;

void _mld_os_init(void) {
  long ps = sysconf(_SC_PAGESIZE);
  if (ps > 0) _mld_os_page_size = (size_t)ps;
}

static void mld_os_account(int64_t delta) {
  uint64_t now = atomic_fetch_add_explicit(&_mld_gstats[MLD_GSTAT_bytes_mapped], (uint64_t)delta,
                                           memory_order_relaxed) + (uint64_t)delta;
  if (delta > 0) {
    uint64_t peak = atomic_load_explicit(&_mld_gstats[MLD_GSTAT_peak_bytes_mapped], memory_order_relaxed);
    while (now > peak && !atomic_compare_exchange_weak_explicit(&_mld_gstats[MLD_GSTAT_peak_bytes_mapped],
                                                                &peak, now, memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
  }
}

void* _mld_os_map(size_t size) {
  void* p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return NULL;
  mld_os_account((int64_t)size);
  return p;
}

/* Map size bytes at an address aligned to alignment (a power of two >= the
 * page size). First try at a hint just after the last aligned mapping (no
 * waste, one syscall); otherwise over-map and trim both ends. */
void* _mld_os_map_aligned(size_t size, size_t alignment) {
  const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
  uintptr_t hint = atomic_load_explicit(&mld_os_hint, memory_order_relaxed);
  if (hint != 0 && (hint & (alignment - 1)) == 0) {
    void* p = mmap((void*)hint, size, prot, flags, -1, 0);
    if (p != MAP_FAILED) {
      if (((uintptr_t)p & (alignment - 1)) == 0) {
        atomic_store_explicit(&mld_os_hint, (uintptr_t)p + size, memory_order_relaxed);
        mld_os_account((int64_t)size);
        return p;
      }
      munmap(p, size);
    }
  }
  size_t over = size + alignment;
  if (over < size) return NULL;
  void* raw = mmap(NULL, over, prot, flags, -1, 0);
  if (raw == MAP_FAILED) return NULL;
  uintptr_t start = ((uintptr_t)raw + alignment - 1) & ~(uintptr_t)(alignment - 1);
  size_t before = start - (uintptr_t)raw, after = over - before - size;
  if (before) munmap(raw, before);
  if (after) munmap((void*)(start + size), after);
  uintptr_t next = start + size;
  next = (next + MLD_SEGMENT_SIZE - 1) & ~MLD_SEGMENT_MASK;
  atomic_store_explicit(&mld_os_hint, next, memory_order_relaxed);
  mld_os_account((int64_t)size);
  return (void*)start;
}

/* Move the pages of [from, from + size) to the same size at to (both page
 * aligned; what was mapped at to is replaced): page tables move, the
 * memory is neither copied nor faulted. False (nothing moved) if the kernel
 * refuses. */
bool _mld_os_move(void* from, size_t size, void* to) {
  int saved = errno;
  void* q = mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, to);
  errno = saved;
  if (q != to) return false;
  mld_os_account(-(int64_t)size);   /* the pages replaced part of to's mapping, counted there */
  return true;
}

/* Make [p, p + size) readable and writable, or inaccessible (a guard: a
 * stray access faults). False if the kernel refuses (errno kept). */
bool _mld_os_protect(void* p, size_t size, bool access) {
  int saved = errno;
  bool ok = mprotect(p, size, access ? PROT_READ | PROT_WRITE : PROT_NONE) == 0;
  errno = saved;
  return ok;
}

void _mld_os_unmap(void* p, size_t size) {
  if (p == NULL || size == 0) return;
  if (munmap(p, size) == 0) mld_os_account(-(int64_t)size);
}

/* Give the memory back; it reads as zeros when touched again. */
void _mld_os_purge(void* p, size_t size) {
  int saved = errno;
  if (madvise(p, size, MADV_DONTNEED) == 0) mld_gstat_add(MLD_GSTAT_bytes_purged, (int64_t)size);
  errno = saved;
}

/* Segments are purged in 64 KiB pages: keep transparent huge pages out of
 * them, or a kernel with THP "always" backs whole 2 MiB ranges at the first
 * touch and RSS no longer follows what is in use. */
void _mld_os_no_huge_pages(void* p, size_t size) {
#ifdef MADV_NOHUGEPAGE
  int saved = errno;
  (void)madvise(p, size, MADV_NOHUGEPAGE);
  errno = saved;
#else
  (void)p;
  (void)size;
#endif
}

uint64_t _mld_os_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void _mld_os_yield(void) { sched_yield(); }
