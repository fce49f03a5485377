/* segment.c: segments, the unit Mallard gets from the OS. A segment is
 * 4 MiB aligned to 4 MiB and registered in a byte map (_mld_segmap), so the
 * page owning any pointer is found in O(1) and pointers that are not ours are
 * recognised without touching their memory. Its first 64 KiB (or one OS page
 * if larger) hold the header and the page table; the rest is cut into pages:
 * 64 KiB pages for small classes, 1 MiB pages for medium ones. Huge blocks
 * (> 128 KiB) get a span of their own (a mapping with a segment header); a
 * freed one waits in the span cache for reuse until the decay expires (see
 * "huge blocks and the span cache" below), then is unmapped.
 *
 * A new segment is PROT_NONE past the part of its header in use (the
 * segment and page structs, the slot table); its pages are opened (made
 * accessible) from the start, MLD_OPEN_STEP at a time, as they are first
 * handed out, so a stray access far past a block (mimalloc-bench's
 * security probes write 1 MiB past one) faults instead of landing in a
 * free page, and so does one just before page 1 (the header's unused
 * tail, never opened). A page once opened stays so.
 *
 * Free pages stay committed for MALLARD_DECAY_MS, then are purged
 * (madvise MADV_DONTNEED); a segment whose pages are all free and purged is
 * unmapped. All of this runs under one lock: it is reached only when a heap
 * needs a whole page or gives one back. */
#include "internal.h"

#include <string.h>

MLD_HIDDEN _Atomic(uint8_t) _mld_segmap[(size_t)1 << (MLD_VA_BITS - MLD_SEGMENT_SHIFT)];

typedef struct mld_kind_state_s {
  mld_page_list_t committed;   /* free pages still holding memory; most recent first */
  mld_page_list_t purged;      /* free pages without memory */
  unsigned page_shift;
  size_t page_size;
} mld_kind_state_t;

static pthread_mutex_t mld_segment_lock = PTHREAD_MUTEX_INITIALIZER;
static mld_kind_state_t mld_kinds[MLD_KINDS];
static mld_segment_t* mld_segments;        /* every small/medium segment */
static size_t mld_header_size;
static uint64_t mld_last_purge_ms;
static _Atomic(uint64_t) mld_purge_due_ms;   /* 0: nothing committed waits for a purge */
static uint64_t mld_decay_ms;

/* Register (the segment's page shift) or forget a segment. */
static void mld_segmap_set(uintptr_t seg, bool on) {
  uint8_t shift = on ? ((mld_segment_t*)seg)->page_shift : 0;
  atomic_store_explicit(&_mld_segmap[seg >> MLD_SEGMENT_SHIFT], shift, memory_order_relaxed);
}

#define MLD_SPAN_CACHE_MAX_COUNT 64
#define MLD_SPAN_CACHE_MIN_BYTES ((size_t)128 << 20)
#define MLD_SPAN_CACHE_LIVE_SHARE 4

static mld_segment_t* mld_span_cache;
static size_t mld_span_cache_bytes;
static unsigned mld_span_cache_count;
static size_t mld_huge_live_bytes;   /* spans holding a block (lock held) */

static void mld_span_unlink(mld_segment_t* s) {
  if (s->prev) s->prev->next = s->next; else mld_span_cache = s->next;
  if (s->next) s->next->prev = s->prev;
  mld_span_cache_bytes -= s->size;
  mld_span_cache_count--;
}

static void mld_span_link(mld_segment_t* s, uint64_t freed_at) {
  s->pages[0].freed_at_ms = freed_at;
  s->prev = NULL;
  s->next = mld_span_cache;
  if (mld_span_cache) mld_span_cache->prev = s;
  mld_span_cache = s;
  mld_span_cache_bytes += s->size;
  mld_span_cache_count++;
}

