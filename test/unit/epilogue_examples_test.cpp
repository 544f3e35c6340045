// GEMM and conv epilogues (passes/fuse.cpp + codegen/epilogue.cpp) and the
// layout pass: compiled results equal eager (rtol 1e-4, atol 1e-5), every
// epilogue group really runs through the epilogue executor (no eager fallback),
// and the structure issue 4 asks for after the default pipeline: W5's
// elementwise and normalization ops all sit in fusion groups or GEMM epilogues,
// W7's batch-norm, relu and residual add in conv epilogues, and W5's head
// split / merge and k^T need no copy.
#include <functional>

#include "graph_test_util.h"

#include "codegen/epilogue.h"
#include "codegen/executable.h"
#include "example.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "passes/pass_manager.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

// |got - want| <= atol + rtol |want|, element by element in double.
::testing::AssertionResult near(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " results, want " << want.size();
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].sizes() != want[r].sizes())
      return ::testing::AssertionFailure() << "result " << r << " shape " << shape_str(got[r].sizes());
    std::vector<double> a = vals(got[r]), b = vals(want[r]);
    for (size_t i = 0; i < a.size(); ++i)
      if (!(std::abs(a[i] - b[i]) <= 1e-5 + 1e-4 * std::abs(b[i])))
        return ::testing::AssertionFailure() << "result " << r << " element " << i << ": " << a[i] << " != " << b[i];
  }
  return ::testing::AssertionSuccess();
}

std::shared_ptr<ir::Graph> optimized(const Fn &fn, const std::vector<Tensor> &in) {
  std::shared_ptr<ir::Graph> g = trace(fn, in);
  passes::PipelineOptions o;
  o.verify_each = true;
  passes::run_pipeline(*g, passes::default_pipeline(), o);
  return g;
}

// Runs the compiled plan of `fn`, checking that no group fell back to eager.
std::vector<Tensor> run_compiled(const Fn &fn, const std::vector<Tensor> &in, int *epilogue_groups = nullptr) {
  std::shared_ptr<ir::Graph> g = optimized(fn, in);
  int n = 0;
  for (const ir::Node *node : g->nodes()) n += codegen::is_epilogue_group(*node);
  if (epilogue_groups) *epilogue_groups = n;
  auto exe = codegen::make_executable(g, in);
  EXPECT_EQ(exe->stats().groups_fallen_back, 0);
  return exe->run(in);
}

void expect_compiled_equals_eager(const Fn &fn, const std::vector<Tensor> &in, int want_groups) {
  int groups = 0;
  std::vector<Tensor> got = run_compiled(fn, in, &groups);
  EXPECT_EQ(groups, want_groups);
  EXPECT_TRUE(near(got, fn(in)));
}

const ir::Node *contraction_in(const ir::Node &group) {
  for (const ir::Node *n : group.body()->nodes())
    if (n->info().kind == OpKind::Contraction) return n;
  return nullptr;
}

bool body_has(const ir::Node &group, OpId op) {
  for (const ir::Node *n : group.body()->nodes())
    if (n->op() == op) return true;
  return false;
}

} // namespace

// ---------------------------------------------------------------- executor

TEST(Epilogue, BiasReluWithRowAndColumnTails) {
  // 37 x 150: the column tiles leave a tail; 300 rows: a row tail past 256.
  for (int64_t m : {37, 300}) {
    Tensor w = rnd({20, 150}, 1), b = rnd({150}, 2);
    Fn fn = [w, b](const std::vector<Tensor> &x) { return std::vector<Tensor>{relu(mm(x[0], w) + b)}; };
    expect_compiled_equals_eager(fn, {rnd({m, 20}, 3)}, 1);
  }
}

TEST(Epilogue, TransposedOperandAndContractionAlsoAResult) {
  Tensor w = rnd({24, 40}, 4);
  Fn fn = [w](const std::vector<Tensor> &x) {
    Tensor y = mm(x[0].t(), w);
    return std::vector<Tensor>{y, sigmoid(y) * 3.0};
  };
  expect_compiled_equals_eager(fn, {rnd({24, 33}, 5)}, 1);
}

