/* page.c: pages, the unit a thread heap owns. A page holds blocks of one
 * size class. Its owner pushes and pops blocks on the local free list
 * without atomics; any other thread frees a block with one CAS onto the
 * page's thread-free list, which the owner (or whoever reclaims an
 * abandoned page) collects in one atomic exchange. Blocks are carved
 * lazily, a batch at a time, so untouched memory stays untouched. */
#include "internal.h"

void _mld_page_init(mld_page_t* page, unsigned c, mld_heap_t* owner) {
  const mld_class_info_t* ci = &_mld_classes[c];
  page->start = page->area_start;
  page->block_size = ci->size;
  page->reserved = (uint32_t)(page->area_size / ci->size);
  mld_page_set_blocks(page, ci->size, page->reserved);
  page->free = NULL;
  atomic_store_explicit(&page->thread_free, 0, memory_order_relaxed);
  page->used = 0;
  page->capacity = 0;
  page->in_full = 0;
  page->in_central = 0;
  page->next = page->prev = NULL;
  mld_page_set_class(page, c);   /* and the segment's slots, which free reads */
  atomic_store_explicit(&page->owner, owner, memory_order_relaxed);
}

/* Move the thread-free list onto the local free list. Its count comes
 * with it (the bits above the address), so the list is walked only to
 * splice it onto a non-empty local free list. The walk that counted it was
 * a chain of cache misses on blocks another core had just written
 * (xmalloc-test: a fifth of the run's time). */
void _mld_page_collect(mld_page_t* page) {
  if (atomic_load_explicit(&page->thread_free, memory_order_relaxed) == 0) return;
  uintptr_t x = atomic_exchange_explicit(&page->thread_free, 0, memory_order_acquire);
  mld_block_t* tf = MLD_TF_PTR(x);
  if (tf == NULL) return;
  page->used -= MLD_TF_COUNT(x);
  if (page->free != NULL) {
    mld_block_t* tail = tf;
    while (tail->next != NULL) tail = tail->next;
    tail->next = page->free;
  }
  page->free = tf;
}

/* Take up to n blocks (free list first, then freshly carved ones) into
 * out[]; returns how many. A carved block is marked free (its cookie, as
 * free writes it), so a free of a block never handed out (in a bin, or
 * the transfer cache) is caught as a double free (mimalloc-bench's
 * invalid_free_close probe frees the block after a 4 KiB one); its line
 * is touched a little before the malloc that hands it out. The walk of
 * the free list tests the end of out[] once per two blocks. */
uint32_t _mld_page_take(mld_page_t* page, uint32_t n, void** out) {
  void** o = out;
  void** end = out + n;
  mld_block_t* b = page->free;
  while (b != NULL && end - o >= 2) {
    mld_block_t* b2 = b->next;
    o[0] = b;
    if (b2 == NULL) {
      o++;
      b = NULL;
      break;
    }
    o[1] = b2;
    o += 2;
    b = b2->next;
  }
  if (b != NULL && o != end) {
    *o++ = b;
    b = b->next;
  }
  page->free = b;
  uint32_t got = (uint32_t)(o - out);
  if (got < n && page->capacity < page->reserved) {
    uint32_t k = n - got;
    if (k > page->reserved - page->capacity) k = page->reserved - page->capacity;
    size_t bs = page->block_size;
    /* the j-th block carved is block (first + j) mod reserved
     * (mld_page_first): blocks lo .. lo + k - 1, of which the last wrap
     * to 0 .. wrapped - 1; descending, so the stack hands them out in
     * carving order */
    uint32_t r = page->reserved, lo = page->capacity + mld_page_first(page);
    if (lo >= r) lo -= r;
    uint32_t wrapped = lo + k > r ? lo + k - r : 0;
    uintptr_t cookie = mld_block_cookie(page);
    uint8_t* p = page->start + (size_t)wrapped * bs;
    for (void** e = o + wrapped; o != e; o++) {
      *o = (p -= bs);
      mld_block_mark((mld_block_t*)p, cookie);
    }
    p = page->start + (size_t)(lo + k - wrapped) * bs;
    for (void** e = o + (k - wrapped); o != e; o++) {
      *o = (p -= bs);
      mld_block_mark((mld_block_t*)p, cookie);
    }
    page->capacity += k;
    got += k;
  }
  page->used += got;
  return got;
}

