// override_new.cpp: C++ operator new/delete (plain, nothrow, sized,
// aligned, array forms) on top of the mld_* API. As the standard says, a
// failing new calls the installed new_handler and retries, and throws
// std::bad_alloc when there is none; the nothrow forms return nullptr.
#include <cstddef>
#include <new>

#include "mallard.h"

#define MLD_EXPORT __attribute__((visibility("default")))

namespace {

void* mld_new(std::size_t n) {
  for (;;) {
    void* p = mld_malloc(n);
    if (p != nullptr) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
    h();
  }
}

void* mld_new_aligned(std::size_t n, std::size_t al) {
  for (;;) {
    void* p = mld_aligned_alloc(al, n);
    if (p != nullptr) return p;
    std::new_handler h = std::get_new_handler();
    if (h == nullptr) throw std::bad_alloc();
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

MLD_EXPORT void* operator new(std::size_t n) { return mld_new(n); }
MLD_EXPORT void* operator new[](std::size_t n) { return mld_new(n); }
MLD_EXPORT void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return mld_new_nothrow(n); }
MLD_EXPORT void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return mld_new_nothrow(n); }
MLD_EXPORT void operator delete(void* p) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p) noexcept { mld_free(p); }
MLD_EXPORT void operator delete(void* p, const std::nothrow_t&) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, const std::nothrow_t&) noexcept { mld_free(p); }
MLD_EXPORT void operator delete(void* p, std::size_t) noexcept { mld_free(p); }
MLD_EXPORT void operator delete[](void* p, std::size_t) noexcept { mld_free(p); }

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
