/* heap.c: the thread heap. Each thread gets a heap (reached through an
 * initial-exec TLS pointer) holding one bin per size class: a stack of
 * block pointers popped by malloc and pushed by free without atomics or
 * locks (the stacks live after the heap struct). The heap owns pages; a
 * free of a block of one of its pages goes to the bin, a free of another
 * heap's block to the class's foreign stack (MALLARD_REMOTE=bin) or to
 * that page's thread-free list (MALLARD_REMOTE=page).
 *
 * Slow paths: an empty bin is refilled from the transfer cache, else from
 * the heap's own pages (collecting remote frees; up to MLD_TAKE_PAGES
 * pages' free lists walked side by side), else from pages abandoned by dead
 * threads (central lists), else from a fresh page. An overflowing bin
 * releases a batch to the transfer cache; when the cache is full the bin
 * keeps its blocks and sends the block just freed to its page (direct
 * mode). A bin's limit grows while its thread cycles its own bursts
 * through the transfer cache and shrinks back when blocks only leave (the
 * adaptive bin limit). At thread exit (pthread key destructor) the heap is
 * abandoned: bins emptied, free pages given back, the others pushed to the
 * central lists for live threads to reclaim. */
#include "internal.h"

#include <errno.h>
#include <string.h>

MLD_HIDDEN mld_heap_t _mld_heap_empty;
MLD_HIDDEN __thread mld_heap_t* _mld_heap_tls __attribute__((tls_model("initial-exec"))) = &_mld_heap_empty;
MLD_HIDDEN __thread uint8_t _mld_heap_exited __attribute__((tls_model("initial-exec")));

static pthread_mutex_t mld_heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static mld_heap_t* mld_heaps;               /* live heaps */
static mld_heap_t* mld_heaps_free;          /* recycled heap structs */
static uint64_t mld_dead_stats[MLD_STAT_HEAP_COUNT];
static pthread_key_t mld_heap_key;
static bool mld_heap_key_ok;

#define MLD_COLLECT_EVERY 1024              /* slow calls between two heap collects */

static void mld_heap_thread_exit(void* arg);

void _mld_heap_process_init(void) {
  mld_heap_key_ok = pthread_key_create(&mld_heap_key, mld_heap_thread_exit) == 0;
}

/* ---- heap structs: from the OS, recycled, never freed ----------------- */

/* A heap is the struct followed by its bins' slot arrays (two per class,
 * room for the class's bin_cap + 1 pointers each: the limit grows, and the
 * two arrays trade places in mld_bin_take_foreign); the size is the same
 * for every heap. */
static size_t mld_heap_bytes;

/* Every heap starts 2 KiB into a 4 KiB page, whatever its size: its bins
 * (the first 1.5 KiB, read and written by every malloc and free) then
 * fill the upper half of the L1 cache sets, away from the lower ones where
 * blocks crowd (pages start 64 KiB aligned, and their first blocks are the
 * ones in use). Before, a heap's offset was an accident of its size: the
 * adaptive bin limit's larger slot arrays moved the first heap from 2 KiB
 * to 3.6 KiB into its page, and fastpath's simulated L1 misses rose from
 * 132 k to 173 k (xmalloc 1T: 56 k to 74 k); here 129 k and 56 k. */
#define MLD_HEAP_ALIGN  4096u
#define MLD_HEAP_OFFSET 2048u

static size_t mld_heap_size(void) {
  if (mld_heap_bytes == 0) {
    size_t slots = 0;
    for (unsigned c = 0; c < MLD_CLASSES; c++) slots += 2u * (_mld_classes[c].bin_cap + 1u);
    size_t bytes = sizeof(mld_heap_t) + slots * sizeof(void*);
    mld_heap_bytes = (bytes + MLD_HEAP_ALIGN - 1) & ~(size_t)(MLD_HEAP_ALIGN - 1);
  }
  return mld_heap_bytes;
}