void _mld_segment_init(void) {
  unsigned os_shift = (unsigned)__builtin_ctzll((unsigned long long)_mld_os_page_size);
  unsigned small = os_shift > 16 ? os_shift : 16, medium = os_shift > 20 ? os_shift : 20;
  /* small <= 512 KiB: a page's thread-free count (16 bits: MLD_TF_COUNT) holds its blocks */
  if (medium >= MLD_SEGMENT_SHIFT || small > 19)
    _mld_report_fatal("mallard: OS page size larger than 512 KiB is not supported\n");
  mld_kinds[MLD_KIND_SMALL].page_shift = small;
  mld_kinds[MLD_KIND_MEDIUM].page_shift = medium;
  for (int k = 0; k < MLD_KINDS; k++) mld_kinds[k].page_size = (size_t)1 << mld_kinds[k].page_shift;
  mld_header_size = (size_t)1 << small;
  size_t need = sizeof(mld_segment_t) + (MLD_SEGMENT_SIZE >> small) * sizeof(mld_page_t);
  if (need > mld_header_size) _mld_report_fatal("mallard: segment header does not fit\n");
  long d = _mld_options_get(MLD_OPT_DECAY_MS);
  mld_decay_ms = d < 0 ? 0 : (uint64_t)d;
}

/* How much of a segment is opened at a time (at least a page): a few
 * mprotect calls per segment (8 for small pages), against the 1,024 faults
 * that fill it. */
#define MLD_OPEN_STEP ((size_t)512 << 10)

/* Open seg up to the end of page (and a step past what was open, within
 * the segment). Lock held. */
static bool mld_segment_open(mld_segment_t* seg, const mld_page_t* page) {
  size_t end = (size_t)(page->area_start + page->area_size - (uint8_t*)seg);
  if (end <= seg->open) return true;
  size_t to = seg->open + MLD_OPEN_STEP;
  if (to < end) to = end;
  if (to > seg->size) to = seg->size;
  if (!_mld_os_protect((uint8_t*)seg + seg->open, to - seg->open, true)) return false;
  seg->open = to;
  return true;
}

/* Map a new segment of this kind and put its pages on the purged list
 * (untouched memory is as good as purged). Lock held. */
static bool mld_segment_new(unsigned kind) {
  mld_kind_state_t* ks = &mld_kinds[kind];
  mld_segment_t* seg = (mld_segment_t*)_mld_os_map_aligned(MLD_SEGMENT_SIZE, MLD_SEGMENT_SIZE);
  if (seg == NULL) return false;
  if (((uintptr_t)seg >> MLD_VA_BITS) != 0) {
    _mld_os_unmap(seg, MLD_SEGMENT_SIZE);
    return false;
  }
  _mld_os_no_huge_pages(seg, MLD_SEGMENT_SIZE);
  /* the pages closed until first used, and the header's unused tail for
   * good (so a write just before page 1's first block faults); if the
   * kernel refuses, all open */
  size_t used = (MLD_SLOT_TABLE_OFFSET + MLD_CACHE_LINE + _mld_os_page_size - 1) & ~(_mld_os_page_size - 1);
  if (used > mld_header_size) used = mld_header_size;
  bool closed = _mld_os_protect((uint8_t*)seg + used, MLD_SEGMENT_SIZE - used, false);
  seg->open = closed ? mld_header_size : MLD_SEGMENT_SIZE;
  seg->size = MLD_SEGMENT_SIZE;
  seg->kind = (uint8_t)kind;
  seg->page_shift = (uint8_t)ks->page_shift;
  seg->page_count = (uint16_t)(MLD_SEGMENT_SIZE >> ks->page_shift);
  seg->usable_pages = 0;
  for (unsigned i = seg->page_count; i-- > 0;) {   /* pushed last first: page 1 is handed out first */
    mld_page_t* page = &seg->pages[i];
    mld_page_set_class(page, MLD_CLASS_NONE);
    page->kind = (uint8_t)kind;
    uint8_t* start = (uint8_t*)seg + ((size_t)i << ks->page_shift);
    uint8_t* end = start + ks->page_size;
    if (start < (uint8_t*)seg + mld_header_size) start = (uint8_t*)seg + mld_header_size;
    page->area_start = start;
    page->area_size = end > start ? (size_t)(end - start) : 0;
    if (page->area_size < ks->page_size / 2) continue;   /* the header page */
    page->purged = 1;
    seg->usable_pages++;
    _mld_page_list_push(&ks->purged, page);
  }
  seg->purged_pages = seg->usable_pages;
  seg->used_pages = 0;
  seg->prev = NULL;
  seg->next = mld_segments;
  if (mld_segments) mld_segments->prev = seg;
  mld_segments = seg;
  mld_segmap_set((uintptr_t)seg, true);
  mld_gstat_add(MLD_GSTAT_segments_mapped, 1);
  return true;
}

