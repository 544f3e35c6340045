// The fuse pass: W1-W3 become one group each; results are unchanged; cycles,
// full reductions of matrices and contractions stay out; a cheap producer read
// by two groups is computed in both instead of stored.
#include <gtest/gtest.h>

#include <cmath>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "passes/pass_manager.h"
#include "passes/plan_memory.h"
#include "unit/graph_test_util.h"

using namespace kiln;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Counts {
  int groups = 0, others = 0;
};
Counts count(const ir::Graph &g) {
  Counts c;
  for (const ir::Node *n : g.nodes()) (n->kind() == ir::Node::Kind::FusionGroup ? c.groups : c.others)++;
  return c;
}

std::unique_ptr<ir::Graph> optimized(const Fn &fn, const std::vector<Tensor> &in) {
  auto g = trace(fn, in);
  passes::PipelineOptions o;
  o.verify_each = true;
  passes::run_pipeline(*g, "decompose,canonicalize,cse,dce,fuse", o);
  return g;
}

void expect_same_results(const Fn &fn, const ir::Graph &g, const std::vector<Tensor> &in) {
  auto want = fn(in);
  auto got = ir::interpret(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(amax(abs(got[i].to(kFloat64) - want[i].to(kFloat64))).item<double>(), 1e-5);
}

} // namespace

TEST(Fuse, GeluChainIsOneGroup) {
  manual_seed(0);
  Tensor a = randn({64}), b = randn({64});
  Fn fn = [a, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * a + b, "tanh")}; };
  std::vector<Tensor> in = {randn({16, 64})};
  auto g = optimized(fn, in);
  Counts c = count(*g);
  EXPECT_EQ(c.groups, 1);
  EXPECT_EQ(c.others, 0);
  expect_same_results(fn, *g, in);
}

TEST(Fuse, SoftmaxAndLayerNormAreOneRowGroupEach) {
  manual_seed(0);
  Tensor w = randn({64}), b = randn({64});
  std::vector<Tensor> in = {randn({16, 64})};
  Fn sm = [](const std::vector<Tensor> &x) { return std::vector<Tensor>{softmax(x[0], -1)}; };
  Fn ln = [w, b](const std::vector<Tensor> &x) { return std::vector<Tensor>{layer_norm(x[0], {64}, w, b)}; };
  for (const Fn &fn : {sm, ln}) {
    auto g = optimized(fn, in);
    Counts c = count(*g);
    EXPECT_EQ(c.groups, 1);
    EXPECT_EQ(c.others, 0);
    expect_same_results(fn, *g, in);
  }
}

TEST(Fuse, ReductionOverFirstDimJoinsItsPrologueAndEpilogue) {
  Fn fn = [](const std::vector<Tensor> &x) { return std::vector<Tensor>{sum(exp(x[0]), {0}) + 1.0}; };
  std::vector<Tensor> in = {randn({8, 16})};
  auto g = optimized(fn, in);
  bool sum_outside = false;
  for (const ir::Node *n : g->nodes())
    sum_outside |= n->kind() == ir::Node::Kind::Op && n->op() == OpId::Sum;
  EXPECT_FALSE(sum_outside);
  EXPECT_EQ(count(*g).groups, 1);
  expect_same_results(fn, *g, in);
}

