/* internal.h: types shared by the layers of Mallard, the cross-file
 * functions (_mld_<file>_<verb>), and the inlined malloc/free fast paths.
 *
 * Layers (top to bottom):
 *   thread heap (heap.c)     per-thread bins: one stack of block pointers per size class
 *   pages (page.c)           per-page free list (owner) + atomic thread-free list (remote frees)
 *   transfer cache           per size class batches of blocks between heaps (transfer.c)
 *   central lists            abandoned pages of dead threads, per size class (central.c)
 *   segments (segment.c)     4 MiB aligned areas cut into pages; decay/purge; huge blocks
 *   OS (os.c)                mmap/munmap/madvise, page size, clock
 */
#ifndef MLD_INTERNAL_H
#define MLD_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>

#include "mallard.h"

#ifndef MLD_OVERRIDE
#define MLD_OVERRIDE 1
#endif

/* The checks on every free (a block start, not already free): on by
 * default; -DMALLARD_FREE_CHECKS=OFF (CMake) builds without them, only to
 * measure what they cost (allocator/README.md, Misuse). */
#ifndef MLD_FREE_CHECKS
#define MLD_FREE_CHECKS 1
#endif

#define mld_likely(x)   __builtin_expect(!!(x), 1)
#define mld_unlikely(x) __builtin_expect(!!(x), 0)
#define MLD_HIDDEN      __attribute__((visibility("hidden")))
#define MLD_NOINLINE    __attribute__((noinline))
#define MLD_CACHE_LINE  64

/* the smallest power of two >= x (x at most 2^63) */
static inline size_t mld_pow2_ceil(size_t x) {
  size_t a = 1;
  while (a < x) a <<= 1;
  return a;
}

/* ---- geometry ---------------------------------------------------------- */

#define MLD_SEGMENT_SHIFT  22                                  /* 4 MiB */
#define MLD_SEGMENT_SIZE   ((uintptr_t)1 << MLD_SEGMENT_SHIFT)
#define MLD_SEGMENT_MASK   (MLD_SEGMENT_SIZE - 1)
#define MLD_VA_BITS        48                                  /* segment map covers this */
#define MLD_MAP_ENTRIES    ((uintptr_t)1 << (MLD_VA_BITS - MLD_SEGMENT_SHIFT))

#define MLD_CLASSES        48          /* size classes 16 B .. 128 KiB */
#define MLD_FAST_MAX       4096        /* sizes looked up by table (malloc's inline path) */
#define MLD_SMALL_MAX      8192        /* <= this: small pages, else medium pages */
#define MLD_MAX_SIZE       (128 * 1024) /* > this: huge (own segment) */
#define MLD_MAX_BATCH      32
#define MLD_CLASS_HUGE     254
#define MLD_CLASS_NONE     255         /* page not in use */

enum { MLD_KIND_SMALL = 0, MLD_KIND_MEDIUM = 1, MLD_KIND_HUGE = 2, MLD_KINDS = 2 };

/* ---- statistics (listed once: X-macro) --------------------------------- */

#define MLD_HEAP_STATS(X)                                                   \
  X(allocs) X(frees) X(remote_frees)                                        \
  X(transfer_insert_hits) X(transfer_insert_misses)                         \
  X(transfer_remove_hits) X(transfer_remove_misses)                         \
  X(central_refills)                                                        \
  X(pages_fresh) X(pages_reclaimed) X(pages_abandoned)                      \
  X(pages_released) X(huge_allocs) X(huge_frees) X(heap_collects)         \
  X(transfer_insert_inflight_misses) X(transfer_remove_inflight_misses)     \
  X(transfer_waits) X(transfer_commit_waits) X(transfer_yields) X(transfer_sleeps) \
  X(direct_frees) X(bin_grows) X(bin_shrinks)

#define MLD_GLOBAL_STATS(X)                                                 \
  X(bytes_mapped) X(peak_bytes_mapped) X(bytes_purged) X(segments_mapped)   \
  X(segments_unmapped) X(threads_started) X(threads_ended)

typedef enum {
#define MLD_X(n) MLD_STAT_##n,
  MLD_HEAP_STATS(MLD_X)
#undef MLD_X
  MLD_STAT_HEAP_COUNT
} mld_heap_stat_t;

typedef enum {
#define MLD_X(n) MLD_GSTAT_##n,
  MLD_GLOBAL_STATS(MLD_X)
#undef MLD_X
  MLD_GSTAT_COUNT
} mld_global_stat_t;

/* Per-thread counters: written only by their thread (relaxed load + store:
 * a plain add, no lock prefix), read by the stats writer at exit. */
typedef _Atomic(uint64_t) mld_counter_t;
#define mld_counter_add(c, n) \
  atomic_store_explicit((c), atomic_load_explicit((c), memory_order_relaxed) + (n), memory_order_relaxed)

extern MLD_HIDDEN _Atomic(uint64_t) _mld_gstats[MLD_GSTAT_COUNT];
static inline void mld_gstat_add(mld_global_stat_t s, int64_t n) {
  atomic_fetch_add_explicit(&_mld_gstats[s], (uint64_t)n, memory_order_relaxed);
}

/* ---- blocks, pages, segments ------------------------------------------- */

/* A free block: the first word links it, the second holds a cookie (the
 * address of its page's struct: mld_block_cookie) that marks it free, so a
 * double free is seen at once. */
