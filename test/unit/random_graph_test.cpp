// Differential tests over seeded random graphs (test/util/random_graph.h):
// - tracing: the interpreter on the traced graph equals running the model eagerly;
// - every registered pass, alone on the traced graph and after the default
//   pipeline, and the default pipeline itself: the result verifies and the
//   interpreter's results equal those before;
// - kiln::compile (no eager fallback) equals eager, also on permuted, sliced
//   and expanded inputs (values and output strides).
// - contraction graphs (contraction_graph_options(): linear, matmul, bmm, addmm
//   and conv2d at sizes 1, 3, 17, 33, 65, ...): kiln::compile equals eager, on
//   contiguous and strided inputs, with the contractions run as contraction
//   steps (not interpreted), and whichever GEMM path KILN_GEMM selects.
// KILN_RANDOM_GRAPH_SEED=N runs seed N only; every failure prints its seed and IR.
//
// Tolerance: rtol 1e-4, atol 1e-5 throughout. Passes reorder float32 sums
// (decompose's mean/var, fusion's row reductions) and the JIT's transcendentals
// differ from libm by a few ulp; the generator keeps magnitudes bounded so those
// differences stay far inside the tolerance. No op needs a relaxed tolerance;
// instead the generator avoids ill-conditioned inputs (layer_norm uses eps 0.1,
// denominators are |b| + 0.5, exp reads bounded values: see random_graph.cpp).
//
// Contraction graphs: atol grows with K, the longest reduction in the graph:
// atol = 1e-5 + K * 8 * 2^-23. Two summation orders of K float32 products
// (OpenBLAS's and kiln's GEMM block K differently) differ by about K ulp of the
// largest partial sum; the generator's values are bounded by 8 (larger ones are
// squashed back to 1), so a product's magnitude is at most 8 and K * 8 * 2^-23
// bounds an ulp of a partial sum times K, relative to the output's scale
// (~1.6e-5 at K = 17, 6.2e-5 at K = 65, 1.4e-4 at conv's 17 * 9). rtol stays 1e-4.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>
#include <set>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "codegen/gemm/conv.h"
#include "codegen/gemm/path.h"
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

