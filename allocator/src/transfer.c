/* transfer.c: the transfer cache, one per size class, between the thread
 * heaps and the pages. A heap whose bin overflows inserts a batch of blocks;
 * a heap whose bin is empty removes a batch, before it looks at pages.
 * Batches have a fixed size per class (_mld_classes[c].batch); the cache
 * counts objects, so a heap giving its bins away (thread exit, or before it
 * creates a thread) may insert a short batch, and a remove that finds fewer
 * than a batch takes what there is.
 *
 * Three variants, chosen at run time by MALLARD_TRANSFER:
 *  - mutex: an array of slots under a lock (mld_lock: spin, yield, then
 *    sleep); LIFO, so a removed batch is the most recently inserted one
 *    (still warm in cache).
 *  - ring:  a lock-free ring (Disruptor style). Each side has a claim index
 *    and a commit index. An insert claims [claim, claim+n) with a CAS, fills
 *    the slots, waits for earlier inserters to commit, then publishes by
 *    moving the commit index (release). A remove does the same on its side,
 *    reading only slots below the producers' commit index. When a claim
 *    finds the ring full (or empty) but the other side has a claim in
 *    progress that would make room (or data), it WAITS for that commit
 *    (spin with pause, yield, then sleep on the index until the commit
 *    wakes it) instead of falling through to the slow path; only a
 *    genuinely full/empty ring is a miss.
 *  - naive: the same ring WITHOUT that wait: where `ring` would wait for the
 *    other side's claim, `naive` misses (counted as an in-flight miss) and
 *    the heap falls through to the pages. The known-bad design: faster in a
 *    microbenchmark, it sends work to the slow path whenever the other side
 *    is mid-operation (a preempted claim makes every caller miss). Kept so
 *    the benchmark can show that loss; never the default.
 * Indices are 64-bit and only grow, so there is no ABA. Counters (waits,
 * yields, in-flight misses) go to the calling heap's stats array.
 *
 * A ring's slots come in chunks of 512 (4 KiB), lent out as its indices
 * need them: index i lives in logical chunk i / 512, mapped to a physical
 * chunk of the class's slot array (map[], tagged with the logical chunk);
 * the producer whose insert reaches a chunk's first slot takes the lowest
 * free physical chunk, the consumer whose remove passes a chunk's last slot
 * gives it back. So a ring touches as many chunks as it holds at once, low
 * ones first, not its whole array: a ring cycling through all its slots at
 * low occupancy touched every page of them (larson 1T: 2 MiB of slot pages
 * against the mutex variant's 0.4 MiB; allocator/docs/speed-rounds.md, "Speed, sixth
 * round"). Chunks are taken and given back in commit order (the taker
 * after its turn, the giver before its publish), so both are serialized
 * per side; an insert fills before its turn, as before, when its chunks
 * are already mapped. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <linux/futex.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "futex on the low half of a 64-bit index");

/* At most 4 MiB of blocks cached per class (16384 slots at most, which
 * binds below 256 B). It was 512 KiB and 4096 slots until the fifth speed
 * round: a burst of frees past that (fragmentation: 3 MB per class and
 * phase) went to the pages one block at a time, to be walked again by the
 * refills; with 2 MiB the workload ran 12% faster (allocator/docs/speed-rounds.md,
 * "Speed, fifth round: fragmentation"), with 4 MiB (the eighth round) about 1%
 * more: its direct frees 47.8 k -> 2.7 k (allocator/README.md, "Speed, eighth
 * round: fragmentation"). */
#define MLD_TRANSFER_SLOTS 16384u           /* per class, at most */
#define MLD_TRANSFER_BYTES (4096u * 1024u)
#define MLD_RING_CHUNK     512u             /* slots per chunk: 4 KiB */
#define MLD_RING_CHUNKS    (MLD_TRANSFER_SLOTS / MLD_RING_CHUNK + 1u)   /* the +1: a ring's occupied
                                                  range may start and end inside a chunk */
#define MLD_RING_MAP       64u              /* map entries: > the chunks a ring's indices span */
_Static_assert(MLD_RING_CHUNKS <= 64 && MLD_RING_MAP > MLD_RING_CHUNKS + 1, "chunk bitmap and map sizes");

typedef _Atomic(uint32_t) mld_lock_t;   /* the mutex variant's lock (mld_lock) */

