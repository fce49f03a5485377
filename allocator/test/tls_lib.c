/* tls_lib.c: a library with thread-local storage, loaded with dlopen by
 * dlopen_threads.c: glibc allocates its dynamic TLS blocks with malloc and
 * frees them at thread exit and dlclose, after Mallard's own thread-exit
 * work, so that interplay is exercised. */
#include <stdlib.h>

static __thread char tls_buf[4096];
static __thread void* tls_owned;

int tls_touch(int v) {
  tls_buf[v % 4096] = (char)v;
  if (!tls_owned) tls_owned = malloc(100); /* leaked per thread on purpose: like real libraries */
  return tls_buf[v % 4096] == (char)v && tls_owned != NULL;
}
