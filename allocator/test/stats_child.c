/* stats_child.c: a known amount of allocation for the stats test
 * (stats_check.py): N mallocs of 64 bytes, N frees, and M blocks allocated
 * here and freed by another thread. Prints "pid N M" and exits; Mallard
 * writes MALLARD_STATS_FILE at exit. */
#include "check.h"

#include <pthread.h>
#include <unistd.h>

enum { N = 10000, M = 2000 };
static void* handed[M];

static void* remote_freer(void* arg) {
  (void)arg;
  for (int i = 0; i < M; i++) free(handed[i]);
  return NULL;
}

int main(void) {
  mallard_require_active("stats_child");
  static void* mine[N];
  for (int i = 0; i < N; i++) {
    mine[i] = malloc(64);
    REQUIRE(mine[i]);
    memset(mine[i], i, 64);
  }
  for (int i = 0; i < N; i++) free(mine[i]);
  for (int i = 0; i < M; i++) {
    handed[i] = malloc(16 + (size_t)(i % 64) * 16);
    REQUIRE(handed[i]);
  }
  pthread_t t;
  REQUIRE(pthread_create(&t, NULL, remote_freer, NULL) == 0);
  REQUIRE(pthread_join(t, NULL) == 0);
  printf("%ld %d %d\n", (long)getpid(), N, M);
  return 0;
}