TEST(Epilogue, BatchedRowsFoldAndBroadcastBatches) {
  Tensor w = rnd({8, 70}, 6), r = rnd({3, 5, 70}, 7);
  Fn folded = [w, r](const std::vector<Tensor> &x) { return std::vector<Tensor>{matmul(x[0], w) * 0.5 + r}; };
  expect_compiled_equals_eager(folded, {rnd({3, 5, 8}, 8)}, 1);
  // B varies per batch and broadcasts over the first batch dim.
  Tensor wb = rnd({3, 8, 70}, 9), bias = rnd({70}, 10);
  Fn batched = [wb, bias](const std::vector<Tensor> &x) { return std::vector<Tensor>{tanh(matmul(x[0], wb) - bias)}; };
  expect_compiled_equals_eager(batched, {rnd({2, 3, 5, 8}, 11)}, 1);
}

TEST(Epilogue, Float64AndBoolMaskOperand) {
  Tensor w = rnd({16, 12}, 12, kFloat64);
  Tensor mask = rnd({9, 12}, 13) > 0.0;
  Fn fn = [w, mask](const std::vector<Tensor> &x) {
    return std::vector<Tensor>{mm(x[0], w).masked_fill(mask, -1.5)};
  };
  expect_compiled_equals_eager(fn, {rnd({9, 16}, 14, kFloat64)}, 1);
}

TEST(Epilogue, ConvBatchNormReluResidual) {
  Tensor w = rnd({6, 6, 3, 3}, 15, kFloat32, -0.3, 0.3), bias = rnd({6}, 16);
  Tensor g = rnd({6}, 17, kFloat32, 0.5, 1.5), b = rnd({6}, 18), m = rnd({6}, 19), v = rnd({6}, 20, kFloat32, 0.5, 2);
  for (int64_t n : {1, 3}) {
    Fn fn = [=](const std::vector<Tensor> &x) {
      Tensor h = batch_norm(conv2d(x[0], w, bias, 1, 1), g, b, m, v, false, 0.1, 1e-5);
      return std::vector<Tensor>{relu(h + x[0])};
    };
    expect_compiled_equals_eager(fn, {rnd({n, 6, 9, 7}, 21)}, 1);
    // Strided conv: the residual does not fit, only bn + relu join.
    Fn strided = [=](const std::vector<Tensor> &x) {
      return std::vector<Tensor>{relu(batch_norm(conv2d(x[0], w, {}, 2, 1), g, b, m, v, false, 0.1, 1e-5))};
    };
    expect_compiled_equals_eager(strided, {rnd({n, 6, 9, 7}, 22)}, 1);
  }
}

TEST(Epilogue, ConvRowBlocksWithATailAndDirectConvs) {
  // 64 x 3 x 3 inputs per pixel and 40 output columns: 5-row blocks (the im2col
  // block within 512 KiB), so 23 rows end in a 3-row tail; stride 2 has 12 rows.
  Tensor w = rnd({8, 64, 3, 3}, 34, kFloat32, -0.1, 0.1), bias = rnd({8}, 35), s = rnd({1, 8, 1, 1}, 36);
  for (int64_t stride : {1, 2}) {
    Fn fn = [=](const std::vector<Tensor> &x) { return std::vector<Tensor>{relu(conv2d(x[0], w, bias, stride, 1) * s)}; };
    expect_compiled_equals_eager(fn, {rnd({2, 64, 23, 40}, 37)}, 1);
  }
  // 1x1, stride 1, no padding: the image itself is the GEMM operand, block by block.
  Tensor w1 = rnd({16, 64, 1, 1}, 38, kFloat32, -0.2, 0.2);
  Fn direct = [=](const std::vector<Tensor> &x) { return std::vector<Tensor>{sigmoid(conv2d(x[0], w1, {}, 1, 0)) + 1.0}; };
  expect_compiled_equals_eager(direct, {rnd({3, 64, 45, 50}, 39)}, 1);
  // Grouped conv: every group of a block is computed before its epilogue.
  Tensor wg = rnd({8, 16, 3, 3}, 40, kFloat32, -0.2, 0.2);
  Fn grouped = [=](const std::vector<Tensor> &x) { return std::vector<Tensor>{tanh(conv2d(x[0], wg, {}, 1, 1, 1, 4))}; };
  expect_compiled_equals_eager(grouped, {rnd({2, 64, 30, 60}, 41)}, 1);
}

