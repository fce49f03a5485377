/* block_start.c: free's block-start test (internal.h, mld_page_is_block:
 * one multiply by the inverse of the block size's odd part, a rotate and
 * one compare with the block count) against division, for every size class
 * and every byte offset of a segment on either side of the page's start,
 * for each page geometry (a small page, a medium page, the medium page
 * behind the segment header), plus offsets spread over all 64 bits and a
 * page that holds no small blocks (count 0: nothing passes). Links the
 * allocator's internals (mallard_nooverride); no preload.
 *
 *   block_start */
#include "check.h"

#include "internal.h"

static long mismatches;

static void check_geometry(unsigned c, size_t area_size) {
  size_t size = _mld_classes[c].size;
  uint64_t count = area_size / size;
  mld_page_t page;
  memset(&page, 0, sizeof page);
  page.start = (uint8_t*)(uintptr_t)0x7f2a00c00000ull;   /* a page start inside a segment */
  mld_page_set_blocks(&page, size, (uint32_t)count);
  /* every offset from a whole segment below the start to a whole segment above */
  for (int64_t off = -(int64_t)MLD_SEGMENT_SIZE; off <= (int64_t)MLD_SEGMENT_SIZE; off++) {
    bool want = off >= 0 && (uint64_t)off % size == 0 && (uint64_t)off / size < count;
    bool got = mld_page_is_block(&page, page.start + off);
    if (got != want && mismatches++ < 10)
      fprintf(stderr, "class %u (size %zu, %llu blocks): offset %lld: %d, want %d\n", c, size,
              (unsigned long long)count, (long long)off, got, want);
  }
  /* offsets over the whole 64-bit range */
  uint64_t rng = 0x2545f4914f6cdd1dull + c;
  for (int i = 0; i < 200000; i++) {
    uint64_t off = next_rand(&rng) >> (next_rand(&rng) % 64);
    bool want = off % size == 0 && off / size < count;
    bool got = mld_page_is_block(&page, (const void*)((uintptr_t)page.start + off));
    if (got != want && mismatches++ < 10)
      fprintf(stderr, "class %u: offset 0x%llx: %d, want %d\n", c, (unsigned long long)off, got, want);
  }
  /* the same page holding no small blocks: nothing is a block start */
  mld_page_set_blocks(&page, 0, 0);
  for (int64_t off = -4096; off <= 4096; off++)
    if (mld_page_is_block(&page, page.start + off) && mismatches++ < 10)
      fprintf(stderr, "page without blocks: offset %lld accepted\n", (long long)off);
}

int main(void) {
  _mld_size_class_init();
  for (unsigned c = 0; c < MLD_CLASSES; c++) {
    size_t size = _mld_classes[c].size;
    if (size <= MLD_SMALL_MAX) {
      check_geometry(c, 64 * 1024);                    /* a small page */
    } else {
      check_geometry(c, 1024 * 1024);                  /* a medium page */
      check_geometry(c, 1024 * 1024 - 64 * 1024);      /* the one behind the segment header */
    }
  }
  CHECKF(mismatches == 0, "%ld mismatch(es)", mismatches);
  return check_report("block_start");
}
