/* libc_interplay.c: glibc functions that allocate inside libc and leave the
 * caller to free (strdup, asprintf, getline, open_memstream, realpath,
 * scandir, glob, regcomp, getaddrinfo, iconv, getpwuid through NSS, stdio
 * buffers, qsort's scratch, setlocale, backtrace_symbols) all work with
 * Mallard interposed: whatever libc allocates, Mallard's free accepts.
 * Run with LD_PRELOAD=libmallard.so. */
#include "check.h"

#include <dirent.h>
#include <execinfo.h>
#include <glob.h>
#include <iconv.h>
#include <locale.h>
#include <netdb.h>
#include <pwd.h>
#include <regex.h>
#include <sys/socket.h>
#include <unistd.h>

static int cmp_int(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

int main(void) {
  mallard_require_active("libc_interplay");
  mld_stat_get_fn get = mallard_stat_fn();
  long long allocs0 = get("allocs");

  char* s = strdup("mallard");
  CHECK(s && !strcmp(s, "mallard"));
  free(s);
  s = strndup("mallard-duck", 7);
  CHECK(s && !strcmp(s, "mallard"));
  free(s);

  char* a = NULL;
  CHECK(asprintf(&a, "%s-%d-%0500d", "x", 42, 7) > 500 && a);
  free(a);

  char* buf = NULL;
  size_t cap = 0;
  FILE* ms = open_memstream(&buf, &cap);
  REQUIRE(ms);
  for (int i = 0; i < 2000; i++) fprintf(ms, "line %d\n", i);
  fclose(ms);
  CHECK(buf && cap > 10000);
  FILE* in = fmemopen(buf, cap, "r");
  REQUIRE(in);
  char* line = NULL;
  size_t lcap = 0;
  int lines = 0;
  while (getline(&line, &lcap, in) > 0) lines++;
  CHECK(lines == 2000);
  free(line);
  fclose(in);
  free(buf);

  char* rp = realpath(".", NULL);
  CHECK(rp && rp[0] == '/');
  free(rp);
  char* cwd = getcwd(NULL, 0);
  CHECK(cwd != NULL);
  free(cwd);

  struct dirent** names = NULL;
  int n = scandir("/", &names, NULL, alphasort);
  CHECK(n > 2);
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);

  glob_t g;
  CHECK(glob("/usr/lib/*", 0, NULL, &g) == 0 && g.gl_pathc > 0);
  globfree(&g);

  regex_t re;
  CHECK(regcomp(&re, "^(m+a+l+)+ard[0-9]*$", REG_EXTENDED) == 0);
  CHECK(regexec(&re, "mallard42", 0, NULL, 0) == 0);
  regfree(&re);

  struct addrinfo hints = {0}, *res = NULL;
  hints.ai_flags = AI_NUMERICHOST;
  hints.ai_socktype = SOCK_STREAM;
  CHECK(getaddrinfo("127.0.0.1", "80", &hints, &res) == 0 && res);
  freeaddrinfo(res);

  iconv_t cd = iconv_open("UCS-4", "UTF-8"); /* built in: no gconv module needed */
  CHECK(cd != (iconv_t)-1);
  if (cd != (iconv_t)-1) iconv_close(cd);

  struct passwd* pw = getpwuid(0);
  CHECK(pw && pw->pw_name);
  endpwent();

  CHECK(setlocale(LC_ALL, "C") != NULL);

  enum { N = 200000 };
  int* arr = malloc(N * sizeof *arr);
  REQUIRE(arr);
  for (int i = 0; i < N; i++) arr[i] = (i * 7919) % N;
  qsort(arr, N, sizeof *arr, cmp_int); /* glibc's qsort mallocs a scratch buffer */
  int sorted = 1;
  for (int i = 1; i < N; i++) sorted &= arr[i - 1] <= arr[i];
  CHECK(sorted);
  free(arr);

  void* frames[16];
  int nf = backtrace(frames, 16);
  char** syms = backtrace_symbols(frames, nf);
  CHECK(nf > 0 && syms);
  free(syms);

  FILE* tf = tmpfile();
  REQUIRE(tf);
  for (int i = 0; i < 10000; i++) fputs("mallard mallard mallard\n", tf);
  fclose(tf);

  CHECKF(get("allocs") - allocs0 > 20, "libc's allocations did not go through Mallard");
  return check_report("libc_interplay");
}
