// A whole training step (zero_grad, forward, loss, backward, optimizer step)
// under kiln::compile, written exactly as the eager loop body, against the same
// step run eagerly on a copy of the parameters: parameters, gradients and
// optimizer state after N steps agree, the compiled calls run no eager code,
// and the graph holds the backward and the write-backs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "frontend/compile.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/printer.h"
#include "runtime/autograd.h"
#include "runtime/loss.h"
#include "runtime/ops.h"
#include "runtime/optim.h"

using namespace kiln;

namespace {

double max_abs_diff(const Tensor &a, const Tensor &b) {
  return to(abs(to(a, kFloat64) - to(b, kFloat64)).max(), kFloat64).item<double>();
}

double max_abs(const Tensor &a) { return to(abs(to(a, kFloat64)).max(), kFloat64).item<double>(); }

// A two-layer MLP classifier's parameters, from a seed.
std::vector<Tensor> mlp_params(uint64_t seed, int64_t in, int64_t hidden, int64_t classes) {
  manual_seed(seed);
  std::vector<Tensor> p = {randn({hidden, in}) * 0.5, zeros({hidden}), randn({classes, hidden}) * 0.3,
                           zeros({classes})};
  for (Tensor &t : p) t.requires_grad_();
  return p;
}

std::vector<Tensor> copies(const std::vector<Tensor> &p) {
  std::vector<Tensor> c;
  for (const Tensor &t : p) c.push_back(t.detach().clone().requires_grad_());
  return c;
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// The eager loop body, the same code compiled and run eagerly; with dropout
// (training mode) on the hidden layer when dropout_p > 0.
ModelFn mlp_step(std::vector<Tensor> p, optim::Optimizer &opt, double dropout_p = 0.0) {
  return [p, &opt, dropout_p](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    opt.zero_grad();
    Tensor h = relu(linear(in[0], p[0], p[1]));
    if (dropout_p > 0) h = dropout(h, dropout_p, true);
    Tensor loss = cross_entropy(linear(h, p[2], p[3]), in[1]);
    loss.backward();
    opt.step();
    return {loss.detach()};
  };
}

struct Data {
  Tensor x, y;
};

Data blobs(uint64_t seed, int64_t n, int64_t in, int64_t classes) {
  manual_seed(seed);
  Tensor y = randint(classes, {n});
  Tensor x = randn({n, in}) + to(y, kFloat32).unsqueeze(1) * 1.5;
  return {x, y};
}

// Trains two copies for `steps`: one eagerly, one compiled; returns the
// largest parameter difference, checking losses along the way.
// Each step of both starts from the same seed: with dropout, equal masks.
void expect_compiled_matches_eager(const MakeOpt &make, int steps, double tol, double dropout_p = 0.0) {
  const std::vector<Tensor> pe = mlp_params(7, 4, 16, 3), pc = copies(pe);
  std::unique_ptr<optim::Optimizer> oe = make(pe), oc = make(pc);
  ModelFn eager = mlp_step(pe, *oe, dropout_p);
  CompiledFunction compiled = compile(mlp_step(pc, *oc, dropout_p), CompileOptions{.name = "train_step"});
  double loss_diff = 0;
  double first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    Data d = blobs(100 + uint64_t(s), 32, 4, 3);
    manual_seed(500 + uint64_t(s));
    Tensor le = eager({d.x, d.y}).at(0);
    manual_seed(500 + uint64_t(s));
    Tensor lc = compiled({d.x, d.y}).at(0);
    loss_diff = std::max(loss_diff, max_abs_diff(le, lc));
    if (s == 0) first = le.item<double>();
    last = le.item<double>();
  }
  EXPECT_LT(last, first) << "the eager reference did not train";
  EXPECT_LT(loss_diff, tol);
  for (size_t i = 0; i < pe.size(); ++i) {
    EXPECT_LT(max_abs_diff(pe[i], pc[i]), tol * (1 + max_abs(pe[i]))) << "parameter " << i;
    ASSERT_TRUE(pc[i].grad().defined()) << "parameter " << i << " has no grad after compiled steps";
    EXPECT_LT(max_abs_diff(pe[i].grad(), pc[i].grad()), tol * (1 + max_abs(pe[i].grad()))) << "grad " << i;
    EXPECT_FALSE(pc[i].grad().requires_grad());
  }
  CompileStats st = compiled.stats();
  EXPECT_EQ(st.calls, steps);
  EXPECT_EQ(st.eager_calls, 0) << st.last_fallback_reason;
  EXPECT_EQ(st.compiles, 1);
}

TEST(CompiledTraining, SgdMomentumMatchesEagerOver50Steps) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9).weight_decay(1e-3));
      },
      50, 2e-5);
}

