// Memory plans over symbols (issue 17): SymMax (an offset as the largest of
// some sizes), the plan-memory pass on a symbolic graph, its text form, the
// verifier checking a symbolic plan away from the traced sizes, and the
// symbolic executor taking its intermediates from one pooled arena.
//
// References: offsets and peaks worked out by hand from the graphs' live
// ranges, values computed by plain integer arithmetic, and eager for the
// compiled results.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "expect_error.h"
#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/plan_memory.h"
#include "runtime/allocator.h"

namespace kiln {
namespace {

using ir::SymExpr;
using ir::SymMax;
using kiln::testing::expect_error;

SymExpr sym(const char *text) { return SymExpr::parse(text); }

// ---- SymMax

TEST(SymMax, KeepsOnlyTermsNoOtherBounds) {
  SymMax m;
  m.add(sym("1024*s0"));
  m.add(sym("512*s0"));         // below 1024*s0 wherever s0 >= 0
  m.add(sym("4096"));           // neither bounds the other
  m.add(sym("1024*s0 + 64"));   // bounds 1024*s0, which goes
  m.add(sym("4096"));           // a duplicate
  ASSERT_EQ(m.terms.size(), 2u) << m.str();
  for (int64_t s0 : {0, 1, 3, 4, 5, 100}) {
    const int64_t v[] = {s0};
    EXPECT_EQ(m.evaluate(v), std::max<int64_t>(1024 * s0 + 64, 4096)) << "s0 = " << s0;
  }
  EXPECT_EQ(SymMax().evaluate(std::vector<int64_t>{7}), 0) << "no term: 0";
}

TEST(SymMax, PlusAddsToEveryTermAndStrRoundTrips) {
  SymMax m;
  m.add(sym("256*s0"));
  m.add(sym("128*s1"));
  SymMax p = m.plus(sym("64*s0*s1"));
  for (auto [s0, s1] : {std::pair<int64_t, int64_t>{2, 9}, {9, 2}, {5, 5}}) {
    const int64_t v[] = {s0, s1};
    EXPECT_EQ(p.evaluate(v), std::max(256 * s0, 128 * s1) + 64 * s0 * s1);
  }
  EXPECT_EQ(SymMax::parse(p.str()), p) << p.str();
  EXPECT_EQ(SymMax::parse("0").evaluate(std::vector<int64_t>{3}), 0);
  EXPECT_EQ(SymMax::parse(" max( 4*s0 ,  floordiv(s0 + 63, 64)*64 ) ").terms.size(), 2u);
  EXPECT_EQ(SymMax().plus(sym("8*s0")).str(), "8*s0") << "0 + e";
  expect_error([] { SymMax::parse("max(4*s0, "); }, {"symbolic size"});
  expect_error([] { SymMax::parse("max 4*s0"); }, {"expected max(a, b, ...)"});
}

TEST(SymMax, BoundsAreShownOnlyWhereEveryAtomIsNonNegative) {
  // floordiv(s0 + 63, 64) >= 0 wherever s0 >= 0: 64*that + 1 bounds 64*that.
  EXPECT_TRUE(ir::sym_at_least(sym("64*floordiv(s0 + 63, 64) + 1"), sym("64*floordiv(s0 + 63, 64)")));
  // floordiv(s0 - 100, 2) is negative for small s0: 2*that + s0 >= s0 does not hold at s0 = 0.
  EXPECT_FALSE(ir::sym_at_least(sym("2*floordiv(s0 - 100, 2) + s0"), sym("s0")));
  EXPECT_FALSE(ir::sym_at_least(sym("s0"), sym("s1")));
  EXPECT_TRUE(ir::sym_at_least(sym("s0*s1 + s1"), sym("s1")));
}

TEST(SymMax, ManyIncomparableTermsFoldIntoTheirSumWhichBoundsThem) {
  SymMax m;
  std::vector<SymExpr> added;
  for (int k = 0; k < int(SymMax::kMaxTerms) + 4; ++k) {
    // k*s0 + (40 - k)*s1: no term bounds another.
    added.push_back(sym(("" + std::to_string(k + 1) + "*s0 + " + std::to_string(40 - k) + "*s1").c_str()));
    m.add(added.back());
  }
  ASSERT_LE(m.terms.size(), SymMax::kMaxTerms);
  for (auto [s0, s1] : {std::pair<int64_t, int64_t>{2, 3}, {100, 2}, {2, 100}}) {
    const int64_t v[] = {s0, s1};
    for (const SymExpr &e : added) EXPECT_GE(m.evaluate(v), e.evaluate(v)) << e.str();
  }
}

// ---- the pass

// Four values over s0 rows of 64 floats (256*s0 bytes each). %0 and %1 are
// live together (%1 reads %0), %2 reads %1 and %0, %3 is made after %0 and %1
// died and reads only %2; %4 is the output.
const char *kChain = R"(graph @g(%x: f32[s0, 64]) symbols(s0 = 4) {
  %0 = exp(%x) : f32[s0, 64]
  %1 = tanh(%0) : f32[s0, 64]
  %2 = mul(%1, %0) : f32[s0, 64]
  %3 = neg(%2) : f32[s0, 64]
  %4 = sum(%3) {dims = [1], keepdim = false, dtype = none} : f32[s0]
  return %4
}
)";