static void mld_segment_release(mld_segment_t* seg) {
  mld_kind_state_t* ks = &mld_kinds[seg->kind];
  for (unsigned i = 0; i < seg->page_count; i++) {
    mld_page_t* page = &seg->pages[i];
    if (page->area_size >= ks->page_size / 2) _mld_page_list_remove(&ks->purged, page);
  }
  if (seg->prev) seg->prev->next = seg->next; else mld_segments = seg->next;
  if (seg->next) seg->next->prev = seg->prev;
  mld_segmap_set((uintptr_t)seg, false);
  mld_gstat_add(MLD_GSTAT_segments_unmapped, 1);
  _mld_os_unmap(seg, seg->size);
}

/* Purge committed free pages older than the decay (all when force), and
 * unmap segments left with nothing but purged free pages. Lock held. */
static void mld_purge_locked(uint64_t now, bool force) {
  mld_last_purge_ms = now;
  atomic_store_explicit(&mld_purge_due_ms, 0, memory_order_relaxed);
  for (int k = 0; k < MLD_KINDS; k++) {
    mld_kind_state_t* ks = &mld_kinds[k];
    mld_page_t* page = ks->committed.last;
    while (page != NULL && (force || now - page->freed_at_ms >= mld_decay_ms)) {
      mld_page_t* prev = page->prev;
      _mld_page_list_remove(&ks->committed, page);
      _mld_os_purge(page->area_start, page->area_size);
      page->purged = 1;
      _mld_page_list_push_back(&ks->purged, page);
      mld_segment_t* seg = mld_segment_of(page);
      seg->purged_pages++;
      page = prev;
    }
  }
  for (int k = 0; k < MLD_KINDS; k++) {
    mld_page_t* oldest = mld_kinds[k].committed.last;
    if (oldest != NULL) {
      uint64_t due = oldest->freed_at_ms + mld_decay_ms;
      uint64_t cur = atomic_load_explicit(&mld_purge_due_ms, memory_order_relaxed);
      if (cur == 0 || due < cur) atomic_store_explicit(&mld_purge_due_ms, due, memory_order_relaxed);
    }
  }
  /* spans cached longer than the decay */
  mld_segment_t* hs = mld_span_cache;
  while (hs != NULL) {
    mld_segment_t* next = hs->next;
    if (force || now - hs->pages[0].freed_at_ms >= mld_decay_ms) {
      mld_span_unlink(hs);
      mld_segmap_set((uintptr_t)hs, false);
      _mld_os_unmap(hs, hs->size);
    }
    hs = next;
  }
  /* keep one empty segment per kind mapped, so a program hovering around a
   * segment boundary does not map and unmap all the time */
  bool kept[MLD_KINDS] = {false, false};
  mld_segment_t* seg = mld_segments;
  while (seg != NULL) {
    mld_segment_t* next = seg->next;
    if (seg->used_pages == 0 && seg->purged_pages == seg->usable_pages) {
      if (!kept[seg->kind] && !force) kept[seg->kind] = true;
      else mld_segment_release(seg);
    }
    seg = next;
  }
}

mld_page_t* _mld_segment_page_alloc(unsigned kind) {
  mld_kind_state_t* ks = &mld_kinds[kind];
  pthread_mutex_lock(&mld_segment_lock);
  mld_page_t* page = ks->committed.first;
  if (page != NULL) {
    _mld_page_list_remove(&ks->committed, page);
  } else {
    if (ks->purged.first == NULL && !mld_segment_new(kind)) {
      pthread_mutex_unlock(&mld_segment_lock);
      return NULL;
    }
    page = ks->purged.first;
    if (!mld_segment_open(mld_segment_of(page), page)) {   /* no memory for the mapping's split */
      pthread_mutex_unlock(&mld_segment_lock);
      return NULL;
    }
    _mld_page_list_remove(&ks->purged, page);
    page->purged = 0;
    mld_segment_of(page)->purged_pages--;
  }
  mld_segment_of(page)->used_pages++;
  pthread_mutex_unlock(&mld_segment_lock);
  page->next = page->prev = NULL;
  return page;
}

