// The steady-state compiled call: the lock-free lookup of the first
// specializations and the locked one behind it, outputs handed over to the
// caller (each call's own memory), outputs that must still be copied,
// concurrent callers while new specializations are being published, the
// inline alias guard (inputs sharing memory with each other or with a captured
// tensor) and constants bound once per call state.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "frontend/compile.h"
#include "ir/graph.h"

#include "concurrency_test_util.h"

using namespace kiln;

using kiln::test::concurrent_failures;

namespace {

double max_abs_diff(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.sizes().vec(), b.sizes().vec());
  return amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

ModelFn scaled_add() {
  return [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * 2.0 + in[1]}; };
}

} // namespace

TEST(CallPath, ManySpecializationsBeyondTheLockFreeOnesMatchEager) {
  manual_seed(3);
  ModelFn fn = scaled_add();
  CompileOptions opts;
  opts.cache_limit = 12; // 8 looked up without a lock, 4 behind the lock
  opts.dynamic = Dynamic::Off; // one specialization per shape
  CompiledFunction f = compile(fn, opts);
  std::vector<std::vector<Tensor>> inputs;
  for (int64_t n = 1; n <= 12; ++n) inputs.push_back({randn({n, 3}), randn({n, 3})});
  for (int round = 0; round < 3; ++round)
    for (const auto &in : inputs) {
      std::vector<Tensor> got = f(in), want = fn(in);
      ASSERT_EQ(got.size(), 1u);
      EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-6) << "rows " << in[0].size(0) << ", round " << round;
    }
  CompileStats s = f.stats();
  EXPECT_EQ(s.specializations, 12);
  EXPECT_EQ(s.compiles, 12);
  EXPECT_EQ(s.eager_calls, 0);
}

TEST(CallPath, HandedOverOutputsAreEachCallsOwnMemory) {
  manual_seed(4);
  ModelFn fn = scaled_add();
  CompiledFunction f = compile(fn);
  std::vector<Tensor> in{randn({64}), randn({64})};
  Tensor first = f(in)[0];
  Tensor second = f(in)[0];
  EXPECT_FALSE(first.is_alias_of(second));
  EXPECT_FALSE(first.is_alias_of(in[0]) || first.is_alias_of(in[1]));
  Tensor expected = fn(in)[0];
  first.fill_(123.0); // the caller owns it: a later call must not see this
  EXPECT_LE(max_abs_diff(f(in)[0], expected), 1e-6);
  EXPECT_LE(max_abs_diff(second, expected), 1e-6);
}

TEST(CallPath, ReturnedInputAndRepeatedResultAreStillCopied) {
  manual_seed(5);
  // out 0 and out 1 are the same kernel result; out 2 is the input itself.
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor y = in[0] + 1.0;
    return std::vector<Tensor>{y, y, in[0] * 1.0};
  };
  CompiledFunction f = compile(fn);
  Tensor x = randn({16});
  std::vector<Tensor> got = f({x});
  ASSERT_EQ(got.size(), 3u);
  std::vector<Tensor> want = fn({x});
  for (size_t i = 0; i < 3; ++i) EXPECT_LE(max_abs_diff(got[i], want[i]), 1e-6) << i;
  // Eager returns y twice (one tensor) and a fresh x * 1: the compiled call may
  // not hand out the input's memory.
  EXPECT_FALSE(got[2].is_alias_of(x));
}

TEST(CallPath, ConcurrentCallersWhileSpecializationsArePublished) {
  manual_seed(6);
  ModelFn fn = scaled_add();
  CompileOptions opts;
  opts.dynamic = Dynamic::Off; // one specialization per shape
  CompiledFunction f = compile(fn, opts);
  std::vector<std::vector<Tensor>> inputs;
  std::vector<Tensor> want;
  for (int64_t n = 1; n <= 6; ++n) {
    inputs.push_back({randn({n, 5}), randn({n, 5})});
    want.push_back(fn(inputs.back())[0]);
  }
  int bad = concurrent_failures(4, 200, [&](int t, int i) {
    size_t k = size_t(t + i) % inputs.size(); // every thread meets every signature, some first
    return max_abs_diff(f(inputs[k])[0], want[k]) <= 1e-6;
  });
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f.stats().specializations, 6);
}

// The per-call alias guard compares storages inline when the specialization
// was built for inputs that share no memory; one built for aliased inputs
// checks the full pattern. Each pattern gets its own specialization, and a
// later call of either kind finds its own again.
TEST(CallPath, AliasedAndDistinctInputsEachFindTheirSpecialization) {
  manual_seed(7);
  ModelFn fn = scaled_add();
  CompiledFunction f = compile(fn);
  Tensor x = randn({2, 8}), y = randn({2, 8});
  Tensor row = x.select(0, 1), other_row = x.select(0, 0);
  auto check = [&](const std::vector<Tensor> &in, const char *what) {
    std::vector<Tensor> got = f(in), want = fn(in);
    ASSERT_EQ(got.size(), 1u) << what;
    EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-6) << what;
  };
  check({row, other_row}, "two views of one tensor"); // built for aliased inputs
  EXPECT_EQ(f.stats().specializations, 1);
  check({row, y.select(0, 0)}, "distinct inputs");
  EXPECT_EQ(f.stats().specializations, 2);
  check({other_row, row}, "aliased again");
  check({y.select(0, 1), row}, "distinct again");
  check({row, row}, "one view passed twice");
  EXPECT_EQ(f.stats().specializations, 2);
  EXPECT_EQ(f.stats().compiles, 2);
}

