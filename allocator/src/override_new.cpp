// override_new.cpp: C++ operator new/delete (plain, nothrow, sized,
// aligned, array forms) on top of the mld_* API. As the standard says, a
// failing new calls the installed new_handler and retries, and throws
// std::bad_alloc when there is none; the nothrow forms return nullptr.
//
// libmallard.so does not link libstdc++: the few C++ runtime functions
// used here (only when an allocation fails) are weak references, bound
// when the program itself loads libstdc++ (every C++ program does) and
// null otherwise. Linking it cost every preloaded process, C programs
// included, the relocation of libstdc++, libm and libgcc_s at start-up:
// about 1.3 M instructions (callgrind, `fragmentation --phases 2`).
#include <cstddef>
#include <new>

#include "mallard.h"

#define MLD_EXPORT __attribute__((visibility("default")))

namespace std {
new_handler get_new_handler() noexcept __attribute__((weak));
[[noreturn]] void __throw_bad_alloc() __attribute__((weak));
}  // namespace std
// What try/catch below refers to: used only while an exception unwinds,
// and only the functions above (or a new_handler, C++ code) throw one, so
// libstdc++ is loaded and these are bound whenever they are used.
__asm__(".weak __gxx_personality_v0\n\t.weak __cxa_begin_catch\n\t.weak __cxa_end_catch");

extern "C" __attribute__((visibility("hidden"), noreturn)) void _mld_report_fatal(const char* msg);

namespace {

// No new_handler: throw std::bad_alloc (libstdc++'s own thrower), or, in a
// process without libstdc++ at start-up, stop with a message.
[[noreturn]] void mld_throw_bad_alloc() {
  if (std::__throw_bad_alloc != nullptr) std::__throw_bad_alloc();
  _mld_report_fatal("out of memory in operator new (no C++ runtime to throw std::bad_alloc)");
}

std::new_handler mld_new_handler() { return std::get_new_handler != nullptr ? std::get_new_handler() : nullptr; }

void* mld_new(std::size_t n) {
  for (;;) {
    void* p = mld_malloc(n);
    if (p != nullptr) return p;
    std::new_handler h = mld_new_handler();
    if (h == nullptr) mld_throw_bad_alloc();
    h();
  }
}

void* mld_new_aligned(std::size_t n, std::size_t al) {
  for (;;) {
    void* p = mld_aligned_alloc(al, n);
    if (p != nullptr) return p;
    std::new_handler h = mld_new_handler();
    if (h == nullptr) mld_throw_bad_alloc();
    h();
  }
}

void* mld_new_nothrow(std::size_t n) noexcept {
  try {
    return mld_new(n);
  } catch (...) {
    return nullptr;
  }
}

void* mld_new_aligned_nothrow(std::size_t n, std::size_t al) noexcept {
  try {
    return mld_new_aligned(n, al);
  } catch (...) {
    return nullptr;
  }
}

}  // namespace

// The plain and array new and the plain and sized delete are in override.c
// (inline fast paths); a failed new comes here: the new_handler loop.
extern "C" __attribute__((visibility("hidden"))) void* _mld_new_retry(std::size_t n) {
  for (;;) {
    std::new_handler h = mld_new_handler();
    if (h == nullptr) mld_throw_bad_alloc();
    h();
    void* p = mld_malloc(n);
    if (p != nullptr) return p;
  }
}

MLD_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return mld_new_nothrow(n); }
MLD_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return mld_new_nothrow(n); }
MLD_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { mld_free(p); }

#if __cpp_aligned_new
MLD_EXPORT void* operator new(std::size_t n, std::align_val_t al) {
  return mld_new_aligned(n, static_cast<std::size_t>(al));
}
MLD_EXPORT void* operator new[](std::size_t n, std::align_val_t al) {
  return mld_new_aligned(n, static_cast<std::size_t>(al));
}
MLD_EXPORT void* operator new(std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return mld_new_aligned_nothrow(n, static_cast<std::size_t>(al));
}
MLD_EXPORT void* operator new[](std::size_t n, std::align_val_t al, const std::nothrow_t&) noexcept {
  return mld_new_aligned_nothrow(n, static_cast<std::size_t>(al));
}
MLD_EXPORT void operator delete(void* p, std::align_val_t) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, std::align_val_t) noexcept { mld_free(p); }
MLD_EXPORT void operator delete(void* p, std::size_t, std::align_val_t) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { mld_free(p); }
MLD_EXPORT void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { mld_free(p); }
#endif