void _mld_segment_page_free(mld_page_t* page) {
  mld_kind_state_t* ks = &mld_kinds[page->kind];
  uint64_t now = _mld_os_now_ms();
  mld_page_set_class(page, MLD_CLASS_NONE);
  mld_page_set_blocks(page, 0, 0);
  atomic_store_explicit(&page->owner, NULL, memory_order_relaxed);
  pthread_mutex_lock(&mld_segment_lock);
  mld_segment_t* seg = mld_segment_of(page);
  seg->used_pages--;
  page->freed_at_ms = now;
  _mld_page_list_push(&ks->committed, page);
  if (atomic_load_explicit(&mld_purge_due_ms, memory_order_relaxed) == 0)
    atomic_store_explicit(&mld_purge_due_ms, now + mld_decay_ms, memory_order_relaxed);
  if (mld_decay_ms == 0 || now - mld_last_purge_ms >= mld_decay_ms / 2 + 1) mld_purge_locked(now, false);
  pthread_mutex_unlock(&mld_segment_lock);
}

/* Called now and then from the heaps' slow paths: purge when a free page
 * (or cached huge block) has outlived the decay. One relaxed load when
 * nothing waits. */
void _mld_segment_maybe_purge(void) {
  uint64_t due = atomic_load_explicit(&mld_purge_due_ms, memory_order_relaxed);
  if (due == 0 || _mld_os_now_ms() < due) return;
  _mld_segment_purge(false);
}

void _mld_segment_purge(bool force) {
  pthread_mutex_lock(&mld_segment_lock);
  mld_purge_locked(_mld_os_now_ms(), force);
  pthread_mutex_unlock(&mld_segment_lock);
}

/* ---- huge blocks and the span cache ----------------------------------------
 * A huge block is a span: a mapping that starts 4 MiB aligned, its header
 * (segment + one page struct) first, the block after it. A freed span waits
 * in the span cache for reuse while younger than the decay: its pages stay
 * faulted in, and on this VM a 4 KiB page fault costs more than writing the
 * page (malloc-large: 12 of its 13 s were the kernel's). A huge malloc takes
 * the smallest cached span that holds it, and a span larger by 4 MiB or more
 * is split at the 4 MiB multiple past the block: the rest is a span of its
 * own (its header written at that boundary). Freed spans coalesce with
 * cached neighbours. A malloc that no span holds maps anew and moves the
 * pages of the largest cached spans that fit into the new mapping (mremap
 * moves page tables: nothing is faulted or zeroed), so spans of any sizes
 * serve it and only the rest is faulted in. Bounded: at most
 * MLD_SPAN_CACHE_MAX_COUNT spans and max(MLD_SPAN_CACHE_MIN_BYTES, live huge
 * bytes / MLD_SPAN_CACHE_LIVE_SHARE) bytes, the oldest unmapped first.
 * Blocks under 4 MiB take only a span that fits them closely (no split).
 *
 * Guards: a block in a span under 4 MiB has a PROT_NONE page (at least)
 * between the header and its start, so a write just before it faults, and
 * its span is PROT_NONE past the header while cached, so a use after free
 * faults (mimalloc-bench's underflow and use-after-free probes on large
 * blocks; glibc unmaps those). Spans of 4 MiB or more have neither:
 * sealing and opening a populated range walks its page tables, and the
 * header's extra pages (a guard, the slot table's page kept out of the
 * block) cost faults whenever such spans are moved together, which
 * malloc-large (5-25 MiB) would pay at every pair. A span taken from the
 * cache is opened whole (a no-op where nothing was sealed), then its guard
 * closed: two mprotect calls per reuse. Cached spans' headers are always
 * accessible (the cache walks them). */

/* A span's header: the segment struct and its one page struct, up to past
 * the slot table's line, which free reads for every pointer (before it
 * knows the segment is a huge block's): never sealed. */
static size_t mld_span_header(void) {
  size_t ps = _mld_os_page_size;
  return (MLD_SLOT_TABLE_OFFSET + MLD_CACHE_LINE + ps - 1) & ~(ps - 1);
}

/* Make everything past a span's header accessible (a span out of the
 * cache: sealed bodies, guards of spans it coalesced). */
static bool mld_span_open(mld_segment_t* s) {
  size_t header = mld_span_header();
  return _mld_os_protect((uint8_t*)s + header, s->size - header, true);
}