TEST(Epilogue, WeightsAreReadLive) {
  // Batch-norm parameters and conv weights updated in place between calls
  // change the compiled result exactly as they change eager's.
  Tensor w = rnd({4, 4, 3, 3}, 23, kFloat32, -0.3, 0.3);
  Tensor g = rnd({4}, 24), b = rnd({4}, 25), m = rnd({4}, 26), v = rnd({4}, 27, kFloat32, 0.5, 2);
  Fn fn = [=](const std::vector<Tensor> &x) {
    return std::vector<Tensor>{relu(batch_norm(conv2d(x[0], w, {}, 1, 1), g, b, m, v, false, 0.1, 1e-5))};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  std::vector<Tensor> in = {rnd({2, 4, 5, 5}, 28)};
  std::vector<Tensor> before = f(in);
  EXPECT_TRUE(near(before, fn(in)));
  g.mul_(-2.0);
  m.add_(0.5);
  w.mul_(1.5);
  std::vector<Tensor> after = f(in);
  EXPECT_TRUE(near(after, fn(in)));
  EXPECT_FALSE(near(after, before));
}

TEST(Epilogue, AGroupTheExecutorCannotRunRunsEagerly) {
  // Output columns with stride 3: BLAS cannot write them, so the group falls
  // back to the interpreter inside the plan and still computes the right values.
  std::shared_ptr<ir::Graph> g = ir::parse(R"(
graph @g(%a: f32[3, 4], %b: f32[4, 5]) {
  %0 = fusion_group(%a, %b) : f32[3, 5]{1, 3} {
    graph @g.group(%x: f32[3, 4], %y: f32[4, 5]) {
      %m = matmul(%x, %y) : f32[3, 5]{1, 3}
      %r = relu(%m) : f32[3, 5]
      return %m
    }
  }
  return %0
}
)");
  ASSERT_TRUE(codegen::is_epilogue_group(*g->nodes()[0]));
  std::vector<Tensor> in = {rnd({3, 4}, 29), rnd({4, 5}, 30)};
  auto exe = codegen::make_executable(g, in);
  EXPECT_EQ(exe->stats().groups_fallen_back, 1);
  EXPECT_EQ(exe->stats().epilogue_steps, 0);
  EXPECT_TRUE(near(exe->run(in), {matmul(in[0], in[1])}));
  // Overlapping result strides are refused the same way (never written through).
  std::shared_ptr<ir::Graph> overlap = ir::parse(R"(
graph @g(%a: f32[3, 4], %b: f32[4, 5]) {
  %0 = fusion_group(%a, %b) : f32[3, 5]{0, 1} {
    graph @g.group(%x: f32[3, 4], %y: f32[4, 5]) {
      %m = matmul(%x, %y) : f32[3, 5]{0, 1}
      return %m
    }
  }
  return %0
}
)");
  auto exe2 = codegen::make_executable(overlap, in);
  EXPECT_EQ(exe2->stats().groups_fallen_back, 1);
  EXPECT_TRUE(near(exe2->run(in), {matmul(in[0], in[1])}));
}

TEST(Epilogue, RunsIntoCallerBuffers) {
  // The interface an arena executor uses: results into preallocated buffers.
  Tensor w = rnd({16, 24}, 31), b = rnd({24}, 32);
  Fn fn = [w, b](const std::vector<Tensor> &x) { return std::vector<Tensor>{relu(mm(x[0], w) + b)}; };
  std::vector<Tensor> in = {rnd({10, 16}, 33)};
  std::shared_ptr<ir::Graph> g = optimized(fn, in);
  ASSERT_EQ(g->num_nodes(), 1u);
  const ir::Node &grp = *g->nodes()[0];
  std::vector<Tensor> ops;
  for (const ir::Value *v : grp.operands()) ops.push_back(v->kind() == ir::Value::Kind::Input ? in[0] : v->tensor());
  auto step = codegen::EpilogueStep::build(grp, ops);
  Tensor out = detail::make_tensor({10, 24}, kFloat32);
  step->run_into(ops, {out});
  EXPECT_TRUE(near({out}, fn(in)));
  EXPECT_THROW(step->run_into(ops, {detail::make_tensor({24, 10}, kFloat32)}), Error);
}

// ---------------------------------------------------------------- workloads

class EpilogueWorkload : public ::testing::TestWithParam<std::string> {};

TEST_P(EpilogueWorkload, CompiledEqualsEager) {
  examples::Workload w = examples::find_example(GetParam())->make();
  std::vector<Tensor> want = w.fn(copies(w.inputs));
  std::vector<Tensor> got = run_compiled(w.fn, copies(w.inputs));
  EXPECT_TRUE(near(got, want));
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(w.fn, o);
  EXPECT_TRUE(near(f(copies(w.inputs)), want));
  EXPECT_TRUE(near(f(copies(w.inputs)), want)) << "second call (arena reused)";
  // The default plan computes groups in place (an epilogue result never lands
  // on an operand it still reads); the same without in-place updates.
  o.pipeline = "decompose,canonicalize,cse,dce,layout,fuse,fuse-horizontal,materialize-views,plan-memory-no-inplace";
  CompiledFunction separate = compile(w.fn, o);
  EXPECT_TRUE(near(separate(copies(w.inputs)), want));
  EXPECT_TRUE(near(separate(copies(w.inputs)), want));
}

INSTANTIATE_TEST_SUITE_P(Contractions, EpilogueWorkload,
                         ::testing::Values("w4-mlp-block", "w5-gpt2-block", "w7-resnet-block"),
                         [](const auto &info) {
                           std::string s = info.param;
                           for (char &c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(EpilogueStructure, W4BothMatmulsCarryTheirEpilogues) {
  examples::Workload w = examples::find_example("w4-mlp-block")->make();
  auto g = optimized(w.fn, w.inputs);
  ASSERT_EQ(g->num_nodes(), 2u) << ir::print(*g);
  for (const ir::Node *n : g->nodes()) EXPECT_TRUE(codegen::is_epilogue_group(*n)) << ir::print(*g);
  EXPECT_TRUE(body_has(*g->nodes()[0], OpId::Tanh)) << "gelu's tanh in the first epilogue";
}

TEST(EpilogueStructure, W5ElementwiseAndNormalizationOnlyInGroups) {
  examples::Workload w = examples::find_example("w5-gpt2-block")->make();
  auto g = optimized(w.fn, w.inputs);
  int epilogues = 0, with_bias = 0;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() == ir::Node::Kind::FusionGroup) {
      if (!codegen::is_epilogue_group(*n)) continue;
      ++epilogues;
      with_bias += body_has(*n, OpId::Add);
      continue;
    }
    OpKind k = n->info().kind;
    EXPECT_TRUE(k == OpKind::View) << "top-level " << n->mnemonic() << " outside any group:\n" << ir::print(*g);
  }
  // qkv, q@k^T (scale + mask), p@v (merged layout), proj (+bias +x), fc (+bias, gelu), fc2 (+bias +x).
  EXPECT_EQ(epilogues, 6) << ir::print(*g);
  EXPECT_EQ(with_bias, 4) << "the four linear layers' biases sit in epilogues";
}

TEST(EpilogueStructure, W7BatchNormReluAndResidualInConvEpilogues) {
  examples::Workload w = examples::find_example("w7-resnet-block")->make();
  auto g = optimized(w.fn, w.inputs);
  std::vector<const ir::Node *> convs;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() == ir::Node::Kind::Op) {
      EXPECT_NE(n->info().kind, OpKind::Contraction) << ir::print(*g);
      continue;
    }
    const ir::Node *c = contraction_in(*n);
    if (c && c->op() == OpId::Conv2d) convs.push_back(n);
  }
  ASSERT_EQ(convs.size(), 2u) << ir::print(*g);
  for (const ir::Node *grp : convs) {
    EXPECT_TRUE(body_has(*grp, OpId::Sub) && body_has(*grp, OpId::Mul)) << "batch-norm (x - mean) * scale";
    EXPECT_TRUE(body_has(*grp, OpId::Relu));
  }
  // The residual: the second conv's epilogue reads the block input x.
  const ir::Node &second = *convs[1];
  bool reads_x = false;
  for (size_t i = 0; i < second.operands().size(); ++i)
    if (second.operand(i) == g->inputs()[0]) {
      const ir::Value *in = second.body()->inputs()[i];
      for (const ir::Node *n : second.body()->nodes())
        if (n->op() == OpId::Add)
          for (const ir::Value *v : n->operands()) reads_x |= v == in;
    }
  EXPECT_TRUE(reads_x) << ir::print(*g);
}

