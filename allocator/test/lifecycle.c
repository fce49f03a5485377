/* lifecycle.c: behaviour over time, as users get it from libmallard.so
 * (LD_PRELOAD): every size up to past the huge threshold, alignments beyond
 * a segment, memory that is reused instead of growing (local and
 * producer/consumer with remote frees), heaps that are not leaked when
 * threads exit (including threads whose TLS destructors allocate after
 * Mallard's own destructor ran), many live threads, mld_thread_done,
 * mld_collect giving memory back, and allocation in atexit handlers. */
#include "check.h"

#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

static mld_stat_get_fn stat_get;
static long long stat(const char* name) { return stat_get(name); }

static long long rss_bytes(void) {
  FILE* f = fopen("/proc/self/statm", "r");
  long long size = 0, res = 0;
  if (!f) return -1;
  if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
  fclose(f);
  return res * sysconf(_SC_PAGESIZE);
}

static void test_every_size(void) {
  /* 1..4096 one by one, then to 300000 in steps: usable >= size, the whole
   * usable size is writable without touching the neighbours */
  for (size_t size = 1; size <= 300000; size += size < 4096 ? 1 : size < 140000 ? 61 : 4093) {
    unsigned char* a = malloc(size);
    unsigned char* b = malloc(size);
    unsigned char* c = malloc(size);
    REQUIRE(a && b && c);
    size_t ua = malloc_usable_size(a), ub = malloc_usable_size(b), uc = malloc_usable_size(c);
    CHECKF(ua >= size && ub >= size && uc >= size, "size %zu: usable %zu %zu %zu", size, ua, ub,
           uc);
    memset(a, 0x11, ua);
    memset(c, 0x33, uc);
    memset(b, 0x22, ub);
    int ok = 1;
    for (size_t i = 0; i < ua; i++) ok &= a[i] == 0x11;
    for (size_t i = 0; i < uc; i++) ok &= c[i] == 0x33;
    CHECKF(ok, "size %zu: writing a block's usable size overwrote a neighbour", size);
    free(a);
    free(b);
    free(c);
  }
}

static void test_big_alignments(void) {
  size_t aligns[] = {(size_t)128 << 10, (size_t)1 << 20, (size_t)4 << 20, (size_t)8 << 20};
  size_t sizes[] = {1, 100, 5000, 200000, (size_t)5 << 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      void* p = NULL;
      int rc = posix_memalign(&p, aligns[i], sizes[k]);
      CHECKF(rc == 0 && p && (uintptr_t)p % aligns[i] == 0, "posix_memalign(%zu, %zu) = %d %p",
             aligns[i], sizes[k], rc, p);
      if (rc == 0) {
        CHECK(malloc_usable_size(p) >= sizes[k]);
        memset(p, 7, sizes[k]);
        free(p);
      }
      p = aligned_alloc(aligns[i], sizes[k]);
      CHECKF(p && (uintptr_t)p % aligns[i] == 0, "aligned_alloc(%zu, %zu) = %p", aligns[i],
             sizes[k], p);
      free(p);
    }
  void* p = (void*)1;
  int rc = posix_memalign(&p, (size_t)1 << 62, 16);
  CHECKF(rc == ENOMEM, "posix_memalign(2^62, 16) = %d, want ENOMEM", rc);
}

/* enough live aligned blocks of each alignment to fill several pages and
 * segments (first pages of segments included): all aligned */
static void test_aligned_many(void) {
  for (size_t align = 16; align <= 65536; align <<= 1) {
    size_t sizes[] = {1, align / 2 + 1, align, align + 1, 3 * align / 2};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      size_t n = ((size_t)6 << 20) / (sizes[k] + align) + 8, bad = 0;
      void** v = malloc(n * sizeof *v);
      REQUIRE(v);
      for (size_t i = 0; i < n; i++) {
        v[i] = aligned_alloc(align, sizes[k]);
        if (!v[i] || (uintptr_t)v[i] % align || malloc_usable_size(v[i]) < sizes[k]) bad++;
      }
      CHECKF(bad == 0, "%zu of %zu live aligned_alloc(%zu, %zu) blocks misaligned or short", bad,
             n, align, sizes[k]);
      for (size_t i = 0; i < n; i++) free(v[i]);
      free(v);
    }
  }
}