static mld_heap_t* mld_heap_struct_alloc(void) {
  pthread_mutex_lock(&mld_heaps_lock);
  mld_heap_t* h = mld_heaps_free;
  if (h == NULL) {
    size_t size = mld_heap_size();
    size_t chunk = 256 * 1024;
    if (chunk < _mld_os_page_size) chunk = _mld_os_page_size;
    if (chunk < MLD_HEAP_OFFSET + size)
      chunk = (MLD_HEAP_OFFSET + size + _mld_os_page_size - 1) & ~(_mld_os_page_size - 1);
    uint8_t* mem = (uint8_t*)_mld_os_map(chunk);
    if (mem != NULL) {
      size_t n = (chunk - MLD_HEAP_OFFSET) / size;
      for (size_t i = 0; i < n; i++) {
        mld_heap_t* x = (mld_heap_t*)(mem + MLD_HEAP_OFFSET + i * size);
        x->next = mld_heaps_free;
        mld_heaps_free = x;
      }
      h = mld_heaps_free;
    }
  }
  if (h != NULL) {
    mld_heaps_free = h->next;
    memset(h, 0, sizeof *h);   /* the struct; the slot arrays need no zeroing */
    h->next = mld_heaps;
    if (mld_heaps) mld_heaps->prev = h;
    mld_heaps = h;
    h->live = 1;
  }
  pthread_mutex_unlock(&mld_heaps_lock);
  return h;
}

/* Blocks the heap's bins (both stacks of every class) hold now. */
static uint64_t mld_heap_held(const mld_heap_t* h) {
  uint64_t n = 0;
  for (unsigned c = 0; c < MLD_CLASSES; c++)
    n += mld_stack_count(&h->bins[c].own) + mld_stack_count(&h->foreign[c]);
  return n;
}

/* Copy the owner's free counters where other threads read them. */
static void mld_heap_publish_frees(mld_heap_t* h) {
  atomic_store_explicit(&h->stats[MLD_STAT_frees], h->hot.local_frees + h->hot.remote_frees,
                        memory_order_relaxed);
  atomic_store_explicit(&h->stats[MLD_STAT_remote_frees], h->hot.remote_frees, memory_order_relaxed);
}

/* Copy the owner's plain counters where other threads read them, exactly.
 * malloc counts nothing (one add less per pair): every block a bin handed
 * out to malloc entered it by a free or a refill and did not leave by a
 * flush or a drain, nor is it there now (see mld_hot_stats_t); huge blocks
 * are counted as they are made. */
void _mld_heap_publish(mld_heap_t* h) {
  uint64_t allocs = h->hot.local_frees + h->hot.remote_frees + h->hot.moved - mld_heap_held(h) +
                    atomic_load_explicit(&h->stats[MLD_STAT_huge_allocs], memory_order_relaxed);
  atomic_store_explicit(&h->stats[MLD_STAT_allocs], allocs, memory_order_relaxed);
  mld_heap_publish_frees(h);
}

/* The publish of the paths that run once a batch (refill, flush): frees
 * every time, allocs every MLD_PUBLISH_ALLOCS_EVERY-th time: counting the
 * bins reads 42 lines of the heap, which at every refill and flush cost
 * larson 1T 1% of its time (lines its blocks had evicted). Other threads
 * read a live heap's allocs as of one of its last 16 batches; its own
 * thread, collect, shed and exit publish them exactly. */
#define MLD_PUBLISH_ALLOCS_EVERY 16

static void mld_heap_publish_often(mld_heap_t* h) {
  if (++h->publishes % MLD_PUBLISH_ALLOCS_EVERY == 0) _mld_heap_publish(h);
  else mld_heap_publish_frees(h);
}

static void mld_heap_struct_free(mld_heap_t* h) {
  _mld_heap_publish(h);
  pthread_mutex_lock(&mld_heaps_lock);
  for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++)
    mld_dead_stats[s] += atomic_load_explicit(&h->stats[s], memory_order_relaxed);
  if (h->prev) h->prev->next = h->next; else mld_heaps = h->next;
  if (h->next) h->next->prev = h->prev;
  h->live = 0;
  h->next = mld_heaps_free;
  mld_heaps_free = h;
  pthread_mutex_unlock(&mld_heaps_lock);
}

