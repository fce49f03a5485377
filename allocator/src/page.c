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
  atomic_store_explicit(&page->thread_free, NULL, memory_order_relaxed);
  page->used = 0;
  page->capacity = 0;
  page->in_full = 0;
  page->in_central = 0;
  page->next = page->prev = NULL;
  mld_page_set_class(page, c);   /* and the segment's slots, which free reads */
  atomic_store_explicit(&page->owner, owner, memory_order_relaxed);
}

/* Move the thread-free list onto the local free list. */
void _mld_page_collect(mld_page_t* page) {
  if (atomic_load_explicit(&page->thread_free, memory_order_relaxed) == NULL) return;
  mld_block_t* tf = atomic_exchange_explicit(&page->thread_free, NULL, memory_order_acquire);
  if (tf == NULL) return;
  uint32_t n = 1;
  mld_block_t* tail = tf;
  while (tail->next != NULL) {
    tail = tail->next;
    n++;
  }
  tail->next = page->free;
  page->free = tf;
  page->used -= n;
}

/* Take up to n blocks (free list first, then freshly carved ones) into
 * out[]; returns how many. Carving writes nothing into the blocks: a
 * carved block is first touched by the malloc that hands it out. */
uint32_t _mld_page_take(mld_page_t* page, uint32_t n, void** out) {
  uint32_t got = 0;
  mld_block_t* b = page->free;
  while (got < n && b != NULL) {
    out[got++] = b;
    b = b->next;
  }
  page->free = b;
  if (got < n && page->capacity < page->reserved) {
    uint32_t k = n - got;
    if (k > page->reserved - page->capacity) k = page->reserved - page->capacity;
    size_t bs = page->block_size;
    uint8_t* p = page->start + (size_t)page->capacity * bs;
    /* descending, so the stack hands them out in address order */
    for (uint32_t i = 0; i < k; i++) out[got + i] = p + (size_t)(k - 1 - i) * bs;
    page->capacity += k;
    got += k;
  }
  page->used += got;
  return got;
}

void _mld_page_free_remote(mld_page_t* page, mld_block_t* b) {
  mld_block_t* old = atomic_load_explicit(&page->thread_free, memory_order_relaxed);
  do {
    b->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&page->thread_free, &old, b, memory_order_release,
                                                  memory_order_relaxed));
}

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