static void test_reuse_local(void) {
  long long base = stat("bytes_mapped");
  for (int i = 0; i < 300; i++) { /* 300 MiB through huge blocks */
    char* p = malloc((size_t)1 << 20);
    REQUIRE(p);
    memset(p, i, 4096);
    p[(1 << 20) - 1] = 1;
    free(p);
  }
  long long after_huge = stat("bytes_mapped");
  CHECKF(after_huge - base < (64LL << 20), "bytes_mapped grew by %lld after 300 x malloc/free 1 MiB",
         after_huge - base);
  enum { N = 100000 };
  static void* v[N];
  long long peak_first = 0;
  for (int round = 0; round < 12; round++) {
    for (int i = 0; i < N; i++) REQUIRE((v[i] = malloc(64)) != NULL);
    for (int i = 0; i < N; i++) free(v[i]);
    if (round == 1) peak_first = stat("bytes_mapped");
  }
  long long now = stat("bytes_mapped");
  CHECKF(now <= peak_first + (16LL << 20), "small rounds: bytes_mapped %lld after round 2, %lld after 12",
         peak_first, now);
}

/* producer/consumer: every block is freed remotely; memory must be reused */
enum { PC_BATCH = 5000 };
static void* pc_batch[PC_BATCH];
static pthread_barrier_t pc_bar;
static int pc_rounds = 100;

static void* consumer(void* arg) {
  (void)arg;
  for (int r = 0; r < pc_rounds; r++) {
    pthread_barrier_wait(&pc_bar); /* producer filled the batch */
    for (int i = 0; i < PC_BATCH; i++) free(pc_batch[i]);
    pthread_barrier_wait(&pc_bar); /* batch consumed */
  }
  return NULL;
}

static void test_reuse_remote(void) {
  pthread_t t;
  REQUIRE(pthread_barrier_init(&pc_bar, NULL, 2) == 0);
  REQUIRE(pthread_create(&t, NULL, consumer, NULL) == 0);
  long long base = stat("bytes_mapped"), remote0 = stat("remote_frees");
  for (int r = 0; r < pc_rounds; r++) {
    for (int i = 0; i < PC_BATCH; i++) REQUIRE((pc_batch[i] = malloc(16 + (size_t)(i % 16) * 16)) != NULL);
    pthread_barrier_wait(&pc_bar);
    pthread_barrier_wait(&pc_bar);
  }
  REQUIRE(pthread_join(t, NULL) == 0);
  pthread_barrier_destroy(&pc_bar);
  long long grew = stat("bytes_mapped") - base;
  /* 100 rounds x 5000 blocks x 16..256 B = ~68 MB allocated in total; a
   * round's worth is < 1.3 MB */
  CHECKF(grew < (24LL << 20), "producer/consumer: bytes_mapped grew by %lld (remote frees not reused)",
         grew);
  CHECK(stat("remote_frees") - remote0 >= (long long)pc_rounds * PC_BATCH);
}

/* threads that only free (never allocate) and exit: what they free is reused */
enum { FO_N = 20000, FO_ROUNDS = 30 };
static void* fo_blocks[FO_N];

static void* free_only(void* arg) {
  (void)arg;
  for (int i = 0; i < FO_N; i++) free(fo_blocks[i]);
  return NULL;
}