typedef struct mld_block_s {
  struct mld_block_s* next;
  uintptr_t cookie;
} mld_block_t;

struct mld_heap_s;

typedef struct mld_page_s {
  /* First cache line: everything free reads (start, blocks, inv,
   * inv_rot, owner) and everything a block's return to its page or a
   * refill from its free list touches (free, used, in_full), so those
   * touch one line of a page struct, not two (they did: fragmentation
   * returns most of its frees to pages, each a miss on both lines). */
  uint8_t* start;              /* first block (set when the page gets a size class) */
  uint64_t blocks;             /* blocks free accepts (reserved); 0 unless the page holds small blocks */
  uint64_t inv;                /* block_size = odd * 2^inv_rot: the inverse of odd mod 2^64 (mld_page_is_block) */
  _Atomic(struct mld_heap_s*) owner;     /* NULL: abandoned or free */
  mld_block_t* free;           /* local free list (owner only, or the central lock holder while abandoned) */
  size_t block_size;
  uint32_t used;               /* blocks not in free/thread_free (owner only) */
  uint8_t size_class;          /* < MLD_CLASSES, MLD_CLASS_HUGE or MLD_CLASS_NONE */
  uint8_t kind;
  uint8_t in_full;             /* in the owner's full list */
  uint8_t in_central;          /* abandoned, in a central list (central lock) */
  uint8_t fresh;               /* huge: a new mapping, still zero */
  uint8_t purged;              /* (free pages) memory given back to the OS */
  uint8_t inv_rot;
  /* second line: frees by other threads (one CAS each: kept off the line
   * every free reads), carving, lists, and what free pages need */
  /* the thread-free list: its first block's address in the low
   * MLD_VA_BITS, the blocks on it counted above them (one CAS pushes a run
   * and its count: _mld_page_free_remote_chain); 0 when empty */
  _Atomic(uintptr_t) thread_free;
  uint32_t reserved;           /* blocks that fit */
  uint32_t capacity;           /* blocks carved so far (lazy) */
  struct mld_page_s* next;
  struct mld_page_s* prev;
  /* free pages (segment lock) */
  uint8_t* area_start;         /* the page's memory */
  size_t area_size;
  uint64_t freed_at_ms;
} __attribute__((aligned(128))) mld_page_t;   /* a power of two: page index -> address is one shift */
_Static_assert(sizeof(mld_page_t) == 128, "mld_page_t should be 128 bytes");
#define MLD_TF_PTR(x)   ((mld_block_t*)((x) & (((uintptr_t)1 << MLD_VA_BITS) - 1)))
#define MLD_TF_COUNT(x) ((uint32_t)((x) >> MLD_VA_BITS))   /* a page holds < 2^16 blocks */
_Static_assert(offsetof(mld_page_t, purged) < MLD_CACHE_LINE && offsetof(mld_page_t, thread_free) == MLD_CACHE_LINE,
               "free's fields in the first cache line of a page struct, thread_free in the second");
#define MLD_PAGE_STRUCT_SHIFT 7

/* free's lookup table: one entry per 64 KiB slot of a segment (the
 * smallest page), so the bin of a pointer (its size class) is one load
 * from an address computed from the pointer alone, not behind the byte
 * map's page shift and the page struct (see mld_free_block_at). */
#define MLD_SLOT_SHIFT 16
#define MLD_SLOTS      (1u << (MLD_SEGMENT_SHIFT - MLD_SLOT_SHIFT))

typedef struct mld_segment_s {
  size_t size;                 /* bytes mapped */
  uint8_t kind;
  uint8_t page_shift;          /* huge: 63 so every offset maps to page 0 */
  uint16_t page_count;
  uint16_t usable_pages;
  uint16_t used_pages;
  uint16_t purged_pages;       /* free and purged (or never touched) */
  /* small/medium: bytes from the start that are accessible; the rest is
   * PROT_NONE until a page there is first handed out (segment.c,
   * mld_segment_open), so a stray write far past a block faults */
  size_t open;
  struct mld_segment_s* next;
  struct mld_segment_s* prev;
  mld_page_t pages[];
} mld_segment_t;

/* The slot table: per slot, the bin of the page covering it (its
 * size_class as mld_page_set_class keeps it), one line in the header
 * area after the largest page table, in the last cache set (offset 0x2fc0):
 * pages start 64 KiB aligned, so blocks crowd the first sets (fastpath's L1
 * misses: 143.8 k with the table right after the page table, in set 2;
 * 132.2 k here, as without it). Not kept in huge segments, whose one page
 * free rejects before the class is used (there the bytes are the block's). */
#define MLD_SLOT_TABLE_OFFSET 0x2fc0
_Static_assert(MLD_SLOT_TABLE_OFFSET % MLD_CACHE_LINE == 0 && MLD_SLOTS <= MLD_CACHE_LINE &&
               MLD_SLOT_TABLE_OFFSET >= sizeof(mld_segment_t) + MLD_SLOTS * sizeof(mld_page_t) &&
               MLD_SLOT_TABLE_OFFSET + MLD_SLOTS <= ((size_t)1 << MLD_SLOT_SHIFT),
               "the slot table: one line after the page table, inside the smallest header");
static inline _Atomic(uint8_t)* mld_slot_table(uintptr_t seg) {
  return (_Atomic(uint8_t)*)(seg + MLD_SLOT_TABLE_OFFSET);
}