/* Write the header of a free span of size bytes at s (registered: a free
 * of a pointer to its start is reported, not taken for a block). */
static void mld_span_init(mld_segment_t* s, size_t size) {
  s->size = size;
  s->kind = MLD_KIND_HUGE;
  s->page_shift = 63;
  s->page_count = 1;
  s->usable_pages = 1;
  s->used_pages = 0;
  mld_page_t* page = &s->pages[0];
  page->kind = MLD_KIND_HUGE;
  mld_page_set_blocks(page, 0, 0);
  mld_page_set_class(page, MLD_CLASS_NONE);
  mld_segmap_set((uintptr_t)s, true);
}

/* The cached span for a block needing need bytes (split if much larger),
 * or NULL. Lock held. */
static mld_segment_t* mld_span_take(size_t need) {
  mld_segment_t* best = NULL;
  for (mld_segment_t* s = mld_span_cache; s != NULL; s = s->next)
    if (s->size >= need && (best == NULL || s->size < best->size)) best = s;
  if (best == NULL || (need < MLD_SEGMENT_SIZE && best->size - need > need / 4 + (256u << 10))) return NULL;
  if (!mld_span_open(best)) return NULL;   /* the kernel refused (mappings limit): map anew */
  mld_span_unlink(best);
  size_t cut = (need + MLD_SEGMENT_MASK) & ~MLD_SEGMENT_MASK;
  if (best->size >= cut + MLD_SEGMENT_SIZE) {
    mld_segment_t* rest = (mld_segment_t*)((uint8_t*)best + cut);
    mld_span_init(rest, best->size - cut);
    mld_span_link(rest, best->pages[0].freed_at_ms);
    best->size = cut;
  }
  return best;
}

/* Pieces of cached spans that add up to need bytes, or to all the cache
 * holds if less, out of the cache (a list through next, each with its size
 * in a header of its own) for mld_span_assemble: whole spans, largest first
 * while their sum stays within need, then the tail of the smallest span
 * longer than what is left (the span keeps its start, shorter). Lock held. */
static mld_segment_t* mld_span_gather(size_t need) {
  mld_segment_t* out = NULL;
  size_t sum = 0;
  for (;;) {
    mld_segment_t* pick = NULL;
    for (mld_segment_t* s = mld_span_cache; s != NULL; s = s->next)
      if (sum + s->size <= need && (pick == NULL || s->size > pick->size)) pick = s;
    if (pick == NULL) break;
    mld_span_unlink(pick);
    mld_segmap_set((uintptr_t)pick, false);
    sum += pick->size;
    pick->next = out;
    out = pick;
  }
  size_t rest = need - sum;
  mld_segment_t* from = NULL;
  for (mld_segment_t* s = mld_span_cache; s != NULL && rest > 0; s = s->next)
    if (s->size > rest && (from == NULL || s->size < from->size)) from = s;
  if (from != NULL && _mld_os_protect((uint8_t*)from + from->size - rest, rest, true)) {
    from->size -= rest;
    mld_span_cache_bytes -= rest;
    mld_segment_t* tail = (mld_segment_t*)((uint8_t*)from + from->size);
    tail->size = rest;
    tail->next = out;
    out = tail;
  }
  return out;
}

/* Put gathered pieces (a list through next) back into the cache; a tail
 * piece (not 4 MiB aligned, so no span) is unmapped. */
static void mld_span_return(mld_segment_t* spans) {
  uint64_t now = _mld_os_now_ms();
  while (spans != NULL) {
    mld_segment_t* next = spans->next;
    if (((uintptr_t)spans & MLD_SEGMENT_MASK) != 0) {
      _mld_os_unmap(spans, spans->size);
    } else {
      pthread_mutex_lock(&mld_segment_lock);
      mld_span_init(spans, spans->size);
      mld_span_link(spans, now);
      pthread_mutex_unlock(&mld_segment_lock);
    }
    spans = next;
  }
}

/* Move the pages of the gathered spans into the new mapping seg (mremap:
 * page tables move, nothing is faulted or zeroed), one after another from
 * its start; a span that does not move goes back to the cache. Whether any
 * moved (the block is then not zero). */