// W5's head split, k^T and head merge cost no copy: walking the optimized graph
// on real buffers laid out as the plan lays them out (group results with the
// strides of their type), every reshape/view is an alias of its operand and
// every contraction operand is a matrix BLAS reads directly (unit stride in one
// of its last two dims: a leading dimension or a transpose flag, no packing).
TEST(EpilogueStructure, W5HeadSplitMergeAndKTransposeAreViews) {
  examples::Workload w = examples::find_example("w5-gpt2-block")->make();
  auto g = optimized(w.fn, w.inputs);
  std::unordered_map<const ir::Value *, Tensor> val;
  for (size_t i = 0; i < g->inputs().size(); ++i) val[g->inputs()[i]] = w.inputs[i];
  for (const ir::Value *p : g->params()) val[p] = p->tensor();
  for (const ir::Value *c : g->consts()) val[c] = c->tensor();
  auto blas_ready = [](const Tensor &t) {
    int64_t rows = t.size(-2), cols = t.size(-1), rs = t.stride(-2), cs = t.stride(-1);
    return (cs == 1 && rs >= cols) || (rs == 1 && cs >= rows);
  };
  int reshapes = 0, contractions = 0;
  for (const ir::Node *n : g->nodes()) {
    std::vector<Tensor> ins;
    for (const ir::Value *v : n->operands()) ins.push_back(v ? val.at(v) : Tensor());
    if (n->kind() == ir::Node::Kind::FusionGroup) {
      if (const ir::Node *c = contraction_in(*n)) {
        for (const ir::Value *v : c->operands()) {
          size_t i = 0;
          while (n->body()->inputs()[i] != v) ++i;
          EXPECT_TRUE(blas_ready(ins[i])) << "operand " << shape_str(ins[i].sizes()) << " strides "
                                          << shape_str(ins[i].strides());
        }
        ++contractions;
      }
      for (const ir::Value *r : n->results()) {
        const ir::TensorType &t = r->type();
        Tensor buf = detail::make_tensor(t.shape, t.dtype);
        if (t.strides) buf = buf.as_strided(t.shape, *t.strides, 0); // a permutation of the same extent
        val[r] = buf;
      }
      continue;
    }
    ASSERT_EQ(n->info().kind, OpKind::View) << n->mnemonic();
    std::vector<Tensor> outs = run_op(n->op(), ins, n->attrs());
    for (size_t i = 0; i < outs.size(); ++i) {
      EXPECT_TRUE(outs[i].is_alias_of(ins[0])) << n->mnemonic() << " copies";
      val[n->results()[i]] = outs[i];
    }
    reshapes += n->op() == OpId::Reshape || n->op() == OpId::View;
  }
  EXPECT_EQ(contractions, 6);
  EXPECT_EQ(reshapes, 4) << "three head-split views and the head-merge reshape";
}