static inline mld_segment_t* mld_segment_of(const void* p) {
  return (mld_segment_t*)((uintptr_t)p & ~MLD_SEGMENT_MASK);
}

/* Set a page's size class (< MLD_CLASSES, MLD_CLASS_HUGE or
 * MLD_CLASS_NONE) and the slots it covers, which free reads instead: there
 * a class c is kept as c * MLD_SLOT_BIN_SCALE, its bin's offset in the
 * heap over 8 (one scaled address: mld_free_block_at), any other as 255. */
#define MLD_SLOT_BIN_SCALE 4
static inline void mld_page_set_class(mld_page_t* page, unsigned c) {
  page->size_class = (uint8_t)c;
  mld_segment_t* seg = mld_segment_of(page);
  unsigned shift = seg->page_shift;
  if (shift >= MLD_SEGMENT_SHIFT) return;   /* huge */
  unsigned first = (unsigned)(((size_t)(page - seg->pages) << shift) >> MLD_SLOT_SHIFT);
  uint8_t v = c < MLD_CLASSES ? (uint8_t)(c * MLD_SLOT_BIN_SCALE) : 255;
  for (unsigned k = 0; k < (1u << (shift - MLD_SLOT_SHIFT)); k++)
    atomic_store_explicit(&mld_slot_table((uintptr_t)seg)[first + k], v, memory_order_relaxed);
}

typedef struct mld_page_list_s {
  mld_page_t* first;
  mld_page_t* last;
  uint32_t count;
} mld_page_list_t;

/* ---- size classes (size_class.c) --------------------------------------- */

typedef struct mld_class_info_s {
  uint32_t size;
  uint16_t batch;              /* objects moved to/from the transfer cache at once */
  uint16_t bin_max;            /* thread bin limit before a batch is released (a new bin's) */
  uint16_t bin_cap;            /* the most a bin's limit grows to (heap.c: mld_heap_grow) */
  uint8_t kind;
} mld_class_info_t;

extern MLD_HIDDEN mld_class_info_t _mld_classes[MLD_CLASSES];
/* sizes <= MLD_FAST_MAX, by (size + 15) / 16: the class's bin offset in the
 * heap over 8 (class * MLD_SLOT_BIN_SCALE, as free's slot bytes), so malloc
 * finds its bin with one scaled address */
extern MLD_HIDDEN uint8_t _mld_size_bin8[MLD_FAST_MAX / 16 + 1];
MLD_HIDDEN void _mld_size_class_init(void);
MLD_HIDDEN unsigned _mld_size_class_aligned(size_t size, size_t alignment); /* MLD_CLASSES if none */

/* the class of a size above MLD_FAST_MAX (and at most MLD_MAX_SIZE) */
static inline unsigned mld_size_class_above(size_t size) {
  size_t s = size - 1;
  unsigned b = 63u - (unsigned)__builtin_clzll((unsigned long long)s);  /* >= 10 */
  return 8u + 4u * (b - 7u) + (unsigned)((s >> (b - 2)) & 3u);  /* classes 2^b * (1.25, 1.5, 1.75, 2) */
}

static inline unsigned mld_size_class(size_t size) {
  if (size <= MLD_FAST_MAX) return _mld_size_bin8[(size + 15) >> 4] / MLD_SLOT_BIN_SCALE;
  return mld_size_class_above(size);
}

/* The block a small page hands out first: blocks are carved from this
 * index on (wrapping around to 0: _mld_page_take), not from the page's
 * start, so the blocks in use of different classes (the first ones carved:
 * the bins hand recent blocks out again) fall into different L1 sets, a
 * per-class offset (its "color", a multiple of 64 below 4 KiB) apart. Pages
 * all start 64 KiB aligned, in set 0, and with every class's first blocks
 * there an 8-way L1 evicted them (fastpath's FIFO windows ran 1.5-5% slower;
 * allocator/docs/speed-rounds.md, "Speed, sixth round"). A rotation, not an offset:
 * the page keeps all its blocks, and every block its alignment. */
static inline uint32_t mld_page_first(const mld_page_t* page) {
  const mld_class_info_t* ci = &_mld_classes[page->size_class];
  uint32_t color = ((page->size_class * 19u) & 63u) * MLD_CACHE_LINE;   /* 19: the 16 classes up to 512 B in 16 sets */
  uint32_t first = ci->kind == MLD_KIND_SMALL ? color / ci->size : 0;
  return first < page->reserved ? first : 0;
}

/* ---- the thread heap (heap.c) ------------------------------------------ */

/* A bin: the thread's cached blocks of one size class, as a stack of
 * pointers (not a list threaded through the blocks): malloc pops, free
 * pushes, and batches move to and from the transfer cache with one copy of
 * pointers, without touching the blocks, whose cache lines may be in
 * another core's cache (tcmalloc keeps its per-CPU caches as arrays for the
 * same reason). Both stacks live after the heap struct; each holds max + 1
 * pointers (a push may go one over before the flush). */
typedef struct mld_stack_s {
  void** top;                  /* the next free slot */
  void** limit;                /* base + max: a push that passes it flushes */
  void** base;
} mld_stack_t;

static inline uint32_t mld_stack_count(const mld_stack_t* s) { return (uint32_t)(s->top - s->base); }

