// cxx_churn.cpp: a small multithreaded C++ program for the real-programs
// test: std::thread workers churn std::vector, std::string and std::map,
// hand containers between threads, and print a checksum that must be the
// same with and without Mallard.
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

std::mutex handoff_lock;
std::vector<std::unique_ptr<std::map<std::string, std::vector<int>>>> handoff;

std::uint64_t work(int id) {
  std::uint64_t sum = 0, x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(id + 1);
  for (int round = 0; round < 60; round++) {
    auto m = std::make_unique<std::map<std::string, std::vector<int>>>();
    for (int i = 0; i < 300; i++) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::string key = "key-" + std::to_string(x % 1000) + std::string(x % 40, 'k');
      auto& v = (*m)[key];
      for (int j = 0; j < static_cast<int>(x % 50); j++) v.push_back(j * id);
    }
    for (auto& [k, v] : *m) sum += k.size() * 31 + v.size();
    std::unique_ptr<std::map<std::string, std::vector<int>>> other;
    {
      std::lock_guard<std::mutex> g(handoff_lock);
      handoff.push_back(std::move(m));
      if (handoff.size() > 4) {  // free a map some other thread built
        other = std::move(handoff.front());
        handoff.erase(handoff.begin());
      }
    }
  }
  return sum;
}

}  // namespace

int main() {
  const int n = 4;
  std::vector<std::uint64_t> sums(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; i++) threads.emplace_back([i, &sums] { sums[i] = work(i); });
  for (auto& t : threads) t.join();
  std::uint64_t total = 0;
  for (auto s : sums) total += s;
  std::size_t left = handoff.size();
  handoff.clear();
  std::printf("cxx_churn: threads=%d checksum=%llu left=%zu\n", n,
              static_cast<unsigned long long>(total), left);
  return 0;
}
