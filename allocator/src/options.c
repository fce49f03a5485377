/* options.c: every run-time option, in one table, read once at process init
 * from MALLARD_<NAME> environment variables, through environ or, when libc
 * has not set it yet, /proc/self/environ with open/read (no allocation). A bad value is a clear
 * error on stderr and an abort: a benchmark must not silently measure a
 * configuration it was not asked for. */
#include "internal.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

extern char** environ;

typedef enum { MLD_OPT_ENUM, MLD_OPT_LONG, MLD_OPT_STRING } mld_opt_type_t;

typedef struct mld_option_desc_s {
  const char* name;            /* without the MALLARD_ prefix */
  mld_opt_type_t type;
  long value;                  /* enum index or number */
  const char* choices[4];      /* enum values, by index */
  const char* def_str;         /* documented default */
  char str[4096];              /* string options */
} mld_option_desc_t;

/* The default transfer cache is the mutex variant: see allocator/README.md. */
static mld_option_desc_t mld_options[MLD_OPT_COUNT] = {
    [MLD_OPT_TRANSFER] = {"TRANSFER", MLD_OPT_ENUM, MLD_TRANSFER_MUTEX, {"mutex", "ring", "naive", NULL}, "mutex", ""},
    [MLD_OPT_STATS_FILE] = {"STATS_FILE", MLD_OPT_STRING, 0, {NULL}, "", ""},
    [MLD_OPT_DECAY_MS] = {"DECAY_MS", MLD_OPT_LONG, 100, {NULL}, "100", ""},
    [MLD_OPT_ON_MISUSE] = {"ON_MISUSE", MLD_OPT_ENUM, MLD_MISUSE_ABORT, {"abort", "ignore", NULL, NULL}, "abort", ""},
    [MLD_OPT_VERBOSE] = {"VERBOSE", MLD_OPT_LONG, 0, {NULL}, "0", ""},
    [MLD_OPT_REMOTE] = {"REMOTE", MLD_OPT_ENUM, MLD_REMOTE_BIN, {"bin", "page", NULL, NULL}, "bin", ""},
    [MLD_OPT_CANARY_NS] = {"CANARY_NS", MLD_OPT_LONG, 0, {NULL}, "0", ""},
    [MLD_OPT_CANARY_LOOPS_PER_US] = {"CANARY_LOOPS_PER_US", MLD_OPT_LONG, 0, {NULL}, "0", ""},
};

static void mld_option_bad(const mld_option_desc_t* o, const char* value, const char* expected) {
  char text[512];
  mld_buf_t b = {text, 0, sizeof text};
  _mld_report_str(&b, "mallard: invalid value '");
  _mld_report_str(&b, value);
  _mld_report_str(&b, "' for MALLARD_");
  _mld_report_str(&b, o->name);
  _mld_report_str(&b, " (expected ");
  _mld_report_str(&b, expected);
  _mld_report_str(&b, ")\n");
  _mld_report_fatal(text);
}

static void mld_option_set(mld_option_desc_t* o, const char* value) {
  switch (o->type) {
    case MLD_OPT_ENUM: {
      for (int i = 0; i < 4 && o->choices[i]; i++) {
        if (strcmp(value, o->choices[i]) == 0) {
          o->value = i;
          return;
        }
      }
      char expected[64];
      mld_buf_t b = {expected, 0, sizeof expected};
      for (int i = 0; i < 4 && o->choices[i]; i++) {
        if (i) _mld_report_str(&b, "|");
        _mld_report_str(&b, o->choices[i]);
      }
      mld_option_bad(o, value, expected);
      return;
    }
    case MLD_OPT_LONG: {
      long v = 0;
      const char* s = value;
      if (*s == 0) mld_option_bad(o, value, "a non-negative integer");
      for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > 100000000L) mld_option_bad(o, value, "a non-negative integer");
        v = v * 10 + (*s - '0');
      }
      o->value = v;
      return;
    }
    case MLD_OPT_STRING: {
      size_t n = strlen(value);
      if (n >= sizeof o->str) mld_option_bad(o, "(too long)", "a path shorter than 4096 bytes");
      memcpy(o->str, value, n + 1);
      o->value = n > 0;
      return;
    }
  }
}

/* One "NAME=value" entry of the environment. */
static void mld_option_entry(const char* entry) {
  if (strncmp(entry, "MALLARD_", 8) != 0) return;
  const char* name = entry + 8;
  const char* eq = strchr(name, '=');
  if (eq == NULL) return;
  size_t len = (size_t)(eq - name);
  for (int i = 0; i < MLD_OPT_COUNT; i++) {
    if (strlen(mld_options[i].name) == len && strncmp(mld_options[i].name, name, len) == 0) {
      mld_option_set(&mld_options[i], eq + 1);
      return;
    }
  }
}

static bool mld_options_from_proc(void) {
  int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  static char entry[8192];
  static char chunk[4096];
  size_t len = 0;
  bool overflow = false;
  for (;;) {
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; i++) {
      if (chunk[i] == 0) {
        entry[len] = 0;
        if (!overflow) mld_option_entry(entry);
        len = 0;
        overflow = false;
      } else if (len + 1 < sizeof entry) {
        entry[len++] = chunk[i];
      } else {
        overflow = true;
        if (strncmp(entry, "MALLARD_", 8) == 0) mld_option_bad(&mld_options[MLD_OPT_STATS_FILE], "(too long)", "a shorter value");
      }
    }
  }
  if (len > 0 && !overflow) {
    entry[len] = 0;
    mld_option_entry(entry);
  }
  close(fd);
  return true;
}

/* environ when libc has set it (it has by the time the library constructor
 * runs; it is also right under qemu-user, where /proc/self/environ shows the
 * emulator's), else /proc/self/environ (an allocation before libc init). */
void _mld_options_init(void) {
  if (environ != NULL && environ[0] != NULL) {
    for (char** e = environ; *e != NULL; e++) mld_option_entry(*e);
    return;
  }
  mld_options_from_proc();
}

long _mld_options_get(mld_option_t o) { return mld_options[o].value; }

const char* _mld_options_str(mld_option_t o) {
  const mld_option_desc_t* d = &mld_options[o];
  if (d->type == MLD_OPT_STRING) return d->str;
  if (d->type == MLD_OPT_ENUM) return d->choices[d->value];
  return NULL;
}

/* "mallard: options: TRANSFER=mutex STATS_FILE= ..." */
void _mld_options_print(int fd) {
  char text[8192];
  mld_buf_t b = {text, 0, sizeof text};
  _mld_report_str(&b, "mallard: options:");
  for (int i = 0; i < MLD_OPT_COUNT; i++) {
    _mld_report_str(&b, " MALLARD_");
    _mld_report_str(&b, mld_options[i].name);
    _mld_report_str(&b, "=");
    if (mld_options[i].type == MLD_OPT_LONG) _mld_report_u64(&b, (uint64_t)mld_options[i].value);
    else _mld_report_str(&b, _mld_options_str((mld_option_t)i));
  }
  _mld_report_str(&b, "\n");
  _mld_report_write(fd, b.p, b.len);
}