// A value of the rows' shape computed from a plain input (neg(b)) and added to a
// reduction without keepdim is aligned with the rows by that add, not with the
// domain's trailing dims: codegen computes it per row. Fuzzing found
// [7, 6, 1, 1] summed over the last dim, where the trailing alignment loaded b
// with strides [0, 6, 1, 0] (wrong elements, no error); with a square domain
// the group ran eagerly.
TEST(Fuse, ValueAddedToARowReductionIsComputedPerRow) {
  auto row_plus = [](std::vector<int64_t> dims) {
    return [dims](const std::vector<Tensor> &x) {
      Tensor s = sum(x[0], dims);
      return std::vector<Tensor>{relu(s / (abs(x[1]) + 0.5)), s - x[1].neg()};
    };
  };
  struct Case {
    std::vector<int64_t> a, b, dims;
  };
  for (const Case &c : {Case{{7, 6, 1, 1}, {7, 6, 1}, {3}}, Case{{3, 3}, {3}, {1}}, Case{{5, 4, 4}, {5, 4}, {2}},
                        Case{{4, 4, 6}, {4, 6}, {1}}}) {
    SCOPED_TRACE(shape_str(c.a));
    std::vector<Tensor> in = {kiln::testing::rnd(c.a, 1), kiln::testing::rnd(c.b, 2)};
    CompiledFunction f = kiln::testing::expect_compiled_equals_eager(row_plus(c.dims), in, 1e-5);
    EXPECT_EQ(f.kernels_per_call(in), 1) << "one row kernel, none of it eager";
  }
}

// Integer remainder (a zero divisor must raise) and pow with a tensor exponent have
// no lowering codegen can apply: fuse leaves them out of groups (it asks codegen,
// passes/lowering_check.h), so the exp * before them and the add after them
// still compile, where one group around them all used to run eagerly whole.
TEST(Fuse, OpsCodegenCannotLowerStayOutOfGroups) {
  manual_seed(0);
  Fn fn = [](const std::vector<Tensor> &x) {
    return std::vector<Tensor>{pow(x[1], exp(x[0]) * remainder(x[2], 5)) + x[0]};
  };
  std::vector<Tensor> in = {randn({8, 16}), rand({8, 16}) + 0.5, randint(-20, 20, {8, 16})};
  std::shared_ptr<ir::Graph> g = optimized(fn, in);
  int left_out = 0;
  for (const ir::Node *n : g->nodes())
    left_out += n->kind() == ir::Node::Kind::Op && (n->op() == OpId::Remainder || n->op() == OpId::Pow);
  EXPECT_EQ(left_out, 2);
  auto exe = codegen::make_executable(g, in);
  EXPECT_EQ(exe->stats().groups_fallen_back, 0);
  EXPECT_EQ(exe->stats().kernels, 2); // exp, add
  std::vector<Tensor> got = exe->run(in), want = fn(in); // eager
  EXPECT_LE(amax(abs(got[0] - want[0])).item<double>(), 1e-5);
}

TEST(Fuse, FullReductionOfAMatrixStaysOut) {
  Fn fn = [](const std::vector<Tensor> &x) { return std::vector<Tensor>{sum(exp(x[0])) + 1.0}; };
  std::vector<Tensor> in = {randn({8, 16})};
  auto g = optimized(fn, in);
  bool sum_outside = false;
  for (const ir::Node *n : g->nodes())
    sum_outside |= n->kind() == ir::Node::Kind::Op && n->op() == OpId::Sum;
  EXPECT_TRUE(sum_outside);
  expect_same_results(fn, *g, in);
}

TEST(Fuse, NeverCreatesACycleThroughAContraction) {
  // x1 feeds both mm and the final add: fusing the add into x1's group would
  // need mm's result inside the group that mm itself reads.
  Tensor w = randn({16, 16});
  Fn fn = [w](const std::vector<Tensor> &in) {
    Tensor x1 = in[0] * 2.0;
    return std::vector<Tensor>{x1 + mm(x1, w)};
  };
  std::vector<Tensor> in = {randn({16, 16})};
  auto g = optimized(fn, in);
  ir::verify(*g);
  EXPECT_EQ(count(*g).groups, 2);
  expect_same_results(fn, *g, in);
}

