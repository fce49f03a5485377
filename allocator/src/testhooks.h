/* testhooks.h: test-only entry points, compiled into the mallard_testhooks
 * library (MLD_TEST_HOOKS=1, no interposition) and nowhere else. They split
 * one ring transfer-cache operation (MALLARD_TRANSFER=ring or naive) into its
 * claim and its commit, so a test can hold a claim open while another thread
 * runs into it (test/transfer_hold.c), and hold the mutex variant's lock
 * (test/transfer_lock.c). */
#ifndef MALLARD_TESTHOOKS_H
#define MALLARD_TESTHOOKS_H

#include <stddef.h>
#include <stdint.h>

#include "mallard.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Claim n slots to insert into (insert=1) or up to n objects to remove
 * (insert=0) in the transfer cache of the size class of `size`, without
 * waiting for the other side. Returns how many were claimed (0: none; always
 * 0 with the mutex variant) and the claim's ticket. */
MLD_API int mld_test_transfer_claim(size_t size, int insert, unsigned n, uint64_t* ticket);
/* Complete a claim: fill its slots from objs (insert) or read them into objs
 * (remove), then publish, after earlier claims of the same side. */
MLD_API void mld_test_transfer_commit(size_t size, int insert, void** objs, unsigned n, uint64_t ticket);
/* Take (hold=1) or release (hold=0) the mutex variant's lock of the class
 * of `size`, as an insert or a remove would; its word: 0 free, 1 held, 2
 * held with a sleeper possible (test/transfer_lock.c). */
MLD_API void mld_test_transfer_lock(size_t size, int hold);
MLD_API unsigned mld_test_transfer_lock_word(size_t size);
MLD_API unsigned mld_test_transfer_capacity(size_t size);   /* objects */
MLD_API unsigned mld_test_transfer_batch(size_t size);      /* objects per batch */
/* The ring's physical slot chunks in use (bit p: chunk p, 512 slots each). */
MLD_API uint64_t mld_test_transfer_chunks(size_t size);

#ifdef __cplusplus
}
#endif
#endif
