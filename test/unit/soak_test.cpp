// Soak: one compiled function called 10,000 times from 8 threads with mixed
// input shapes and layouts, so guard misses and recompiles happen while other
// threads run existing specializations, and signatures past the cache limit
// evict the least recently used specialization while other threads may be
// running it. Every result is checked against eager results
// computed up front. Runs under TSan through the `concurrency` ctest label.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.h>

#include "frontend/compile.h"

using namespace kiln;

namespace {

constexpr int kThreads = 8;
constexpr int kCalls = 10000;
constexpr int kCacheLimit = 5;

// Largest |got - want| relative to max(1, |want|); infinity when shapes differ.
double worst_error(const Tensor &got, const Tensor &want) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype()) return INFINITY;
  Tensor g = got.contiguous(), w = want.contiguous();
  const float *gp = g.data_ptr<float>(), *wp = w.data_ptr<float>();
  double worst = 0;
  for (int64_t i = 0; i < w.numel(); ++i) {
    double d = std::fabs(double(gp[i]) - double(wp[i])) / std::max(1.0, std::fabs(double(wp[i])));
    if (!(d <= worst)) worst = std::isnan(d) ? INFINITY : d;
  }
  return worst;
}

} // namespace

// Eight threads call one compiled function 10000 times with 7 signatures;
// returns its stats after checking every result against eager.
CompileStats soak_mixed_shapes(Dynamic dynamic) {
  manual_seed(2026);
  Tensor w = randn({48, 32}) * 0.2, b = randn({48}), gamma = randn({48}), beta = randn({48});
  // An elementwise chain, a row reduction (layer norm, softmax) and a GEMM.
  ModelFn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = gelu(linear(in[0], w, b) * 0.5 + 1.0, "tanh");
    Tensor n = layer_norm(h, {48}, gamma, beta);
    return std::vector<Tensor>{softmax(n, -1), (n * in[1]).sum({1})};
  };
  // 7 signatures for a cache of 5: batch sizes and a transposed
  // (non-contiguous) first input. The last two are rare: each of their calls
  // evicts a specialization, which is compiled again when next needed.
  std::vector<std::vector<Tensor>> inputs;
  for (int64_t rows : {1, 3, 8, 17, 33, 64}) inputs.push_back({randn({rows, 32}), randn({rows, 48})});
  inputs.push_back({randn({32, 5}).t(), randn({5, 48})});
  std::vector<std::vector<Tensor>> want;
  for (const auto &in : inputs) want.push_back(fn(in));

  CompileOptions options;
  options.cache_limit = kCacheLimit;
  options.fallback = Fallback::Off;
  options.dynamic = dynamic;
  CompiledFunction f = compile(fn, options);
  std::atomic<int> mismatches{0}, errors{0};
  std::vector<int> calls_per_input(inputs.size(), 0);
  std::vector<std::vector<int>> per_thread(kThreads, std::vector<int>(inputs.size(), 0));
  std::string first_problem;
  std::atomic<bool> have_problem{false};
  auto report = [&](const std::string &what) {
    if (!have_problem.exchange(true)) first_problem = what;
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kCalls / kThreads; ++i) {
        // Each thread walks the signatures in its own order so every signature
        // is first seen by several threads at once.
        size_t k = size_t((i * (2 * t + 1) + t * 3) % kCacheLimit);
        if (i % 256 == 255) k = kCacheLimit + size_t(t % 2); // a rare signature
        ++per_thread[size_t(t)][k];
        try {
          std::vector<Tensor> got = f(inputs[k]);
          double err = got.size() == 2 ? std::max(worst_error(got[0], want[k][0]), worst_error(got[1], want[k][1]))
                                       : INFINITY;
          if (err > 1e-4) {
            mismatches.fetch_add(1);
            report("input " + std::to_string(k) + ": error " + std::to_string(err));
          }
        } catch (const std::exception &e) {
          errors.fetch_add(1);
          report(std::string("input ") + std::to_string(k) + ": " + e.what());
        }
      }
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0) << first_problem;
  EXPECT_EQ(errors.load(), 0) << first_problem;

  for (const auto &pt : per_thread)
    for (size_t k = 0; k < inputs.size(); ++k) calls_per_input[k] += pt[k];
  for (size_t k = 0; k < inputs.size(); ++k) EXPECT_GT(calls_per_input[k], 0) << "input " << k;
  CompileStats s = f.stats();
  EXPECT_EQ(s.calls, kCalls);
  EXPECT_EQ(s.eager_calls, 0); // no call ran eagerly
  return s;
}