TEST(Fuse, KeepsWriteBacksAndOutputsOfInnerValues) {
  Fn fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    Tensor y = x * 2.0;
    x.add_(1.0);
    return std::vector<Tensor>{y, y + x};
  };
  Tensor a = randn({4, 4});
  std::vector<Tensor> in = {a.clone()};
  auto g = optimized(fn, in);
  ir::verify(*g);
  std::vector<Tensor> e = {a.clone()};
  auto want = fn(e);
  std::vector<Tensor> i2 = {a.clone()};
  auto got = ir::interpret(*g, i2);
  for (size_t k = 0; k < 2; ++k) EXPECT_LE(amax(abs(got[k] - want[k])).item<float>(), 1e-6f);
  EXPECT_LE(amax(abs(i2[0] - e[0])).item<float>(), 1e-6f);
}

TEST(Fuse, NodeBetweenMembersReadingAMemberMovesAfterTheGroup) {
  // a and b form one group; mm sits between them in program order and reads a,
  // so it must run after the group once the group is placed at b.
  Tensor w = randn({8, 8});
  Fn fn = [w](const std::vector<Tensor> &in) {
    Tensor a = in[0] * 2.0;
    Tensor m = mm(a, w);
    Tensor b = a + 1.0;
    return std::vector<Tensor>{b, m};
  };
  std::vector<Tensor> in = {randn({8, 8})};
  auto g = optimized(fn, in);
  ir::verify(*g);
  EXPECT_EQ(count(*g).groups, 1);
  expect_same_results(fn, *g, in);
}

// fuse-horizontal: sibling elementwise chains over one input become one group
// with two results; the interpreter and the compiled kernel both match eager.
TEST(FuseHorizontal, SiblingsReadingOneInputBecomeOneKernel) {
  manual_seed(0);
  Tensor r = randn({64});
  Fn fn = [r](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    return std::vector<Tensor>{exp(x) * in[1], tanh(x) + r, sigmoid(x)};
  };
  std::vector<Tensor> in = {randn({16, 64}), randn({16, 64})};
  auto g = optimized(fn, in);
  EXPECT_EQ(count(*g).groups, 3);
  passes::PipelineOptions o;
  o.verify_each = true;
  EXPECT_TRUE(passes::run_pipeline(*g, "fuse-horizontal", o).at(0).changed);
  Counts c = count(*g);
  EXPECT_EQ(c.groups, 1);
  EXPECT_EQ(c.others, 0);
  expect_same_results(fn, *g, in);

  CompiledFunction f = compile(fn);
  std::vector<Tensor> got = f(in), want = fn(in);
  EXPECT_EQ(f.kernels_per_call(in), 1);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(amax(abs(got[i].to(kFloat64) - want[i].to(kFloat64))).item<double>(), 1e-5) << "output " << i;
}

// A node between the two groups that reads the first one's result moves behind
// the merged group; results stay correct.
TEST(FuseHorizontal, ConsumerBetweenTheGroupsMovesBehindTheMerge) {
  manual_seed(0);
  Fn fn = [](const std::vector<Tensor> &in) {
    Tensor a = exp(in[0]);
    Tensor col = sum(a); // eager (a full reduction of a matrix), between the groups
    Tensor b = tanh(in[0]);
    return std::vector<Tensor>{col, b};
  };
  std::vector<Tensor> in = {randn({8, 32})};
  auto g = optimized(fn, in);
  passes::PipelineOptions o;
  o.verify_each = true;
  EXPECT_TRUE(passes::run_pipeline(*g, "fuse-horizontal", o).at(0).changed);
  EXPECT_EQ(count(*g).groups, 1);
  expect_same_results(fn, *g, in);
}

