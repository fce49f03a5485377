/* size_classes.c: the size-class lookup against its definition. malloc's
 * inline path finds the class of every size up to MLD_FAST_MAX (4 KiB)
 * with one load from _mld_size_bin8 (the class's bin offset over 8),
 * larger ones with clz (mld_size_class_above); both must give, for every size from 0 to 128 KiB, the
 * smallest class that holds it. Then through the allocator itself: a block
 * of every size up to 16 KiB reports its class's size as usable size, and
 * blocks of sizes around the table's end (mixed, many at once) are
 * written in full and checked before they are freed. Links the
 * allocator's internals (mallard_nooverride); no preload.
 *
 *   size_classes */
#include "check.h"

#include "internal.h"

int main(void) {
  _mld_size_class_init();
  long bad = 0;
  unsigned want = 0;
  for (size_t size = 0; size <= MLD_MAX_SIZE; size++) {
    while (_mld_classes[want].size < size) want++;
    unsigned got = mld_size_class(size);
    if (got != want && bad++ < 10)
      fprintf(stderr, "size %zu: class %u (%u B), want %u (%u B)\n", size, got, _mld_classes[got].size, want,
              _mld_classes[want].size);
    if (size <= MLD_FAST_MAX && _mld_size_bin8[(size + 15) >> 4] != want * MLD_SLOT_BIN_SCALE && bad++ < 10)
      fprintf(stderr, "size %zu: table gives bin offset %u, want class %u\n", size, _mld_size_bin8[(size + 15) >> 4], want);
    if (size > MLD_FAST_MAX && mld_size_class_above(size) != want && bad++ < 10)
      fprintf(stderr, "size %zu: clz gives %u, want %u\n", size, mld_size_class_above(size), want);
  }
  CHECKF(bad == 0, "%ld wrong class(es)", bad);

  /* through malloc: every size up to 16 KiB gets its class's block */
  bad = 0;
  for (size_t size = 1; size <= 16384; size++) {
    void* p = mld_malloc(size);
    REQUIRE(p != NULL);
    size_t u = mld_usable_size(p);
    if (u != _mld_classes[mld_size_class(size)].size && bad++ < 10)
      fprintf(stderr, "malloc(%zu): usable %zu, class size %u\n", size, u, _mld_classes[mld_size_class(size)].size);
    memset(p, 0xa5, size);
    mld_free(p);
  }
  CHECKF(bad == 0, "%ld wrong usable size(s)", bad);

  /* stress: many live blocks of sizes on both sides of the table's end */
  enum { LIVE = 4096, ROUNDS = 200000 };
  static unsigned char* live[LIVE];
  static size_t sizes[LIVE];
  uint64_t rng = 0x9e3779b97f4a7c15ull;
  bad = 0;
  for (int i = 0; i < ROUNDS; i++) {
    unsigned k = (unsigned)(next_rand(&rng) % LIVE);
    if (live[k] != NULL) {
      for (size_t j = 0; j < sizes[k]; j += 61)
        if (live[k][j] != (unsigned char)(k + j) && bad++ < 10) fprintf(stderr, "block %u changed at %zu\n", k, j);
      mld_free(live[k]);
    }
    sizes[k] = MLD_FAST_MAX / 2 + 1 + next_rand(&rng) % MLD_FAST_MAX;   /* 2 KiB .. 6 KiB */
    live[k] = mld_malloc(sizes[k]);
    REQUIRE(live[k] != NULL);
    for (size_t j = 0; j < sizes[k]; j += 61) live[k][j] = (unsigned char)(k + j);
  }
  for (unsigned k = 0; k < LIVE; k++) mld_free(live[k]);
  CHECKF(bad == 0, "%ld corrupted byte(s)", bad);
  return check_report("size_classes");
}