void check_compile(Checker &c, uint64_t seed, const RandomGraphOptions &o = {}, double rtol = kRtol,
                   double atol = kAtol) {
  RandomGraph rg = random_graph(seed, o);
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
    std::string d = compare_outputs(got, rg.fn(inputs), rtol, atol);
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

// ---- contraction graphs

double contraction_atol(int64_t k) { return kAtol + double(k) * 8 * std::ldexp(1.0, -23); }

// What a compiled call's steps did with the graph's contractions.
struct StepCounts {
  int contraction_steps = 0; // run by the contraction path (BLAS or kiln's GEMM), epilogue included
  int interpreted_groups = 0;
};

StepCounts count_steps(const CompiledFunction &f, const std::vector<Tensor> &inputs) {
  StepCounts n;
  codegen::ScopedStepObserver observe([&](const codegen::StepEvent &e) {
    if (e.category == "eager-group") ++n.interpreted_groups;
    else if (e.category != "kernel" && e.category != "eager") ++n.contraction_steps;
  });
  f(inputs);
  return n;
}

int count_contractions(const ir::Graph &g) {
  int n = 0;
  for (const ir::Node *node : g.nodes())
    n += node->kind() == ir::Node::Kind::Op && node->info().kind == OpKind::Contraction;
  return n;
}

// Totals over a case's seeds, for the coverage checks.
struct ContractionCoverage {
  std::map<std::string, int> traced_ops; // graphs using each contraction op
  int graphs = 0, contraction_nodes = 0, contraction_steps = 0, interpreted_groups = 0;
  // Graphs with a contraction decompose keeps as one (every one but linear,
  // matmul and mm over K <= 4, which become elementwise products).
  int graphs_past_small_k = 0;
};

// Whether decompose leaves traced contraction `n` a contraction: not a linear,
// or matmul / mm of two matrices, over K <= 4 (passes/decompose.cpp).
bool kept_as_contraction(const ir::Node &n) {
  const Dims &a = n.operand(0)->type().shape;
  const int64_t k = a.size() == 0 ? 0 : a[a.size() - 1];
  if (n.op() == OpId::Linear) return k > 4;
  if (n.op() != OpId::Matmul && n.op() != OpId::Mm) return true;
  return k > 4 || a.size() != 2 || n.operand(1)->type().shape.size() != 2;
}

void check_contraction_compile(Checker &c, uint64_t seed, bool strided, ContractionCoverage &cov) {
  RandomGraph rg = random_graph(seed, contraction_graph_options());
  std::unique_ptr<ir::Graph> traced = rg.trace();
  const double atol = contraction_atol(max_contraction_length(*traced));
  CompileOptions opts;
  opts.fallback = Fallback::Off;
  CompiledFunction f = compile(rg.fn, opts);
  for (uint64_t data : {seed + 1, seed + 2}) {
    std::vector<Tensor> inputs = rg.make_inputs(data, strided);
    std::vector<Tensor> got;
    try {
      got = f(inputs);
    } catch (const Error &e) {
      return c.fail(rg, *traced, std::string("compile threw ") + e.what());
    }
    std::string d = compare_outputs(got, rg.fn(inputs), kRtol, atol);
    if (d.empty()) continue;
    std::shared_ptr<const ir::Graph> opt = f.graph_for(inputs);
    return c.fail(rg, *traced,
                  std::string(strided ? "on strided inputs, " : "") + "compiled vs eager (gemm path " +
                      std::string(gemm::path_name(gemm::path())) + "): " + d + "\noptimized graph:\n" +
                      (opt ? ir::print(*opt) : "(none)"));
  }
  std::vector<Tensor> inputs = rg.make_inputs(seed + 1, strided);
  std::shared_ptr<const ir::Graph> opt = f.graph_for(inputs);
  if (!opt) return c.fail(rg, *traced, "no optimized graph: the compiled call ran eagerly");
  ++cov.graphs;
  bool kept = false;
  for (const ir::Node *n : traced->nodes())
    if (n->info().kind == OpKind::Contraction || n->op() == OpId::Linear) {
      ++cov.traced_ops[std::string(n->mnemonic())];
      kept |= kept_as_contraction(*n);
    }
  cov.graphs_past_small_k += kept;
  // Contractions left as nodes of the optimized graph run as contraction steps
  // (alone or heading their epilogue group). Decompose turns a tiny linear
  // into mul + sum, and a contraction over K <= 4 into products, which fuse may
  // put in a group that codegen cannot lower (then interpreted): counted, not
  // a failure (a speed matter).
  StepCounts steps = count_steps(f, inputs);
  cov.contraction_nodes += count_contractions(*opt);
  cov.contraction_steps += steps.contraction_steps;
  cov.interpreted_groups += steps.interpreted_groups;
}

constexpr uint64_t kContractionSeedsPerCase = 20, kContractionCases = 4;

class RandomGraphContractions : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RandomGraphContractions, CompiledAgreesWithEager) {
  if (replaying() && GetParam() != 0) return;
  Checker c;
  ContractionCoverage cov;
  // Even cases contiguous inputs, odd cases strided (transposed, sliced, expanded operands).
  const bool strided = GetParam() % 2 == 1;
  uint64_t first = 3000000 + GetParam() * kContractionSeedsPerCase;
  for (uint64_t seed : random_graph_seeds(first, kContractionSeedsPerCase)) {
    check_contraction_compile(c, seed, strided, cov);
    if (c.failures >= kMaxFailures) break;
  }
  if (replaying()) return;
  // The generated contractions reach the contraction path: not lowered away,
  // not run eagerly (Fallback::Off would throw), not interpreted.
  EXPECT_GE(cov.contraction_steps, cov.graphs_past_small_k);
  EXPECT_GE(cov.graphs_past_small_k, cov.graphs / 2);
  EXPECT_GE(cov.contraction_steps, cov.contraction_nodes);
  for (const char *op : {"linear", "matmul", "conv2d"}) EXPECT_GT(cov.traced_ops[op], 0) << "no graph with " << op;
  RecordProperty("graphs", cov.graphs);
  RecordProperty("contraction_steps", cov.contraction_steps);
  RecordProperty("interpreted_groups", cov.interpreted_groups);
}