mld_heap_t* _mld_heap_thread_init(void) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  mld_heap_t* h = mld_heap_struct_alloc();
  if (h == NULL) return NULL;
  void** slots = (void**)(h + 1);
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    mld_bin_t* bin = &h->bins[c];
    bin->max = _mld_classes[c].bin_max;
    mld_stack_t* stacks[2] = {&bin->own, &h->foreign[c]};
    for (int i = 0; i < 2; i++) {
      stacks[i]->base = stacks[i]->top = slots;
      stacks[i]->limit = slots + bin->max;
      slots += _mld_classes[c].bin_cap + 1u;
    }
    bin->foreign_take = (_mld_classes[c].batch + 1u) / 2u;
  }
  h->free_limit = _mld_free_limit;
  _mld_heap_tls = h;
  if (mld_heap_key_ok) pthread_setspecific(mld_heap_key, h);
  mld_gstat_add(MLD_GSTAT_threads_started, 1);
  return h;
}

static void mld_heap_thread_exit(void* arg) {
  mld_heap_t* h = (mld_heap_t*)arg;
  if (h == NULL || h == &_mld_heap_empty) return;
  if (_mld_heap_tls == h) _mld_heap_tls = &_mld_heap_empty;
  _mld_heap_exited = 1;
  _mld_heap_abandon(h);
  mld_gstat_add(MLD_GSTAT_threads_ended, 1);
}

void _mld_heap_thread_done(void) {
  mld_heap_t* h = _mld_heap_tls;
  if (h == &_mld_heap_empty) return;
  _mld_heap_tls = &_mld_heap_empty;
  if (mld_heap_key_ok) pthread_setspecific(mld_heap_key, NULL);
  _mld_heap_abandon(h);
  mld_gstat_add(MLD_GSTAT_threads_ended, 1);
}

/* ---- giving blocks back --------------------------------------------------- */

static void mld_heap_release_page(mld_heap_t* h, mld_page_t* page) {
  unsigned c = page->size_class;
  _mld_page_list_remove(page->in_full ? &h->full[c] : &h->avail[c], page);
  page->in_full = 0;
  mld_counter_add(&h->stats[MLD_STAT_pages_released], 1);
  _mld_segment_page_free(page);
}

/* A block of our page was just pushed onto its free list: a page on the
 * full list is available again, an empty one goes back to its segment
 * unless it is the class's only available page. */
static MLD_NOINLINE void mld_heap_page_fixup(mld_heap_t* h, mld_page_t* page) {
  unsigned c = page->size_class;
  int saved = errno;   /* the direct free path calls this from free */
  if (page->in_full) {
    _mld_page_list_remove(&h->full[c], page);
    page->in_full = 0;
    _mld_page_list_push_back(&h->avail[c], page);
  }
  if (page->used == 0 && h->avail[c].count > 1) mld_heap_release_page(h, page);
  errno = saved;
}

/* One block back to its page (page: the block's page). The common case -
 * our page, neither on the full list nor left empty - is a push onto its
 * free list and a decrement. */
static inline void mld_heap_return_to(mld_heap_t* h, mld_page_t* page, mld_block_t* b) {
  if (mld_unlikely(atomic_load_explicit(&page->owner, memory_order_relaxed) != h)) {
    _mld_page_free_remote(page, b);
    return;
  }
  b->next = page->free;
  page->free = b;
  if (mld_unlikely((--page->used == 0) | page->in_full)) mld_heap_page_fixup(h, page);
}

/* n blocks back to their pages (the transfer cache was full, or a bin is
 * drained), each page found through the segment byte map (no segment
 * header read); a run of blocks of one other heap's page is pushed onto
 * its thread-free list at once (xmalloc-test's releasers free blocks in
 * the order they were carved: runs of a page's blocks). */
