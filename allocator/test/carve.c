/* carve.c: small pages carve their blocks from a per-class first block on,
 * wrapping around to the page's start (internal.h: mld_page_first,
 * page.c: _mld_page_take), so each class's first blocks sit in L1 sets of
 * their own. Every block of a page is still handed out once and only once.
 *
 *   carve [rounds]
 *
 * For every small size class (16 B .. 8 KiB), each round: allocate enough
 * blocks to fill more than two 64 KiB pages and check that they are
 * distinct and do not overlap (sorted, each at least its size from the
 * next), aligned to their size's largest power of two, that no page holds
 * more than 64 KiB / size of them and at least one holds exactly that many
 * (a page carved to its end and wrapped around to its start), and that
 * every block still holds its whole-block tag when freed. Then free them
 * all and give the pages back (mld_collect(1), MALLARD_DECAY_MS=0 in
 * ctest), so the next round carves pages initialized again. Also: the
 * classes up to 512 B do not all start their pages in one L1 set. */
#include "check.h"

#include <malloc.h>
#include <stdint.h>

enum { PAGE = 64 * 1024, LINE = 64, SETS = 64 };

static void collect(void) {
  void (*fn)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(fn != NULL);
  fn(1);
}

static int cmp_addr(const void* a, const void* b) {
  uintptr_t x = *(const uintptr_t*)a, y = *(const uintptr_t*)b;
  return x < y ? -1 : x > y;
}

static void fill(unsigned char* p, size_t size, uint64_t tag) {
  for (size_t i = 0; i < size; i++) p[i] = (unsigned char)(tag + i * 131);
}

static int intact(const unsigned char* p, size_t size, uint64_t tag) {
  for (size_t i = 0; i < size; i++)
    if (p[i] != (unsigned char)(tag + i * 131)) return 0;
  return 1;
}

/* One class, more than two pages of it. */
static void one_class(size_t size) {
  size_t per_page = PAGE / size, n = 2 * per_page + 3;
  unsigned char** blocks = calloc(n, sizeof *blocks);
  uintptr_t* sorted = calloc(n, sizeof *sorted);
  REQUIRE(blocks != NULL && sorted != NULL);
  for (size_t i = 0; i < n; i++) {
    blocks[i] = malloc(size);
    REQUIRE(blocks[i] != NULL);
    CHECKF(malloc_usable_size(blocks[i]) == size, "size %zu: usable size %zu", size,
           malloc_usable_size(blocks[i]));
    CHECKF((uintptr_t)blocks[i] % (size & (0 - size)) == 0, "size %zu: block %p misaligned", size,
           (void*)blocks[i]);
    fill(blocks[i], size, i);
    sorted[i] = (uintptr_t)blocks[i];
  }
  qsort(sorted, n, sizeof *sorted, cmp_addr);
  size_t full_pages = 0, run = 1;
  for (size_t i = 1; i <= n; i++) {
    if (i < n) CHECKF(sorted[i] - sorted[i - 1] >= size, "size %zu: blocks %#lx and %#lx overlap", size,
                      (unsigned long)sorted[i - 1], (unsigned long)sorted[i]);
    if (i < n && sorted[i] / PAGE == sorted[i - 1] / PAGE) {
      run++;
      continue;
    }
    CHECKF(run <= per_page, "size %zu: %zu blocks in one 64 KiB page (at most %zu fit)", size, run, per_page);
    if (run == per_page) full_pages++;
    run = 1;
  }
  CHECKF(full_pages >= 1, "size %zu: no page carved to its end (%zu blocks over %zu pages' worth)", size, n,
         n / per_page);
  for (size_t i = 0; i < n; i++) {
    CHECKF(intact(blocks[i], size, i), "size %zu: block %p overwritten while live", size, (void*)blocks[i]);
    free(blocks[i]);
  }
  free(blocks);
  free(sorted);
}

/* The class size of the next class above last (by malloc_usable_size of
 * the sizes from last + 16 on), or 0 past max. */
static size_t next_class(size_t last, size_t max) {
  for (size_t s = last + 16; s <= max; s += 16) {
    void* p = malloc(s);
    REQUIRE(p != NULL);
    size_t size = malloc_usable_size(p);
    free(p);
    if (size != last) return size;
  }
  return 0;
}

int main(int argc, char** argv) {
  long rounds = argc > 1 ? atol(argv[1]) : 3;
  mallard_require_active("carve");
  for (long r = 0; r < rounds; r++) {
    for (size_t size = next_class(0, 8192); size != 0; size = next_class(size, 8192)) {
      one_class(size);
      collect();
    }
  }
  /* the first blocks of the classes up to 512 B: not all in one set (they
   * were, every page starting 64 KiB aligned, before the rotation) */
  int first_set = -1, same = 1, classes = 0;
  for (size_t size = next_class(0, 512); size != 0; size = next_class(size, 512)) {
    unsigned char* q = malloc(size);   /* the first block carved of a fresh page (collected above) */
    REQUIRE(q != NULL);
    int set = (int)(((uintptr_t)q % PAGE) / LINE % SETS);
    free(q);
    if (first_set < 0) first_set = set;
    else if (set != first_set) same = 0;
    classes++;
  }
  CHECKF(classes >= 8 && !same, "the %d classes up to 512 B all hand out blocks in L1 set %d", classes,
         first_set);
  return check_report("carve");
}