// ---- duplication of cheap producers (passes/fuse_duplicate.cpp)
namespace {

// The traced graph after the passes before fuse, then fuse with or without duplication.
std::unique_ptr<ir::Graph> fused(const Fn &fn, const std::vector<Tensor> &in, bool duplicate) {
  auto g = trace(fn, in);
  passes::PipelineOptions o;
  o.verify_each = true;
  passes::run_pipeline(*g, "decompose,canonicalize,cse,dce", o);
  passes::fuse(*g, duplicate);
  ir::verify(*g);
  return g;
}

// How many group bodies hold a node of op `op`, and how many such nodes are at top level.
std::pair<int, int> where_is(const ir::Graph &g, OpId op) {
  int in_groups = 0, top = 0;
  for (const ir::Node *n : g.nodes()) {
    if (n->kind() == ir::Node::Kind::Op) {
      top += n->op() == op;
      continue;
    }
    for (const ir::Node *m : n->body()->nodes())
      if (m->kind() == ir::Node::Kind::Op && m->op() == op) {
        ++in_groups;
        break;
      }
  }
  return {in_groups, top};
}

// How many group operands are results of another group (written to memory, read back).
int group_to_group_values(const ir::Graph &g) {
  int n = 0;
  for (const ir::Node *node : g.nodes())
    if (node->kind() == ir::Node::Kind::FusionGroup)
      for (const ir::Value *v : node->operands())
        n += v && v->producer() && v->producer()->kind() == ir::Node::Kind::FusionGroup;
  return n;
}

void expect_compiled_equals_eager(const Fn &fn, const std::vector<Tensor> &in) {
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  std::vector<Tensor> got = f(in), want = fn(in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LE(amax(abs(got[i].to(kFloat64) - want[i].to(kFloat64))).item<double>(), 1e-5) << "output " << i;
  EXPECT_EQ(f.stats().eager_calls, 0);
}

} // namespace

// t = x * a + b feeds a softmax (a row group) and the residual add of a linear,
// which cannot share a group with it: each group computes t itself and t is
// never written. 16 rows: the linear is a tiny one (mul + row sum, a row
// group); 64 rows: a matmul with its epilogue.
TEST(FuseDuplicate, ScaledInputSharedBySoftmaxAndLinearIsComputedInBoth) {
  for (int64_t rows : {16, 64}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    manual_seed(0);
    Tensor a = randn({64}), b = randn({64}), w = randn({64, 32}), c = randn({64});
    Fn fn = [=](const std::vector<Tensor> &in) {
      Tensor t = in[0] * a + b;
      return std::vector<Tensor>{softmax(t, -1), linear(in[1], w, c) + t};
    };
    std::vector<Tensor> in = {randn({rows, 64}), randn({rows, 32})};
    auto dup = fused(fn, in, true), plain = fused(fn, in, false);
    EXPECT_EQ(count(*dup).groups, 2);
    EXPECT_EQ(count(*plain).groups, 2);
    EXPECT_EQ(group_to_group_values(*plain), 1);
    EXPECT_EQ(group_to_group_values(*dup), 0);
    EXPECT_EQ(where_is(*dup, OpId::Matmul).first, rows == 64 ? 1 : 0);
    passes::GraphStats sd = passes::graph_stats(*dup), sp = passes::graph_stats(*plain);
    EXPECT_EQ(sp.bytes_written - sd.bytes_written, rows * 64 * 4); // t's buffer
    expect_same_results(fn, *dup, in);
    expect_compiled_equals_eager(fn, in);
  }
}

// t feeds t * t (whose full sum runs eagerly) and t + that sum, which cannot
// join t's group (a cycle through the sum): the second group recomputes t.
TEST(FuseDuplicate, ProducerSplitFromAConsumerByACycleIsComputedInBoth) {
  manual_seed(0);
  Tensor a = randn({48});
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor t = in[0] * a;
    return std::vector<Tensor>{t + sum(t * t, {0, 1}, true)};
  };
  std::vector<Tensor> in = {randn({32, 48})};
  auto dup = fused(fn, in, true), plain = fused(fn, in, false);
  EXPECT_EQ(count(*dup).groups, 2);
  EXPECT_EQ(count(*plain).groups, 2);
  EXPECT_EQ(group_to_group_values(*plain), 1);
  EXPECT_EQ(group_to_group_values(*dup), 0);
  EXPECT_EQ(where_is(*dup, OpId::Mul), std::make_pair(2, 0)); // t in both groups (and t * t in the first)
  EXPECT_EQ(passes::graph_stats(*plain).bytes_written - passes::graph_stats(*dup).bytes_written, 32 * 48 * 4);
  expect_same_results(fn, *dup, in);
  expect_compiled_equals_eager(fn, in);
}

