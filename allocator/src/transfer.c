/* transfer.c: the transfer cache, one per size class, between the thread
 * heaps and the pages. A heap whose bin overflows inserts a batch of blocks;
 * a heap whose bin is empty removes a batch, before it looks at pages.
 * Batches have a fixed size per class (_mld_classes[c].batch); the cache
 * counts objects, so a heap giving its bins away (thread exit, or before it
 * creates a thread) may insert a short batch, and a remove that finds fewer
 * than a batch takes what there is.
 *
 * Two variants, chosen at run time by MALLARD_TRANSFER:
 *  - mutex: an array of slots under a mutex; LIFO, so a removed batch is the
 *    most recently inserted one (still warm in cache).
 *  - ring:  a lock-free ring (Disruptor style). Each side has a claim index
 *    and a commit index. An insert claims [claim, claim+n) with a CAS, fills
 *    the slots, waits for earlier inserters to commit, then publishes by
 *    moving the commit index (release). A remove does the same on its side,
 *    reading only slots below the producers' commit index. When a claim
 *    finds the ring full (or empty) but the other side has a claim in
 *    progress that would make room (or data), it WAITS for that commit
 *    (spin with pause, then yield) instead of falling through to the slow
 *    path; only a genuinely full/empty ring is a miss.
 * Indices are 64-bit and only grow, so there is no ABA. */
#define _GNU_SOURCE
#include "internal.h"

#include <string.h>

#define MLD_TRANSFER_SLOTS 1024u            /* per class, power of two */
#define MLD_TRANSFER_BYTES (512u * 1024u)   /* at most this many bytes of blocks cached per class */

typedef struct mld_transfer_s {
  /* ring: producer side */
  _Atomic(uint64_t) prod_claim;
  _Atomic(uint64_t) prod_commit;
  char pad0[MLD_CACHE_LINE - 2 * sizeof(uint64_t)];
  /* ring: consumer side */
  _Atomic(uint64_t) cons_claim;
  _Atomic(uint64_t) cons_commit;
  char pad1[MLD_CACHE_LINE - 2 * sizeof(uint64_t)];
  /* mutex variant */
  pthread_mutex_t lock;
  uint32_t count;
  /* both */
  uint32_t cap;                            /* objects */
  void* slots[MLD_TRANSFER_SLOTS];
} __attribute__((aligned(MLD_CACHE_LINE))) mld_transfer_t;

static mld_transfer_t mld_transfer[MLD_CLASSES];
static int mld_transfer_kind = MLD_TRANSFER_MUTEX;

/* Adaptive mutexes spin a little before sleeping: the critical section is a
 * copy of at most 32 pointers, shorter than a futex round trip. */
static void mld_transfer_lock_init(pthread_mutex_t* m) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
#ifdef PTHREAD_MUTEX_ADAPTIVE_NP
  pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
  pthread_mutex_init(m, &attr);
  pthread_mutexattr_destroy(&attr);
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
    mld_transfer_lock_init(&t->lock);
    t->count = 0;
    atomic_store_explicit(&t->prod_claim, 0, memory_order_relaxed);
    atomic_store_explicit(&t->prod_commit, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cons_claim, 0, memory_order_relaxed);
    atomic_store_explicit(&t->cons_commit, 0, memory_order_relaxed);
  }
}

int _mld_transfer_mode(void) { return mld_transfer_kind; }

/* ---- mutex variant ------------------------------------------------------ */

static bool mld_mutex_insert(mld_transfer_t* t, void** objs, unsigned n) {
  pthread_mutex_lock(&t->lock);
  if (t->count + n > t->cap) {
    pthread_mutex_unlock(&t->lock);
    return false;
  }
  memcpy(&t->slots[t->count], objs, n * sizeof(void*));
  t->count += n;
  pthread_mutex_unlock(&t->lock);
  return true;
}

static unsigned mld_mutex_remove(mld_transfer_t* t, void** objs, unsigned n) {
  pthread_mutex_lock(&t->lock);
  if (t->count < n) n = t->count;   /* a short batch rather than a miss */
  t->count -= n;
  memcpy(objs, &t->slots[t->count], n * sizeof(void*));
  pthread_mutex_unlock(&t->lock);
  return n;
}

/* ---- ring variant --------------------------------------------------------- */

/* One step of waiting for another thread's commit: pause a while, then yield
 * (on a loaded machine the thread we wait for may not be running). */