typedef struct mld_bin_s {
  mld_stack_t own;
  uint32_t foreign_take;       /* half a batch; 0 only in the empty heap */
  uint16_t max;
  /* > 0: the class's transfer cache was found full; this many more
   * overflows each send the block just freed straight to its page (see
   * _mld_heap_flush) before a batch tries the transfer cache again (at
   * most 4 batches: 128) */
  uint8_t direct;
  /* batches flushed since the last refill (heap.c: the adaptive limit,
   * mld_heap_grow and mld_heap_flushed) */
  uint8_t flushes;
} mld_bin_t;
_Static_assert(4 * MLD_MAX_BATCH <= UINT8_MAX, "direct counts down from 4 batches in a byte");
_Static_assert(sizeof(mld_bin_t) == 8 * MLD_SLOT_BIN_SCALE && MLD_CLASSES * MLD_SLOT_BIN_SCALE < 255,
               "a bin is 32 bytes: a slot byte is its offset over 8, so free finds it with one scaled address");

/* A block of another thread's page freed here (MALLARD_REMOTE=bin) while
 * the bin is empty waits on a stack of its own (mld_heap_t.foreign), not
 * in the bin, where the next malloc would hand out exactly that block,
 * whose cache line other threads' live blocks share (passive false
 * sharing, cache-scratch); into a non-empty bin it goes as usual. An
 * empty bin takes them all (the stacks swap) once they are at least half a
 * batch (no transfer-cache trip); past max, a batch goes to the transfer
 * cache (_mld_heap_flush_foreign), as a full bin's does. The cheapest
 * refill, inline in malloc's miss branch. */
static inline bool mld_bin_take_foreign(mld_bin_t* bin, mld_stack_t* foreign) {
  uint32_t n = mld_stack_count(foreign);
  if (n < bin->foreign_take || n == 0) return false;
  mld_stack_t s = bin->own;   /* empty */
  bin->own = *foreign;
  *foreign = s;
  return true;
}

/* Push a block; true when that went past the limit (the caller flushes a
 * batch). The slot is written before the top moves: a fork child that
 * drains a bin caught in between loses the block, and never hands out a
 * stale slot. */
static inline bool mld_stack_push(mld_stack_t* s, void* b) {
  void** top = s->top;
  *top = b;
  atomic_signal_fence(memory_order_release);
  s->top = ++top;
  return top > s->limit;
}

/* The owner thread's plain counters, copied into the atomic stats now and
 * then (every refill, flush, collect and at thread exit), which is what
 * other threads read. free bumps local_frees or remote_frees (one add;
 * frees is their sum, as published); malloc bumps
 * nothing: its count is a balance of the bins (_mld_heap_publish), kept by
 * the slow paths in moved: blocks into the bins other than by free
 * (refills), minus blocks out other than by malloc (flushes, drains),
 * minus frees that never entered a bin (huge, remote by CAS); mod 2^64. */
typedef struct mld_hot_stats_s {
  uint64_t moved;
  uint64_t local_frees;        /* frees of blocks of the heap's own pages */
  uint64_t remote_frees;
} mld_hot_stats_t;

typedef struct mld_heap_s {
  mld_bin_t bins[MLD_CLASSES];
  mld_hot_stats_t hot;
  /* the largest byte-map index free's range test lets through: 0 in the
   * empty heap and while the canary is on (every free then takes the slow
   * path: _mld_alloc_free_outside), else MLD_MAP_ENTRIES - 1. In the heap,
   * on the line of the counters free bumps anyway, not in a global of its
   * own: the canary costs free nothing, and no line more is read (a global
   * landed in cache set 0, which the blocks crowd: +45 k L1 misses on
   * fastpath) */
  uintptr_t free_limit;
  mld_counter_t stats[MLD_STAT_HEAP_COUNT];   /* slow paths; hot ones as last published */
  mld_stack_t foreign[MLD_CLASSES];    /* other threads' blocks freed here, per class (see mld_bin_take_foreign) */
  mld_page_list_t avail[MLD_CLASSES];  /* pages that may have free blocks */
  mld_page_list_t full[MLD_CLASSES];   /* pages with none at last look */
  uint64_t slow_calls;
  struct mld_heap_s* next;             /* all heaps (heap list lock) */
  struct mld_heap_s* prev;
  uint8_t live;
  uint8_t publishes;                   /* heap.c: mld_heap_publish_often (in the padding: the slot arrays stay where they were) */
} mld_heap_t;

extern MLD_HIDDEN mld_heap_t _mld_heap_empty;
extern MLD_HIDDEN __thread mld_heap_t* _mld_heap_tls __attribute__((tls_model("initial-exec")));
/* set once the thread's heap was given back at thread exit */
extern MLD_HIDDEN __thread uint8_t _mld_heap_exited __attribute__((tls_model("initial-exec")));

MLD_HIDDEN mld_heap_t* _mld_heap_thread_init(void);
MLD_HIDDEN bool _mld_heap_refill(mld_heap_t* h, unsigned c);
MLD_HIDDEN void _mld_heap_flush(mld_heap_t* h, unsigned c, mld_page_t* page);   /* page: the pushed block's */
MLD_HIDDEN void _mld_heap_flush_foreign(mld_heap_t* h, unsigned c);
MLD_HIDDEN void _mld_heap_push_local(mld_heap_t* h, unsigned c, mld_block_t* b);
MLD_HIDDEN void _mld_heap_abandon(mld_heap_t* h);
MLD_HIDDEN void _mld_heap_thread_done(void);
MLD_HIDDEN void _mld_heap_shed(void);
MLD_HIDDEN void _mld_heap_collect(mld_heap_t* h, bool force);
MLD_HIDDEN void _mld_heap_process_init(void);
MLD_HIDDEN void _mld_heap_stats_sum(uint64_t out[MLD_STAT_HEAP_COUNT]);
MLD_HIDDEN void _mld_heap_publish(mld_heap_t* h);
MLD_HIDDEN void _mld_heap_fork_prepare(void);
MLD_HIDDEN void _mld_heap_fork_parent(void);
MLD_HIDDEN void _mld_heap_fork_child(void);
MLD_HIDDEN void _mld_heap_adopted(mld_heap_t* h, mld_page_t* page);