// The same shape of graph with exp(x) as the shared producer on 256 x 128
// elements: an expensive op on a large input is stored once, not recomputed.
TEST(FuseDuplicate, ExpensiveProducerOnALargeInputIsStored) {
  manual_seed(0);
  Fn fn = [](const std::vector<Tensor> &in) {
    Tensor t = exp(in[0]);
    return std::vector<Tensor>{t + sum(t * t, {0, 1}, true)};
  };
  std::vector<Tensor> in = {randn({256, 128})};
  auto dup = fused(fn, in, true), plain = fused(fn, in, false);
  EXPECT_EQ(passes::graph_stats(*dup).bytes_written, passes::graph_stats(*plain).bytes_written);
  EXPECT_EQ(where_is(*dup, OpId::Exp), std::make_pair(1, 0));
  EXPECT_EQ(group_to_group_values(*dup), 1);
  expect_same_results(fn, *dup, in);
}

// t = x * a + b feeds a softmax over [16, 64] and a product over [4, 16, 64]:
// the second group computes t over its own domain (x read through an expand).
TEST(FuseDuplicate, ProducerReadOverAWiderDomainIsComputedThere) {
  manual_seed(0);
  Tensor a = randn({64}), b = randn({64});
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor t = in[0] * a + b;
    return std::vector<Tensor>{softmax(t, -1), t * in[1]};
  };
  std::vector<Tensor> in = {randn({16, 64}), randn({4, 16, 64})};
  auto dup = fused(fn, in, true), plain = fused(fn, in, false);
  EXPECT_EQ(count(*dup).groups, 2);
  EXPECT_EQ(group_to_group_values(*plain), 1);
  EXPECT_EQ(group_to_group_values(*dup), 0);
  EXPECT_EQ(where_is(*dup, OpId::Expand), std::make_pair(0, 1));
  EXPECT_EQ(passes::graph_stats(*plain).bytes_written - passes::graph_stats(*dup).bytes_written, 16 * 64 * 4);
  expect_same_results(fn, *dup, in);
  expect_compiled_equals_eager(fn, in);
}

// Causal attention scores (as in W5): the mask's negation is no longer a group
// of its own; the scores' epilogue negates the broadcast mask per tile.
TEST(FuseDuplicate, CausalMaskNegationJoinsTheScoresEpilogue) {
  manual_seed(0);
  Tensor causal = tril(ones({32, 32}, kBool));
  Fn fn = [=](const std::vector<Tensor> &in) {
    Tensor att = matmul(in[0], in[1].transpose(-2, -1)) * 0.25;
    att = att.masked_fill(causal.logical_not(), -INFINITY);
    return std::vector<Tensor>{softmax(att, -1)};
  };
  std::vector<Tensor> in = {randn({2, 4, 32, 16}), randn({2, 4, 32, 16})};
  auto dup = fused(fn, in, true), plain = fused(fn, in, false);
  EXPECT_EQ(count(*plain).groups - count(*dup).groups, 1);
  EXPECT_EQ(where_is(*plain, OpId::LogicalNot), std::make_pair(1, 0));
  EXPECT_EQ(where_is(*dup, OpId::LogicalNot), std::make_pair(1, 0));
  EXPECT_EQ(where_is(*dup, OpId::Matmul), std::make_pair(1, 0));
  EXPECT_EQ(passes::graph_stats(*plain).bytes_written - passes::graph_stats(*dup).bytes_written, 32 * 32);
  expect_same_results(fn, *dup, in);
  expect_compiled_equals_eager(fn, in);
}
