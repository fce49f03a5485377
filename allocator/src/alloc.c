/* alloc.c: the allocation API behind both builds: the malloc/free slow
 * paths, remote and huge frees, misuse checks, calloc, realloc, the aligned
 * family and usable size, exported as mld_*. The fast paths themselves are
 * inlined from internal.h (here and in override.c). */
#include "internal.h"

#include <errno.h>
#include <string.h>

static void* mld_huge_alloc(mld_heap_t* h, size_t size, size_t alignment) {
  void* p;
  if (alignment >= MLD_SEGMENT_SIZE / 2) {
    p = _mld_segment_giant_alloc(size, alignment);
  } else {
    mld_page_t* page = _mld_segment_huge_alloc(size, alignment);
    p = page != NULL ? page->start : NULL;
  }
  if (p == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  if (h != &_mld_heap_empty) {
    mld_counter_add(&h->stats[MLD_STAT_huge_allocs], 1);   /* allocs adds it (_mld_heap_publish) */
  }
  return p;
}

/* Pop a block of class c, refilling the bin if needed. */
static void* mld_alloc_class(mld_heap_t* h, unsigned c) {
  mld_bin_t* bin = &h->bins[c];
  if (bin->own.top == bin->own.base && !mld_bin_take_foreign(bin, &h->foreign[c]) && !_mld_heap_refill(h, c)) {
    errno = ENOMEM;
    return NULL;
  }
  mld_block_t* b = (mld_block_t*)*--bin->own.top;
  mld_block_mark(b, 0);
  return b;
}

static mld_heap_t* mld_heap_get(void) {
  mld_heap_t* h = _mld_heap_tls;
  if (mld_unlikely(h == &_mld_heap_empty)) h = _mld_heap_thread_init();
  return h;
}

void* _mld_alloc_slow(size_t size, mld_heap_t* h) {
  if (h == &_mld_heap_empty) {
    h = _mld_heap_thread_init();
    if (h == NULL) {
      errno = ENOMEM;
      return NULL;
    }
  }
  if (size > MLD_MAX_SIZE) return mld_huge_alloc(h, size, 0);
  return mld_alloc_class(h, mld_size_class(size));
}

void* _mld_alloc_aligned(size_t alignment, size_t size) {
  if (alignment <= 16) return mld_malloc_inline(size);
  mld_heap_t* h = mld_heap_get();
  if (h == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  unsigned c = _mld_size_class_aligned(size, alignment);
  if (c < MLD_CLASSES) return mld_alloc_class(h, c);
  return mld_huge_alloc(h, size, alignment);
}

/* ---- free ------------------------------------------------------------------ */

/* A block of a page this thread does not own that the inline path did not
 * take (see mld_free_block_at): a thread without a heap gets one first (bin
 * mode); a page whose thread has exited is taken over, and the block is
 * ours; else, in bin mode, into our bin (its foreign stack when the bin is
 * empty), tcmalloc style, and it reaches its page only if it must; with
 * MALLARD_REMOTE=page onto the page's thread-free list, one CAS (mimalloc). */
void _mld_alloc_free_remote(mld_heap_t* h, mld_page_t* page, mld_block_t* b) {
  if (h == &_mld_heap_empty && _mld_remote_mode == MLD_REMOTE_BIN && !_mld_heap_exited) {
    int saved = errno;
    /* a thread that frees before it ever allocated (a consumer): give it a
     * heap, so its frees are batched like everyone's (not a thread whose
     * heap is already gone: it is exiting, a new heap could outlive it) */
    h = _mld_heap_thread_init();
    errno = saved;
    if (h != NULL) {
      mld_block_mark(b, 0);   /* free marked it before it came here: not a double free */
      mld_free_block_inline(b);
      return;
    }
    h = &_mld_heap_empty;
  }
  /* b carries its mark already (free marks before it looks at the owner) */
  if (atomic_load_explicit(&page->owner, memory_order_relaxed) == NULL && h != &_mld_heap_empty &&
      _mld_central_adopt(page, h)) {
    /* the page was abandoned: now it is ours, free locally */
    _mld_heap_adopted(h, page);
    _mld_heap_push_local(h, page->size_class, b);
    return;
  }
  if (_mld_remote_mode == MLD_REMOTE_BIN && h != &_mld_heap_empty) {
    /* into our bin, or (an empty bin) onto its foreign stack, see the inline path */
    unsigned c = page->size_class;
    mld_bin_t* bin = &h->bins[c];
    h->hot.remote_frees++;
    if (bin->own.top != bin->own.base) {
      if (mld_stack_push(&bin->own, b)) _mld_heap_flush(h, c, page);
    } else if (mld_stack_push(&h->foreign[c], b)) {
      _mld_heap_flush_foreign(h, c);
    }
    return;
  }
  _mld_page_free_remote(page, b);
  if (h != &_mld_heap_empty) {
    h->hot.remote_frees++;
    h->hot.moved--;   /* a free that skipped the bins */
  } else {
    atomic_fetch_add_explicit(&_mld_heap_empty.stats[MLD_STAT_frees], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&_mld_heap_empty.stats[MLD_STAT_remote_frees], 1, memory_order_relaxed);
  }
}

/* free's range test failed: the canary is on (it runs, then the free), the
 * thread has no heap yet (or any more), or p is past the byte map; the free
 * itself tests the range again, against the map's size. */
void _mld_alloc_free_outside(void* p) {
  if (_mld_canary_loops != 0 && p != NULL) _mld_canary_free(p);
  else mld_free_block_inline(p);
}

/* Not a small block of ours: a huge block, or misuse. */
void _mld_alloc_free_slow(void* p, mld_page_t* page) {
  if (p == NULL) return;   /* the fast path's one range test sends NULL here */
  int saved = errno;
  if (page != NULL && page->size_class == MLD_CLASS_HUGE && p == page->start) {
    mld_heap_t* h = _mld_heap_tls;
    if (h != &_mld_heap_empty) {
      mld_counter_add(&h->stats[MLD_STAT_huge_frees], 1);
      h->hot.local_frees++;
      h->hot.moved--;   /* a free that skipped the bins */
    }
    _mld_segment_huge_free(page);
  } else if (page == NULL && _mld_segment_giant_find(p, true) != 0) {
    mld_heap_t* h = _mld_heap_tls;   /* a giant-aligned block: unmapped */
    if (h != &_mld_heap_empty) {
      mld_counter_add(&h->stats[MLD_STAT_huge_frees], 1);
      h->hot.local_frees++;
      h->hot.moved--;   /* a free that skipped the bins */
    }
  } else {
    _mld_report_invalid("free", p);
  }
  errno = saved;
}

/* A valid block of ours: its usable size; otherwise report and return 0. */
static size_t mld_checked_size(const void* p, const char* what) {
  mld_page_t* page = mld_page_of(p);
  if (page != NULL) {
    if (page->size_class < MLD_CLASSES && mld_page_is_block(page, p)) {
      const mld_block_t* b = (const mld_block_t*)p;
      if (b->cookie != mld_block_cookie(page)) return page->block_size;
      _mld_report_use_after_free(what, p, page);
      return 0;
    }
    if (page->size_class == MLD_CLASS_HUGE && p == page->start) return page->block_size;
  } else {
    size_t giant = _mld_segment_giant_find(p, false);
    if (giant != 0) return giant;
  }
  _mld_report_invalid(what, p);
  return 0;
}

size_t _mld_alloc_usable_size(const void* p) {
  if (p == NULL) return 0;
  return mld_checked_size(p, "malloc_usable_size");
}

void* _mld_alloc_calloc(size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  void* p = mld_malloc_inline(total);
  if (p == NULL) return NULL;
  if (total > MLD_MAX_SIZE) {         /* a fresh huge mapping is already zero */
    mld_page_t* page = mld_page_of(p);
    if (page != NULL && page->fresh) return p;
  }
  memset(p, 0, total);
  return p;
}

void* _mld_alloc_realloc(void* p, size_t size) {
  if (p == NULL) return mld_malloc_inline(size);
  if (size == 0) {              /* as glibc: free and return NULL */
    mld_free_inline(p);
    return NULL;
  }
  size_t old = mld_checked_size(p, "realloc");
  if (old == 0) {               /* misuse ignored: do not touch p */
    errno = EINVAL;
    return NULL;
  }
  if (size <= old && (size >= old / 2 || old <= 64)) return p;
  void* q = mld_malloc_inline(size);
  if (q == NULL) return NULL;
  memcpy(q, p, old < size ? old : size);
  mld_free_inline(p);
  return q;
}

/* ---- exported mld_* API --------------------------------------------------- */

MLD_API void* mld_malloc(size_t size) { return mld_malloc_inline(size); }
MLD_API void mld_free(void* p) { mld_free_inline(p); }
MLD_API void* mld_calloc(size_t count, size_t size) { return _mld_alloc_calloc(count, size); }
MLD_API void* mld_realloc(void* p, size_t size) { return _mld_alloc_realloc(p, size); }
MLD_API size_t mld_usable_size(const void* p) { return _mld_alloc_usable_size(p); }

MLD_API void* mld_reallocarray(void* p, size_t count, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(count, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return _mld_alloc_realloc(p, total);
}

static bool mld_pow2(size_t x) { return x != 0 && (x & (x - 1)) == 0; }

MLD_API void* mld_aligned_alloc(size_t alignment, size_t size) {
  if (!mld_pow2(alignment)) {   /* C11: an unsupported alignment fails */
    errno = EINVAL;
    return NULL;
  }
  return _mld_alloc_aligned(alignment, size);
}

MLD_API int mld_posix_memalign(void** out, size_t alignment, size_t size) {
  if (!mld_pow2(alignment) || alignment % sizeof(void*) != 0) return EINVAL;
  int saved = errno;
  void* p = _mld_alloc_aligned(alignment, size);
  errno = saved;   /* POSIX: the error is returned, errno is not set */
  if (p == NULL) return ENOMEM;
  *out = p;
  return 0;
}

MLD_API void* mld_memalign(size_t alignment, size_t size) {
  if (!mld_pow2(alignment)) {   /* as glibc: round up to a power of two */
    if (alignment > ((size_t)1 << (sizeof(size_t) * 8 - 1))) {
      errno = EINVAL;
      return NULL;
    }
    alignment = mld_pow2_ceil(alignment);
  }
  return _mld_alloc_aligned(alignment, size);
}

MLD_API void* mld_valloc(size_t size) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  return _mld_alloc_aligned(_mld_os_page_size, size);
}

MLD_API void* mld_pvalloc(size_t size) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  size_t ps = _mld_os_page_size;
  if (size > SIZE_MAX - ps) {
    errno = ENOMEM;
    return NULL;
  }
  size_t rounded = (size + ps - 1) & ~(ps - 1);
  if (rounded == 0) rounded = ps;
  return _mld_alloc_aligned(ps, rounded);
}

MLD_API void mld_thread_done(void) { _mld_heap_thread_done(); }

MLD_API void mld_collect(int force) {
  mld_heap_t* h = _mld_heap_tls;
  if (h != &_mld_heap_empty) _mld_heap_collect(h, force != 0);
  else if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) == 2) _mld_segment_purge(force != 0);
}

MLD_API const char* mld_transfer_mode(void) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  return _mld_options_str(MLD_OPT_TRANSFER);
}
