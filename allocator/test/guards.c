/* guards.c: the pages of a segment not handed out yet are PROT_NONE
 * (segment.c, mld_segment_open): a stray access far past a block faults;
 * a huge block has a PROT_NONE guard before it, and a freed one under
 * 4 MiB is PROT_NONE while its span is cached (segment.c, "Guards").
 *
 *   guards faults   each case in a forked child of a fresh process, which
 *                   must die of SIGSEGV (or SIGBUS): a write 1 MiB past a
 *                   block of 8 B and of 4 KiB (mimalloc-bench's
 *                   one_mbyte_overflow probes), a 1 MiB memcpy from a block's
 *                   start, a read of the segment's last byte, a write to the
 *                   last byte of its header (before page 1), a write 1 and
 *                   32 bytes before a 256 KiB block, a write into and a read
 *                   of a freed 256 KiB block; control children must exit 0:
 *                   one that writes only inside its blocks, one that frees
 *                   and mallocs huge blocks of many sizes and alignments
 *                   (from the span cache: opened again, guards where they
 *                   belong) and writes every byte of each.
 *   guards stress [threads] [rounds]
 *                   threads allocate blocks of every small and medium
 *                   class until many segments have been opened page by
 *                   page, write every byte of each block, free them in a
 *                   shuffled order, purge (mld_collect(1): freed pages go
 *                   back to the OS and come back from the purged lists),
 *                   and do it again; every byte is checked before the free.
 * Run with LD_PRELOAD=libmallard.so. */
#include "check.h"

#include <pthread.h>
#include <stdbool.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#define SEGMENT ((uintptr_t)4 << 20)
#define MIB ((size_t)1 << 20)

typedef void (*collect_fn)(int);

static volatile char sink;

typedef enum {
  WRITE_FAR_SMALL, WRITE_FAR_MEDIUM, MEMCPY_FAR, READ_SEGMENT_END, HEADER_TAIL, HUGE_UNDERFLOW_1, HUGE_UNDERFLOW_32,
  HUGE_WRITE_FREED, HUGE_READ_FREED, CONTROL, CONTROL_HUGE, N_CASES
} guard_case;
static const char* const NAMES[] = {
    "write 1 MiB past an 8 B block", "write 1 MiB past a 4 KiB block", "memcpy 1 MiB from a block's start",
    "read the segment's last byte", "write the last byte of the segment header (before page 1)",
    "write 1 byte before a 256 KiB block",
    "write 32 bytes before a 256 KiB block", "write into a freed 256 KiB block",
    "read a freed 256 KiB block", "writes inside blocks only (control)",
    "huge blocks freed and reused, every byte written (control)"};
#define FIRST_CONTROL CONTROL

/* Huge blocks of many sizes and alignments, freed in an order that
 * coalesces cached spans, taken again (split, gathered), each written
 * whole, including the bytes right before a guard would be. */
static void huge_reuse(void) {
  static const size_t sizes[] = {200 << 10, 256 << 10, 1 << 20, 3 << 20, 5 << 20, 9 << 20, 300 << 10};
  static const size_t aligns[] = {0, 16 << 10, 64 << 10, 1 << 20};
  enum { N = 7 };
  for (int round = 0; round < 6; round++) {
    char* b[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
      len[i] = sizes[(i + round) % N];
      size_t a = aligns[(i * 3 + round) % 4];
      if (a == 0) b[i] = malloc(len[i]);
      else if (posix_memalign((void**)&b[i], a, len[i]) != 0) b[i] = NULL;
      if (!b[i]) _exit(91);
      if (a != 0 && ((uintptr_t)b[i] & (a - 1)) != 0) _exit(92);
      memset(b[i], round + i, len[i]);
    }
    for (int i = 0; i < N; i++)
      if (b[i][0] != (char)(round + i) || b[i][len[i] - 1] != (char)(round + i)) _exit(93);
    for (int i = 0; i < N; i++) free(b[(i * 2) % N]);   /* neighbours freed apart, then together */
    char* big = malloc((size_t)20 << 20);   /* gathers cached spans */
    if (!big) _exit(94);
    memset(big, 7, (size_t)20 << 20);
    free(big);
  }
}