const ir::BufferAssignment *slot(const ir::Graph &g, const char *name) {
  for (const auto &[v, s] : g.memory_plan()->entries)
    if (v->name() == name) return &s;
  return nullptr;
}

TEST(SymPlanMemory, OffsetsAreFormulasThatHoldAtEverySize) {
  auto g = ir::parse(kChain);
  passes::run_pipeline(*g, "plan-memory");
  ASSERT_TRUE(g->memory_plan());
  const ir::MemoryPlan &plan = *g->memory_plan();
  ASSERT_TRUE(plan.symbolic);
  ASSERT_EQ(plan.entries.size(), 4u) << ir::print(*g);
  // At most three of the four are live at once (%0, %1, %2 at node 2), so
  // three rows of 256*s0 bytes each; %3 takes bytes of one that died.
  for (int64_t s0 : {1, 2, 3, 4, 5, 17, 1000}) {
    const int64_t v[] = {s0};
    EXPECT_EQ(plan.sym_peak.evaluate(v), 3 * 256 * s0) << plan.sym_peak.str() << " at s0 = " << s0;
    auto range = [&](const char *n) {
      const ir::BufferAssignment *a = slot(*g, n);
      const int64_t at = a->sym_offset.evaluate(v);
      EXPECT_EQ(at % 64, 0) << n;
      EXPECT_GE(a->sym_size.evaluate(v), 256 * s0) << n;
      return std::pair<int64_t, int64_t>{at, at + 256 * s0};
    };
    auto disjoint = [&](const char *a, const char *b) {
      auto [a0, a1] = range(a);
      auto [b0, b1] = range(b);
      EXPECT_TRUE(a1 <= b0 || b1 <= a0) << "%" << a << " and %" << b << " at s0 = " << s0;
    };
    disjoint("0", "1");
    disjoint("0", "2");
    disjoint("1", "2");
    disjoint("2", "3");
  }
  // The traced numbers are the formulas at s0 = 4.
  EXPECT_EQ(plan.peak_bytes, 3 * 256 * 4);
  for (const auto &[v, a] : plan.entries) {
    const int64_t hint[] = {4};
    EXPECT_EQ(a.offset, a.sym_offset.evaluate(hint)) << v->name();
    EXPECT_EQ(a.size, a.sym_size.evaluate(hint)) << v->name();
  }
  EXPECT_NO_THROW(ir::verify(*g));
  EXPECT_EQ(passes::graph_stats(*g).peak_arena_bytes, 3 * 256 * 4);
}