/* Take up to n blocks from the free lists of pages[0..k) (1 <= k <=
 * MLD_TAKE_PAGES, each with a non-empty list) into out[], walking the
 * lists side by side; returns how many. A block freed long ago is a cache
 * miss when its next pointer is read, and one list is a chain of such
 * misses, each waiting for the one before (fragmentation: the walk was a
 * fifth of the run's time); k lists keep k misses in flight. */
uint32_t _mld_page_take_lists(mld_page_t** pages, unsigned k, uint32_t n, void** out) {
  mld_block_t* b[MLD_TAKE_PAGES];
  uint32_t got[MLD_TAKE_PAGES];
  for (unsigned i = 0; i < k; i++) {
    b[i] = pages[i]->free;
    got[i] = 0;
  }
  void** o = out;
  void** end = out + n;
  if (k == MLD_TAKE_PAGES) {
    /* all lists at once while none has ended (the common case) */
    uint32_t rounds = 0;
    for (;;) {
      bool ended = false;
      for (unsigned i = 0; i < MLD_TAKE_PAGES; i++) ended |= b[i] == NULL;
      if (ended || (size_t)(end - o) < MLD_TAKE_PAGES) break;
      for (unsigned i = 0; i < MLD_TAKE_PAGES; i++) {
        o[i] = b[i];
        b[i] = b[i]->next;
      }
      o += MLD_TAKE_PAGES;
      rounds++;
    }
    for (unsigned i = 0; i < MLD_TAKE_PAGES; i++) got[i] = rounds;
  }
  unsigned live = k;
  while (live > 0 && o != end) {
    live = 0;
    for (unsigned i = 0; i < k && o != end; i++) {
      if (b[i] == NULL) continue;
      *o++ = b[i];
      b[i] = b[i]->next;
      got[i]++;
      live++;
    }
  }
  for (unsigned i = 0; i < k; i++) {
    pages[i]->free = b[i];
    pages[i]->used += got[i];
  }
  return (uint32_t)(o - out);
}

/* n blocks of page, linked first .. last, onto its thread-free list with
 * their count: one CAS for the run. */
void _mld_page_free_remote_chain(mld_page_t* page, mld_block_t* first, mld_block_t* last, uint32_t n) {
  uintptr_t old = atomic_load_explicit(&page->thread_free, memory_order_relaxed), next;
  do {
    last->next = MLD_TF_PTR(old);
    next = (uintptr_t)first | ((uintptr_t)(MLD_TF_COUNT(old) + n) << MLD_VA_BITS);
  } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &old, next, memory_order_release,
                                                  memory_order_relaxed));
}

void _mld_page_free_remote(mld_page_t* page, mld_block_t* b) { _mld_page_free_remote_chain(page, b, b, 1); }

void _mld_page_list_push(mld_page_list_t* l, mld_page_t* p) {
  p->prev = NULL;
  p->next = l->first;
  if (l->first) l->first->prev = p; else l->last = p;
  l->first = p;
  l->count++;
}

void _mld_page_list_push_back(mld_page_list_t* l, mld_page_t* p) {
  p->next = NULL;
  p->prev = l->last;
  if (l->last) l->last->next = p; else l->first = p;
  l->last = p;
  l->count++;
}

void _mld_page_list_remove(mld_page_list_t* l, mld_page_t* p) {
  if (p->prev) p->prev->next = p->next; else l->first = p->next;
  if (p->next) p->next->prev = p->prev; else l->last = p->prev;
  p->next = p->prev = NULL;
  l->count--;
}