TEST(CompiledTraining, NesterovWithDampeningFreeMomentum) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.05).momentum(0.8).nesterov(true));
      },
      20, 2e-5);
}

TEST(CompiledTraining, AdamMatchesEagerOver50Steps) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01)); }, 50, 2e-5);
}

TEST(CompiledTraining, AdamWAmsgradMatchesEager) {
  expect_compiled_matches_eager(
      [](std::vector<Tensor> p) {
        return std::make_unique<optim::AdamW>(p, optim::AdamWOptions(0.01).amsgrad(true));
      },
      30, 2e-5);
}

TEST(CompiledTraining, TwoThreadsMatchOneThread) {
  const MakeOpt make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::Adam>(p, optim::AdamOptions(0.01));
  };
  set_num_threads(2);
  expect_compiled_matches_eager(make, 50, 2e-5);
  set_num_threads(1);
  expect_compiled_matches_eager(make, 50, 2e-5);
}

// Training-mode dropout compiles: its mask is a random node that draws, in
// every call, the numbers eager draws from the same seed, at any thread count.
TEST(CompiledTraining, DropoutMasksEqualEagerOver50Steps) {
  const MakeOpt make = [](std::vector<Tensor> p) {
    return std::make_unique<optim::SGD>(p, optim::SGDOptions(0.1).momentum(0.9));
  };
  set_num_threads(2);
  expect_compiled_matches_eager(make, 50, 2e-5, 0.3);
  set_num_threads(1);
  expect_compiled_matches_eager(make, 50, 2e-5, 0.3);
}

// The graph: one trace holds the forward, the backward (the transposed
// products) and the write-backs of parameters, gradients and Adam's state.
TEST(CompiledTraining, GraphHoldsBackwardAndWriteBacks) {
  const std::vector<Tensor> p = mlp_params(3, 4, 8, 3);
  optim::Adam opt(p, optim::AdamOptions(0.01));
  CompiledFunction f = compile(mlp_step(p, opt), CompileOptions{.name = "graph_check"});
  Data d = blobs(5, 16, 4, 3);
  std::shared_ptr<const ir::Graph> g = f.graph_for({d.x, d.y});
  ASSERT_TRUE(g) << f.stats().last_fallback_reason;
  // 4 parameters + 4 gradients + 4 x (step, exp_avg, exp_avg_sq).
  EXPECT_EQ(g->write_backs().size(), 4u + 4u + 12u);
  for (const Tensor &t : p) EXPECT_TRUE(t.grad().defined());
}

// The update of all parameters is a few kernels, not one per parameter per op:
// each parameter's new value and both Adam moments come from one fused kernel
// (fuse makes the moments' groups one), and the four step counts (0-dim
// float64) from one kernel (fuse-horizontal batches small groups).
TEST(CompiledTraining, AdamUpdateIsAFewKernels) {
  const std::vector<Tensor> p = mlp_params(3, 4, 8, 3);
  optim::Adam opt(p, optim::AdamOptions(0.01));
  CompiledFunction f = compile(mlp_step(p, opt), CompileOptions{.name = "update_kernels"});
  Data d = blobs(5, 16, 4, 3);
  f({d.x, d.y}); // after a call, each grad() is the buffer its write-back targets
  std::shared_ptr<const ir::Graph> g = f.graph_for({d.x, d.y});
  ASSERT_TRUE(g) << f.stats().last_fallback_reason;
  std::set<const ir::Node *> steps, all;
  std::map<std::string, std::set<const ir::Node *>> per_param; // by shape: the four shapes differ
  for (const ir::WriteBack &w : g->write_backs()) {
    bool grad = false;
    for (const Tensor &t : p) grad |= w.target->tensor().is_same(t.grad());
    if (grad) continue; // a bias's gradient is a view of its column sum
    const ir::Node *by = w.value->producer();
    ASSERT_TRUE(by && by->kind() == ir::Node::Kind::FusionGroup) << "%" << w.target->name() << " <- %"
                                                                 << w.value->name();
    if (w.target->type().dtype == kFloat64) steps.insert(by);
    else per_param[shape_str(w.target->type().shape)].insert(by);
    all.insert(by);
  }
  EXPECT_EQ(steps.size(), 1u) << ir::print(*g);
  ASSERT_EQ(per_param.size(), p.size());
  for (const auto &[shape, groups] : per_param)
    EXPECT_EQ(groups.size(), 1u) << "parameter " << shape << " is updated by " << groups.size()
                                 << " kernels\n" << ir::print(*g);
  EXPECT_LE(all.size(), 1 + p.size());
}