/* ---- pages (page.c) ----------------------------------------------------- */

MLD_HIDDEN void _mld_page_init(mld_page_t* page, unsigned c, mld_heap_t* owner);
MLD_HIDDEN void _mld_page_collect(mld_page_t* page);
MLD_HIDDEN uint32_t _mld_page_take(mld_page_t* page, uint32_t n, void** out);
#ifndef MLD_TAKE_PAGES
#define MLD_TAKE_PAGES 8       /* free lists a refill walks side by side */
#endif
MLD_HIDDEN uint32_t _mld_page_take_lists(mld_page_t** pages, unsigned k, uint32_t n, void** out);
MLD_HIDDEN void _mld_page_free_remote(mld_page_t* page, mld_block_t* b);
MLD_HIDDEN void _mld_page_free_remote_chain(mld_page_t* page, mld_block_t* first, mld_block_t* last, uint32_t n);
MLD_HIDDEN void _mld_page_list_push(mld_page_list_t* l, mld_page_t* p);
MLD_HIDDEN void _mld_page_list_push_back(mld_page_list_t* l, mld_page_t* p);
MLD_HIDDEN void _mld_page_list_remove(mld_page_list_t* l, mld_page_t* p);

/* ---- transfer cache (transfer.c) --------------------------------------- */

/* the order of MALLARD_TRANSFER's choices in the options table */
enum { MLD_TRANSFER_MUTEX = 0, MLD_TRANSFER_RING = 1, MLD_TRANSFER_NAIVE = 2 };
MLD_HIDDEN void _mld_transfer_init(int mode);
/* st: the calling heap's counters (waits, yields, in-flight misses) */
MLD_HIDDEN bool _mld_transfer_insert(mld_counter_t* st, unsigned c, void** objs, unsigned n);
MLD_HIDDEN unsigned _mld_transfer_remove(mld_counter_t* st, unsigned c, void** objs, unsigned n);
MLD_HIDDEN int  _mld_transfer_mode(void);
MLD_HIDDEN void _mld_transfer_fork_prepare(void);
MLD_HIDDEN void _mld_transfer_fork_parent(void);
MLD_HIDDEN void _mld_transfer_fork_child(void);

/* ---- central lists of abandoned pages (central.c) ---------------------- */

MLD_HIDDEN void _mld_central_init(void);
MLD_HIDDEN void _mld_central_push(mld_page_t* page);
MLD_HIDDEN mld_page_t* _mld_central_pop(unsigned c, mld_heap_t* h);
MLD_HIDDEN bool _mld_central_adopt(mld_page_t* page, mld_heap_t* h);
MLD_HIDDEN void _mld_central_sweep(mld_heap_t* h, unsigned max);
MLD_HIDDEN void _mld_central_fork_prepare(void);
MLD_HIDDEN void _mld_central_fork_parent(void);
MLD_HIDDEN void _mld_central_fork_child(void);

/* ---- segments (segment.c) ----------------------------------------------- */

/* One byte per 4 MiB of the address space (64 MiB of zero-page-backed bss,
 * touched only where segments are): 0, or the page shift of the segment
 * that starts there (63 for a huge block's). */
extern MLD_HIDDEN _Atomic(uint8_t) _mld_segmap[MLD_MAP_ENTRIES];
MLD_HIDDEN void _mld_segment_init(void);
MLD_HIDDEN mld_page_t* _mld_segment_page_alloc(unsigned kind);
MLD_HIDDEN void _mld_segment_page_free(mld_page_t* page);
MLD_HIDDEN mld_page_t* _mld_segment_huge_alloc(size_t size, size_t alignment);
MLD_HIDDEN void _mld_segment_huge_free(mld_page_t* page);
MLD_HIDDEN void* _mld_segment_giant_alloc(size_t size, size_t alignment);
MLD_HIDDEN size_t _mld_segment_giant_find(const void* p, bool release);
MLD_HIDDEN void _mld_segment_purge(bool force);
MLD_HIDDEN void _mld_segment_maybe_purge(void);
MLD_HIDDEN void _mld_segment_fork_prepare(void);
MLD_HIDDEN void _mld_segment_fork_parent(void);
MLD_HIDDEN void _mld_segment_fork_child(void);

/* The page struct at offset off of segment seg, whose pages are 2^shift
 * bytes: &seg->pages[i] as one address (helps the compiler keep one base). */
static inline mld_page_t* mld_page_at(uintptr_t seg, uintptr_t off, unsigned shift) {
  return (mld_page_t*)(seg + offsetof(mld_segment_t, pages) + ((off >> shift) << MLD_PAGE_STRUCT_SHIFT));
}