typedef struct mld_transfer_s {
  /* ring: producer side */
  _Atomic(uint64_t) prod_claim;
  _Atomic(uint64_t) prod_commit;
  char pad0[MLD_CACHE_LINE - 2 * sizeof(uint64_t)];
  /* ring: consumer side */
  _Atomic(uint64_t) cons_claim;
  _Atomic(uint64_t) cons_commit;
  char pad1[MLD_CACHE_LINE - 2 * sizeof(uint64_t)];
  /* ring: threads asleep on one of the commit indices (committers wake them) */
  _Atomic(uint32_t) sleepers;
  char pad2[MLD_CACHE_LINE - sizeof(uint32_t)];
  /* mutex variant */
  mld_lock_t lock;
  _Atomic(uint32_t) count;                 /* written under the lock; read without it for a peek */
  /* both */
  uint32_t cap;                            /* objects */
  void** slots;                            /* this class's row of mld_transfer_slots */
  /* ring: physical chunks in use (bit p: slots[p*512, p*512+512)), set by the
   * inserter in turn, cleared by the remover in turn; map[k % 64] is
   * ((k + 1) << 6) | p for logical chunk k in physical chunk p (0: none) */
  _Atomic(uint64_t) chunks_used;
  _Atomic(uint64_t) map[MLD_RING_MAP];
} __attribute__((aligned(MLD_CACHE_LINE))) mld_transfer_t;

/* The headers side by side (touched at init), the slots apart (touched only
 * as used): with each header beside its 128 KiB of slots, init made a page
 * resident per class (a small process's peak RSS: 1,964 KiB, now 1,708). */
static mld_transfer_t mld_transfer[MLD_CLASSES];
static void* mld_transfer_slots[MLD_CLASSES][MLD_RING_CHUNKS * MLD_RING_CHUNK] __attribute__((aligned(4096)));
static int mld_transfer_kind = MLD_TRANSFER_MUTEX;

/* Sleeping on a 32-bit word (futex) while it reads `seen`, for at most
 * timeout (NULL: until woken), and waking n sleepers. */
static void mld_futex_wait(void* word, uint32_t seen, const struct timespec* timeout) {
  int saved = errno;   /* malloc and free leave errno alone */
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAIT_PRIVATE, seen, timeout, NULL, 0);
  errno = saved;
}

static void mld_futex_wake(void* word, int n) {
  int saved = errno;
  syscall(SYS_futex, (uint32_t*)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
  errno = saved;
}

/* The mutex variant's lock: 0 free, 1 held, 2 held and someone may sleep on
 * it. A waiter spins (64 pauses), yields (16 times), and only then sleeps,
 * as the ring's waits do. The critical section is a copy of at most a batch
 * of pointers; what makes a waiter wait long is a holder preempted inside
 * it (more threads than CPUs). A pthread mutex slept at once then (its
 * adaptive spin could not outlast a time slice) and its unlock paid a
 * futex wake: xmalloc-test at 2 workers (4 threads on 2 CPUs) spent a
 * quarter of its time in the kernel and in glibc's lock paths, 1.3 s of
 * system time in a 3 s run against mimalloc's 0.3 (allocator/docs/standard-suite.md). */

static void mld_transfer_lock_init(mld_lock_t* l) { atomic_store_explicit(l, 0, memory_order_relaxed); }

static void mld_lock_slow(mld_lock_t* l, mld_counter_t* st) {
  mld_counter_add(&st[MLD_STAT_transfer_waits], 1);
  for (unsigned spins = 0; spins < 64 + 16; spins++) {
    if (spins < 64) {
      mld_cpu_relax();
    } else {
      mld_counter_add(&st[MLD_STAT_transfer_yields], 1);
      _mld_os_yield();
    }
    uint32_t free_ = 0;
    if (atomic_load_explicit(l, memory_order_relaxed) == 0 &&
        atomic_compare_exchange_weak_explicit(l, &free_, 1, memory_order_acquire, memory_order_relaxed))
      return;
  }
  /* taken as 2 from here on: the holder that unlocks it wakes a sleeper */
  while (atomic_exchange_explicit(l, 2, memory_order_acquire) != 0) {
    mld_counter_add(&st[MLD_STAT_transfer_sleeps], 1);
    mld_futex_wait((void*)l, 2, NULL);   /* an unlock that saw 2 wakes one */
  }
}

static inline void mld_lock(mld_lock_t* l, mld_counter_t* st) {
  uint32_t free_ = 0;
  if (mld_unlikely(!atomic_compare_exchange_strong_explicit(l, &free_, 1, memory_order_acquire,
                                                            memory_order_relaxed)))
    mld_lock_slow(l, st);
}

static inline void mld_unlock(mld_lock_t* l) {
  if (mld_unlikely(atomic_exchange_explicit(l, 0, memory_order_release) == 2)) mld_futex_wake((void*)l, 1);
}

void _mld_transfer_init(int mode) {
  mld_transfer_kind = mode;
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    mld_transfer_t* t = &mld_transfer[c];
    uint32_t batch = _mld_classes[c].batch;
    uint32_t cap = MLD_TRANSFER_BYTES / _mld_classes[c].size;
    if (cap > MLD_TRANSFER_SLOTS) cap = MLD_TRANSFER_SLOTS;
    if (cap < 4 * batch) cap = 4 * batch;
    t->cap = cap - cap % batch;
    t->slots = mld_transfer_slots[c];
    mld_transfer_lock_init(&t->lock);
    atomic_store_explicit(&t->count, 0, memory_order_relaxed);
    atomic_store_explicit(&t->prod_claim, 0, memory_order_relaxed);
    atomic_store_explicit(&t->prod_commit, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cons_claim, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cons_commit, 0, memory_order_relaxed);
    atomic_store_explicit(&t->sleepers, 0, memory_order_relaxed);
    atomic_store_explicit(&t->chunks_used, 0, memory_order_relaxed);
  }
}