TEST(CallPath, InputThatIsACapturedTensorGetsItsOwnSpecialization) {
  manual_seed(8);
  Tensor w = randn({16});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * w + 1.0}; };
  CompiledFunction f = compile(fn);
  Tensor x = randn({16});
  EXPECT_LE(max_abs_diff(f({x})[0], fn({x})[0]), 1e-6);
  EXPECT_LE(max_abs_diff(f({w})[0], fn({w})[0]), 1e-6);
  EXPECT_EQ(f.stats().specializations, 2);
  EXPECT_LE(max_abs_diff(f({x})[0], fn({x})[0]), 1e-6);
  EXPECT_LE(max_abs_diff(f({w})[0], fn({w})[0]), 1e-6);
  EXPECT_EQ(f.stats().compiles, 2);
}

namespace {
// A constant matrix made inside the function (folded into a plan constant),
// read by a contraction, and returned as a result of its own.
ModelFn with_constants() {
  return [](const std::vector<Tensor> &in) {
    Tensor c = full({8, 8}, 0.25) + eye(8);
    return std::vector<Tensor>{matmul(in[0], c) + 1.0, c * 1.0};
  };
}
} // namespace

// Constants are bound once per call state, not per call: a caller writing to
// a returned constant must not change later calls.
TEST(CallPath, ConstantsStayIntactWhenTheCallerWritesToResults) {
  manual_seed(9);
  ModelFn fn = with_constants();
  CompiledFunction f = compile(fn);
  Tensor x = randn({4, 8});
  std::vector<Tensor> want = fn({x});
  std::shared_ptr<const ir::Graph> g = f.graph_for({x});
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->consts().empty()); // else this test no longer covers them
  for (int call = 0; call < 3; ++call) {
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u);
    EXPECT_LE(max_abs_diff(got[0], want[0]), 1e-5) << "call " << call;
    EXPECT_LE(max_abs_diff(got[1], want[1]), 1e-6) << "call " << call;
    got[0].fill_(-5.0);
    got[1].fill_(-7.0);
  }
}

TEST(CallPath, ConcurrentCallersShareConstants) {
  manual_seed(10);
  ModelFn fn = with_constants();
  CompiledFunction f = compile(fn);
  std::vector<Tensor> inputs, want0, want1;
  for (int t = 0; t < 4; ++t) {
    inputs.push_back(randn({4, 8}));
    std::vector<Tensor> w = fn({inputs.back()});
    want0.push_back(w[0]);
    want1.push_back(w[1]);
  }
  int bad = concurrent_failures(4, 100, [&](int t, int) {
    std::vector<Tensor> got = f({inputs[size_t(t)]});
    bool ok = max_abs_diff(got[0], want0[size_t(t)]) <= 1e-5 && max_abs_diff(got[1], want1[size_t(t)]) <= 1e-6;
    got[1].fill_(double(t)); // each caller's own copy
    return ok;
  });
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(f.stats().specializations, 1);
}

// A plan counts the calls it runs (CompileStats::calls adds them to the calls
// run eagerly or that failed before running, and to those of evicted plans),
// from any number of threads.
TEST(CallPath, ConcurrentCallsAreCountedWhicheverPathRunsThem) {
  manual_seed(11);
  ModelFn fn = scaled_add();
  CompileOptions opts;
  opts.cache_limit = 1;
  CompiledFunction f = compile(fn, opts);
  std::vector<Tensor> planned{randn({4}), randn({4})}, other{randn({5}), randn({5})};
  for (int i = 0; i < 3; ++i) f(planned);
  for (int i = 0; i < 2; ++i) f(other); // over the cache limit: evicts `planned`'s plan
  CompileStats s = f.stats();
  EXPECT_EQ(s.calls, 5);
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.specializations, 1);
  concurrent_failures(4, 50, [&](int t, int i) { return !f(i % 5 == t ? other : planned).empty(); });
  s = f.stats();
  EXPECT_EQ(s.calls, 5 + 200);
  EXPECT_EQ(s.eager_calls, 0);
  EXPECT_EQ(s.specializations, 1);
  CompiledFunction forced = compile(fn, [] {
    CompileOptions o;
    o.fallback = Fallback::Force;
    return o;
  }());
  concurrent_failures(4, 10, [&](int, int) { return !forced(planned).empty(); });
  EXPECT_EQ(forced.stats().calls, 40);
  EXPECT_EQ(forced.stats().eager_calls, 40);

  CompileOptions off;
  off.fallback = Fallback::Off;
  CompiledFunction g = compile(fn, off);
  g(planned);
  EXPECT_THROW(g({Tensor(), planned[1]}), Error); // a failed compile is a call too
  EXPECT_EQ(g.stats().calls, 2);
}