static void test_free_only_threads(void) {
  long long base = stat("bytes_mapped"), a0 = stat("allocs"), f0 = stat("frees");
  for (int r = 0; r < FO_ROUNDS; r++) {
    for (int i = 0; i < FO_N; i++) {
      fo_blocks[i] = malloc(200);
      REQUIRE(fo_blocks[i]);
      memset(fo_blocks[i], r, 200);
    }
    pthread_t t;
    REQUIRE(pthread_create(&t, NULL, free_only, NULL) == 0);
    REQUIRE(pthread_join(t, NULL) == 0);
  }
  long long grew = stat("bytes_mapped") - base;
  long long da = stat("allocs") - a0, df = stat("frees") - f0;
  /* a round is 20000 x 200 B = ~4 MB; 30 rounds must not keep 30 rounds' worth */
  CHECKF(grew < (32LL << 20), "free-only threads: bytes_mapped grew by %lld MB over %d rounds",
         grew >> 20, FO_ROUNDS);
  CHECKF(df >= (long long)FO_N * FO_ROUNDS && da - df < 64,
         "free-only threads: allocs +%lld, frees +%lld", da, df);
}

/* threads whose TLS destructor allocates after Mallard's destructor ran */
static pthread_key_t late_key;
static _Atomic(void*) late_blocks[64];

static void late_destructor(void* arg) {
  free(arg);                  /* allocated by this thread, freed late */
  void* p = malloc(200);      /* allocated after Mallard's destructor ran */
  if (p) memset(p, 1, 200);
  for (int i = 0; i < 63; i++) {
    void* expected = NULL;
    if (atomic_compare_exchange_strong(&late_blocks[i], &expected, p)) return;
  }
  free(p);
}

static void* late_thread(void* arg) {
  (void)arg;
  for (int i = 0; i < 100; i++) free(malloc(32 + (size_t)i));
  void* mine = malloc(100);
  pthread_setspecific(late_key, mine);
  return NULL;
}

static void test_thread_exit(void) {
  REQUIRE(pthread_key_create(&late_key, late_destructor) == 0);
  long long started0 = stat("threads_started"), ended0 = stat("threads_ended");
  for (int round = 0; round < 5; round++) {
    pthread_t t[10];
    for (int i = 0; i < 10; i++) REQUIRE(pthread_create(&t[i], NULL, late_thread, NULL) == 0);
    for (int i = 0; i < 10; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
    for (int i = 0; i < 63; i++) free(atomic_exchange(&late_blocks[i], NULL));
  }
  long long started = stat("threads_started") - started0, ended = stat("threads_ended") - ended0;
  CHECKF(started >= 50, "threads_started moved by %lld for 50 threads", started);
  CHECKF(ended == started, "%lld heaps started but %lld ended: heaps of exited threads leak",
         started, ended);
}

/* many live threads at once, freeing each other's blocks */
enum { MANY = 64, PER = 200 };
static void* many_blocks[MANY][PER];
static pthread_barrier_t many_bar;

static void* many_thread(void* arg) {
  long id = (long)arg;
  for (int i = 0; i < PER; i++) {
    many_blocks[id][i] = malloc(24 + (size_t)((id * PER + i) % 3000));
    if (many_blocks[id][i]) memset(many_blocks[id][i], (int)id, 24);
  }
  pthread_barrier_wait(&many_bar);
  long other = (id + 1) % MANY;
  int bad = 0;
  for (int i = 0; i < PER; i++) {
    unsigned char* p = many_blocks[other][i];
    if (!p || p[0] != (unsigned char)other || p[23] != (unsigned char)other) bad++;
    free(p);
  }
  return (void*)(long)bad;
}

static void test_many_threads(void) {
  pthread_t t[MANY];
  REQUIRE(pthread_barrier_init(&many_bar, NULL, MANY) == 0);
  for (long i = 0; i < MANY; i++) REQUIRE(pthread_create(&t[i], NULL, many_thread, (void*)i) == 0);
  long bad = 0;
  for (int i = 0; i < MANY; i++) {
    void* r;
    REQUIRE(pthread_join(t[i], &r) == 0);
    bad += (long)r;
  }
  pthread_barrier_destroy(&many_bar);
  CHECKF(bad == 0, "%ld blocks corrupted among %d live threads", bad, MANY);
}

static void* done_thread(void* arg) {
  (void)arg;
  void (*thread_done)(void) = (void (*)(void))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_thread_done");
  if (!thread_done) return (void*)1;
  void* keep = malloc(64);
  for (int i = 0; i < 1000; i++) free(malloc(48));
  thread_done();               /* give the heap back, then keep going */
  for (int i = 0; i < 1000; i++) free(malloc(48));
  char* p = malloc(100000);
  if (!p) return (void*)2;
  memset(p, 3, 100000);
  free(p);
  free(keep);                  /* a block of the heap given back */
  thread_done();
  return NULL;
}

static void test_thread_done_and_collect(void) {
  pthread_t t;
  void* r = (void*)9;
  REQUIRE(pthread_create(&t, NULL, done_thread, NULL) == 0);
  REQUIRE(pthread_join(t, &r) == 0);
  CHECKF(r == NULL, "mld_thread_done thread failed (%ld)", (long)r);

  void (*collect)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  CHECK(collect != NULL);
  if (!collect) return;
  enum { N = 64 * 1024 };
  static void* v[N];
  for (int i = 0; i < N; i++) {
    v[i] = malloc(1024);
    REQUIRE(v[i]);
    memset(v[i], 1, 1024);
  }
  long long rss_full = rss_bytes();
  for (int i = 0; i < N; i++) free(v[i]);
  collect(1);
  long long rss_after = rss_bytes();
  /* 64 MiB freed and a forced collect: most of it leaves the resident set */
  CHECKF(rss_full - rss_after >= (32LL << 20), "mld_collect(1) after freeing 64 MiB: RSS %lld -> %lld",
         rss_full, rss_after);
}

/* allocs and frees move together: nothing stays live in this block of code */
static void test_stats_balance(void) {
  size_t aligns[] = {16, 64, 4096, 65536, (size_t)1 << 20, (size_t)2 << 20, (size_t)4 << 20};
  size_t sizes[] = {8, 100, 3000, 20000, 200000, (size_t)3 << 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    long long a0 = stat("allocs"), f0 = stat("frees");
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      void* p = aligned_alloc(aligns[i], sizes[k]);
      REQUIRE(p);
      free(p);
      p = malloc(sizes[k]);
      REQUIRE(p);
      p = realloc(p, sizes[k] * 2);
      REQUIRE(p);
      free(p);
    }
    long long da = stat("allocs") - a0, df = stat("frees") - f0;
    CHECKF(da == df && da >= 2 * (long long)(sizeof sizes / sizeof sizes[0]),
           "alignment %zu: allocs +%lld but frees +%lld for balanced alloc/free pairs", aligns[i],
           da, df);
  }
}