static void mld_heap_return_blocks(mld_heap_t* h, void** batch, unsigned n) {
  for (unsigned i = 0; i < n;) {
    mld_page_t* page = mld_page_of_known(batch[i]);
    mld_block_t* first = (mld_block_t*)batch[i++];
    if (atomic_load_explicit(&page->owner, memory_order_relaxed) == h) {
      mld_heap_return_to(h, page, first);
      continue;
    }
    /* another heap's page: the run of its blocks that follows goes in one push */
    mld_block_t* last = first;
    uint32_t k = 1;
    for (; i < n && mld_page_of_known(batch[i]) == page; i++, k++) {
      last->next = (mld_block_t*)batch[i];
      last = last->next;
    }
    _mld_page_free_remote_chain(page, first, last, k);
  }
}

/* page was just taken over from the central list (owner is h). */
void _mld_heap_adopted(mld_heap_t* h, mld_page_t* page) {
  mld_counter_add(&h->stats[MLD_STAT_pages_reclaimed], 1);
  _mld_page_collect(page);
  page->in_full = 0;
  _mld_page_list_push_back(&h->avail[page->size_class], page);
}

/* The newest n blocks of a stack go to the transfer cache, or, when that
 * is full, back to their pages (then false). */
static bool mld_heap_release(mld_heap_t* h, unsigned c, mld_stack_t* s, uint32_t n) {
  void** batch = s->top - n;
  bool hit = _mld_transfer_insert(h->stats, c, batch, n);
  if (hit) {
    mld_counter_add(&h->stats[MLD_STAT_transfer_insert_hits], 1);
  } else {
    mld_counter_add(&h->stats[MLD_STAT_transfer_insert_misses], 1);
    mld_heap_return_blocks(h, batch, n);
  }
  s->top = batch;
  h->hot.moved -= n;
  return hit;
}

/* ---- the adaptive bin limit ------------------------------------------------
 * A bin starts at its class's bin_max (at most ~32 KiB of blocks, for
 * thread churn: see Design, "Bins and transfer cache sizes"). A thread that
 * frees a burst of blocks and allocates them again (a server's request
 * batch; transfer and xmalloc at one thread) sends every batch through the
 * transfer cache and back: a lock, a copy of 32 pointers and an unlock
 * each way (transfer 1T: 14% of its time). So, as tcmalloc's thread cache
 * lists do, the limit grows by a batch, up to bin_cap (4 batches, ~128
 * KiB), at each refill of a bin that flushed since its last refill, and
 * shrinks by a batch when a bin flushes more than MLD_SHRINK_FLUSHES times
 * without a refill (blocks only leave: a consumer's bin). A producer's bin
 * (refills, never flushes) and a consumer's (the reverse) keep bin_max. */
#define MLD_SHRINK_FLUSHES 3

static void mld_heap_set_max(mld_heap_t* h, unsigned c, uint32_t max) {
  mld_bin_t* bin = &h->bins[c];
  bin->max = (uint16_t)max;
  bin->own.limit = bin->own.base + max;
  h->foreign[c].limit = h->foreign[c].base + max;
}

/* Bin c (empty) is about to be refilled. */
static void mld_heap_grow(mld_heap_t* h, unsigned c) {
  uint32_t cap = _mld_classes[c].bin_cap, max = h->bins[c].max;
  if (h->bins[c].flushes != 0 && max < cap) {
    max += _mld_classes[c].batch;
    mld_heap_set_max(h, c, max < cap ? max : cap);
    mld_counter_add(&h->stats[MLD_STAT_bin_grows], 1);
  }
  h->bins[c].flushes = 0;
}

/* Bin c just gave a batch to the transfer cache. Shrinks only when both
 * stacks hold at most the smaller limit + 1 (the count a push past the
 * limit leaves: the next push flushes; a stack is never over that, and
 * its array has room for bin_cap + 1). */