/* The page holding p, or NULL when p is in no segment of ours. O(1):
 * segments are aligned to 4 MiB and registered in a byte map that also
 * gives their page shift, so the segment header is not read. */
static inline mld_page_t* mld_page_of(const void* p) {
  uintptr_t a = (uintptr_t)p;
  /* one test for addresses past the map, on the index the load needs
   * anyway; NULL reads entry 0 (no segment starts at 0) and takes free to
   * its slow path, which returns */
  uintptr_t i = a >> MLD_SEGMENT_SHIFT;
  if (mld_unlikely(i >= MLD_MAP_ENTRIES)) return NULL;
  unsigned shift = atomic_load_explicit(&_mld_segmap[i], memory_order_relaxed);
  if (mld_unlikely(shift == 0)) return NULL;
  return mld_page_at(a & ~MLD_SEGMENT_MASK, a & MLD_SEGMENT_MASK, shift);
}

/* The page of a block known to be in a segment of ours: through the byte
 * map too (hot: every free reads it), not the segment header. */
static inline mld_page_t* mld_page_of_known(const void* p) {
  uintptr_t a = (uintptr_t)p;
  unsigned shift = atomic_load_explicit(&_mld_segmap[a >> MLD_SEGMENT_SHIFT], memory_order_relaxed);
  return mld_page_at(a & ~MLD_SEGMENT_MASK, a & MLD_SEGMENT_MASK, shift);
}

/* The constants of free's block-start test for blocks of this size, of
 * which count fit the page (0: the page holds no small blocks and the test
 * rejects every pointer). */
static inline void mld_page_set_blocks(mld_page_t* page, size_t block_size, uint32_t count) {
  unsigned rot = block_size ? (unsigned)__builtin_ctzll(block_size) : 0;
  uint64_t odd = block_size ? block_size >> rot : 1, inv = odd;
  for (int i = 0; i < 5; i++) inv *= 2 - odd * inv;   /* Newton: 3, 6, 12, 24, 48, 96 bits */
  page->inv = inv;
  page->inv_rot = (uint8_t)rot;
  page->blocks = count;
}

/* Is p the start of a block of this (small/medium) page? With block_size
 * = odd * 2^r: rotr((p - start) * odd^-1 mod 2^64, r) is the block index
 * when p is a block start and >= 2^64 / block_size otherwise, for every
 * 64-bit offset (exact division: Granlund and Montgomery, "Division by
 * invariant integers using multiplication", 1994; Hacker's Delight
 * 10-17), so one compare with the block count tests the range and the
 * block start at once, below the page's start (an offset that wrapped)
 * and past its last block too. */
static inline bool mld_page_is_block(const mld_page_t* page, const void* p) {
  uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)page->start);
#if MLD_FREE_CHECKS
  uint64_t q = off * page->inv;
  unsigned r = page->inv_rot;
  q = (q >> r) | (q << ((64 - r) & 63));
  return q < page->blocks;
#else
  return off < page->blocks * page->block_size;   /* the range only */
#endif
}

/* A freed block carries its cookie in its second word; malloc clears it.
 * Without MLD_FREE_CHECKS neither happens. The cookie is the address of
 * the block's page struct, which free has in a register already (the
 * block test reads it): the mark is one compare and one store, no key to
 * load and mix in (2 instructions fewer than address ^ secret). No live
 * block holds it by chance: it points into Mallard's segment header, a
 * place the program never gets an address of (a block holding its own
 * address there, e.g. an empty circular list head, would). */
static inline uintptr_t mld_block_cookie(const mld_page_t* page) { return (uintptr_t)page; }

static inline void mld_block_mark(mld_block_t* b, uintptr_t cookie) {
#if MLD_FREE_CHECKS
  b->cookie = cookie;
#else
  (void)b;
  (void)cookie;
#endif
}

/* page->owner == h, a relaxed read. On x86-64 one compare with a memory
 * operand: GCC does not fold an atomic load into a compare (it loads into
 * a register first: one instruction more in every free); an aligned 8-byte
 * load is atomic there. ThreadSanitizer builds keep the atomic load, which
 * it checks. */
static inline bool mld_page_owned_by(const mld_page_t* page, const struct mld_heap_s* h) {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  bool ne;
  __asm__("cmpq %2, %1" : "=@ccne"(ne) : "m"(page->owner), "r"(h));
  return !ne;
#else
  return atomic_load_explicit(&page->owner, memory_order_relaxed) == h;
#endif
}

/* ---- OS (os.c) ----------------------------------------------------------- */

extern MLD_HIDDEN size_t _mld_os_page_size;
MLD_HIDDEN void _mld_os_init(void);
MLD_HIDDEN void* _mld_os_map(size_t size);
MLD_HIDDEN void* _mld_os_map_aligned(size_t size, size_t alignment);
MLD_HIDDEN bool _mld_os_move(void* from, size_t size, void* to);
MLD_HIDDEN bool _mld_os_protect(void* p, size_t size, bool access);
MLD_HIDDEN void _mld_os_unmap(void* p, size_t size);
MLD_HIDDEN void _mld_os_purge(void* p, size_t size);
MLD_HIDDEN void _mld_os_no_huge_pages(void* p, size_t size);
MLD_HIDDEN uint64_t _mld_os_now_ms(void);
MLD_HIDDEN void _mld_os_yield(void);

static inline void mld_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield" ::: "memory");
#else
  __asm__ __volatile__("" ::: "memory");
