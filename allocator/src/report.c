/* report.c: messages to stderr with write(2) only (the allocator must never
 * call code that may allocate), misuse reports (double free, free of a
 * pointer Mallard never returned) that abort unless MALLARD_ON_MISUSE=ignore,
 * and the small number/string formatters the stats writer uses. */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void _mld_report_str(mld_buf_t* b, const char* s) {
  while (*s && b->len + 1 < b->cap) b->p[b->len++] = *s++;
  b->p[b->len] = 0;
}

void _mld_report_u64(mld_buf_t* b, uint64_t v) {
  char tmp[24];
  int n = 0;
  do {
    tmp[n++] = (char)('0' + v % 10);
    v /= 10;
  } while (v);
  while (n > 0 && b->len + 1 < b->cap) b->p[b->len++] = tmp[--n];
  b->p[b->len] = 0;
}

void _mld_report_hex(mld_buf_t* b, uintptr_t v) {
  char tmp[2 + 2 * sizeof(uintptr_t) + 1];
  int n = 0;
  do {
    tmp[n++] = "0123456789abcdef"[v & 15];
    v >>= 4;
  } while (v);
  _mld_report_str(b, "0x");
  while (n > 0 && b->len + 1 < b->cap) b->p[b->len++] = tmp[--n];
  b->p[b->len] = 0;
}

void _mld_report_write(int fd, const char* s, size_t n) {
  int saved = errno;
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) break;
    s += w;
    n -= (size_t)w;
  }
  errno = saved;
}

void _mld_report_message(const char* msg) { _mld_report_write(2, msg, strlen(msg)); }

_Noreturn void _mld_report_fatal(const char* msg) {
  _mld_report_message(msg);
  abort();
}

static void mld_misuse(mld_buf_t* b) {
  bool ignore = _mld_options_get(MLD_OPT_ON_MISUSE) == MLD_MISUSE_IGNORE;
  if (ignore) _mld_report_str(b, " (ignored: MALLARD_ON_MISUSE=ignore)");
  _mld_report_str(b, "\n");
  _mld_report_write(2, b->p, b->len);
  if (!ignore) abort();
}

void _mld_report_double_free(const void* p, const mld_page_t* page) {
  char text[256];
  mld_buf_t b = {text, 0, sizeof text};
  _mld_report_str(&b, "mallard: double free of pointer ");
  _mld_report_hex(&b, (uintptr_t)p);
  _mld_report_str(&b, " (size class ");
  _mld_report_u64(&b, page->block_size);
  _mld_report_str(&b, ")");
  mld_misuse(&b);
}

void _mld_report_use_after_free(const char* what, const void* p, const mld_page_t* page) {
  char text[256];
  mld_buf_t b = {text, 0, sizeof text};
  _mld_report_str(&b, "mallard: ");
  _mld_report_str(&b, what);
  _mld_report_str(&b, " of pointer ");
  _mld_report_hex(&b, (uintptr_t)p);
  _mld_report_str(&b, " that was already freed (size class ");
  _mld_report_u64(&b, page->block_size);
  _mld_report_str(&b, ")");
  mld_misuse(&b);
}

void _mld_report_invalid(const char* what, const void* p) {
  char text[256];
  mld_buf_t b = {text, 0, sizeof text};
  _mld_report_str(&b, "mallard: ");
  _mld_report_str(&b, what);
  _mld_report_str(&b, " of pointer ");
  _mld_report_hex(&b, (uintptr_t)p);
  _mld_report_str(&b, " that mallard never returned (or already freed)");
  mld_misuse(&b);
}