// Each traced node carries the phase its op ran in: the forward's, then the
// engine's backward (the transposed products among them), then the optimizer's
// update (the write-backs' values); a dump prints a `phase` line at each change.
TEST(CompiledTraining, TracedStepMarksForwardBackwardAndUpdate) {
  const std::vector<Tensor> p = mlp_params(3, 4, 8, 3);
  optim::SGD opt(p, optim::SGDOptions(0.1).momentum(0.9));
  Data d = blobs(5, 16, 4, 3);
  std::unique_ptr<ir::Graph> g = trace(mlp_step(p, opt), {d.x, d.y}, "phases");
  std::vector<StepPhase> order;
  int mm_in_backward = 0;
  for (const ir::Node *n : g->nodes()) {
    if (order.empty() || order.back() != n->phase()) order.push_back(n->phase());
    if (n->phase() == StepPhase::Backward && n->kind() == ir::Node::Kind::Op &&
        (n->op() == OpId::Mm || n->op() == OpId::Matmul))
      ++mm_in_backward;
  }
  EXPECT_EQ(order, (std::vector<StepPhase>{StepPhase::Forward, StepPhase::Backward, StepPhase::Update}));
  EXPECT_GE(mm_in_backward, 3); // two weight gradients and the hidden layer's input gradient
  for (const ir::WriteBack &w : g->write_backs())
    if (w.value->producer()) EXPECT_NE(w.value->producer()->phase(), StepPhase::Forward) << w.target->name();
  const std::string text = ir::print(*g);
  const size_t back = text.find("  phase backward\n"), update = text.find("  phase update\n");
  ASSERT_NE(back, std::string::npos) << text;
  ASSERT_NE(update, std::string::npos) << text;
  EXPECT_LT(back, update);
  EXPECT_EQ(text.find("phase forward"), std::string::npos); // the first phase needs no line
  // Inference graphs print no phase lines.
  EXPECT_EQ(ir::print(*trace([](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(in[0])}; },
                             {d.x}, "inference"))
                .find("phase"),
            std::string::npos);
}

// Code outside the compiled step may reset the grads (an eager zero_grad(), or
// a call that failed after the step's own zero_grad ran): the next compiled step
// leaves each parameter's grad() holding that step's gradient, as eager does.
TEST(CompiledTraining, GradsAreBackAfterAnEagerZeroGradOrAFailedCall) {
  const std::vector<Tensor> pe = mlp_params(9, 4, 8, 3), pc = copies(pe);
  optim::SGD oe(pe, optim::SGDOptions(0.1)), oc(pc, optim::SGDOptions(0.1));
  ModelFn eager = mlp_step(pe, oe);
  CompiledFunction compiled = compile(mlp_step(pc, oc));
  Data d = blobs(5, 16, 4, 3);
  eager({d.x, d.y});
  compiled({d.x, d.y});
  oc.zero_grad();
  EXPECT_THROW(compiled({randn({16, 5}), d.y}), Error); // fails in linear, after the step's zero_grad
  for (const Tensor &p : pc) EXPECT_FALSE(p.grad().defined());
  eager({d.x, d.y});
  compiled({d.x, d.y});
  for (size_t i = 0; i < pc.size(); ++i) {
    ASSERT_TRUE(pc[i].grad().defined()) << "parameter " << i;
    EXPECT_LT(max_abs_diff(pe[i].grad(), pc[i].grad()), 1e-5) << "parameter " << i;
    EXPECT_LT(max_abs_diff(pe[i], pc[i]), 1e-5) << "parameter " << i;
  }
  EXPECT_EQ(compiled.stats().compiles, 2); // the failed call's signature too
}

// Grad mode off: eager's backward fails, and so does the compiled step (which
// retraces rather than run a graph that trains).
TEST(CompiledTraining, NoGradCallFailsAsEager) {
  const std::vector<Tensor> p = mlp_params(3, 4, 8, 3);
  optim::SGD opt(p, optim::SGDOptions(0.1));
  CompiledFunction f = compile(mlp_step(p, opt), CompileOptions{.name = "nograd"});
  Data d = blobs(5, 16, 4, 3);
  f({d.x, d.y});
  const Tensor before = p[0].detach().clone();
  NoGradGuard off;
  EXPECT_THROW(f({d.x, d.y}), Error);
  EXPECT_EQ(max_abs_diff(before, p[0]), 0.0);
}

