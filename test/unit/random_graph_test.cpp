// Differential tests over seeded random graphs (test/util/random_graph.h):
// - tracing: the interpreter on the traced graph equals running the model eagerly;
// - every registered pass, alone on the traced graph and after the default
//   pipeline, and the default pipeline itself: the result verifies and the
//   interpreter's results equal those before;
// - kiln::compile (no eager fallback) equals eager, also on permuted, sliced
//   and expanded inputs (values and output strides).
// KILN_RANDOM_GRAPH_SEED=N runs seed N only; every failure prints its seed and IR.
//
// Tolerance: rtol 1e-4, atol 1e-5 throughout. Passes reorder float32 sums
// (decompose's mean/var, fusion's row reductions) and the JIT's transcendentals
// differ from libm by a few ulp; the generator keeps magnitudes bounded so those
// differences stay far inside the tolerance. No op needs a relaxed tolerance;
// instead the generator avoids ill-conditioned inputs (layer_norm uses eps 0.1,
// denominators are |b| + 0.5, exp reads bounded values: see random_graph.cpp).
#include <gtest/gtest.h>

#include <cstdlib>
#include <random>
#include <set>

#include <kiln/kiln.h>

#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "passes/pass_manager.h"
#include "passes/plan_memory.h"
#include "util/random_graph.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

constexpr double kRtol = 1e-4, kAtol = 1e-5;

// Seeds per test case; cases run in parallel under ctest.
constexpr uint64_t kPassSeedsPerCase = 250, kPassCases = 16;
constexpr uint64_t kCompileSeedsPerCase = 50, kCompileCases = 6;
// Stop a case after this many failures: one seed replays each.
constexpr int kMaxFailures = 5;

