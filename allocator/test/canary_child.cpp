// canary_child.cpp: a known number of frees through every path that frees
// a block (free, realloc to 0, operator delete plain/sized/array/aligned),
// for canary_check.py, which counts this program's instructions under
// callgrind with MALLARD_CANARY_NS unset, 100 and 1000. Prints the number
// of frees.
#include <cstdio>
#include <cstdlib>
#include <new>

#include "check.h"

int main() {
  mallard_require_active("canary_child");
  const int rounds = 2000;
  long frees = 0;
  for (int i = 0; i < rounds; i++) {
    void* p = malloc(48);
    check_sink = p;
    free(p);
    void* q = malloc(100);
    check_sink = q;
    q = realloc(q, 0);  // frees, returns NULL
    int* a = new int[8];
    check_sink = a;
    delete[] a;
    long* b = new long(i);
    check_sink = b;
    ::operator delete(b, sizeof(long));  // sized
    void* c = ::operator new(64, std::align_val_t(64));
    check_sink = c;
    ::operator delete(c, std::align_val_t(64));
    frees += 5;
  }
  printf("%ld\n", frees);
  return 0;
}