// A function that only reads parameters that require grad (inference without
// no_grad) still runs eagerly, so its results carry history.
TEST(CompiledTraining, InferenceOnGradParamsKeepsHistory) {
  const std::vector<Tensor> p = mlp_params(3, 4, 8, 3);
  CompiledFunction f = compile([p](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    return {linear(in[0], p[0], p[1])};
  });
  Data d = blobs(5, 16, 4, 3);
  Tensor out = f({d.x, d.y}).at(0);
  EXPECT_TRUE(out.requires_grad());
  out.sum().backward();
  EXPECT_TRUE(p[0].grad().defined());
}

} // namespace

// A parameter that is a transposed view (not dense row-major): its update is
// copied into it, never computed into it in a row-major layout
// (ir::write_backs_in_place), and compiled SGD with momentum equals eager's.
TEST(CompiledTraining, TransposedParameterIsUpdatedLikeEager) {
  auto make = [] {
    manual_seed(31);
    std::vector<Tensor> p = {randn({3, 5}).t(), zeros({3})};
    for (Tensor &t : p) t.requires_grad_();
    return p;
  };
  std::vector<Tensor> pe = make(), pc = make();
  ASSERT_FALSE(pc[0].is_contiguous());
  optim::SGD oe(pe, optim::SGDOptions(0.1).momentum(0.9)), oc(pc, optim::SGDOptions(0.1).momentum(0.9));
  auto step = [](std::vector<Tensor> &p, optim::SGD &o) {
    return [&p, &o](const std::vector<Tensor> &in) {
      o.zero_grad();
      Tensor loss = mse_loss(tanh(matmul(in[0], p[0]) + p[1]), in[1]);
      loss.backward();
      o.step();
      return std::vector<Tensor>{loss.detach()};
    };
  };
  ModelFn eager = step(pe, oe);
  CompiledFunction compiled = compile(step(pc, oc), CompileOptions{.fallback = Fallback::Off});
  manual_seed(32);
  for (int s = 0; s < 10; ++s) {
    Tensor x = randn({8, 5}), y = randn({8, 3});
    eager({x, y});
    compiled({x, y});
  }
  for (size_t i = 0; i < pe.size(); ++i) EXPECT_LT(max_abs_diff(pe[i], pc[i]), 1e-5) << "parameter " << i;
  EXPECT_FALSE(pc[0].is_contiguous());
}

// A step whose forward updates a view of an activation in place (torch's
// CopySlices in the backward) compiles, and trains as eager does.
TEST(CompiledTraining, InPlaceUpdateOfAViewMatchesEager) {
  const std::vector<Tensor> pe = mlp_params(11, 4, 16, 3), pc = copies(pe);
  optim::SGD oe(pe, optim::SGDOptions(0.1).momentum(0.9)), oc(pc, optim::SGDOptions(0.1).momentum(0.9));
  auto step = [](const std::vector<Tensor> &p, optim::SGD &o) {
    return [p, &o](const std::vector<Tensor> &in) {
      o.zero_grad();
      Tensor h = linear(in[0], p[0], p[1]);
      h.slice(1, 0, 8).mul_(in[2]);     // half the hidden units scaled by an input
      h.select(1, 9).add_(p[1][0]);     // one more shifted by a parameter's element
      Tensor loss = cross_entropy(linear(relu(h), p[2], p[3]), in[1]);
      loss.backward();
      o.step();
      return std::vector<Tensor>{loss.detach()};
    };
  };
  ModelFn eager = step(pe, oe);
  CompiledFunction compiled = compile(step(pc, oc), CompileOptions{.fallback = Fallback::Off});
  for (int s = 0; s < 10; ++s) {
    Data d = blobs(200 + uint64_t(s), 32, 4, 3);
    Tensor scale = full({8}, 0.5f + 0.1f * float(s));
    Tensor le = eager({d.x, d.y, scale}).at(0), lc = compiled({d.x, d.y, scale}).at(0);
    EXPECT_LT(max_abs_diff(le, lc), 1e-5) << "step " << s;
  }
  for (size_t i = 0; i < pe.size(); ++i) {
    EXPECT_LT(max_abs_diff(pe[i], pc[i]), 1e-5 * (1 + max_abs(pe[i]))) << "parameter " << i;
    EXPECT_LT(max_abs_diff(pe[i].grad(), pc[i].grad()), 1e-5 * (1 + max_abs(pe[i].grad()))) << "grad " << i;
  }
  EXPECT_EQ(compiled.stats().eager_calls, 0) << compiled.stats().last_fallback_reason;
}