int _mld_transfer_mode(void) { return mld_transfer_kind; }

/* ---- mutex variant ------------------------------------------------------ */

/* A look at the count without the lock first: a cache found full (a burst
 * of frees) or empty (a burst of mallocs) is a miss without the lock's two
 * atomic operations (fragmentation: 2,015 locked looks at empty caches and
 * 1,304 at full ones). A count that changes right after the look only
 * makes this call miss, as it would have a moment earlier. */
static bool mld_mutex_insert(mld_transfer_t* t, mld_counter_t* st, void** objs, unsigned n) {
  if (atomic_load_explicit(&t->count, memory_order_relaxed) + n > t->cap) return false;
  mld_lock(&t->lock, st);
  uint32_t count = atomic_load_explicit(&t->count, memory_order_relaxed);
  if (count + n > t->cap) {
    mld_unlock(&t->lock);
    return false;
  }
  memcpy(&t->slots[count], objs, n * sizeof(void*));
  atomic_store_explicit(&t->count, count + n, memory_order_relaxed);
  mld_unlock(&t->lock);
  return true;
}

static unsigned mld_mutex_remove(mld_transfer_t* t, mld_counter_t* st, void** objs, unsigned n) {
  if (atomic_load_explicit(&t->count, memory_order_relaxed) == 0) return 0;
  mld_lock(&t->lock, st);
  uint32_t count = atomic_load_explicit(&t->count, memory_order_relaxed);
  if (count < n) n = count;   /* a short batch rather than a miss */
  count -= n;
  memcpy(objs, &t->slots[count], n * sizeof(void*));
  atomic_store_explicit(&t->count, count, memory_order_relaxed);
  mld_unlock(&t->lock);
  return n;
}

/* ---- ring variants (ring, naive) ------------------------------------------ */

/* Waiting for another thread's commit: 64 pauses, then up to 16 yields,
 * then sleeps on the commit index (futex, woken by the next commit, at most
 * 1 ms). Sleeping matters with more threads than CPUs: a claim holder that
 * was preempted must get a CPU to commit, and a crowd of yielding waiters
 * kept it off for whole scheduler rounds (measured: a 32-thread run of the
 * transfer workload crawled at ~6k objects/s for minutes). The first step
 * counts one wait of the given kind. */
static void mld_wait_step(mld_transfer_t* t, mld_counter_t* st, mld_heap_stat_t kind, unsigned* spins,
                          _Atomic(uint64_t)* word, uint64_t seen) {
  if (*spins == 0) mld_counter_add(&st[kind], 1);
  ++*spins;
  if (*spins < 64) {
    mld_cpu_relax();
  } else if (*spins < 64 + 16) {
    mld_counter_add(&st[MLD_STAT_transfer_yields], 1);
    _mld_os_yield();
  } else {
    mld_counter_add(&st[MLD_STAT_transfer_sleeps], 1);
    /* seq_cst on both sides (here and in mld_ring_publish): either the
     * committer sees us counted, or we see its commit and do not sleep */
    atomic_fetch_add(&t->sleepers, 1);
    /* the low half of the index (little endian): it changes with every commit */
    static const struct timespec ms = {0, 1000000};
    if (atomic_load(word) == seen) mld_futex_wait((void*)word, (uint32_t)seen, &ms);
    atomic_fetch_sub(&t->sleepers, 1);
  }
}