static void mld_heap_flushed(mld_heap_t* h, unsigned c) {
  if (h->bins[c].flushes < UINT8_MAX) h->bins[c].flushes++;
  uint32_t base = _mld_classes[c].bin_max, max = h->bins[c].max, batch = _mld_classes[c].batch;
  if (h->bins[c].flushes <= MLD_SHRINK_FLUSHES || max == base) return;
  uint32_t smaller = max - batch > base ? max - batch : base;
  if (mld_stack_count(&h->bins[c].own) > smaller + 1 || mld_stack_count(&h->foreign[c]) > smaller + 1) return;
  mld_heap_set_max(h, c, smaller);
  mld_counter_add(&h->stats[MLD_STAT_bin_shrinks], 1);
  h->bins[c].flushes = 1;   /* still flushed since the last refill */
}

/* The bin of class c is over its limit: release one batch (the newest)
 * to the transfer cache. When the cache refuses it (full: a burst of
 * frees, as in fragmentation), the bin keeps its blocks and only the block
 * just freed goes to its page, while its cache line is still hot; so do the
 * next overflows, up to four batches' worth (direct mode), before a batch
 * tries the transfer cache again (a look at its count, no lock, when it is
 * still full). A refill from the transfer cache (room again) ends it early.
 * An earlier version sent the refused batch back to its pages: blocks
 * whose lines had left the cache (a write miss each), to be walked again
 * by a refill from the pages' free lists later. */
static MLD_NOINLINE void mld_heap_flush_batch(mld_heap_t* h, unsigned c, mld_page_t* page) {
  int saved = errno;   /* free preserves errno, whatever the slow path does */
  mld_heap_publish_often(h);
  mld_bin_t* bin = &h->bins[c];
  uint32_t n = _mld_classes[c].batch;
  void** batch = bin->own.top - n;
  if (_mld_transfer_insert(h->stats, c, batch, n)) {
    mld_counter_add(&h->stats[MLD_STAT_transfer_insert_hits], 1);
    bin->own.top = batch;
    h->hot.moved -= n;
    mld_heap_flushed(h, c);
  } else {
    mld_counter_add(&h->stats[MLD_STAT_transfer_insert_misses], 1);
    mld_counter_add(&h->stats[MLD_STAT_direct_frees], 1);
    bin->direct = (uint8_t)(4u * n);   /* n <= MLD_MAX_BATCH */
    h->hot.moved--;
    mld_heap_return_to(h, page, (mld_block_t*)*--bin->own.top);
  }
  errno = saved;
}

/* page: the page of the block just pushed (free has it at hand). The
 * direct case saves no register: the batch case is a call apart. */
void _mld_heap_flush(mld_heap_t* h, unsigned c, mld_page_t* page) {
  mld_bin_t* bin = &h->bins[c];
  if (bin->direct == 0) {
    mld_heap_flush_batch(h, c, page);
    return;
  }
  bin->direct--;
  mld_counter_add(&h->stats[MLD_STAT_direct_frees], 1);
  h->hot.moved--;
  mld_heap_return_to(h, page, (mld_block_t*)*--bin->own.top);
}

/* Bin c's foreign blocks are over max: their newest batch goes the same way. */
void _mld_heap_flush_foreign(mld_heap_t* h, unsigned c) {
  int saved = errno;
  mld_heap_publish_often(h);
  mld_heap_release(h, c, &h->foreign[c], _mld_classes[c].batch);
  errno = saved;
}

/* A block that is now ours (a page just adopted) into bin c. */
void _mld_heap_push_local(mld_heap_t* h, unsigned c, mld_block_t* b) {
  h->hot.local_frees++;
  if (mld_stack_push(&h->bins[c].own, b)) _mld_heap_flush(h, c, mld_page_of_known(b));
}

/* ---- refilling a bin ------------------------------------------------------ */