#endif
}

/* ---- options (options.c) ------------------------------------------------ */

typedef enum {
  MLD_OPT_TRANSFER,
  MLD_OPT_STATS_FILE,
  MLD_OPT_DECAY_MS,
  MLD_OPT_ON_MISUSE,
  MLD_OPT_VERBOSE,
  MLD_OPT_REMOTE,
  MLD_OPT_CANARY_NS,
  MLD_OPT_CANARY_LOOPS_PER_US,
  MLD_OPT_COUNT
} mld_option_t;

enum { MLD_MISUSE_ABORT = 0, MLD_MISUSE_IGNORE = 1 };
enum { MLD_REMOTE_BIN = 0, MLD_REMOTE_PAGE = 1 };
extern MLD_HIDDEN int _mld_remote_mode;   /* MALLARD_REMOTE, cached */

MLD_HIDDEN void _mld_options_init(void);
MLD_HIDDEN long _mld_options_get(mld_option_t o);
MLD_HIDDEN const char* _mld_options_str(mld_option_t o);
MLD_HIDDEN void _mld_options_print(int fd);

/* ---- canary (canary.c): MALLARD_CANARY_NS, calibrated work in every free */

extern MLD_HIDDEN uint64_t _mld_canary_loops;   /* 0 unless MALLARD_CANARY_NS is set */
/* mld_heap_t.free_limit of new heaps: MLD_MAP_ENTRIES - 1, or 0 while
 * the canary is on, so every free of a block takes the slow path that runs
 * it */
extern MLD_HIDDEN uintptr_t _mld_free_limit;
MLD_HIDDEN void _mld_canary_init(void);
MLD_HIDDEN void _mld_canary_free(void* p);   /* the work, then the free */
MLD_HIDDEN uint64_t _mld_canary_rate(void);    /* chain steps per microsecond, 0 when off */

/* ---- reporting (report.c): write(2) only, never allocates ------------- */

typedef struct mld_buf_s {
  char* p;
  size_t len, cap;
} mld_buf_t;
MLD_HIDDEN void _mld_report_str(mld_buf_t* b, const char* s);
MLD_HIDDEN void _mld_report_u64(mld_buf_t* b, uint64_t v);
MLD_HIDDEN void _mld_report_hex(mld_buf_t* b, uintptr_t v);
MLD_HIDDEN void _mld_report_write(int fd, const char* s, size_t n);
MLD_HIDDEN void _mld_report_message(const char* msg);
MLD_HIDDEN void _mld_report_double_free(const void* p, const mld_page_t* page);
MLD_HIDDEN void _mld_report_use_after_free(const char* what, const void* p, const mld_page_t* page);
MLD_HIDDEN void _mld_report_invalid(const char* what, const void* p);
MLD_HIDDEN _Noreturn void _mld_report_fatal(const char* msg);

/* ---- stats (stats.c) and init (init.c) ---------------------------------- */

MLD_HIDDEN size_t _mld_stats_format(char* out, size_t cap);
MLD_HIDDEN void _mld_init_process(void);
extern MLD_HIDDEN _Atomic(int) _mld_init_state;   /* 0 none, 1 running, 2 done */

/* ---- slow paths and the inlined fast paths (alloc.c) ------------------- */

MLD_HIDDEN void* _mld_alloc_slow(size_t size, mld_heap_t* h);   /* size first: malloc's own argument register */
/* operator new's miss (override.c): _mld_alloc_slow, then the new_handler
 * loop of override_new.cpp when that fails (it returns or throws) */
MLD_HIDDEN void* _mld_new_slow(size_t size, mld_heap_t* h);
MLD_HIDDEN void* _mld_new_retry(size_t size);
MLD_HIDDEN void _mld_alloc_free_slow(void* p, mld_page_t* page);
MLD_HIDDEN void _mld_alloc_free_outside(void* p);
MLD_HIDDEN void _mld_alloc_free_remote(mld_heap_t* h, mld_page_t* page, mld_block_t* b);
MLD_HIDDEN void* _mld_alloc_aligned(size_t alignment, size_t size);
MLD_HIDDEN void* _mld_alloc_calloc(size_t count, size_t size);
MLD_HIDDEN void* _mld_alloc_realloc(void* p, size_t size);
MLD_HIDDEN size_t _mld_alloc_usable_size(const void* p);

/* malloc's pop from a non-empty bin whose top is top */
static inline void* mld_bin_pop(mld_heap_t* h, mld_bin_t* bin, void** top) {
  top--;
  bin->own.top = top;
  mld_block_t* b = (mld_block_t*)*top;
  (void)h;   /* not counted: see mld_hot_stats_t */
  mld_block_mark(b, 0);
  return b;
}

/* Sizes up to MLD_FAST_MAX (4 KiB) find their bin with one table load;
 * larger ones up to 128 KiB with a bit scan, inline too (through
 * _mld_alloc_slow they cost 39 instructions per malloc more: the slow
 * path's frame and its calls). */
/* malloc's body; slow: where a miss goes (a constant: inlined, a tail jump),
 * _mld_alloc_slow for malloc, _mld_new_slow for operator new. */
