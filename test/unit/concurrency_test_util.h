// The harness of the concurrent-caller tests: several threads call at once.
#pragma once

#include <atomic>
#include <thread>
#include <vector>

namespace kiln::test {

// Runs ok(t, i) for i in [0, iters) on each of `threads` threads started
// together (t = the thread's index); returns how many calls returned false.
template <class Check> int concurrent_failures(int threads, int iters, Check ok) {
  std::atomic<int> bad{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < iters; ++i)
        if (!ok(t, i)) bad.fetch_add(1);
    });
  for (auto &th : pool) th.join();
  return bad.load();
}

} // namespace kiln::test