/* How many blocks a refill from pages takes: half the bin. */
static uint32_t mld_heap_want(mld_heap_t* h, unsigned c) {
  mld_bin_t* bin = &h->bins[c];
  uint32_t want = bin->max / 2;
  if (want < _mld_classes[c].batch) want = _mld_classes[c].batch;
  uint32_t room = bin->max - mld_stack_count(&bin->own);
  return want > room ? room : want;
}

static bool mld_heap_take(mld_heap_t* h, unsigned c, mld_page_t* page) {
  mld_bin_t* bin = &h->bins[c];
  uint32_t got = _mld_page_take(page, mld_heap_want(h, c), bin->own.top);
  bin->own.top += got;
  h->hot.moved += got;
  return got != 0;
}

/* The available pages first: up to MLD_TAKE_PAGES of them with blocks on
 * their free lists are walked side by side (_mld_page_take_lists); a page
 * with none but room to carve is carved when no list was found before it;
 * a page with neither goes to the full list. */
static bool mld_heap_refill_pages(mld_heap_t* h, unsigned c) {
  mld_page_list_t* avail = &h->avail[c];
  mld_page_list_t* full = &h->full[c];
  mld_page_t* page = avail->first;
  mld_page_t* lists[MLD_TAKE_PAGES];
  unsigned k = 0;
  while (page != NULL && k < MLD_TAKE_PAGES) {
    mld_page_t* next = page->next;
    _mld_page_collect(page);
    if (page->free != NULL) {
      lists[k++] = page;
    } else if (page->capacity < page->reserved) {
      if (k == 0) return mld_heap_take(h, c, page);
      break;
    } else {
      _mld_page_list_remove(avail, page);
      page->in_full = 1;
      _mld_page_list_push(full, page);
    }
    page = next;
  }
  if (k > 0) {
    mld_bin_t* bin = &h->bins[c];
    uint32_t got = _mld_page_take_lists(lists, k, mld_heap_want(h, c), bin->own.top);
    bin->own.top += got;
    h->hot.moved += got;
    return true;
  }
  /* full pages that have received remote frees since: look at a few, the
   * ones looked at without luck go to the back (the list rotates) */
  for (unsigned todo = full->count < 16 ? full->count : 16; todo > 0; todo--) {
    page = full->first;
    _mld_page_list_remove(full, page);
    if (atomic_load_explicit(&page->thread_free, memory_order_relaxed) == 0) {
      _mld_page_list_push_back(full, page);
      continue;
    }
    _mld_page_collect(page);
    page->in_full = 0;
    _mld_page_list_push(avail, page);
    if (mld_heap_take(h, c, page)) return true;
  }
  /* pages abandoned by exited threads */
  while ((page = _mld_central_pop(c, h)) != NULL) {
    mld_counter_add(&h->stats[MLD_STAT_pages_reclaimed], 1);
    _mld_page_list_push(avail, page);
    if (mld_heap_take(h, c, page)) return true;
  }
  /* a fresh page */
  page = _mld_segment_page_alloc(_mld_classes[c].kind);
  if (page == NULL) return false;
  mld_counter_add(&h->stats[MLD_STAT_pages_fresh], 1);
  _mld_page_init(page, c, h);
  _mld_page_list_push(avail, page);
  return mld_heap_take(h, c, page);
}

bool _mld_heap_refill(mld_heap_t* h, unsigned c) {
  mld_bin_t* bin = &h->bins[c];
  unsigned n = _mld_classes[c].batch;
  if (mld_bin_take_foreign(bin, &h->foreign[c])) return true;   /* callers try this first; others may not */
  mld_heap_publish_often(h);
  mld_heap_grow(h, c);
  if (++h->slow_calls % MLD_COLLECT_EVERY == 0) _mld_heap_collect(h, false);
  else if (h->slow_calls % 64 == 0) _mld_segment_maybe_purge();
  if ((n = _mld_transfer_remove(h->stats, c, bin->own.base, n)) != 0) {   /* the bin is empty */
    mld_counter_add(&h->stats[MLD_STAT_transfer_remove_hits], 1);
    bin->own.top = bin->own.base + n;
    h->hot.moved += n;
    bin->direct = 0;   /* the transfer cache has room again */
    return true;
  }
  mld_counter_add(&h->stats[MLD_STAT_transfer_remove_misses], 1);
  mld_counter_add(&h->stats[MLD_STAT_central_refills], 1);
  return mld_heap_refill_pages(h, c);
}

