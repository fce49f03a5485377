/* central.c: the central lists, one per size class: pages whose owner
 * thread exited (abandoned) and that still hold live blocks. Their blocks
 * keep being freed by other threads onto the pages' thread-free lists; a
 * live heap that runs out of blocks of the class reclaims such a page and
 * makes it its own. Pages found entirely free on the way are given back to
 * their segment. One mutex per class; taken only on slow paths. */
#include "internal.h"

typedef struct mld_central_s {
  pthread_mutex_t lock;
  mld_page_list_t pages;
  _Atomic(uint32_t) count;     /* pages.count, readable without the lock */
} __attribute__((aligned(MLD_CACHE_LINE))) mld_central_t;

static mld_central_t mld_central[MLD_CLASSES];

static void mld_central_init_locks(void) {
  for (unsigned c = 0; c < MLD_CLASSES; c++) pthread_mutex_init(&mld_central[c].lock, NULL);
}

/* Called once by the process init, before any page can be abandoned. */
void _mld_central_init(void) { mld_central_init_locks(); }

void _mld_central_push(mld_page_t* page) {
  mld_central_t* ce = &mld_central[page->size_class];
  atomic_store_explicit(&page->owner, NULL, memory_order_relaxed);
  pthread_mutex_lock(&ce->lock);
  page->in_full = 0;
  page->in_central = 1;
  _mld_page_list_push_back(&ce->pages, page);
  atomic_store_explicit(&ce->count, ce->pages.count, memory_order_relaxed);
  pthread_mutex_unlock(&ce->lock);
}

/* A page of class c with free blocks for heap h, or NULL. */
mld_page_t* _mld_central_pop(unsigned c, mld_heap_t* h) {
  mld_central_t* ce = &mld_central[c];
  /* peek without the lock: a page pushed right now is found by a later look */
  if (atomic_load_explicit(&ce->count, memory_order_relaxed) == 0) return NULL;
  pthread_mutex_lock(&ce->lock);
  mld_page_t* page = ce->pages.first;
  mld_page_t* found = NULL;
  uint32_t todo = ce->pages.count < 64 ? ce->pages.count : 64;
  while (page != NULL && todo-- > 0) {
    mld_page_t* next = page->next;
    _mld_page_collect(page);
    if (page->used == 0) {
      _mld_page_list_remove(&ce->pages, page);
      page->in_central = 0;
      mld_counter_add(&h->stats[MLD_STAT_pages_released], 1);
      _mld_segment_page_free(page);
    } else if (page->free != NULL || page->capacity < page->reserved) {
      _mld_page_list_remove(&ce->pages, page);
      page->in_central = 0;
      atomic_store_explicit(&page->owner, h, memory_order_relaxed);
      found = page;
      break;
    } else {
      /* still full: move it to the back so the next look starts elsewhere */
      _mld_page_list_remove(&ce->pages, page);
      _mld_page_list_push_back(&ce->pages, page);
    }
    page = next;
  }
  atomic_store_explicit(&ce->count, ce->pages.count, memory_order_relaxed);
  pthread_mutex_unlock(&ce->lock);
  return found;
}

/* A thread frees a block of an abandoned page: it takes the page over, so
 * the rest of that page's blocks are freed (and reused) locally. This is
 * what keeps thread churn (Larson) from leaving pages to remote frees. */
bool _mld_central_adopt(mld_page_t* page, mld_heap_t* h) {
  mld_central_t* ce = &mld_central[page->size_class];
  bool ok = false;
  pthread_mutex_lock(&ce->lock);
  if (page->in_central && atomic_load_explicit(&page->owner, memory_order_relaxed) == NULL) {
    _mld_page_list_remove(&ce->pages, page);
    page->in_central = 0;
    atomic_store_explicit(&page->owner, h, memory_order_relaxed);
    atomic_store_explicit(&ce->count, ce->pages.count, memory_order_relaxed);
    ok = true;
  }
  pthread_mutex_unlock(&ce->lock);
  return ok;
}

/* Give back abandoned pages whose blocks have all come home: look at up to
 * max pages per class (rotating through the list); counted as h's. */
void _mld_central_sweep(mld_heap_t* h, unsigned max) {
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    mld_central_t* ce = &mld_central[c];
    if (atomic_load_explicit(&ce->count, memory_order_relaxed) == 0) continue;
    pthread_mutex_lock(&ce->lock);
    uint32_t todo = ce->pages.count < max ? ce->pages.count : max;
    while (todo-- > 0) {
      mld_page_t* page = ce->pages.first;
      _mld_page_list_remove(&ce->pages, page);
      _mld_page_collect(page);
      if (page->used == 0) {
        page->in_central = 0;
        mld_counter_add(&h->stats[MLD_STAT_pages_released], 1);
        _mld_segment_page_free(page);
      } else {
        _mld_page_list_push_back(&ce->pages, page);
      }
    }
    atomic_store_explicit(&ce->count, ce->pages.count, memory_order_relaxed);
    pthread_mutex_unlock(&ce->lock);
  }
}

void _mld_central_fork_prepare(void) {
  for (unsigned c = 0; c < MLD_CLASSES; c++) pthread_mutex_lock(&mld_central[c].lock);
}

void _mld_central_fork_parent(void) {
  for (unsigned c = MLD_CLASSES; c-- > 0;) pthread_mutex_unlock(&mld_central[c].lock);
}

void _mld_central_fork_child(void) { mld_central_init_locks(); }