static inline void* mld_malloc_with(size_t size, void* (*slow)(size_t, mld_heap_t*)) {
  mld_heap_t* h = _mld_heap_tls;
  mld_bin_t* bin;
  if (mld_likely(size <= MLD_FAST_MAX))
    bin = (mld_bin_t*)((uintptr_t)h->bins + (size_t)_mld_size_bin8[(size + 15) >> 4] * 8);
  else if (mld_likely(size <= MLD_MAX_SIZE))
    bin = &h->bins[mld_size_class_above(size)];
  else
    return slow(size, h);
  void** top = bin->own.top;
  if (mld_likely(top != bin->own.base)) return mld_bin_pop(h, bin, top);
  if (mld_bin_take_foreign(bin, &h->foreign[bin - h->bins])) return mld_bin_pop(h, bin, bin->own.top);
  return slow(size, h);
}

static inline void* mld_malloc_inline(size_t size) { return mld_malloc_with(size, _mld_alloc_slow); }

/* The body of every free. outer: called by free itself, which pays the
 * canary: while it is on, p takes the slow path that runs it and comes back
 * here with outer false (frees the slow paths hand back come here with
 * outer false too: the canary is paid once). */
static inline void mld_free_block_at(void* p, bool outer) {
  /* The bin comes from the segment's slot table, at an address computed
   * from p alone, so the address the push stores to is two dependent
   * loads away from p, not four (map -> page shift -> page struct -> class
   * -> bin top); the checks read the page struct meanwhile and only decide
   * branches. */
  uintptr_t a = (uintptr_t)p;
  mld_heap_t* h = _mld_heap_tls;
  /* one test for addresses past the map (and the canary, and a thread
   * without a heap: their limit is 0), on the index the load needs anyway;
   * NULL reads entry 0 (no segment starts at 0) */
  uintptr_t i = a >> MLD_SEGMENT_SHIFT;
  if (mld_unlikely(i > (outer ? h->free_limit : MLD_MAP_ENTRIES - 1))) {
    if (outer) _mld_alloc_free_outside(p);
    else _mld_alloc_free_slow(p, NULL);
    return;
  }
  unsigned shift = atomic_load_explicit(&_mld_segmap[i], memory_order_relaxed);
  if (mld_unlikely(shift == 0)) { _mld_alloc_free_slow(p, NULL); return; }
  uintptr_t seg = a & ~MLD_SEGMENT_MASK, off = a & MLD_SEGMENT_MASK;
  size_t bin8 = atomic_load_explicit(&mld_slot_table(seg)[off >> MLD_SLOT_SHIFT], memory_order_relaxed);
  mld_page_t* page = mld_page_at(seg, off, shift);
  /* pages not holding small blocks (free, header, huge) have 0 blocks, so
   * this one check also rejects them: then the slot gives a valid bin
   * (their slots hold 255) */
  if (mld_unlikely(!mld_page_is_block(page, p))) { _mld_alloc_free_slow(p, page); return; }
  mld_block_t* b = (mld_block_t*)p;
  uintptr_t cookie = mld_block_cookie(page);
#if MLD_FREE_CHECKS
  if (mld_unlikely(b->cookie == cookie)) { _mld_report_double_free(p, page); return; }
#endif
  /* marked at once, right after the test: the same store after the owner
   * test (next to the push) cost fastpath 0.8 ns per pair more
   * (allocator/docs/speed-rounds.md, "Speed, fifth round") */
  mld_block_mark(b, cookie);
  mld_bin_t* bin = (mld_bin_t*)((uintptr_t)h->bins + bin8 * 8);
  if (mld_unlikely(!mld_page_owned_by(page, h))) {
    /* another thread's block (MALLARD_REMOTE=bin): into our bin like one of
     * ours, the next malloc reuses it hot; into an empty bin's foreign stack
     * instead (then the next malloc would hand out exactly this block, the
     * cache-scratch case). Both inline: a thread that only frees (a
     * consumer: xmalloc-test's releasers) has empty bins, and every one of
     * its frees took the slow path's call, 46 instructions more. The slow
     * path takes the rest: an abandoned page (no owner: taken over),
     * MALLARD_REMOTE=page, no heap (only !outer: the empty heap's
     * free_limit sends every outer free elsewhere). */
    if (_mld_remote_mode != MLD_REMOTE_BIN || (!outer && h == &_mld_heap_empty) ||
        mld_unlikely(atomic_load_explicit(&page->owner, memory_order_relaxed) == NULL)) {
      _mld_alloc_free_remote(h, page, b);
      return;
    }
    h->hot.remote_frees++;
    unsigned c = (unsigned)(bin8 / MLD_SLOT_BIN_SCALE);
    if (mld_likely(bin->own.top != bin->own.base)) {
      if (mld_unlikely(mld_stack_push(&bin->own, b))) _mld_heap_flush(h, c, page);
    } else if (mld_unlikely(mld_stack_push(&h->foreign[c], b))) {
      _mld_heap_flush_foreign(h, c);
    }
    return;
  }
  h->hot.local_frees++;
  /* the class again from the bin, not kept in a register across the push */
  if (mld_unlikely(mld_stack_push(&bin->own, b))) _mld_heap_flush(h, (unsigned)(bin - h->bins), page);
}

/* free without the canary (slow paths handing a block back, the canary itself) */
static inline void mld_free_block_inline(void* p) { mld_free_block_at(p, false); }

/* Every path that frees a block comes through here: free, cfree, realloc,
 * operator delete (all forms, through mld_free). */
static inline void mld_free_inline(void* p) { mld_free_block_at(p, true); }

#endif /* MLD_INTERNAL_H */