/* mld_stats_write: the stats object on demand; a failure is -1 with errno */
static void test_stats_write(void) {
  int (*write_stats)(const char*) =
      (int (*)(const char*))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_stats_write");
  CHECK(write_stats != NULL);
  if (!write_stats) return;
  char path[] = "/tmp/mallard-lifecycle-XXXXXX";
  int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  close(fd);
  CHECK(write_stats(path) == 0);
  FILE* f = fopen(path, "r");
  REQUIRE(f);
  char text[8192];
  size_t n = fread(text, 1, sizeof text - 1, f);
  text[n] = 0;
  fclose(f);
  unlink(path);
  CHECKF(!strncmp(text, "{\"version\": 1", 13) && strstr(text, "\"allocs\"") && strchr(text, '}'),
         "mld_stats_write wrote: %.200s", text);
  errno = 0;
  CHECK(write_stats("/nonexistent-dir/stats.json") == -1 && errno == ENOENT);
}

/* A thread allocates 64 MiB and exits; another thread frees every block.
 * That memory is free: a forced collect must give it back to the OS (it
 * must not stay resident until someone allocates that size class again). */
enum { ORPHANS = 64 * 1024 };
static void* orphans[ORPHANS];

static void* orphan_maker(void* arg) {
  (void)arg;
  for (int i = 0; i < ORPHANS; i++) {
    orphans[i] = malloc(1000);
    if (orphans[i]) memset(orphans[i], 1, 1000);
  }
  return NULL;
}