TEST(SymPlanMemory, SizesRoundUpToTheAlignmentAtEverySize) {
  // 4*s0 bytes: a multiple of 64 only for some s0.
  auto g = ir::parse(R"(graph @g(%x: f32[s0]) symbols(s0 = 5) {
  %0 = exp(%x) : f32[s0]
  %1 = tanh(%0) : f32[s0]
  %2 = mul(%1, %0) : f32[s0]
  return %2
}
)");
  passes::run_pipeline(*g, "plan-memory");
  const ir::MemoryPlan &plan = *g->memory_plan();
  for (int64_t s0 : {1, 5, 16, 17, 33}) {
    const int64_t v[] = {s0};
    const int64_t rounded = (4 * s0 + 63) / 64 * 64;
    EXPECT_EQ(slot(*g, "0")->sym_size.evaluate(v), rounded) << s0;
    EXPECT_EQ(plan.sym_peak.evaluate(v), 2 * rounded) << s0;
  }
}

TEST(SymPlanMemory, PrintsAndParsesBack) {
  auto g = ir::parse(kChain);
  passes::run_pipeline(*g, "plan-memory");
  const std::string text = ir::print(*g);
  EXPECT_NE(text.find("sym_peak = ["), std::string::npos) << text;
  EXPECT_NE(text.find("sym_offset = [256*s0]"), std::string::npos) << text;
  auto back = ir::parse(text);
  EXPECT_EQ(ir::print(*back), text);
  ASSERT_TRUE(back->memory_plan());
  EXPECT_TRUE(back->memory_plan()->symbolic);
  EXPECT_EQ(back->memory_plan()->sym_peak, g->memory_plan()->sym_peak);
}

// A plan that holds at the traced size but not at others: the verifier
// checks the formulas away from the traced sizes.
TEST(SymPlanMemory, VerifierFindsAnOverlapAwayFromTheTracedSizes) {
  // At s0 = 64, %0 takes [0, 16384) and %1 [16384, 32768); at s0 = 1000 they overlap.
  const char *text = R"(graph @g(%x: f32[s0, 64]) symbols(s0 = 64) {
  %0 = exp(%x) : f32[s0, 64]
  %1 = tanh(%0) : f32[s0, 64]
  %2 = mul(%1, %0) : f32[s0, 64]
  return %2
  memory_plan {peak_bytes = 32768, sym_peak = [max(256*s0 + 16384, 32768)]} {
    %0 {buffer = 0, offset = 0, size = 16384, sym_offset = [0], sym_size = [256*s0]}
    %1 {buffer = 1, offset = 16384, size = 16384, sym_offset = [16384], sym_size = [256*s0]}
  }
}
)";
  expect_error([&] { ir::verify(*ir::parse(text)); }, {"overlap while both are live", "with s0 = "});
  // The traced numbers must be the formulas' values at the traced sizes.
  std::string wrong = text;
  wrong.replace(wrong.find("peak_bytes = 32768"), 18, "peak_bytes = 99968");
  expect_error([&] { ir::verify(*ir::parse(wrong)); }, {"is not sym_peak"});
  // A symbolic plan needs symbols, and a graph with symbols a symbolic plan.
  expect_error([] {
    ir::verify(*ir::parse(R"(graph @g(%x: f32[s0]) symbols(s0 = 5) {
  %0 = exp(%x) : f32[s0]
  %1 = tanh(%0) : f32[s0]
  return %1
  memory_plan {peak_bytes = 64} {
    %0 {buffer = 0, offset = 0, size = 64}
  }
}
)"));
  }, {"needs a symbolic plan"});
}