/* Publish a commit index; wake the threads asleep on the ring, if any. */
static void mld_ring_publish(mld_transfer_t* t, _Atomic(uint64_t)* commit, uint64_t value) {
  atomic_store(commit, value);   /* seq_cst: a release that is ordered before the load below */
  if (mld_unlikely(atomic_load(&t->sleepers) != 0)) mld_futex_wake((void*)commit, INT32_MAX);
}

/* Commits happen in claim order: wait for earlier claims of the same side. */
static void mld_wait_turn(mld_transfer_t* t, mld_counter_t* st, _Atomic(uint64_t)* commit, uint64_t mine) {
  unsigned spins = 0;
  uint64_t now;
  /* acquire: the earlier side's slot accesses must happen before our release */
  while ((now = atomic_load_explicit(commit, memory_order_acquire)) != mine)
    mld_wait_step(t, st, MLD_STAT_transfer_commit_waits, &spins, commit, now);
}

/* Claim n slots to insert into: true with *at set, false on a miss. */
static bool mld_ring_claim_insert(mld_transfer_t* t, mld_counter_t* st, unsigned n, bool wait, uint64_t* at) {
  uint64_t pc = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
  unsigned spins = 0;
  for (;;) {
    uint64_t done = atomic_load_explicit(&t->cons_commit, memory_order_acquire);
    if (pc + n - done > t->cap) {
      /* full, unless removes in progress will free enough: wait for them (ring) */
      uint64_t claimed = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
      if (claimed != done && pc + n - claimed <= t->cap) {
        if (!wait) {
          mld_counter_add(&st[MLD_STAT_transfer_insert_inflight_misses], 1);
          return false;
        }
        mld_wait_step(t, st, MLD_STAT_transfer_waits, &spins, &t->cons_commit, done);
        pc = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
        continue;
      }
      return false;
    }
    if (atomic_compare_exchange_weak_explicit(&t->prod_claim, &pc, pc + n, memory_order_relaxed,
                                              memory_order_relaxed))
      break;
  }
  *at = pc;
  return true;
}

/* The slots of logical chunk k, or NULL while it is not mapped. Acquire:
 * pairs with the release that mapped it (the chunk's earlier contents were
 * read, and the chunk given back, before that). */
static void** mld_ring_chunk(mld_transfer_t* t, uint64_t k) {
  uint64_t e = atomic_load_explicit(&t->map[k % MLD_RING_MAP], memory_order_acquire);
  if ((e >> 6) != k + 1) return NULL;
  return t->slots + (size_t)(e & 63u) * MLD_RING_CHUNK;
}

/* Map logical chunk k to the lowest free physical chunk. Only the inserter
 * in turn calls this, so bits are set by one thread at a time; removers
 * clear bits of chunks they are done with before they publish, and the
 * caller saw that publish (its claim read cons_commit with acquire), so
 * the chunks it sees in use overlap [cons_commit, at): with the one it
 * maps, at most cap / 512 + 1 < MLD_RING_CHUNKS + 1. */
static void mld_ring_map(mld_transfer_t* t, uint64_t k) {
  uint64_t used = atomic_load_explicit(&t->chunks_used, memory_order_acquire);
  unsigned p = (unsigned)__builtin_ctzll(~used);
  atomic_fetch_or_explicit(&t->chunks_used, 1ull << p, memory_order_relaxed);
  atomic_store_explicit(&t->map[k % MLD_RING_MAP], ((k + 1) << 6) | p, memory_order_release);
}

/* Copy between objs and the ring's slots [at, at+n) (at most two chunks:
 * n <= a batch < 512); all of them mapped. */
static void mld_ring_copy(mld_transfer_t* t, uint64_t at, void** objs, unsigned n, bool insert) {
  while (n != 0) {
    unsigned off = (unsigned)(at % MLD_RING_CHUNK);
    unsigned run = MLD_RING_CHUNK - off < n ? MLD_RING_CHUNK - off : n;
    void** s = mld_ring_chunk(t, at / MLD_RING_CHUNK) + off;
    if (insert) memcpy(s, objs, run * sizeof(void*));
    else memcpy(objs, s, run * sizeof(void*));
    at += run;
    objs += run;
    n -= run;
  }
}