static void test_exited_thread_memory_returned(void) {
  void (*collect)(int) = (void (*)(int))(uintptr_t)dlsym(RTLD_DEFAULT, "mld_collect");
  REQUIRE(collect);
  collect(1);
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, orphan_maker, NULL) == 0);
  REQUIRE(pthread_join(t, NULL) == 0); /* its heap is abandoned now */
  long long rss_full = rss_bytes();
  for (int i = 0; i < ORPHANS; i++) free(orphans[i]);
  collect(1);
  long long rss_after = rss_bytes();
  CHECKF(rss_full - rss_after >= (32LL << 20),
         "64 MiB of an exited thread, freed by another thread, then mld_collect(1): RSS %lld MB -> "
         "%lld MB (not returned)",
         rss_full >> 20, rss_after >> 20);
}

static void at_exit_allocates(void) {
  char* p = malloc(1000);
  if (!p) _exit(5);
  memset(p, 1, 1000);
  p = realloc(p, 300000);
  if (!p) _exit(6);
  free(p);
}

/* blocks of 2 GiB, 4 GiB + 4 KiB and 5 GiB (32-bit size fields would wrap),
 * touched once per MiB: usable size, realloc down (to 3/4, which Mallard
 * does in place: a copy would touch GiBs) keeps contents, calloc zero */
static void test_big_blocks(void) {
  size_t sizes[] = {(size_t)1 << 31, ((size_t)1 << 32) + 4096, ((size_t)5 << 30) + 123};
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    size_t n = sizes[k];
    unsigned char* p = malloc(n);
    CHECKF(p != NULL, "malloc(%zu) failed", n);
    if (!p) continue;
    for (size_t i = 0; i < n; i += 1 << 20) p[i] = (unsigned char)(i >> 20);
    p[n - 1] = 0x5a;
    CHECKF(malloc_usable_size(p) >= n, "usable %zu < %zu", malloc_usable_size(p), n);
    size_t m = n / 4 * 3;
    unsigned char* q = realloc(p, m);
    CHECKF(q != NULL, "realloc(%zu -> %zu) failed", n, m);
    if (q) {
      int same = 1;
      for (size_t i = 0; i < m; i += 1 << 20) same &= q[i] == (unsigned char)(i >> 20);
      CHECKF(same, "realloc(%zu -> %zu) lost contents", n, m);
      free(q);
    }
    unsigned char* c = calloc(1, n);
    CHECKF(c != NULL, "calloc(1, %zu) failed", n);
    if (c) {
      int zero = 1;
      for (size_t i = 0; i < n; i += 1 << 20) zero &= c[i] == 0;
      CHECKF(zero && c[n - 1] == 0, "calloc(1, %zu) is not zero", n);
      free(c);
    }
  }
}

static const struct {
  const char* name;
  void (*fns[4])(void);
} GROUPS[] = {
    {"sizes", {test_every_size}},
    {"bigblocks", {test_big_blocks}},
    {"alignment", {test_big_alignments, test_aligned_many}},
    {"reuse", {test_reuse_local, test_reuse_remote, test_free_only_threads}},
    {"threads", {test_thread_exit, test_many_threads}},
    {"collect", {test_thread_done_and_collect}},
    {"orphans", {test_exited_thread_memory_returned}},
    {"stats", {test_stats_balance, test_stats_write}},
};
#define NGROUPS (sizeof GROUPS / sizeof GROUPS[0])

/* lifecycle [group]: one group of checks (each a ctest of its own), or all */
int main(int argc, char** argv) {
  mallard_require_active("lifecycle");
  stat_get = mallard_stat_fn();
  atexit(at_exit_allocates);
  const char* only = argc > 1 ? argv[1] : NULL;
  int ran = 0;
  for (size_t g = 0; g < NGROUPS; g++) {
    if (only && strcmp(only, GROUPS[g].name)) continue;
    for (int k = 0; k < 4 && GROUPS[g].fns[k]; k++) GROUPS[g].fns[k]();
    ran++;
  }
  REQUIRE(ran > 0);
  char label[64];
  snprintf(label, sizeof label, "lifecycle %s", only ? only : "(all)");
  return check_report(label);
}