TEST(SymPlanMemory, BadFormulasAreParseErrors) {
  auto with_entry = [](const std::string &entry) {
    return std::string(R"(graph @g(%x: f32[s0]) symbols(s0 = 5) {
  %0 = exp(%x) : f32[s0]
  %1 = tanh(%0) : f32[s0]
  return %1
  memory_plan {peak_bytes = 64, sym_peak = [64*floordiv(4*s0 + 63, 64)]} {
    %0 {buffer = 0, offset = 0, size = 64, )") + entry + "}\n  }\n}\n";
  };
  expect_error([&] { ir::parse(with_entry("sym_offset = [0], sym_size = [max(s0, 4)]")); },
               {"sym_size is one formula, not a max"});
  expect_error([&] { ir::parse(with_entry("sym_offset = [0")); }, {"unterminated sym_offset"});
  expect_error([&] { ir::parse(with_entry("sym_offset = 0, sym_size = [4]")); }, {"expected '[' and a formula"});
  expect_error([&] { ir::parse(with_entry("sym_offset = [s0 +], sym_size = [4]")); }, {"bad sym_offset"});
  expect_error([&] { ir::parse(with_entry("sym_size = [4]")); }, {"sym_offset"});
}

// ---- the executor

// An MLP whose two hidden activations are kernel results in the arena: a
// steady-state call at a size seen before allocates its output and little
// else, where each hidden activation alone is 128 KiB.
TEST(SymArena, ASteadyCallAllocatesOnlyItsOutputs) {
  manual_seed(21);
  Tensor w1 = randn({512, 256}) * 0.05, b1 = randn({512}), w2 = randn({512, 512}) * 0.05, b2 = randn({512});
  Tensor w3 = randn({10, 512}) * 0.05;
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor h = relu(linear(in[0], w1, b1));
    Tensor h2 = relu(linear(h, w2, b2)) + h;
    return {softmax(linear(h2, w3, Tensor()), -1)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t b : {64, 3, 17, 64, 40}) {
    std::vector<Tensor> in = {randn({b, 256})};
    std::vector<Tensor> got = f(in), want = fn(in);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_TRUE(allclose(got[0], want[0], 1e-4, 1e-5)) << "batch " << b;
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  std::shared_ptr<const ir::Graph> g = f.graph_for({randn({64, 256})});
  ASSERT_TRUE(g && g->memory_plan());
  EXPECT_TRUE(g->memory_plan()->symbolic);
  EXPECT_GE(g->memory_plan()->entries.size(), 2u) << ir::print(*g);
  bool arena_line = false;
  for (const std::string &line : codegen::describe_symbolic_executable(g))
    arena_line |= line.rfind("arena: ", 0) == 0 && line.find("planned intermediates") != std::string::npos;
  EXPECT_TRUE(arena_line);

  std::vector<Tensor> in = {randn({64, 256})};
  f(in); // the arena for 64 rows is pooled already; this warms the thread's caches
  reset_peak_memory_stats();
  std::vector<Tensor> out = f(in);
  const int64_t peak = allocator_stats().peak_allocated_bytes;
  const int64_t hidden = 64 * 512 * 4;
  EXPECT_LT(peak, hidden) << "a hidden activation was allocated per call";
  EXPECT_GE(peak, 64 * 10 * 4) << "the output is allocated";
  EXPECT_TRUE(allclose(out[0], fn(in)[0], 1e-4, 1e-5));
}

// Sizes growing call by call take larger arenas; results stay eager's, and an
// output is never a view into the arena the next call overwrites.
TEST(SymArena, GrowingSizesAndKeptOutputs) {
  manual_seed(22);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor a = exp(in[0]) * 0.5;
    Tensor m = a.sum({1}, true);
    return {a / m, tanh(a - m)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  std::vector<std::vector<Tensor>> kept, wants;
  for (int64_t b : {2, 5, 9, 33, 100, 7, 250}) {
    std::vector<Tensor> in = {randn({b, 48})};
    kept.push_back(f(in));
    wants.push_back(fn(in));
  }
  for (size_t i = 0; i < kept.size(); ++i)
    for (size_t k = 0; k < 2; ++k) EXPECT_TRUE(allclose(kept[i][k], wants[i][k], 1e-5, 1e-6)) << i << " " << k;
  EXPECT_EQ(f.stats().compiles, 1);
}


// An input updated in place whose new value is made first: its write-back runs
// right after it is made (ir::write_back_points), and later intermediates may
// take its bytes, so the copy into the input must not wait for the end.
TEST(SymArena, AnUpdatedInputIsWrittenBeforeItsBytesAreReused) {
  manual_seed(23);
  Tensor w1 = randn({64, 128}) * 0.1, w2 = randn({64, 64}) * 0.1, w3 = randn({8, 64}) * 0.1;
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor x = in[0];
    x.add_(exp(x) * 0.5);                          // [b, 256]: the largest value
    Tensor c = relu(linear(in[1], w1));            // [b, 64]
    Tensor c2 = relu(linear(c, w2));               // [b, 64]: made after x's new value was written
    return {linear(c2, w3)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t b : {16, 5, 40, 16}) {
    Tensor x = randn({b, 256}), y = randn({b, 128});
    Tensor xe = x.clone();
    std::vector<Tensor> got = f({x, y}), want = fn({xe, y});
    EXPECT_TRUE(allclose(x, xe, 1e-5, 1e-6)) << "the updated input, batch " << b;
    EXPECT_TRUE(allclose(got[0], want[0], 1e-4, 1e-5)) << "batch " << b;
  }
  EXPECT_EQ(f.stats().eager_calls, 0);
  std::shared_ptr<const ir::Graph> g = f.graph_for({randn({16, 256}), randn({16, 128})});
  ASSERT_TRUE(g && g->memory_plan());
  EXPECT_EQ(g->write_backs().size(), 1u) << ir::print(*g);
}

// A symbolic executable binds its symbols from the inputs' bare dims and
// checks every other dim (a static one, an expression, a symbol bound by an
// earlier input) as ir::bind_symbols does, with its errors; kernels then read
// the inputs' sizes unchecked, so a miss must never reach them.
TEST(SymArena, ACallBindsItsSymbolsAndChecksEveryOtherDim) {
  auto g = ir::parse(R"(graph @g(%x: f32[s0, 2*s1], %y: f32[s1, 3], %z: f32[s0]) symbols(s0 = 4, s1 = 5) {
  %0 = exp(%x) : f32[s0, 2*s1]
  %1 = neg(%y) : f32[s1, 3]
  %2 = relu(%z) : f32[s0]
  return %0, %1, %2
})");
  passes::run_pipeline(*g, "fuse,plan-memory");
  std::shared_ptr<codegen::Executable> e = codegen::make_symbolic_executable(std::move(g));
  Tensor x = randn({7, 18}), y = randn({9, 3}), z = randn({7});
  std::vector<Tensor> got = e->run({x, y, z});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{7, 18}));
  const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>();
  for (int64_t i = 0; i < 7 * 18; ++i) ASSERT_FLOAT_EQ(got[0].data_ptr<float>()[i], std::exp(px[i])) << i;
  for (int64_t i = 0; i < 9 * 3; ++i) ASSERT_FLOAT_EQ(got[1].data_ptr<float>()[i], -py[i]) << i;
  expect_error([&] { e->run({randn({7, 17}), y, z}); }, {"input 0 (%x)", "size 17 in dim 1", "2*s1 = 18 at s1 = 9"});
  expect_error([&] { e->run({x, randn({9, 4}), z}); }, {"input 1 (%y)", "size 4 in dim 1", "needs 3"});
  expect_error([&] { e->run({x, y, randn({8})}); }, {"input 2 (%z)", "size 8 in dim 0", "needs s0 = 7"});
  expect_error([&] { e->run({x, y, randn({7, 1})}); }, {"input 2 (%z) must have 1 dims"});
  expect_error([&] { e->run({x, y}); }, {"expected 3 inputs, got 2"});
}

} // namespace
} // namespace kiln
