/* stats.c: the counters as one JSON object (docs/contracts.md section 2):
 * written to MALLARD_STATS_FILE at exit ("%p" in the path becomes the pid),
 * to stderr with MALLARD_VERBOSE, or on demand (mld_stats_print/_write).
 * Heaps count in plain per-thread counters that are only summed here, so
 * counting costs nothing measurable whether or not the file is asked for. */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

static const char* const mld_heap_stat_names[MLD_STAT_HEAP_COUNT] = {
#define MLD_X(n) #n,
    MLD_HEAP_STATS(MLD_X)
#undef MLD_X
};

static const char* const mld_global_stat_names[MLD_GSTAT_COUNT] = {
#define MLD_X(n) #n,
    MLD_GLOBAL_STATS(MLD_X)
#undef MLD_X
};

static void mld_field(mld_buf_t* b, const char* name, uint64_t v) {
  _mld_report_str(b, ", \"");
  _mld_report_str(b, name);
  _mld_report_str(b, "\": ");
  _mld_report_u64(b, v);
}

size_t _mld_stats_format(char* out, size_t cap) {
  uint64_t hs[MLD_STAT_HEAP_COUNT];
  _mld_heap_stats_sum(hs);
  mld_buf_t b = {out, 0, cap};
  _mld_report_str(&b, "{\"version\": 1, \"allocator\": \"mallard\", \"transfer\": \"");
  _mld_report_str(&b, _mld_options_str(MLD_OPT_TRANSFER));
  _mld_report_str(&b, "\"");
  mld_field(&b, "pid", (uint64_t)getpid());
  for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++) mld_field(&b, mld_heap_stat_names[s], hs[s]);
  for (int s = 0; s < MLD_GSTAT_COUNT; s++)
    mld_field(&b, mld_global_stat_names[s], atomic_load_explicit(&_mld_gstats[s], memory_order_relaxed));
  mld_field(&b, "os_page_size", _mld_os_page_size);
  mld_field(&b, "decay_ms", (uint64_t)_mld_options_get(MLD_OPT_DECAY_MS));
  mld_field(&b, "canary_ns", (uint64_t)_mld_options_get(MLD_OPT_CANARY_NS));
  mld_field(&b, "canary_loops_per_us", _mld_canary_rate());
  _mld_report_str(&b, "}\n");
  return b.len;
}

long long mld_stat_get(const char* name) {
  uint64_t hs[MLD_STAT_HEAP_COUNT];
  _mld_heap_stats_sum(hs);
  for (int s = 0; s < MLD_STAT_HEAP_COUNT; s++)
    if (strcmp(name, mld_heap_stat_names[s]) == 0) return (long long)hs[s];
  for (int s = 0; s < MLD_GSTAT_COUNT; s++)
    if (strcmp(name, mld_global_stat_names[s]) == 0)
      return (long long)atomic_load_explicit(&_mld_gstats[s], memory_order_relaxed);
  return -1;
}

static int mld_stats_write_fd(int fd) {
  char text[4096];
  size_t n = _mld_stats_format(text, sizeof text);
  _mld_report_write(fd, text, n);
  return 0;
}

void mld_stats_print(void) { mld_stats_write_fd(2); }

int mld_stats_write(const char* path) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  mld_stats_write_fd(fd);
  return close(fd);
}

/* At exit: the file named by MALLARD_STATS_FILE, "%p" replaced by the pid. */
__attribute__((destructor)) static void mld_stats_at_exit(void) {
  if (atomic_load_explicit(&_mld_init_state, memory_order_acquire) != 2) return;
  int saved = errno;
  if (_mld_options_get(MLD_OPT_VERBOSE) > 0) mld_stats_print();
  const char* tmpl = _mld_options_str(MLD_OPT_STATS_FILE);
  if (tmpl != NULL && tmpl[0] != 0) {
    char path[4200];
    mld_buf_t b = {path, 0, sizeof path};
    for (const char* s = tmpl; *s; s++) {
      if (s[0] == '%' && s[1] == 'p') {
        _mld_report_u64(&b, (uint64_t)getpid());
        s++;
      } else {
        char one[2] = {*s, 0};
        _mld_report_str(&b, one);
      }
    }
    if (mld_stats_write(path) != 0) {
      char text[4400];
      mld_buf_t m = {text, 0, sizeof text};
      _mld_report_str(&m, "mallard: cannot write MALLARD_STATS_FILE ");
      _mld_report_str(&m, path);
      _mld_report_str(&m, "\n");
      _mld_report_write(2, m.p, m.len);
    }
  }
  errno = saved;
}
