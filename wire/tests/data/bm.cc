#include <benchmark/benchmark.h>
#include <vector>
static void BM_Alloc(benchmark::State& state) {
  for (auto _ : state) {
    std::vector<char> v(state.range(0));
    benchmark::DoNotOptimize(v.data());
  }
  state.SetItemsProcessed(state.iterations());
  state.counters["allocs"] = 1;
}
BENCHMARK(BM_Alloc)->Arg(64)->Arg(4096)->Threads(1)->Threads(2);
BENCHMARK_MAIN();