std::string verify_message(const ir::Graph &g) {
  try {
    ir::verify(g);
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

struct Checker {
  int failures = 0;
  void fail(const RandomGraph &rg, const ir::Graph &g, const std::string &what) {
    ++failures;
    ADD_FAILURE() << what << "\n" << describe(rg, g);
  }
};

// Runs `pipeline` on a fresh trace and checks it verifies and matches `want`.
void check_pipeline(Checker &c, const RandomGraph &rg, const std::string &pipeline, const std::string &then,
                    const std::vector<Tensor> &inputs, const std::vector<Tensor> &want) {
  std::unique_ptr<ir::Graph> g = rg.trace();
  std::string before = ir::print(*g);
  std::string label = "after " + pipeline + (then.empty() ? "" : "," + then);
  try {
    passes::run_pipeline(*g, pipeline);
    if (!then.empty()) passes::run_pipeline(*g, then);
  } catch (const Error &e) {
    return c.fail(rg, *g, label + ": threw " + e.what() + "\ninput graph:\n" + before);
  }
  if (std::string v = verify_message(*g); !v.empty())
    return c.fail(rg, *g, label + ": does not verify: " + v + "\ninput graph:\n" + before);
  std::vector<Tensor> got;
  try {
    got = ir::interpret(*g, inputs);
  } catch (const Error &e) {
    return c.fail(rg, *g, label + ": interpreter threw " + e.what());
  }
  if (std::string d = compare_outputs(got, want, kRtol, kAtol); !d.empty())
    c.fail(rg, *g, label + ": " + d + "\ninput graph:\n" + before);
}

void check_passes(Checker &c, uint64_t seed) {
  RandomGraph rg = random_graph(seed);
  std::unique_ptr<ir::Graph> g;
  try {
    g = rg.trace();
  } catch (const Error &e) {
    ++c.failures;
    ADD_FAILURE() << "tracing " << rg.origin << " threw " << e.what();
    return;
  }
  if (std::string v = verify_message(*g); !v.empty()) return c.fail(rg, *g, "traced graph does not verify: " + v);
  std::vector<Tensor> inputs = rg.make_inputs(seed + 1);
  std::vector<Tensor> want = ir::interpret(*g, inputs);
  if (std::string d = compare_outputs(want, rg.fn(inputs), kRtol, kAtol); !d.empty())
    return c.fail(rg, *g, "interpreter vs eager: " + d);
  const std::string pipeline = passes::default_pipeline();
  for (const std::string &pass : passes::pass_names()) {
    check_pipeline(c, rg, pass, "", inputs, want);
    check_pipeline(c, rg, pipeline, pass, inputs, want);
  }
  check_pipeline(c, rg, pipeline, "", inputs, want);
}

void check_compile(Checker &c, uint64_t seed) {
  RandomGraph rg = random_graph(seed);
  CompileOptions opts;
  opts.fallback = Fallback::Off;
  CompiledFunction f = compile(rg.fn, opts);
  // Two calls with different data: the first compiles, the second reuses the plan.
  for (uint64_t data : {seed + 1, seed + 2}) {
    std::vector<Tensor> inputs = rg.make_inputs(data);
    std::vector<Tensor> got;
    try {
      got = f(inputs);
    } catch (const Error &e) {
      return c.fail(rg, *rg.trace(), std::string("compile threw ") + e.what());
    }
    std::string d = compare_outputs(got, rg.fn(inputs), kRtol, kAtol);
    if (d.empty()) continue;
    std::shared_ptr<const ir::Graph> opt = f.graph_for(inputs);
    return c.fail(rg, *rg.trace(),
                  "compiled vs eager: " + d + "\noptimized graph:\n" + (opt ? ir::print(*opt) : "(none)"));
  }
}

// Strides along dims of size > 1 of each output: compiled must lay out its
// results as eager does (a caller's later view or contiguous() depends on it).
std::string compare_strides(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    for (int64_t d = 0; d < want[i].dim() && d < got[i].dim(); ++d)
      if (want[i].size(d) > 1 && got[i].stride(d) != want[i].stride(d))
        return "output " + std::to_string(i) + " has strides " + shape_str(got[i].strides()) + ", eager's " +
               shape_str(want[i].strides());
  return "";
}

// kiln::compile on permuted, sliced and expanded inputs (fallback off): the
// trace sees their strides, so every view, reshape and contiguous() does what
// it does in eager, and results equal eager's in value and layout.
void check_compile_strided(Checker &c, uint64_t seed) {
  RandomGraph rg = random_graph(seed);
  CompileOptions opts;
  opts.fallback = Fallback::Off;
  CompiledFunction f = compile(rg.fn, opts);
  for (uint64_t data : {seed + 1, seed + 1}) { // the same layouts twice: compile, then the cached plan
    std::vector<Tensor> inputs = rg.make_inputs(data, true);
    std::vector<Tensor> want;
    std::string eager_error;
    try {
      want = rg.fn(inputs);
    } catch (const Error &e) {
      eager_error = e.what(); // view() of a strided input: compiled must refuse it too
    }
    std::vector<Tensor> got;
    try {
      got = f(inputs);
    } catch (const Error &e) {
      if (!eager_error.empty()) return;
      return c.fail(rg, *rg.trace(), std::string("compile on strided inputs threw ") + e.what());
    }
    if (!eager_error.empty()) return c.fail(rg, *rg.trace(), "eager threw " + eager_error + ", compiled did not");
    std::string d = compare_outputs(got, want, kRtol, kAtol);
    if (d.empty()) d = compare_strides(got, want);
    if (d.empty()) continue;
    std::shared_ptr<const ir::Graph> opt = f.graph_for(inputs);
    return c.fail(rg, *rg.trace(),
                  "compiled vs eager on strided inputs: " + d + "\noptimized graph:\n" + (opt ? ir::print(*opt) : "(none)"));
  }
}

// KILN_RANDOM_GRAPH_SEED set: each case would run that seed; only case 0 does.
bool replaying() {
  const char *env = std::getenv("KILN_RANDOM_GRAPH_SEED");
  return env && *env;
}

class RandomGraphPasses : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomGraphPasses, InterpreterAgreesBeforeAndAfterEveryPass) {
  if (replaying() && GetParam() != 0) return; // a replayed seed runs once, in case 0
  Checker c;
  uint64_t first = GetParam() * kPassSeedsPerCase;
  for (uint64_t seed : random_graph_seeds(first, kPassSeedsPerCase)) {
    check_passes(c, seed);
    if (c.failures >= kMaxFailures) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomGraphPasses, ::testing::Range<uint64_t>(0, kPassCases));

class RandomGraphCompile : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomGraphCompile, CompiledAgreesWithEager) {
  if (replaying() && GetParam() != 0) return;
  Checker c;
  // Seeds of their own (offset), so compile covers graphs the pass cases do not.
  uint64_t first = 1000000 + GetParam() * kCompileSeedsPerCase;
  for (uint64_t seed : random_graph_seeds(first, kCompileSeedsPerCase)) {
    check_compile(c, seed);
    if (c.failures >= kMaxFailures) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomGraphCompile, ::testing::Range<uint64_t>(0, kCompileCases));

class RandomGraphCompileStrided : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomGraphCompileStrided, CompiledAgreesWithEagerOnStridedInputs) {
  if (replaying() && GetParam() != 0) return;
  Checker c;
  uint64_t first = 2000000 + GetParam() * kCompileSeedsPerCase;
  for (uint64_t seed : random_graph_seeds(first, kCompileSeedsPerCase)) {
    check_compile_strided(c, seed);
    if (c.failures >= kMaxFailures) break;
  }
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomGraphCompileStrided, ::testing::Range<uint64_t>(0, kCompileCases));

// The generator itself: a seed always makes the same graph, different seeds
// make different graphs, and the generated graphs cover the op families.
TEST(RandomGraphGenerator, DeterministicAndVaried) {
  EXPECT_EQ(ir::print(*random_graph(7).trace()), ir::print(*random_graph(7).trace()));
  std::set<std::string> texts, ops;
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto g = random_graph(seed).trace();
    texts.insert(ir::print(*g));
    for (const ir::Node *n : g->nodes()) ops.insert(std::string(n->info().mnemonic));
  }
  EXPECT_GT(texts.size(), 190u);
  for (const char *op : {"add", "sub", "mul", "div", "maximum", "relu", "gelu", "tanh", "exp", "sigmoid", "neg",
                         "abs", "sum", "mean", "amax", "softmax", "layer_norm", "linear", "matmul", "transpose",
                         "permute", "slice", "select", "expand", "view"})
    EXPECT_TRUE(ops.count(op)) << "no generated graph uses " << op;
}

