/* fork.c: fork while other threads allocate. Worker threads keep
 * allocating, exchanging and freeing; the main thread forks repeatedly.
 * The program's own pthread_atfork handlers allocate and free as well.
 * Each child (single-threaded now, with whatever state the allocator's fork
 * handlers left) frees blocks allocated before the fork, allocates every
 * kind of block, starts a thread that allocates, and exits 0; a deadlocked
 * child is killed by alarm(). The parent checks every child's status and
 * goes on allocating. Run with LD_PRELOAD=libmallard.so.
 *
 * `fork_while_allocating --no-child-thread` leaves out the child's thread:
 * qemu-user 7.2 itself crashes (cpu_exec: assertion cpu == current_cpu)
 * when a forked child of a multithreaded guest starts a thread, with glibc
 * as with Mallard, so the arm64 run under qemu uses it. */
#include "check.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

enum { WORKERS = 3, FORKS = 12, SLOTS = 256 };

static _Atomic(void*) slots[SLOTS];
static atomic_int stop;

static void* worker(void* arg) {
  uint64_t x = 88172645463325252ULL + (uintptr_t)arg;
  while (!atomic_load(&stop)) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    size_t size = x % 100 < 95 ? 16 + x % 700 : 4096 + x % 200000;
    void* p = malloc(size);
    if (!p) abort();
    memset(p, (int)(x & 0xff), size < 64 ? size : 64);
    void* old = atomic_exchange(&slots[(x >> 20) % SLOTS], p);
    free(old);
  }
  return NULL;
}

static void* child_thread(void* arg) {
  (void)arg;
  for (int i = 0; i < 1000; i++) free(malloc(16 + (size_t)i * 8));
  return NULL;
}

static int child_thread_wanted = 1;

/* The program's own fork handlers allocate too (they run around Mallard's). */
static void* atfork_block;
static void atfork_prepare(void) { atfork_block = malloc(100); }
static void atfork_parent(void) {
  free(atfork_block);
  free(malloc(50));
}
static void atfork_child(void) {
  free(atfork_block);
  free(malloc(70));
}

static int child(void* before_fork) {
  alarm(20); /* a lock left held across fork would hang here */
  free(before_fork);
  for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&slots[i], NULL));
  size_t sizes[] = {8, 24, 100, 1000, 5000, 20000, 100000, 300000, 1 << 20};
  for (int r = 0; r < 8; r++)
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      char* p = malloc(sizes[k]);
      if (!p) return 2;
      memset(p, r, sizes[k]);
      p = realloc(p, sizes[k] * 2);
      if (!p) return 3;
      free(p);
    }
  if (child_thread_wanted) {
    pthread_t t;
    if (pthread_create(&t, NULL, child_thread, NULL) || pthread_join(t, NULL)) return 4;
  }
  return 0;
}

int main(int argc, char** argv) {
  mallard_require_active("fork");
  if (argc > 1 && !strcmp(argv[1], "--no-child-thread")) {
    child_thread_wanted = 0;
    printf("fork: children start no thread (qemu-user cannot do that after fork)\n");
  }
  REQUIRE(pthread_atfork(atfork_prepare, atfork_parent, atfork_child) == 0);
  pthread_t t[WORKERS];
  for (long i = 0; i < WORKERS; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)i) == 0);
  for (int f = 0; f < FORKS; f++) {
    void* before = malloc(64 + (size_t)f * 1000);
    REQUIRE(before);
    usleep(2000);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) exit(child(before));
    free(before);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    if (WIFSIGNALED(status))
      CHECKF(0, "child %d died of signal %d%s", f, WTERMSIG(status),
             WTERMSIG(status) == SIGALRM ? " (deadlock after fork)" : "");
    else
      CHECKF(WEXITSTATUS(status) == 0, "child %d exited %d", f, WEXITSTATUS(status));
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < WORKERS; i++) REQUIRE(pthread_join(t[i], NULL) == 0);
  for (int i = 0; i < SLOTS; i++) free(atomic_exchange(&slots[i], NULL));
  return check_report("fork");
}