TEST(Soak, TenThousandCallsFromEightThreadsWithMixedShapes) {
  CompileStats s = soak_mixed_shapes(Dynamic::Off);
  // Every signature compiled, some again after an eviction.
  EXPECT_EQ(s.specializations, kCacheLimit);
  EXPECT_GE(s.compiles, 7);
  EXPECT_EQ(s.dynamic_specializations, 0);
}

// Issue 17: the batch sizes 3..64 share one symbolic specialization (built
// when a call first differs from the first one); batch 1 specializes, and so
// does the transposed input: symbolic too (copied contiguous per call) unless
// it came first. Nothing is evicted, so nothing compiles twice.
TEST(Soak, TenThousandCallsWithChangingBatchShareOneDynamicSpecialization) {
  CompileStats s = soak_mixed_shapes(Dynamic::Auto);
  EXPECT_GE(s.dynamic_specializations, 1);
  EXPECT_LE(s.dynamic_specializations, 2);
  EXPECT_LE(s.compiles, 4);
  EXPECT_LE(s.specializations, 4);
}

TEST(Soak, SeveralFunctionsWhileTheThreadCountChanges) {
  // Three compiled functions share the global Jit and thread pool; one thread
  // keeps switching the thread count (no part of the guards: a plan runs at
  // any count), so calls run while the pool is resized.
  manual_seed(7);
  Tensor w = randn({64, 32});
  std::vector<ModelFn> fns = {
      [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(linear(in[0], w), -1)}; },
      [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * 2.0 + 1.0).sum({1})}; },
      [](const std::vector<Tensor> &in) { return std::vector<Tensor>{layer_norm(in[0], {32}) * 3.0}; },
  };
  CompileOptions options;
  options.fallback = Fallback::Off;
  std::vector<CompiledFunction> compiled;
  for (const ModelFn &fn : fns) compiled.push_back(compile(fn, options));
  std::vector<Tensor> xs = {randn({4, 32}), randn({100, 32}), randn({1000, 32})};
  std::vector<std::vector<Tensor>> want(fns.size());
  for (size_t f = 0; f < fns.size(); ++f)
    for (const Tensor &x : xs) want[f].push_back(fns[f]({x})[0]);

  const int saved_threads = get_num_threads();
  std::atomic<int> mismatches{0}, errors{0};
  std::atomic<bool> stop{false};
  std::thread toggler([&] {
    for (int i = 0; !stop.load(); ++i) {
      set_num_threads(1 + i % 2);
      std::this_thread::yield();
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 400; ++i) {
        size_t f = size_t(t + i) % fns.size(), k = size_t(i * 7 + t) % xs.size();
        try {
          if (worst_error(compiled[f]({xs[k]})[0], want[f][k]) > 1e-4) mismatches.fetch_add(1);
        } catch (const std::exception &) {
          errors.fetch_add(1);
        }
      }
    });
  for (auto &th : threads) th.join();
  stop.store(true);
  toggler.join();
  set_num_threads(saved_threads);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  for (const CompiledFunction &f : compiled) {
    EXPECT_EQ(f.stats().compiles, 1); // each function sees one shape (k == f); the thread count costs none
    EXPECT_EQ(f.stats().eager_calls, 0);
  }
}