static bool mld_span_assemble(mld_segment_t* seg, mld_segment_t* spans) {
  size_t off = 0;
  bool moved = false;
  while (spans != NULL) {
    mld_segment_t* next = spans->next;
    size_t size = spans->size;
    (void)_mld_os_protect(spans, size, true);   /* one mapping of one protection: it moves as one */
    if (_mld_os_move(spans, size, (uint8_t*)seg + off)) {
      off += size;
      moved = true;
    } else {
      spans->next = NULL;
      mld_span_return(spans);
    }
    spans = next;
  }
  return moved;
}

/* A huge block: a span of its own; the block starts after the header and
 * a guard page, at the requested alignment. */
mld_page_t* _mld_segment_huge_alloc(size_t size, size_t alignment) {
  size_t ps = _mld_os_page_size;
  if (alignment < ps) alignment = ps;
  /* blocks of spans under 4 MiB (the ones sealed when freed) get the guard;
   * larger ones start right after the segment and page structs, as the
   * slot table's page is the block's there (no fault more per span) */
  size_t header = mld_span_header();
  size_t offset = (header + ps + alignment - 1) & ~(alignment - 1);
  bool guarded = size < MLD_SEGMENT_SIZE - offset;
  if (!guarded) {
    header = (sizeof(mld_segment_t) + sizeof(mld_page_t) + ps - 1) & ~(ps - 1);
    offset = (header + alignment - 1) & ~(alignment - 1);
  }
  if (offset >= MLD_SEGMENT_SIZE) return NULL;   /* giant alignment: see below */
  if (size > SIZE_MAX / 2 - offset - ps) return NULL;
  size_t total = (offset + size + ps - 1) & ~(ps - 1);
  pthread_mutex_lock(&mld_segment_lock);
  mld_segment_t* seg = mld_span_take(total);
  mld_segment_t* spans = NULL;
  if (seg != NULL) total = seg->size;
  else spans = mld_span_gather(total);
  mld_huge_live_bytes += total;
  pthread_mutex_unlock(&mld_segment_lock);
  bool fresh = false;
  if (seg == NULL) {
    seg = (mld_segment_t*)_mld_os_map_aligned(total, MLD_SEGMENT_SIZE);
    if (seg != NULL && ((uintptr_t)seg + total - 1) >> MLD_VA_BITS) {
      _mld_os_unmap(seg, total);
      seg = NULL;
    }
    if (seg == NULL) {
      pthread_mutex_lock(&mld_segment_lock);
      mld_huge_live_bytes -= total;
      pthread_mutex_unlock(&mld_segment_lock);
      mld_span_return(spans);
      return NULL;
    }
    fresh = !mld_span_assemble(seg, spans);
    mld_span_init(seg, total);
  }
  if (guarded) (void)_mld_os_protect((uint8_t*)seg + header, offset - header, false);   /* the guard */
  seg->used_pages = 1;
  mld_page_t* page = &seg->pages[0];
  page->start = (uint8_t*)seg + offset;
  page->block_size = seg->size - offset;
  page->reserved = 1;
  mld_page_set_class(page, MLD_CLASS_HUGE);
  page->area_start = page->start;
  page->area_size = page->block_size;
  page->fresh = fresh;
  return page;
}

/* Merge a freed span with its cached neighbours; the span that holds it
 * all (no longer in the cache). Lock held. */
static mld_segment_t* mld_span_coalesce(mld_segment_t* seg) {
  mld_segment_t *before = NULL, *after = NULL;
  for (mld_segment_t* s = mld_span_cache; s != NULL; s = s->next) {
    if ((uint8_t*)s + s->size == (uint8_t*)seg) before = s;
    else if ((uint8_t*)seg + seg->size == (uint8_t*)s) after = s;
  }
  if (after != NULL) {
    mld_span_unlink(after);
    mld_segmap_set((uintptr_t)after, false);
    seg->size += after->size;
  }
  if (before != NULL) {
    mld_span_unlink(before);
    mld_segmap_set((uintptr_t)seg, false);
    before->size += seg->size;
    seg = before;
  }
  return seg;
}

/* Take the oldest spans out of the cache until it is within its bounds;
 * they are returned as a list (through next) to unmap. Lock held. */