static void do_case(guard_case c) {
  char* small = malloc(8);
  char* medium = malloc(4096);
  if (!small || !medium) _exit(90);
  switch (c) {
    case WRITE_FAR_SMALL: small[8 - 1 + MIB] ^= 'A'; break;
    case WRITE_FAR_MEDIUM: medium[4096 - 1 + MIB] ^= 'A'; break;
    case MEMCPY_FAR: {
      static char src[4096 + MIB];
      memcpy(medium, src, sizeof src);
      break;
    }
    case READ_SEGMENT_END: sink = *(volatile char*)(((uintptr_t)small & ~(SEGMENT - 1)) + SEGMENT - 1); break;
    case HEADER_TAIL: {   /* the header is 64 KiB; only its first 12 KiB are used */
      *(volatile char*)(((uintptr_t)small & ~(SEGMENT - 1)) + (64u << 10) - 1) = 'A';
      break;
    }
    case HUGE_UNDERFLOW_1:
    case HUGE_UNDERFLOW_32: {
      char* p = malloc(256 << 10);
      if (!p) _exit(90);
      p[c == HUGE_UNDERFLOW_1 ? -1 : -32] ^= 'A';
      free(p);
      break;
    }
    case HUGE_WRITE_FREED:
    case HUGE_READ_FREED: {
      char* volatile p = malloc(256 << 10);
      if (!p) _exit(90);
      memset(p, 'A', 256 << 10);
      free(p);
      if (c == HUGE_WRITE_FREED) p[100] = 'B';
      else sink = p[100];
      break;
    }
    case CONTROL_HUGE: huge_reuse(); break;
    default:
      memset(small, 1, 8);
      memset(medium, 2, 4096);
      free(small);
      free(medium);
      break;
  }
}

static int faults(void) {
  for (int c = 0; c < N_CASES; c++) {
    if (c == HEADER_TAIL && sysconf(_SC_PAGESIZE) > (16 << 10)) continue;   /* header = one page: no tail */
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      alarm(20);
      do_case((guard_case)c);
      _exit(0);
    }
    int st = 0;
    REQUIRE(waitpid(pid, &st, 0) == pid);
    if (c >= FIRST_CONTROL) {
      CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status 0x%x", NAMES[c], st);
    } else {
      bool faulted = WIFSIGNALED(st) && (WTERMSIG(st) == SIGSEGV || WTERMSIG(st) == SIGBUS);
      CHECKF(faulted, "%s: not caught (status 0x%x)", NAMES[c], st);
    }
  }
  return check_report("guards faults");
}

/* ---- stress ------------------------------------------------------------------ */

static long n_threads = 4, n_rounds = 6;
static collect_fn collect;

enum { PER_THREAD = 6000 };

static void* worker(void* arg) {
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)((uintptr_t)arg + 1);
  static const size_t sizes[] = {8, 16, 48, 100, 256, 700, 1500, 4096, 6000, 9000, 20000, 50000, 100000};
  char** blocks = malloc(PER_THREAD * sizeof(char*));
  size_t* lens = malloc(PER_THREAD * sizeof(size_t));
  REQUIRE(blocks && lens);
  for (long round = 0; round < n_rounds; round++) {
    for (int i = 0; i < PER_THREAD; i++) {
      size_t len = sizes[next_rand(&seed) % (sizeof sizes / sizeof sizes[0])];
      if (len > 20000 && next_rand(&seed) % 8 != 0) len = 64;   /* ~100 MB per round at most */
      REQUIRE((blocks[i] = malloc(len)) != NULL);
      lens[i] = len;
      memset(blocks[i], (int)(i ^ round) & 0xff, len);   /* every byte: faults if not open */
    }
    for (int i = PER_THREAD - 1; i > 0; i--) {   /* shuffled frees */
      int j = (int)(next_rand(&seed) % (uint64_t)(i + 1));
      char* b = blocks[i];
      blocks[i] = blocks[j];
      blocks[j] = b;
      size_t l = lens[i];
      lens[i] = lens[j];
      lens[j] = l;
    }
    for (int i = 0; i < PER_THREAD; i++) {
      unsigned char* b = (unsigned char*)blocks[i];
      unsigned char want = b[0];
      for (size_t k = 1; k < lens[i]; k++)
        if (b[k] != want) {
          fprintf(stderr, "block %p byte %zu: %u, want %u\n", (void*)b, k, b[k], want);
          check_failures++;
          break;
        }
      free(b);
    }
    if (collect) collect(1);   /* freed pages purged: later rounds reuse them from the purged lists */
  }
  free(blocks);
  free(lens);
  return NULL;
}

static int stress(void) {
  collect = (collect_fn)(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(collect != NULL);
  pthread_t t[64];
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)(uintptr_t)i) == 0);
  for (long i = 0; i < n_threads; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  mld_stat_get_fn get = mallard_stat_fn();
  long long segments = get("segments_mapped");
  CHECKF(segments >= 4, "only %lld segments mapped: the stress did not open many", segments);
  return check_report("guards stress");
}

int main(int argc, char** argv) {
  mallard_require_active("guards");
  if (argc >= 2 && strcmp(argv[1], "faults") == 0) return faults();
  if (argc >= 2 && strcmp(argv[1], "stress") == 0) {
    if (argc >= 3) n_threads = strtol(argv[2], NULL, 10);
    if (argc >= 4) n_rounds = strtol(argv[3], NULL, 10);
    if (n_threads < 1 || n_threads > 64 || n_rounds < 1) return 2;
    return stress();
  }
  fprintf(stderr, "usage: guards faults | guards stress [threads] [rounds]\n");
  return 2;
}