INSTANTIATE_TEST_SUITE_P(Seeds, RandomGraphContractions, ::testing::Range<uint64_t>(0, kContractionCases));

// The generator's Winograd-shaped convs (16 -> 16, 3x3, on 11 x 11) run
// through Winograd F(2x2, 3x3) when compiled, and agree with eager.
TEST(RandomGraphContractionsWinograd, ReachWinograd) {
  if (replaying() || gemm::path() != gemm::Path::Jit) GTEST_SKIP() << "kiln's conv is not the contraction path";
  int found = 0;
  for (uint64_t seed = 0; seed < 400 && found < 3; ++seed) {
    std::unique_ptr<ir::Graph> g = random_graph(seed, contraction_graph_options()).trace();
    bool shaped = false;
    for (const ir::Node *n : g->nodes()) {
      if (n->kind() != ir::Node::Kind::Op || n->op() != OpId::Conv2d) continue;
      const Dims &w = n->operand(1)->type().shape;
      shaped = shaped || (w.size() == 4 && w[0] == 16 && w[1] == 16 && w[2] == 3 && w[3] == 3);
    }
    if (!shaped) continue;
    ++found;
    Checker c;
    ContractionCoverage cov;
    const int64_t before = gemm::conv_winograd_items();
    check_contraction_compile(c, seed, false, cov);
    EXPECT_EQ(c.failures, 0) << "seed " << seed;
    EXPECT_GT(gemm::conv_winograd_items(), before) << "seed " << seed << ": no conv ran through Winograd";
  }
  EXPECT_EQ(found, 3) << "too few Winograd-shaped convs in seeds 0..399";
}