static void mld_wait_step(unsigned* spins) {
  if (*spins == 0) mld_gstat_add(MLD_GSTAT_transfer_waits, 1);
  if (++*spins < 64) {
    mld_cpu_relax();
  } else {
    mld_gstat_add(MLD_GSTAT_transfer_yields, 1);
    _mld_os_yield();
  }
}

static void mld_wait_turn(_Atomic(uint64_t)* commit, uint64_t mine) {
  unsigned spins = 0;
  /* acquire: the earlier side's slot accesses must happen before our release */
  while (atomic_load_explicit(commit, memory_order_acquire) != mine) mld_wait_step(&spins);
}

static bool mld_ring_insert(mld_transfer_t* t, void** objs, unsigned n) {
  uint64_t pc = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
  unsigned spins = 0;
  for (;;) {
    uint64_t done = atomic_load_explicit(&t->cons_commit, memory_order_acquire);
    if (pc + n - done > t->cap) {
      /* full, unless removes in progress will free enough: then wait for them */
      uint64_t claimed = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
      if (claimed != done && pc + n - claimed <= t->cap) {
        mld_wait_step(&spins);
        pc = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
        continue;
      }
      return false;
    }
    if (atomic_compare_exchange_weak_explicit(&t->prod_claim, &pc, pc + n, memory_order_relaxed,
                                              memory_order_relaxed))
      break;
  }
  for (unsigned i = 0; i < n; i++) t->slots[(pc + i) & (MLD_TRANSFER_SLOTS - 1)] = objs[i];
  mld_wait_turn(&t->prod_commit, pc);   /* earlier inserters publish first */
  atomic_store_explicit(&t->prod_commit, pc + n, memory_order_release);
  return true;
}

static unsigned mld_ring_remove(mld_transfer_t* t, void** objs, unsigned want) {
  uint64_t cc = atomic_load_explicit(&t->cons_claim, memory_order_relaxed);
  unsigned spins = 0;
  unsigned n;
  for (;;) {
    n = want;
    uint64_t avail = atomic_load_explicit(&t->prod_commit, memory_order_acquire);
    if (cc + n > avail) {
      /* empty, unless inserts in progress will bring enough: then wait for them */
      uint64_t claimed = atomic_load_explicit(&t->prod_claim, memory_order_relaxed);
      if (claimed != avail && cc + n <= claimed) {
        mld_wait_step(&spins);
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
  for (unsigned i = 0; i < n; i++) objs[i] = t->slots[(cc + i) & (MLD_TRANSFER_SLOTS - 1)];
  mld_wait_turn(&t->cons_commit, cc);   /* earlier removers release their slots first */
  atomic_store_explicit(&t->cons_commit, cc + n, memory_order_release);
  return n;
}

bool _mld_transfer_insert(unsigned c, void** objs, unsigned n) {
  mld_transfer_t* t = &mld_transfer[c];
  return mld_transfer_kind == MLD_TRANSFER_RING ? mld_ring_insert(t, objs, n) : mld_mutex_insert(t, objs, n);
}

/* Up to n objects (fewer only when fewer are cached); 0 is a miss. */
unsigned _mld_transfer_remove(unsigned c, void** objs, unsigned n) {
  mld_transfer_t* t = &mld_transfer[c];
  return mld_transfer_kind == MLD_TRANSFER_RING ? mld_ring_remove(t, objs, n) : mld_mutex_remove(t, objs, n);
}

/* fork: the mutex variant is locked across fork. A ring cannot be locked;
 * in the child, a ring caught mid-operation (a thread that does not exist
 * there claimed a range) is reset to empty: its blocks stay counted as used
 * by their pages, a small leak in the child, never a hang or corruption. */
void _mld_transfer_fork_prepare(void) {
  if (mld_transfer_kind != MLD_TRANSFER_MUTEX) return;
  for (unsigned c = 0; c < MLD_CLASSES; c++) pthread_mutex_lock(&mld_transfer[c].lock);
}

void _mld_transfer_fork_parent(void) {
  if (mld_transfer_kind != MLD_TRANSFER_MUTEX) return;
  for (unsigned c = MLD_CLASSES; c-- > 0;) pthread_mutex_unlock(&mld_transfer[c].lock);
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
      atomic_store_explicit(&t->prod_claim, pcl, memory_order_relaxed);
      atomic_store_explicit(&t->prod_commit, pcl, memory_order_relaxed);
      atomic_store_explicit(&t->cons_claim, pcl, memory_order_relaxed);
      atomic_store_explicit(&t->cons_commit, pcl, memory_order_relaxed);
    }
  }
}
