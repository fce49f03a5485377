/* size_class.c: the size classes. 16..128 bytes in steps of 16, then four
 * classes per power of two (2^k * 1.25, 1.5, 1.75, 2) up to 128 KiB; a table
 * maps sizes <= MLD_FAST_MAX (4 KiB) to their class (as its bin's offset
 * over 8) in one load (malloc's inline path), larger sizes use clz.
 * Also the per-class batch size (objects moved to and from the transfer
 * cache at once), the thread bin limit and how far it may grow. */
#include "internal.h"

MLD_HIDDEN mld_class_info_t _mld_classes[MLD_CLASSES];
MLD_HIDDEN uint8_t _mld_size_bin8[MLD_FAST_MAX / 16 + 1];

void _mld_size_class_init(void) {
  unsigned c = 0;
  for (uint32_t s = 16; s <= 128; s += 16) _mld_classes[c++].size = s;
  for (unsigned k = 7; k <= 16; k++)
    for (unsigned j = 1; j <= 4; j++) _mld_classes[c++].size = (uint32_t)((1u << k) + j * (1u << (k - 2)));
  for (c = 0; c < MLD_CLASSES; c++) {
    mld_class_info_t* ci = &_mld_classes[c];
    uint32_t batch = (64u * 1024u) / ci->size;
    if (batch > MLD_MAX_BATCH) batch = MLD_MAX_BATCH;
    if (batch < 2) batch = 2;
    ci->batch = (uint16_t)batch;
    /* a bin holds up to 4 batches, but at most ~32 KiB of blocks (at least one batch) */
    uint32_t bin_max = 4u * batch;
    if (bin_max > (32u * 1024u) / ci->size) bin_max = (32u * 1024u) / ci->size;
    if (bin_max < batch) bin_max = batch;
    ci->bin_max = (uint16_t)bin_max;
    /* a bin that keeps cycling its own blocks through the transfer cache
     * (freed in bursts, allocated again) may grow to 4 batches, but at most
     * ~128 KiB of blocks (heap.c: mld_heap_grow) */
    uint32_t bin_cap = 4u * batch;
    if (bin_cap > (128u * 1024u) / ci->size) bin_cap = (128u * 1024u) / ci->size;
    if (bin_cap < bin_max) bin_cap = bin_max;
    ci->bin_cap = (uint16_t)bin_cap;
    ci->kind = ci->size <= MLD_SMALL_MAX ? MLD_KIND_SMALL : MLD_KIND_MEDIUM;
  }
  c = 0;
  for (size_t i = 0; i <= MLD_FAST_MAX / 16; i++) {
    size_t size = i * 16;
    while (_mld_classes[c].size < size) c++;
    _mld_size_bin8[i] = (uint8_t)(c * MLD_SLOT_BIN_SCALE);
  }
}

/* The smallest class that holds size bytes and whose blocks are all aligned
 * to alignment (pages start on 64 KiB boundaries, so a block size that is a
 * multiple of the alignment keeps every block aligned). */
unsigned _mld_size_class_aligned(size_t size, size_t alignment) {
  if (size > MLD_MAX_SIZE || alignment > 64 * 1024) return MLD_CLASSES;
  for (unsigned c = mld_size_class(size < 16 ? 16 : size); c < MLD_CLASSES; c++)
    if (_mld_classes[c].size % alignment == 0) return c;
  return MLD_CLASSES;
}
