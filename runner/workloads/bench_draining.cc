// bench_draining: a Google Benchmark program in the shape of tcmalloc's BM_Draining
// (transfer_cache_benchmark.cc: two transfer caches; each iteration removes a batch from
// one and inserts it into the other), driven through plain malloc/free so that it
// measures whatever allocator is preloaded.
//
// Here the two "caches" are arrays of pointers holding `depth` batches each, of two size
// classes (`size` and 2 x `size` bytes). Each iteration removes a batch from the full
// cache (frees `batch` blocks of its class) and inserts a batch into the other (mallocs
// `batch` blocks of the other class); when the first is drained the two swap roles. A
// drain frees depth x batch blocks of one class in a row, far more than a thread cache
// holds (Mallard's bin: 32-128 blocks), so the frees overflow that class's bin into the
// allocator's shared cache (Mallard's transfer cache) batch by batch, and the mallocs of
// the other class empty its bin and refill from it: every iteration is one transfer
// insert and one remove at steady state. With ->Threads(2) each thread has its own two
// caches and the threads meet in the shared caches of the two classes: where Mallard's
// transfer=mutex and transfer=ring differ.
//
// Fixed work: `--blocks=N` moves N blocks per thread in every benchmark (N / batch
// iterations, shown in its name as `iterations:<n>`; Google Benchmark 1.7 has no
// `--benchmark_min_time=Nx`); without it Google Benchmark picks the count. Other flags of
// its own: `--size=BYTES` (default 256), `--depth=BATCHES` (default 32). Every
// `--benchmark_*` flag is Google Benchmark's.
//
// items_per_second: blocks moved (one free and one malloc each) per second of wall time.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

namespace {

int64_t g_blocks = 0;
size_t g_size = 256;
size_t g_depth = 32;

struct Cache {
  std::vector<void*> slots;
  size_t n = 0;
  size_t size = 0;  // the size class of the blocks it holds
};

void* fill(size_t size, uint64_t tag) {
  auto* p = static_cast<unsigned char*>(std::malloc(size));
  if (p == nullptr) {
    std::fprintf(stderr, "bench_draining: malloc(%zu) failed\n", size);
    std::abort();
  }
  std::memcpy(p, &tag, sizeof tag);  // touch it: the block is really handed out
  p[size - 1] = static_cast<unsigned char>(tag);
  return p;
}

void BM_Draining(benchmark::State& state) {
  const size_t batch = static_cast<size_t>(state.range(0));
  const size_t capacity = g_depth * batch;
  Cache full, empty;
  full.slots.resize(capacity);
  empty.slots.resize(capacity);
  full.size = g_size;
  empty.size = 2 * g_size;
  for (size_t i = 0; i < capacity; i++) full.slots[full.n++] = fill(full.size, i);
  uint64_t tag = 0;
  for (auto _ : state) {
    if (full.n < batch) std::swap(full, empty);  // drained: the other way round
    for (size_t i = 0; i < batch; i++) {  // remove a batch from one cache ...
      void* p = full.slots[--full.n];
      benchmark::DoNotOptimize(p);
      std::free(p);
    }
    for (size_t i = 0; i < batch; i++) {  // ... and insert a batch into the other
      void* p = fill(empty.size, ++tag);
      benchmark::DoNotOptimize(p);
      empty.slots[empty.n++] = p;
    }
  }
  for (Cache* c : {&full, &empty})
    while (c->n) std::free(c->slots[--c->n]);
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(batch));
}

// Our flags (`--name=value`) out of argv before Google Benchmark reads it; false on a
// bad value.
bool take_flags(int* argc, char** argv) {
  int out = 1;
  for (int i = 1; i < *argc; i++) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      std::string prefix = std::string("--") + name + "=";
      return arg.rfind(prefix, 0) == 0 ? argv[i] + prefix.size() : nullptr;
    };
    const char* v = nullptr;
    char* end = nullptr;
    if ((v = value("blocks"))) {
      g_blocks = std::strtoll(v, &end, 10);
      if (*end || g_blocks < 1) return false;
    } else if ((v = value("size"))) {
      g_size = std::strtoull(v, &end, 10);
      if (*end || g_size < sizeof(uint64_t) || g_size > (1u << 20)) return false;
    } else if ((v = value("depth"))) {
      g_depth = std::strtoull(v, &end, 10);
      if (*end || g_depth < 2 || g_depth > 4096) return false;
    } else {
      argv[out++] = argv[i];
    }
  }
  *argc = out;
  argv[out] = nullptr;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  if (!take_flags(&argc, argv)) {
    std::fprintf(stderr, "bench_draining: bad flag value (--blocks=N>=1, "
                         "--size=8..1048576, --depth=2..4096)\n");
    return 2;
  }
  for (int64_t batch : {8, 32, 64, 128}) {
    auto* b = benchmark::RegisterBenchmark("BM_Draining", BM_Draining)
                  ->Arg(batch)
                  ->Threads(1)
                  ->Threads(2)
                  ->UseRealTime();
    if (g_blocks > 0) b->Iterations(g_blocks / batch > 0 ? g_blocks / batch : 1);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
