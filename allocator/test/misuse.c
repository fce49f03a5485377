/* misuse.c: Mallard stops a program that frees what it must not, and names
 * the pointer. Each case runs in a forked child whose stderr the parent
 * reads:
 *   misuse abort   -> double free (small, medium, huge, 4 MiB-aligned, from
 *                     another thread, after the block was reused and freed
 *                     again, after its bin was flushed, realloc of a freed block), free of an interior
 *                     pointer, free of a pointer Mallard never returned (a
 *                     static buffer, the address 2^48, the block after a
 *                     4 KiB or a 48 B one: carved into the bin, never handed
 *                     out): each child must die of SIGABRT with
 *                     the pointer (hex) on stderr;
 *   misuse ignore  -> (run with the option that ignores misuse) the same
 *                     frees are reported or ignored, the child lives on,
 *                     exits 0, and a double-freed block is not handed out
 *                     twice.
 * Run with LD_PRELOAD=libmallard.so. */
#include "check.h"

#include <ctype.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static char static_buf[256] __attribute__((aligned(64)));

typedef enum {
  DOUBLE_FREE, DOUBLE_FREE_MEDIUM, DOUBLE_FREE_HUGE, DOUBLE_FREE_GIANT, DOUBLE_FREE_REMOTE,
  DOUBLE_FREE_AFTER_REUSE, DOUBLE_FREE_FLUSHED, REALLOC_FREED, INTERIOR_FREE, FOREIGN_FREE, EDGE_FREE,
  CARVED_FREE, CARVED_FREE_SMALL, N_MISUSE
} misuse_t;
static const char* const NAMES[] = {
    "double free", "double free (medium)", "double free (huge)", "double free (4 MiB-aligned)",
    "double free (other thread)", "double free (after reuse)",
    "double free (after its bin was flushed)", "realloc of a freed block",
    "interior-pointer free", "foreign-pointer free", "free of 2^48 (the segment map's edge)",
    "free of the block after a 4 KiB one (never handed out)",
    "free of the block after a 48 B one (never handed out)"};

static void* volatile remote_target;
static void* remote_free(void* arg) {
  (void)arg;
  free(remote_target);
  return NULL;
}

/* The child: tell the parent which pointer, then misuse it. */
static void do_misuse(misuse_t kind, int report_fd) {
  size_t size = kind == DOUBLE_FREE_MEDIUM ? 5000 : kind == DOUBLE_FREE_HUGE ? (1 << 20) : kind == CARVED_FREE ? 4096 : 48;
  void* volatile p = kind == DOUBLE_FREE_GIANT ? aligned_alloc(4 << 20, 100) : malloc(size);
  void* target = p;
  if (kind == INTERIOR_FREE) target = (char*)p + 16;
  if (kind == FOREIGN_FREE) target = static_buf + 64;
  if (kind == CARVED_FREE || kind == CARVED_FREE_SMALL) target = (char*)p + size;
  /* the first address past the segment map: free's one range test lets
   * it through to the map's extra last byte (always 0) */
  if (kind == EDGE_FREE) target = (void*)((uintptr_t)1 << 48);
  char line[64];
  int n = snprintf(line, sizeof line, "%lx\n", (unsigned long)(uintptr_t)target);
  if (write(report_fd, line, (size_t)n) != n) _exit(90);
  close(report_fd);
  switch (kind) {
    case INTERIOR_FREE:
    case FOREIGN_FREE:
    case EDGE_FREE:
    case CARVED_FREE:
    case CARVED_FREE_SMALL:
      free(target);
      free(p);
      return;
    case DOUBLE_FREE_REMOTE: {
      free(p);
      remote_target = p;
      pthread_t t;
      if (pthread_create(&t, NULL, remote_free, NULL) || pthread_join(t, NULL)) _exit(91);
      return;
    }
    case DOUBLE_FREE_AFTER_REUSE: {
      void* q[200];
      free(p);
      for (int i = 0; i < 200; i++) q[i] = malloc(48); /* p is handed out again ... */
      for (int i = 0; i < 200; i++) free(q[i]);        /* ... and freed properly */
      free(p);
      return;
    }
    case DOUBLE_FREE_FLUSHED: {
      /* p leaves the bin: 20000 more frees of its size flush it to the
       * transfer cache and past it (direct frees to the pages, which
       * link the blocks through their first word, beside the mark) */
      enum { MORE = 20000 };
      void** more = malloc(MORE * sizeof(void*));
      if (!more) _exit(92);
      for (int i = 0; i < MORE; i++) more[i] = malloc(48);
      free(p);
      for (int i = 0; i < MORE; i++) free(more[i]);
      free(p);
      return;
    }
    case REALLOC_FREED: {
      free(p);
      void* r = realloc(p, 100);
      if (r) free(r);
      return;
    }
    default:
      free(p);
      free(p);
      return;
  }
}

static void lower(char* s) {
  for (; *s; s++) *s = (char)tolower((unsigned char)*s);
}

static ssize_t read_all(int fd, char* buf, size_t cap) {
  size_t len = 0;
  ssize_t r;
  while (len + 1 < cap && (r = read(fd, buf + len, cap - 1 - len)) > 0) len += (size_t)r;
  buf[len] = 0;
  return (ssize_t)len;
}

/* Runs one misuse in a child; returns its status, fills ptr and err. */
static int run_child(misuse_t kind, int ignore_mode, char* ptr, size_t ptrcap, char* err,
                     size_t errcap) {
  int rep[2], errp[2];
  REQUIRE(pipe(rep) == 0 && pipe(errp) == 0);
  pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    alarm(20);
    close(rep[0]);
    close(errp[0]);
    dup2(errp[1], 2);
    do_misuse(kind, rep[1]);
    if (ignore_mode) {
      /* still a working allocator: a double-freed block is not handed out twice */
      void* a = malloc(48);
      void* b = malloc(48);
      if (!a || !b || a == b) _exit(3);
      free(a);
      free(b);
      _exit(0);
    }
    _exit(0); /* reached only if the misuse went unnoticed */
  }
  close(rep[1]);
  close(errp[1]);
  read_all(rep[0], ptr, ptrcap);
  read_all(errp[0], err, errcap);
  close(rep[0]);
  close(errp[0]);
  int status;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  char* nl = strchr(ptr, '\n');
  if (nl) *nl = 0;
  lower(err);
  return status;
}

int main(int argc, char** argv) {
  mallard_require_active("misuse");
  int ignore_mode = argc > 1 && !strcmp(argv[1], "ignore");
  for (misuse_t k = DOUBLE_FREE; k < N_MISUSE; k++) {
    char ptr[64], err[8192];
    int status = run_child(k, ignore_mode, ptr, sizeof ptr, err, sizeof err);
    fprintf(stderr, "--- %s of %s: status 0x%x, stderr:\n%s", NAMES[k], ptr, status, err);
    if (ignore_mode) {
      CHECKF(WIFEXITED(status) && WEXITSTATUS(status) == 0,
             "%s with misuse ignored: child did not exit 0 (status 0x%x)", NAMES[k], status);
    } else {
      CHECKF(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT,
             "%s: child was not killed by SIGABRT (status 0x%x)", NAMES[k], status);
      CHECKF(ptr[0] && strstr(err, ptr) != NULL, "%s: stderr does not name the pointer %s",
             NAMES[k], ptr);
    }
  }
  return check_report(ignore_mode ? "misuse ignore" : "misuse abort");
}