static mld_segment_t* mld_span_evict(void) {
  size_t share = mld_huge_live_bytes / MLD_SPAN_CACHE_LIVE_SHARE;
  size_t max = share > MLD_SPAN_CACHE_MIN_BYTES ? share : MLD_SPAN_CACHE_MIN_BYTES;
  mld_segment_t* out = NULL;
  while (mld_span_cache != NULL && (mld_span_cache_bytes > max || mld_span_cache_count > MLD_SPAN_CACHE_MAX_COUNT)) {
    mld_segment_t* oldest = mld_span_cache;
    for (mld_segment_t* s = mld_span_cache; s != NULL; s = s->next)
      if (s->pages[0].freed_at_ms < oldest->pages[0].freed_at_ms) oldest = s;
    mld_span_unlink(oldest);
    mld_segmap_set((uintptr_t)oldest, false);
    oldest->next = out;
    out = oldest;
  }
  return out;
}

/* A freed huge block: its span cached for reuse (bounded) until the decay. */
void _mld_segment_huge_free(mld_page_t* page) {
  mld_segment_t* seg = mld_segment_of(page);
  mld_page_set_class(page, MLD_CLASS_NONE);
  if (mld_decay_ms > 0 && seg->size < MLD_SEGMENT_SIZE) {   /* sealed while cached */
    size_t header = mld_span_header();
    (void)_mld_os_protect((uint8_t*)seg + header, seg->size - header, false);
  }
  uint64_t now = _mld_os_now_ms();
  pthread_mutex_lock(&mld_segment_lock);
  mld_huge_live_bytes -= seg->size;
  mld_segment_t* evicted = seg;
  if (mld_decay_ms > 0) {
    mld_span_link(mld_span_coalesce(seg), now);
    evicted = mld_span_evict();
    if (atomic_load_explicit(&mld_purge_due_ms, memory_order_relaxed) == 0)
      atomic_store_explicit(&mld_purge_due_ms, now + mld_decay_ms, memory_order_relaxed);
    if (now - mld_last_purge_ms >= mld_decay_ms / 2 + 1) mld_purge_locked(now, false);
  } else {
    mld_segmap_set((uintptr_t)seg, false);
    seg->next = NULL;
  }
  pthread_mutex_unlock(&mld_segment_lock);
  while (evicted != NULL) {
    mld_segment_t* next = evicted->next;
    _mld_os_unmap(evicted, evicted->size);
    evicted = next;
  }
}

/* ---- giant alignments ------------------------------------------------------
 * A block aligned to 4 MiB or more cannot sit behind a segment header in the
 * same 4 MiB region, so such blocks (rare) are kept in a list whose nodes live
 * at the start of their own mappings; free finds them on its slow path. */

typedef struct mld_giant_s {
  struct mld_giant_s* next;
  void* block;
  size_t usable;
  size_t mapped;
} mld_giant_t;

static mld_giant_t* mld_giants;

void* _mld_segment_giant_alloc(size_t size, size_t alignment) {
  size_t ps = _mld_os_page_size;
  if (size > SIZE_MAX / 4 - alignment) return NULL;
  size_t usable = (size + ps - 1) & ~(ps - 1);
  size_t total = alignment + usable;
  uint8_t* base = (uint8_t*)_mld_os_map_aligned(total, alignment);
  if (base == NULL) return NULL;
  mld_giant_t* g = (mld_giant_t*)base;
  g->block = base + alignment;
  g->usable = usable;
  g->mapped = total;
  pthread_mutex_lock(&mld_segment_lock);
  g->next = mld_giants;
  mld_giants = g;
  pthread_mutex_unlock(&mld_segment_lock);
  return g->block;
}

/* p's usable size if p is a giant block (and unmap it when release), else 0. */
size_t _mld_segment_giant_find(const void* p, bool release) {
  size_t usable = 0;
  mld_giant_t* found = NULL;
  pthread_mutex_lock(&mld_segment_lock);
  for (mld_giant_t** link = &mld_giants; *link != NULL; link = &(*link)->next) {
    if ((*link)->block == p) {
      found = *link;
      usable = found->usable;
      if (release) *link = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&mld_segment_lock);
  if (found != NULL && release) _mld_os_unmap(found, found->mapped);
  return usable;
}

void _mld_segment_fork_prepare(void) { pthread_mutex_lock(&mld_segment_lock); }
void _mld_segment_fork_parent(void) { pthread_mutex_unlock(&mld_segment_lock); }
void _mld_segment_fork_child(void) { pthread_mutex_init(&mld_segment_lock, NULL); }