/* Fill the claimed slots [at, at+n) and publish them. When their chunks are
 * mapped the fill comes first (inserters fill side by side); otherwise an
 * earlier inserter has yet to map one, or this insert reaches a chunk's
 * first slot and maps it: that happens in turn. */
static void mld_ring_commit_insert(mld_transfer_t* t, mld_counter_t* st, uint64_t at, void** objs, unsigned n) {
  uint64_t first = at / MLD_RING_CHUNK, last = (at + n - 1) / MLD_RING_CHUNK;
  if (mld_likely(mld_ring_chunk(t, first) != NULL && mld_ring_chunk(t, last) != NULL)) {
    mld_ring_copy(t, at, objs, n, true);
    mld_wait_turn(t, st, &t->prod_commit, at);   /* earlier inserters publish first */
  } else {
    mld_wait_turn(t, st, &t->prod_commit, at);
    for (uint64_t k = first; k <= last; k++)
      if (k * MLD_RING_CHUNK >= at) mld_ring_map(t, k);   /* its first slot is ours */
    mld_ring_copy(t, at, objs, n, true);
  }
  mld_ring_publish(t, &t->prod_commit, at + n);
}

/* Claim up to want committed objects: how many (0 is a miss), *at set. */
static unsigned mld_ring_claim_remove(mld_transfer_t* t, mld_counter_t* st, unsigned want, bool wait, uint64_t* at) {
  uint64_t cc = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
  unsigned spins = 0;
  unsigned n;
  for (;;) {
    n = want;
    uint64_t avail = atomic_load_explicit(&t->prod_commit, memory_order_acquire);
    if (cc + n > avail) {
      /* empty, unless inserts in progress will bring enough: wait for them (ring) */
      uint64_t claimed = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
      if (claimed != avail && cc + n <= claimed) {
        if (!wait) {
          mld_counter_add(&st[MLD_STAT_transfer_remove_inflight_misses], 1);
          return 0;
        }
        mld_wait_step(t, st, MLD_STAT_transfer_waits, &spins, &t->prod_commit, avail);
        cc = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
        continue;
      }
      if (avail <= cc) return 0;
      n = (unsigned)(avail - cc);       /* a short batch rather than a miss */
    }
    if (atomic_compare_exchange_weak_explicit(&t->cons_claim, &cc, cc + n, memory_order_relaxed,
                                              memory_order_relaxed))
      break;
  }
  *at = cc;
  return n;
}

/* Read the claimed objects [at, at+n) and release their slots: a chunk
 * whose last slot this remove reads goes back (in turn, so every earlier
 * remover has read its part of it). */
static void mld_ring_commit_remove(mld_transfer_t* t, mld_counter_t* st, uint64_t at, void** objs, unsigned n) {
  mld_ring_copy(t, at, objs, n, false);
  mld_wait_turn(t, st, &t->cons_commit, at);   /* earlier removers release their slots first */
  for (uint64_t k = at / MLD_RING_CHUNK; (k + 1) * MLD_RING_CHUNK <= at + n; k++) {
    uint64_t e = atomic_load_explicit(&t->map[k % MLD_RING_MAP], memory_order_relaxed);
    atomic_fetch_and_explicit(&t->chunks_used, ~(1ull << (e & 63u)), memory_order_release);
  }
  mld_ring_publish(t, &t->cons_commit, at + n);
}

bool _mld_transfer_insert(mld_counter_t* st, unsigned c, void** objs, unsigned n) {
  mld_transfer_t* t = &mld_transfer[c];
  if (mld_transfer_kind == MLD_TRANSFER_MUTEX) return mld_mutex_insert(t, st, objs, n);
  uint64_t at;
  if (!mld_ring_claim_insert(t, st, n, mld_transfer_kind == MLD_TRANSFER_RING, &at)) return false;
  mld_ring_commit_insert(t, st, at, objs, n);
  return true;
}

/* Up to n objects (fewer only when fewer are cached); 0 is a miss. */
unsigned _mld_transfer_remove(mld_counter_t* st, unsigned c, void** objs, unsigned n) {
  mld_transfer_t* t = &mld_transfer[c];
  if (mld_transfer_kind == MLD_TRANSFER_MUTEX) return mld_mutex_remove(t, st, objs, n);
  uint64_t at;
  n = mld_ring_claim_remove(t, st, n, mld_transfer_kind == MLD_TRANSFER_RING, &at);
  if (n != 0) mld_ring_commit_remove(t, st, at, objs, n);
  return n;
}