// ---------------------------------------------------------------- channels-last conv chains

namespace {
const char *kChannelsLastPipeline = "decompose,canonicalize,cse,dce,layout-channels-last,fuse,fuse-horizontal,materialize-views,plan-memory";

std::shared_ptr<ir::Graph> optimized_channels_last(const Fn &fn, const std::vector<Tensor> &in) {
  std::shared_ptr<ir::Graph> g = trace(fn, in);
  passes::PipelineOptions o;
  o.verify_each = true;
  passes::run_pipeline(*g, kChannelsLastPipeline, o);
  return g;
}

// The conv nodes inside the graph's epilogue groups.
std::vector<const ir::Node *> convs_of(const ir::Graph &g) {
  std::vector<const ir::Node *> convs;
  for (const ir::Node *n : g.nodes())
    if (n->kind() == ir::Node::Kind::FusionGroup)
      if (const ir::Node *c = contraction_in(*n); c && c->op() == OpId::Conv2d) convs.push_back(c);
  return convs;
}

// Compiled with the conv chains forced channels-last: every conv but a chain's
// last writes channels-last (`want_channels_last` of them), the last reads
// channels-last and writes NCHW; equal to eager, every output NCHW-contiguous,
// on the plan executor and through kiln::compile.
void expect_channels_last_equals_eager(const Fn &fn, const std::vector<Tensor> &in, size_t want_channels_last) {
  std::shared_ptr<ir::Graph> g = optimized_channels_last(fn, copies(in));
  size_t channels_last = 0;
  for (const ir::Node *c : convs_of(*g)) {
    const ir::TensorType &t = c->result()->type();
    if (!t.strides) continue;
    EXPECT_EQ(t.strides->vec(), detail::channels_last_strides(t.shape).vec()) << ir::print(*g);
    ++channels_last;
  }
  EXPECT_EQ(channels_last, want_channels_last) << ir::print(*g);
  const std::vector<Tensor> want = fn(copies(in));
  auto exe = codegen::make_executable(g, copies(in));
  EXPECT_EQ(exe->stats().groups_fallen_back, 0);
  std::vector<Tensor> got = exe->run(copies(in));
  EXPECT_TRUE(near(got, want));
  for (const Tensor &t : got) EXPECT_TRUE(t.is_contiguous()) << shape_str(t.strides());
  CompileOptions o;
  o.fallback = Fallback::Off;
  o.pipeline = kChannelsLastPipeline;
  CompiledFunction f = compile(fn, o);
  for (int call = 0; call < 2; ++call) { // the second call reuses the arena
    std::vector<Tensor> y = f(copies(in));
    EXPECT_TRUE(near(y, want)) << "call " << call;
    for (const Tensor &t : y) EXPECT_TRUE(t.is_contiguous()) << shape_str(t.strides());
  }
}
} // namespace