/* ---- collect and abandon ------------------------------------------------- */

/* Collect remote frees on every page; give back pages with no live block
 * (keeping one per class unless force); look at abandoned pages; purge
 * expired free pages. With force, the bins and the transfer cache are
 * emptied first, so every block that is free can reach its page. */
static void mld_heap_drain_bin(mld_heap_t* h, unsigned c, bool to_transfer);

void _mld_heap_collect(mld_heap_t* h, bool force) {
  _mld_heap_publish(h);
  mld_counter_add(&h->stats[MLD_STAT_heap_collects], 1);
  if (force) {
    for (unsigned c = 0; c < MLD_CLASSES; c++) {
      mld_heap_drain_bin(h, c, false);
      unsigned n = _mld_classes[c].batch;
      void* batch[MLD_MAX_BATCH];
      unsigned got;
      while ((got = _mld_transfer_remove(h->stats, c, batch, n)) != 0)
        mld_heap_return_blocks(h, batch, got);
    }
  }
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    for (int which = 0; which < 2; which++) {
      mld_page_list_t* l = which ? &h->full[c] : &h->avail[c];
      mld_page_t* page = l->first;
      while (page != NULL) {
        mld_page_t* next = page->next;
        _mld_page_collect(page);
        if (page->in_full && (page->free != NULL || page->capacity < page->reserved)) {
          _mld_page_list_remove(l, page);
          page->in_full = 0;
          _mld_page_list_push_back(&h->avail[c], page);
        }
        if (page->used == 0 && (force || h->avail[c].count + h->full[c].count > 1)) mld_heap_release_page(h, page);
        page = next;
      }
    }
  }
  _mld_central_sweep(h, force ? UINT32_MAX : 16);
  _mld_segment_purge(force);
}

/* Empty a stack of bin c: to the transfer cache while it takes them (whole
 * batches, then the remainder as one short batch: the cache counts
 * objects, and a later remove of a whole batch takes it together with
 * others), whatever it refuses back to their pages. In a fork child the
 * bins of the threads that are gone may have been caught anywhere in a
 * push or pop: mld_stack_push keeps every such state valid. */
static void mld_heap_drain_stack(mld_heap_t* h, unsigned c, mld_stack_t* s, bool to_transfer) {
  if (s->top < s->base || s->top > s->limit + 1) {   /* cannot happen; leak rather than hand out */
    h->hot.moved -= (uint64_t)(s->top - s->base);
    s->top = s->base;
    return;
  }
  unsigned n = _mld_classes[c].batch;
  while (s->top > s->base) {
    uint32_t left = mld_stack_count(s);
    uint32_t k = left < n ? left : n;
    void** batch = s->top - k;
    if (to_transfer && _mld_transfer_insert(h->stats, c, batch, k)) {
      mld_counter_add(&h->stats[MLD_STAT_transfer_insert_hits], 1);
    } else {
      to_transfer = false;   /* full: the rest goes back to the pages too */
      mld_heap_return_blocks(h, batch, k);
    }
    s->top = batch;
    h->hot.moved -= k;
  }
}

/* Empty bin c, its foreign blocks first. */
static void mld_heap_drain_bin(mld_heap_t* h, unsigned c, bool to_transfer) {
  mld_bin_t* bin = &h->bins[c];
  mld_heap_drain_stack(h, c, &h->foreign[c], to_transfer);
  mld_heap_drain_stack(h, c, &bin->own, to_transfer);
}

