/* canary.c: MALLARD_CANARY_NS, a benchmarking control. With N > 0 every free
 * of a block (free, cfree, a realloc that frees, every operator delete) first
 * spends about N ns of real work: a dependent multiply-add chain, so the cost
 * is CPU time (not a sleep) and also shows in instruction counts. The chain's
 * speed is measured once at init against CLOCK_MONOTONIC (best of a few runs
 * of ~200 us), or given by MALLARD_CANARY_LOOPS_PER_US, which makes the cost
 * an exact, repeatable instruction count under callgrind (a timing-based
 * calibration is not repeatable there). Calibration runs inject known
 * regressions this way. Unset, it costs the free fast path nothing: on, it
 * lowers _mld_free_limit, the bound of free's range test, to 0, so every
 * free of a block goes to the slow path (_mld_alloc_free_outside), which
 * runs it. */
#include "internal.h"

#include <time.h>

MLD_HIDDEN uint64_t _mld_canary_loops;   /* chain steps per free; 0: off */
MLD_HIDDEN uintptr_t _mld_free_limit = MLD_MAP_ENTRIES - 1;   /* 0 while the canary is on */
static uint64_t mld_canary_rate;         /* chain steps per microsecond */

/* n dependent steps; the empty asm keeps the compiler from folding the chain */
static MLD_NOINLINE uint64_t mld_canary_run(uint64_t n) {
  uint64_t x = n;
  for (uint64_t i = 0; i < n; i++) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    __asm__ __volatile__("" : "+r"(x));
  }
  return x;
}

static uint64_t mld_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Steps per microsecond: double the run until it lasts >= 200 us, then keep
 * the fastest of 5 such runs (a preempted run only looks slower). */
static uint64_t mld_canary_calibrate(void) {
  uint64_t n = 1024, best = 0;
  int samples = 0;
  for (int round = 0; round < 64 && samples < 5; round++) {
    uint64_t t0 = mld_now_ns();
    mld_canary_run(n);
    uint64_t dt = mld_now_ns() - t0;
    if (dt < 200000) {
      if (n < ((uint64_t)1 << 40)) n *= 2;
      continue;
    }
    uint64_t rate = n * 1000u / dt;
    if (rate > best) best = rate;
    samples++;
  }
  return best > 0 ? best : 1;
}

void _mld_canary_init(void) {
  uint64_t ns = (uint64_t)_mld_options_get(MLD_OPT_CANARY_NS);
  if (ns == 0) return;
  uint64_t rate = (uint64_t)_mld_options_get(MLD_OPT_CANARY_LOOPS_PER_US);
  mld_canary_rate = rate > 0 ? rate : mld_canary_calibrate();
  uint64_t loops = (ns * mld_canary_rate + 500u) / 1000u;
  _mld_canary_loops = loops > 0 ? loops : 1;
  _mld_free_limit = 0;
}

uint64_t _mld_canary_rate(void) { return mld_canary_rate; }

void _mld_canary_free(void* p) {
  mld_canary_run(_mld_canary_loops);
  mld_free_block_inline(p);
}