TEST(RandomGraphGenerator, AnyBytesMakeAValidGraph) {
  std::mt19937_64 gen(3);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> bytes(gen() % 64);
    for (uint8_t &b : bytes) b = uint8_t(gen());
    RandomGraph rg = random_graph_from_bytes(bytes.data(), bytes.size());
    auto g = rg.trace();
    EXPECT_NO_THROW(ir::verify(*g)) << describe(rg, *g);
  }
  EXPECT_NO_THROW(random_graph_from_bytes(nullptr, 0).trace());
}

// The pass cases exercise fuse's duplication of cheap producers: some generated
// graphs have a value read by two groups that fuse computes in both instead of
// storing (fewer bytes written than fuse without duplication).
TEST(RandomGraphGenerator, SomeGraphsShareACheapProducerBetweenGroups) {
  int saved = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    RandomGraph rg = random_graph(seed);
    int64_t written[2];
    for (bool duplicate : {false, true}) {
      std::unique_ptr<ir::Graph> g = rg.trace();
      passes::run_pipeline(*g, "decompose,canonicalize,cse,dce");
      passes::fuse(*g, duplicate);
      written[duplicate] = passes::graph_stats(*g).bytes_written;
    }
    EXPECT_LE(written[1], written[0]) << "seed " << seed;
    saved += written[1] < written[0];
  }
  EXPECT_GE(saved, 15); // 29 of these 400 graphs when this test was written
}

} // namespace