/* The thread is about to create a thread (override.c wraps pthread_create):
 * its bins go to the transfer cache, where any heap finds them. The creator
 * may not run again for a long while: a new thread often runs first, and a
 * thread that hands its work to a successor and exits (Larson) is
 * preempted right there, before its exit destructor can abandon the heap.
 * With the bins kept, a chain of such threads (measured: up to 477 heaps
 * alive at once on one core) left each successor to carve fresh pages for
 * blocks stranded in its predecessors' bins: peak RSS 7 MB or 118 MB,
 * depending on scheduling. Pages stay owned (their live blocks are freed
 * into the freeing threads' bins and reused there). */
void _mld_heap_shed(void) {
  mld_heap_t* h = _mld_heap_tls;
  if (h == &_mld_heap_empty) return;
  int saved = errno;
  _mld_heap_publish(h);
  for (unsigned c = 0; c < MLD_CLASSES; c++)
    if (h->bins[c].own.top != h->bins[c].own.base || h->foreign[c].top != h->foreign[c].base)
      mld_heap_drain_bin(h, c, true);
  errno = saved;
}

/* The heap's thread is gone (or asked to let go): give everything back. */
void _mld_heap_abandon(mld_heap_t* h) {
  for (unsigned c = 0; c < MLD_CLASSES; c++) mld_heap_drain_bin(h, c, true);
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    for (int which = 0; which < 2; which++) {
      mld_page_list_t* l = which ? &h->full[c] : &h->avail[c];
      mld_page_t* page = l->first;
      while (page != NULL) {
        mld_page_t* next = page->next;
        _mld_page_list_remove(l, page);
        page->in_full = 0;
        _mld_page_collect(page);
        if (page->used == 0) {
          mld_counter_add(&h->stats[MLD_STAT_pages_released], 1);
          _mld_segment_page_free(page);
        } else {
          mld_counter_add(&h->stats[MLD_STAT_pages_abandoned], 1);
          _mld_central_push(page);
        }
        page = next;
      }
    }
  }
  mld_heap_struct_free(h);
}

/* ---- stats and fork ------------------------------------------------------- */

void _mld_heap_stats_sum(uint64_t out[MLD_STAT_HEAP_COUNT]) {
  if (_mld_heap_tls != &_mld_heap_empty) _mld_heap_publish(_mld_heap_tls);   /* our own: exact */
  pthread_mutex_lock(&mld_heaps_lock);
  for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++) out[s] = mld_dead_stats[s];
  for (mld_heap_t* h = mld_heaps; h != NULL; h = h->next)
    for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++) out[s] += atomic_load_explicit(&h->stats[s], memory_order_relaxed);
  for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++)
    out[s] += atomic_load_explicit(&_mld_heap_empty.stats[s], memory_order_relaxed);
  pthread_mutex_unlock(&mld_heaps_lock);
}

void _mld_heap_fork_prepare(void) { pthread_mutex_lock(&mld_heaps_lock); }
void _mld_heap_fork_parent(void) { pthread_mutex_unlock(&mld_heaps_lock); }

/* In the child only the forking thread exists. The other threads' heaps were
 * caught at arbitrary points of their lock-free bin and page updates (a bin
 * list half spliced, a page list mid-move), so walking them can loop forever
 * or corrupt memory (seen: the child spinning in a drained bin). They are
 * unlinked and left alone: their blocks and pages are leaked in the child (a
 * child usually execs or exits soon), never walked. Their counters still
 * count. Their structs are not reused either: pages still name them as owner. */
void _mld_heap_fork_child(void) {
  pthread_mutex_init(&mld_heaps_lock, NULL);
  mld_heap_t* self = _mld_heap_tls;
  mld_heap_t* h = mld_heaps;
  while (h != NULL) {
    mld_heap_t* next = h->next;
    if (h != self) {
      for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++)
        mld_dead_stats[s] += atomic_load_explicit(&h->stats[s], memory_order_relaxed);
      if (h->prev) h->prev->next = h->next; else mld_heaps = h->next;
      if (h->next) h->next->prev = h->prev;
      h->live = 0;
    }
    h = next;
  }
}