// The contraction generator covers each contraction op, the odd sizes and
// conv's parameters, and its graphs verify.
TEST(RandomGraphGenerator, ContractionGraphsCoverTheOpsAndSizes) {
  std::map<std::string, int> ops;
  std::set<int64_t> ks, ns;
  std::set<std::string> conv_kinds;
  for (uint64_t seed = 0; seed < 300; ++seed) {
    auto g = random_graph(seed, contraction_graph_options()).trace();
    ASSERT_NO_THROW(ir::verify(*g)) << "seed " << seed;
    for (const ir::Node *n : g->nodes()) {
      ++ops[std::string(n->mnemonic())];
      if (n->op() == OpId::Linear || n->op() == OpId::Matmul || n->op() == OpId::Mm) {
        const Dims &x = n->operand(0)->type().shape, &y = n->result()->type().shape;
        ks.insert(x[x.size() - 1]);
        ns.insert(y[y.size() - 1]);
      }
      if (n->op() == OpId::Conv2d) {
        const Dims &w = n->operand(1)->type().shape, &x = n->operand(0)->type().shape;
        int64_t groups = n->attr("groups")->as_int();
        if (groups == x[1] && groups > 1) conv_kinds.insert("depthwise");
        else if (groups > 1) conv_kinds.insert("grouped");
        if (w[2] == 1 && w[3] == 1) conv_kinds.insert("1x1");
        if (w[2] == 3 && w[3] == 3) conv_kinds.insert("3x3");
        if (n->attr("stride")->as_ints()[0] == 2) conv_kinds.insert("stride 2");
        if (n->attr("dilation")->as_ints()[0] == 2) conv_kinds.insert("dilation 2");
        if (n->attr("padding")->as_ints()[0] > 0) conv_kinds.insert("padded");
        if (w[0] >= 16 && w[1] >= 16 && w[2] == 3 && w[3] == 3 && groups == 1 && n->attr("stride")->as_ints()[0] == 1 &&
            n->attr("dilation")->as_ints()[0] == 1)
          conv_kinds.insert("winograd-shaped");
      }
    }
  }
  for (const char *op : {"linear", "matmul", "bmm", "addmm", "conv2d"}) EXPECT_GE(ops[op], 10) << op;
  for (int64_t size : {1, 3, 17, 33, 65}) {
    EXPECT_TRUE(ks.count(size)) << "no contraction over K = " << size;
    EXPECT_TRUE(ns.count(size)) << "no contraction with N = " << size;
  }
  for (const char *kind : {"depthwise", "grouped", "1x1", "3x3", "stride 2", "dilation 2", "padded", "winograd-shaped"})
    EXPECT_TRUE(conv_kinds.count(kind)) << "no " << kind << " conv";
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

// Graphs that also draw the newer elementwise ops (extended_graph_options: the libm
// list, the composed activations, composites): compiled equals eager, and the
// generator reaches the new ops.
TEST(RandomGraphExtended, CompiledAgreesWithEagerAndCoversTheNewOps) {
  Checker c;
  std::map<std::string, int> ops;
  for (uint64_t seed : random_graph_seeds(5000000, 150)) {
    check_compile(c, seed, extended_graph_options());
    if (c.failures >= kMaxFailures) break;
    if (replaying()) continue;
    std::unique_ptr<ir::Graph> g = random_graph(seed, extended_graph_options()).trace();
    for (const ir::Node *n : g->nodes())
      if (n->kind() == ir::Node::Kind::Op) ++ops[std::string(op_info(n->op()).mnemonic)];
  }
  if (replaying()) return;
  for (const char *op : {"sin", "tan", "asinh", "acosh", "log2", "mish", "selu", "log_sigmoid", "hardswish"})
    EXPECT_GT(ops[op], 0) << "no graph with " << op;
}

// Graphs with scans and sorts between the compiled groups, and trunc / frac fused
// (scan_graph_options): compiled equals eager, and the generator reaches each op.
TEST(RandomGraphScan, CompiledAgreesWithEagerAndCoversTheNewOps) {
  Checker c;
  std::map<std::string, int> ops;
  for (uint64_t seed : random_graph_seeds(6000000, 120)) {
    check_compile(c, seed, scan_graph_options());
    if (c.failures >= kMaxFailures) break;
    if (replaying()) continue;
    std::unique_ptr<ir::Graph> g = random_graph(seed, scan_graph_options()).trace();
    for (const ir::Node *n : g->nodes())
      if (n->kind() == ir::Node::Kind::Op) ++ops[std::string(op_info(n->op()).mnemonic)];
  }
  if (replaying()) return;
  for (const char *op : {"cumsum", "cumprod", "logcumsumexp", "sort", "topk", "floor", "ceil", "atan2", "hypot",
                         "fmod", "copysign", "remainder"})
    EXPECT_GT(ops[op], 0) << "no graph with " << op;
}

// float16 and bfloat16 graphs (inputs and parameters; the extended ops): the upcast
// pass and the kernels' 16-bit loads and stores against eager. Both round every op
// to 16 bits, so they agree exactly unless a float32 difference (a contraction's
// or a reduction's summation order) lands across a rounding boundary: a 16-bit ulp
// (2^-8 for bfloat16, 2^-11 for float16), which the ops after it carry on. (On the
// machine this was written on, all 120 graphs agree bit for bit; the tolerance is
// for executors whose float32 sums take another order.)
TEST(RandomGraphReducedFloat, CompiledAgreesWithEager) {
  Checker c;
  for (DType t : {kBFloat16, kFloat16}) {
    const double tol = t == kBFloat16 ? 3e-2 : 4e-3;
    for (uint64_t seed : random_graph_seeds(t == kBFloat16 ? 7000000 : 7100000, 60)) {
      check_compile(c, seed, reduced_float_graph_options(t), tol, tol);
      if (c.failures >= kMaxFailures) break;
    }
  }
}

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
