// The fuse pass: W1-W3 become one group each; results are unchanged; cycles,
// full reductions of matrices and contractions stay out.
#include <gtest/gtest.h>

#include <kiln/kiln.h>

#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/verifier.h"
#include "passes/fusion.h"
#include "passes/pass_manager.h"

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