/* fork: the mutex variant is locked across fork. A ring cannot be locked;
 * in the child, a ring caught mid-operation (a thread that does not exist
 * there claimed a range) is reset to empty: its blocks stay counted as used
 * by their pages, a small leak in the child, never a hang or corruption. */
static mld_counter_t mld_fork_stats[MLD_STAT_HEAP_COUNT];   /* the forking thread's waits: not a heap's */

void _mld_transfer_fork_prepare(void) {
  if (mld_transfer_kind != MLD_TRANSFER_MUTEX) return;
  for (unsigned c = 0; c < MLD_CLASSES; c++) mld_lock(&mld_transfer[c].lock, mld_fork_stats);
}

void _mld_transfer_fork_parent(void) {
  if (mld_transfer_kind != MLD_TRANSFER_MUTEX) return;
  for (unsigned c = MLD_CLASSES; c-- > 0;) mld_unlock(&mld_transfer[c].lock);
}

void _mld_transfer_fork_child(void) {
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    mld_transfer_t* t = &mld_transfer[c];
    mld_transfer_lock_init(&t->lock);
    uint64_t pcl = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
    uint64_t pcm = atomic_load_explicit(&t->prod_commit, memory_order_relaxed);
    uint64_t ccl = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
    uint64_t ccm = atomic_load_explicit(&t->cons_commit, memory_order_relaxed);
    if (pcl != pcm || ccl != ccm) {
      /* empty, at the next chunk's first slot, every chunk free */
      uint64_t at = (pcl + MLD_RING_CHUNK - 1) / MLD_RING_CHUNK * MLD_RING_CHUNK;
      atomic_store_explicit(&t->prod_claim, at, memory_order_relaxed);
      atomic_store_explicit(&t->prod_commit, at, memory_order_relaxed);
      atomic_store_explicit(&t->cons_claim, at, memory_order_relaxed);
      atomic_store_explicit(&t->cons_commit, at, memory_order_relaxed);
      atomic_store_explicit(&t->chunks_used, 0, memory_order_relaxed);
    }
  }
}

#if MLD_TEST_HOOKS
/* Test hooks (the mallard_testhooks library only, see src/testhooks.h):
 * one side of a ring operation in two halves, so a test can hold a claim
 * open while other threads run into it. The caller's heap counts. */
static mld_counter_t* mld_hook_stats(void) {
  mld_heap_t* h = _mld_heap_tls;
  if (h == &_mld_heap_empty) h = _mld_heap_thread_init();
  return h->stats;
}

MLD_API int mld_test_transfer_claim(size_t size, int insert, unsigned n, uint64_t* ticket) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  if (mld_transfer_kind == MLD_TRANSFER_MUTEX || size == 0 || size > MLD_MAX_SIZE) return 0;
  mld_transfer_t* t = &mld_transfer[mld_size_class(size)];
  if (insert) return mld_ring_claim_insert(t, mld_hook_stats(), n, false, ticket) ? (int)n : 0;
  return (int)mld_ring_claim_remove(t, mld_hook_stats(), n, false, ticket);
}

MLD_API void mld_test_transfer_commit(size_t size, int insert, void** objs, unsigned n, uint64_t ticket) {
  mld_transfer_t* t = &mld_transfer[mld_size_class(size)];
  if (insert) mld_ring_commit_insert(t, mld_hook_stats(), ticket, objs, n);
  else mld_ring_commit_remove(t, mld_hook_stats(), ticket, objs, n);
}

MLD_API void mld_test_transfer_lock(size_t size, int hold) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
  mld_transfer_t* t = &mld_transfer[mld_size_class(size)];
  if (hold) mld_lock(&t->lock, mld_hook_stats());
  else mld_unlock(&t->lock);
}

MLD_API unsigned mld_test_transfer_lock_word(size_t size) {
  return atomic_load(&mld_transfer[mld_size_class(size)].lock);
}

MLD_API unsigned mld_test_transfer_capacity(size_t size) { return mld_transfer[mld_size_class(size)].cap; }
MLD_API unsigned mld_test_transfer_batch(size_t size) { return _mld_classes[mld_size_class(size)].batch; }
MLD_API uint64_t mld_test_transfer_chunks(size_t size) {
  return atomic_load(&mld_transfer[mld_size_class(size)].chunks_used);
}
#endif
