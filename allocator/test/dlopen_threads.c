/* dlopen_threads.c: dlopen/dlclose a library with thread-local storage while
 * threads use it (glibc mallocs dynamic TLS and frees it at thread exit and
 * dlclose), and fail a dlopen so that dlerror's malloc'ed message is freed
 * on the next call. Run with LD_PRELOAD=libmallard.so.
 *   dlopen_threads PATH_TO_libtls_lib.so */
#include "check.h"

#include <pthread.h>

static int (*touch)(int);

static void* user(void* arg) {
  (void)arg;
  long ok = 1;
  for (int i = 0; i < 200; i++) ok &= touch(i);
  free(malloc(24));
  return (void*)ok;
}

int main(int argc, char** argv) {
  mallard_require_active("dlopen_threads");
  REQUIRE(argc == 2);
  for (int round = 0; round < 30; round++) {
    void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    CHECKF(h != NULL, "dlopen(%s): %s", argv[1], dlerror());
    if (!h) break;
    touch = (int (*)(int))(uintptr_t)dlsym(h, "tls_touch");
    REQUIRE(touch);
    pthread_t t[6];
    for (int i = 0; i < 6; i++) REQUIRE(pthread_create(&t[i], NULL, user, NULL) == 0);
    for (int i = 0; i < 6; i++) {
      void* ok;
      REQUIRE(pthread_join(t[i], &ok) == 0);
      CHECK(ok == (void*)1);
    }
    CHECK(touch(round) == 1);
    CHECK(dlclose(h) == 0);
    CHECK(dlopen("/nonexistent/libmallard-test-none.so", RTLD_NOW) == NULL);
    CHECK(dlerror() != NULL);
  }
  return check_report("dlopen_threads");
}
