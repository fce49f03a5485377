// conformance_cxx.cpp: the C++ allocation operators as users get them from
// libmallard.so (LD_PRELOAD): plain, nothrow, sized, aligned and array forms
// of new/delete go through Mallard (its "allocs" counter moves), honour
// alignment, throw std::bad_alloc (or return nullptr for nothrow) on
// impossible sizes, and call the new_handler before giving up.
#include "check.h"

#include <malloc.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

mld_stat_get_fn stat_get;
volatile std::size_t huge_size = SIZE_MAX / 2;

long long allocs() { return stat_get("allocs"); }

// Each form of new must route to Mallard: the allocs counter moves.
template <typename F>
void through_mallard(const char* what, F f) {
  long long before = allocs();
  f();
  long long after = allocs();
  CHECKF(after > before, "%s did not allocate through Mallard (%lld -> %lld)", what, before,
         after);
}

void* volatile keep;

void test_forms() {
  through_mallard("new", [] {
    int* p = new int(7);
    keep = p;
    CHECK(*p == 7);
    delete p;
  });
  through_mallard("new[]", [] {
    long* p = new long[100];
    keep = p;
    for (int i = 0; i < 100; i++) p[i] = i;
    CHECK(malloc_usable_size(p) >= 100 * sizeof(long));
    delete[] p;
  });
  through_mallard("new nothrow", [] {
    char* p = new (std::nothrow) char[33];
    keep = p;
    CHECK(p != nullptr);
    std::memset(p, 1, 33);
    delete[] p;
  });
  through_mallard("operator new + sized delete", [] {
    void* p = ::operator new(250);
    keep = p;
    std::memset(p, 2, 250);
    ::operator delete(p, 250);
  });
  through_mallard("operator new[] + sized delete[]", [] {
    void* p = ::operator new[](4000);
    keep = p;
    std::memset(p, 3, 4000);
    ::operator delete[](p, 4000);
  });
  through_mallard("nothrow operator new + nothrow delete", [] {
    void* p = ::operator new(64, std::nothrow);
    keep = p;
    CHECK(p != nullptr);
    ::operator delete(p, std::nothrow);
    void* q = ::operator new[](64, std::nothrow);
    CHECK(q != nullptr);
    ::operator delete[](q, std::nothrow);
  });
  for (std::size_t align = 16; align <= 65536; align <<= 1) {
    std::size_t sizes[] = {1, align, 3 * align + 5};
    for (std::size_t size : sizes) {
      std::align_val_t al{align};
      through_mallard("aligned new", [&] {
        void* p = ::operator new(size, al);
        keep = p;
        CHECKF(reinterpret_cast<std::uintptr_t>(p) % align == 0, "new(%zu, align %zu) = %p",
               size, align, p);
        std::memset(p, 4, size);
        ::operator delete(p, size, al);
      });
      void* p = ::operator new[](size, al);
      CHECK(reinterpret_cast<std::uintptr_t>(p) % align == 0);
      std::memset(p, 5, size);
      ::operator delete[](p, al);
      p = ::operator new(size, al, std::nothrow);
      CHECK(p && reinterpret_cast<std::uintptr_t>(p) % align == 0);
      ::operator delete(p, al, std::nothrow);
      p = ::operator new[](size, al, std::nothrow);
      CHECK(p && reinterpret_cast<std::uintptr_t>(p) % align == 0);
      ::operator delete[](p, size, al);
      p = ::operator new(size, al);
      ::operator delete(p, al);
    }
  }
  struct alignas(256) Over {
    char c[300];
  };
  through_mallard("new of an over-aligned type", [] {
    Over* o = new Over[3];
    keep = o;
    CHECK(reinterpret_cast<std::uintptr_t>(o) % 256 == 0);
    delete[] o;
  });
  // Containers use the same operators.
  through_mallard("std::vector/std::string", [] {
    std::vector<std::string> v;
    for (int i = 0; i < 200; i++) v.push_back(std::string(40 + i, 'x'));
    CHECK(v.size() == 200 && v[199].size() == 239);
  });
}

int handler_calls;
void give_up_handler() {
  handler_calls++;
  std::set_new_handler(nullptr);  // next failure throws
}

void throwing_handler() {
  handler_calls++;
  throw std::bad_alloc();
}

void test_failures() {
  bool threw = false;
  try {
    keep = ::operator new(huge_size);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECKF(threw, "operator new(SIZE_MAX/2) did not throw std::bad_alloc");
  threw = false;
  try {
    keep = ::operator new[](huge_size, std::align_val_t{64});
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECKF(threw, "aligned operator new[](SIZE_MAX/2) did not throw std::bad_alloc");
  CHECK(::operator new(huge_size, std::nothrow) == nullptr);
  CHECK(::operator new[](huge_size, std::nothrow) == nullptr);
  CHECK(::operator new(huge_size, std::align_val_t{128}, std::nothrow) == nullptr);
  // The new_handler is called before bad_alloc is thrown.
  handler_calls = 0;
  std::set_new_handler(give_up_handler);
  threw = false;
  try {
    keep = ::operator new(huge_size);
  } catch (const std::bad_alloc&) {
    threw = true;
  }
  CHECKF(threw && handler_calls == 1, "new_handler: threw %d, calls %d", threw, handler_calls);
  // A handler that throws bad_alloc: nothrow forms catch it and return
  // nullptr (libmallard.so binds the C++ runtime weakly: this unwinds
  // through it and catches there).
  handler_calls = 0;
  std::set_new_handler(throwing_handler);
  CHECK(::operator new(huge_size, std::nothrow) == nullptr);
  CHECK(::operator new[](huge_size, std::align_val_t{64}, std::nothrow) == nullptr);
  CHECKF(handler_calls == 2, "throwing new_handler: calls %d", handler_calls);
  std::set_new_handler(nullptr);
  // delete of nullptr is a no-op in every form
  ::operator delete(nullptr);
  ::operator delete[](nullptr);
  ::operator delete(nullptr, std::align_val_t{64});
}

}  // namespace

int main() {
  mallard_require_active("conformance_cxx");
  stat_get = mallard_stat_fn();
  test_forms();
  test_failures();
  return check_report("conformance_cxx");
}