TEST(EpilogueChannelsLast, W7CompiledEqualsEagerWithNchwOutputs) {
  examples::Workload w = examples::find_example("w7-resnet-block")->make();
  expect_channels_last_equals_eager(w.fn, w.inputs, 1);
}

TEST(EpilogueChannelsLast, ChainVariants) {
  // Bias, a strided second conv (the residual no longer fits), a grouped conv,
  // a 1x1 conv, odd sizes, and one thread as well as two.
  Tensor w1 = rnd({12, 6, 3, 3}, 50, kFloat32, -0.3, 0.3), b1 = rnd({12}, 51);
  Tensor w2 = rnd({6, 12, 3, 3}, 52, kFloat32, -0.2, 0.2), w3 = rnd({6, 3, 3, 3}, 53, kFloat32, -0.3, 0.3);
  Tensor w4 = rnd({6, 6, 1, 1}, 54, kFloat32, -0.4, 0.4), s = rnd({1, 6, 1, 1}, 55);
  Fn fn = [=](const std::vector<Tensor> &x) {
    Tensor h = relu(conv2d(x[0], w1, b1, 1, 1));
    h = sigmoid(conv2d(h, w2, {}, 1, 1) * s) + x[0];
    Tensor g = tanh(conv2d(h, w3, {}, 2, 1, 1, 2));
    return std::vector<Tensor>{conv2d(g, w4, {}, 1, 0) + 1.0, h};
  };
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_channels_last_equals_eager(fn, {rnd({3, 6, 11, 13}, 56)}, 2);
  }
  set_num_threads(saved);
}
