/* init.c: process initialisation (once, on the first allocation or from
 * the library constructor, whichever comes first) and fork safety: every
 * allocator lock is taken before fork, released in the parent and
 * re-initialised in the child (pthread_atfork). Lock order everywhere:
 * heap list, central lists, transfer caches, segments. */
#include "internal.h"

MLD_HIDDEN _Atomic(int) _mld_init_state;
MLD_HIDDEN int _mld_remote_mode = MLD_REMOTE_BIN;

static void mld_fork_prepare(void) {
  _mld_heap_fork_prepare();
  _mld_central_fork_prepare();
  _mld_transfer_fork_prepare();
  _mld_segment_fork_prepare();
}

static void mld_fork_parent(void) {
  _mld_segment_fork_parent();
  _mld_transfer_fork_parent();
  _mld_central_fork_parent();
  _mld_heap_fork_parent();
}

static void mld_fork_child(void) {
  _mld_segment_fork_child();
  _mld_transfer_fork_child();
  _mld_central_fork_child();
  _mld_heap_fork_child();
}

void _mld_init_process(void) {
  int expected = 0;
  if (!atomic_compare_exchange_strong_explicit(&_mld_init_state, &expected, 1, memory_order_acq_rel,
                                               memory_order_acquire)) {
    while (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_os_yield();
    return;
  }
  _mld_os_init();
  _mld_options_init();
  _mld_remote_mode = (int)_mld_options_get(MLD_OPT_REMOTE);
  _mld_size_class_init();
  _mld_segment_init();
  _mld_central_init();
  _mld_transfer_init((int)_mld_options_get(MLD_OPT_TRANSFER));
  _mld_heap_process_init();
  _mld_canary_init();
  atomic_store_explicit(&_mld_init_state, 2, memory_order_release);
  /* after the state is "done": these may allocate, which must now work */
  pthread_atfork(mld_fork_prepare, mld_fork_parent, mld_fork_child);
  if (_mld_options_get(MLD_OPT_VERBOSE) > 0) _mld_options_print(2);
}

__attribute__((constructor)) static void mld_init_at_load(void) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) _mld_init_process();
}
