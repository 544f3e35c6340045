// Losses and optimizers against naive double loops written from torch's
// documented formulas (not from kiln's code), their gradients through autograd,
// and torch's errors.
#include <gtest/gtest.h>

#include <cmath>

#include "expect_error.h"
#include "runtime/autograd.h"
#include "runtime/functional.h"
#include "runtime/loss.h"
#include "runtime/ops.h"
#include "runtime/optim.h"

using namespace kiln;

#define EXPECT_KILN_ERROR(stmt, part) ::kiln::testing::expect_error([&] { (void)(stmt); }, {part})

namespace {

std::vector<double> vals(const Tensor &t) {
  Tensor c = to(t, kFloat64).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

double scalar(const Tensor &t) { return to(t, kFloat64).item<double>(); }

const std::vector<double> kX = {0.3, -1.2, 2.0, 0.7, -0.4, 1.1}; // [2, 3]
const std::vector<double> kY = {0.0, -1.0, 1.5, 1.0, 0.2, 0.9};

TEST(Loss, MseAndL1AgainstLoops) {
  Tensor x = tensor(kX).reshape({2, 3}), y = tensor(kY).reshape({2, 3});
  double sq = 0, ab = 0;
  for (size_t i = 0; i < kX.size(); ++i) {
    sq += (kX[i] - kY[i]) * (kX[i] - kY[i]);
    ab += std::abs(kX[i] - kY[i]);
  }
  EXPECT_NEAR(scalar(mse_loss(x, y)), sq / 6, 1e-12);
  EXPECT_NEAR(scalar(mse_loss(x, y, "sum")), sq, 1e-12);
  EXPECT_NEAR(scalar(l1_loss(x, y)), ab / 6, 1e-12);
  std::vector<double> none = vals(mse_loss(x, y, "none"));
  for (size_t i = 0; i < kX.size(); ++i) EXPECT_NEAR(none[i], (kX[i] - kY[i]) * (kX[i] - kY[i]), 1e-12);
}

// cross_entropy over [N=3, C=4] logits: loss_n = -w[t_n] log softmax(x_n)[t_n], mean over
// the weights of kept targets; the gradient is w[t_n] (softmax(x_n) - onehot(t_n)) / sum(w).
TEST(Loss, CrossEntropyAndItsGradientAgainstLoops) {
  const std::vector<double> logits = {0.1, 1.2, -0.3, 0.8, 2.0, -1.0, 0.5, 0.0, -0.7, 0.4, 1.5, -0.2};
  const std::vector<int64_t> target = {1, 0, -100};
  const std::vector<double> weight = {0.5, 2.0, 1.0, 1.5};
  Tensor x = tensor(logits).reshape({3, 4}).requires_grad_();
  Tensor t = tensor(target);
  Tensor loss = cross_entropy(x, t, tensor(weight));
  loss.backward();
  double total = 0, wsum = 0;
  std::vector<double> grad(12, 0.0);
  std::vector<std::vector<double>> sm(3, std::vector<double>(4));
  for (int n = 0; n < 3; ++n) {
    double mx = -1e30, z = 0;
    for (int c = 0; c < 4; ++c) mx = std::max(mx, logits[size_t(n * 4 + c)]);
    for (int c = 0; c < 4; ++c) z += std::exp(logits[size_t(n * 4 + c)] - mx);
    for (int c = 0; c < 4; ++c) sm[size_t(n)][size_t(c)] = std::exp(logits[size_t(n * 4 + c)] - mx) / z;
    if (target[size_t(n)] == -100) continue;
    const double w = weight[size_t(target[size_t(n)])];
    total += -w * std::log(sm[size_t(n)][size_t(target[size_t(n)])]);
    wsum += w;
  }
  for (int n = 0; n < 3; ++n) {
    if (target[size_t(n)] == -100) continue;
    const double w = weight[size_t(target[size_t(n)])];
    for (int c = 0; c < 4; ++c)
      grad[size_t(n * 4 + c)] = w * (sm[size_t(n)][size_t(c)] - (c == target[size_t(n)] ? 1.0 : 0.0)) / wsum;
  }
  EXPECT_NEAR(scalar(loss), total / wsum, 1e-12);
  std::vector<double> g = vals(x.grad());
  for (size_t i = 0; i < 12; ++i) EXPECT_NEAR(g[i], grad[i], 1e-12) << i;
}

// torch's label smoothing: (1 - e) nll + e / C * mean_n(-sum_c log p_nc).
TEST(Loss, CrossEntropyLabelSmoothingAndProbabilityTargets) {
  const std::vector<double> logits = {0.1, 1.2, -0.3, 2.0, -1.0, 0.5};
  Tensor x = tensor(logits).reshape({2, 3});
  const double e = 0.2;
  double nll = 0, smooth = 0, soft = 0;
  const int64_t target[2] = {2, 0};
  const double probs[6] = {0.2, 0.5, 0.3, 0.6, 0.1, 0.3};
  for (int n = 0; n < 2; ++n) {
    double z = 0;
    for (int c = 0; c < 3; ++c) z += std::exp(logits[size_t(n * 3 + c)]);
    for (int c = 0; c < 3; ++c) {
      const double lp = logits[size_t(n * 3 + c)] - std::log(z);
      smooth -= lp;
      soft -= probs[n * 3 + c] * lp;
      if (c == target[n]) nll -= lp;
    }
  }
  const double want = (1 - e) * nll / 2 + e / 3 * smooth / 2;
  EXPECT_NEAR(scalar(cross_entropy(x, tensor({int64_t(2), int64_t(0)}), {}, -100, "mean", e)), want, 1e-12);
  EXPECT_NEAR(scalar(cross_entropy(x, tensor(std::vector<double>(probs, probs + 6)).reshape({2, 3}))), soft / 2,
              1e-12);
}

TEST(Loss, NllLossSumAndNone) {
  Tensor logp = log_softmax(tensor(kX).reshape({2, 3}), 1);
  std::vector<double> lp = vals(logp);
  Tensor t = tensor({int64_t(2), int64_t(1)});
  EXPECT_NEAR(scalar(nll_loss(logp, t, {}, -100, "sum")), -(lp[2] + lp[4]), 1e-12);
  std::vector<double> none = vals(nll_loss(logp, t, {}, -100, "none"));
  EXPECT_NEAR(none[0], -lp[2], 1e-12);
  EXPECT_NEAR(none[1], -lp[4], 1e-12);
}

// -w [pw t log s(x) + (1 - t) log(1 - s(x))], per element, then the mean; the logits
// reach +-30, where a naive log(sigmoid) in float64 still holds but float32 would not.
TEST(Loss, BinaryCrossEntropyWithLogitsAgainstLoops) {
  const std::vector<double> x = {0.5, -2.0, 30.0, -30.0, 1.0, 0.0};
  const std::vector<double> t = {1.0, 0.0, 1.0, 0.0, 0.3, 0.7};
  const std::vector<double> w = {1.0, 2.0, 0.5, 1.5, 1.0, 3.0};
  const std::vector<double> pw = {2.0, 0.5, 1.0}; // per class, last dim of [2, 3]
  double sum_l = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = 1 / (1 + std::exp(-x[i]));
    sum_l += -w[i] * (pw[i % 3] * t[i] * std::log(s) + (1 - t[i]) * std::log1p(-s));
  }
  Tensor got = binary_cross_entropy_with_logits(tensor(x).reshape({2, 3}), tensor(t).reshape({2, 3}),
                                                tensor(w).reshape({2, 3}), "mean", tensor(pw));
  EXPECT_NEAR(scalar(got), sum_l / 6, 1e-9);
}

// torch::nn::functional's spellings call the same functions.
TEST(Loss, FunctionalOptions) {
  namespace F = kiln::nn::functional;
  Tensor x = tensor(kX).reshape({2, 3}), y = tensor(kY).reshape({2, 3});
  Tensor t = tensor({int64_t(2), int64_t(0)});
  EXPECT_EQ(scalar(F::mse_loss(x, y, F::MSELossFuncOptions().reduction("sum"))), scalar(mse_loss(x, y, "sum")));
  EXPECT_EQ(scalar(F::cross_entropy(x, t, F::CrossEntropyFuncOptions().label_smoothing(0.1))),
            scalar(cross_entropy(x, t, {}, -100, "mean", 0.1)));
  EXPECT_EQ(scalar(F::nll_loss(x, t, F::NLLLossFuncOptions().ignore_index(0))), scalar(nll_loss(x, t, {}, 0)));
  EXPECT_EQ(scalar(F::binary_cross_entropy_with_logits(x, sigmoid(y))),
            scalar(binary_cross_entropy_with_logits(x, sigmoid(y))));
}

TEST(LossErrors, TorchsMessages) {
  Tensor x = tensor(kX).reshape({2, 3});
  EXPECT_KILN_ERROR(mse_loss(x, x, "avg"), "avg is not a valid value for reduction");
  EXPECT_KILN_ERROR(nll_loss(x, tensor(std::vector<int32_t>{0, 1})), "expected target of scalar type Long");
  EXPECT_KILN_ERROR(cross_entropy(x, tensor({int64_t(0), int64_t(1), int64_t(2)})),
                    "Expected input batch_size (2) to match target batch_size (3)");
  EXPECT_KILN_ERROR(cross_entropy(x, tensor({int64_t(0), int64_t(1)}), tensor({1.0, 2.0})),
                    "weight tensor should be defined either for all 3 classes");
  EXPECT_KILN_ERROR(binary_cross_entropy_with_logits(x, x.reshape({3, 2})), "must have the same shape as input");
}

// ---- optimizers: three steps with fixed gradients against torch's update rules as loops

struct Run {
  std::vector<double> p;
  std::vector<std::vector<double>> grads; // one per step
};

const Run kRun = {{0.5, -1.0, 2.0}, {{0.1, -0.2, 0.3}, {0.05, 0.4, -0.1}, {-0.3, 0.0, 0.2}}};

template <class Opt> std::vector<double> run_kiln(Opt &&make) {
  Tensor p = tensor(kRun.p).requires_grad_();
  auto opt = make(p);
  for (const auto &g : kRun.grads) {
    opt.zero_grad();
    EXPECT_FALSE(p.grad().defined());
    p.mutable_grad() = tensor(g);
    opt.step();
  }
  return vals(p);
}

TEST(Optim, SgdMomentumNesterovWeightDecay) {
  const double lr = 0.1, mu = 0.9, wd = 0.01;
  for (bool nesterov : {false, true}) {
    std::vector<double> p = kRun.p, buf(3);
    for (size_t s = 0; s < kRun.grads.size(); ++s)
      for (size_t i = 0; i < 3; ++i) {
        double g = kRun.grads[s][i] + wd * p[i];
        buf[i] = s == 0 ? g : mu * buf[i] + g;
        g = nesterov ? g + mu * buf[i] : buf[i];
        p[i] -= lr * g;
      }
    std::vector<double> got = run_kiln([&](Tensor &t) {
      return optim::SGD({t}, optim::SGDOptions(lr).momentum(mu).nesterov(nesterov).weight_decay(wd));
    });
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-12) << "nesterov " << nesterov << " i " << i;
  }
  // Dampening, plain momentum.
  std::vector<double> p = kRun.p, buf(3);
  for (size_t s = 0; s < kRun.grads.size(); ++s)
    for (size_t i = 0; i < 3; ++i) {
      buf[i] = s == 0 ? kRun.grads[s][i] : 0.5 * buf[i] + 0.7 * kRun.grads[s][i];
      p[i] -= 0.2 * buf[i];
    }
  std::vector<double> got =
      run_kiln([](Tensor &t) { return optim::SGD({t}, optim::SGDOptions(0.2).momentum(0.5).dampening(0.3)); });
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], p[i], 1e-12);
}

std::vector<double> adam_loop(double lr, double b1, double b2, double eps, double wd, bool amsgrad, bool decoupled) {
  std::vector<double> p = kRun.p, m(3), v(3), vmax(3);
  for (size_t s = 0; s < kRun.grads.size(); ++s) {
    const double t = double(s + 1);
    for (size_t i = 0; i < 3; ++i) {
      double g = kRun.grads[s][i];
      if (decoupled) p[i] *= 1 - lr * wd;
      else g += wd * p[i];
      m[i] = b1 * m[i] + (1 - b1) * g;
      v[i] = b2 * v[i] + (1 - b2) * g * g;
      vmax[i] = std::max(vmax[i], v[i]);
      const double vv = amsgrad ? vmax[i] : v[i];
      const double mhat = m[i] / (1 - std::pow(b1, t));
      p[i] -= lr * mhat / (std::sqrt(vv) / std::sqrt(1 - std::pow(b2, t)) + eps);
    }
  }
  return p;
}

TEST(Optim, AdamAndAdamW) {
  for (bool amsgrad : {false, true}) {
    std::vector<double> want = adam_loop(0.01, 0.8, 0.99, 1e-6, 0.1, amsgrad, false);
    std::vector<double> got = run_kiln([&](Tensor &t) {
      return optim::Adam(
          {t}, optim::AdamOptions(0.01).betas({0.8, 0.99}).eps(1e-6).weight_decay(0.1).amsgrad(amsgrad));
    });
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "adam amsgrad " << amsgrad;
    want = adam_loop(0.01, 0.9, 0.999, 1e-8, 0.05, amsgrad, true);
    got = run_kiln([&](Tensor &t) {
      return optim::AdamW({t}, optim::AdamWOptions(0.01).weight_decay(0.05).amsgrad(amsgrad));
    });
    for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "adamw amsgrad " << amsgrad;
  }
}

// A whole eager loop: 300 SGD steps of linear regression onto y = 2 x0 - 3 x1 + 1 recover it.
TEST(Optim, EagerTrainingLoopFitsALinearModel) {
  manual_seed(7);
  Tensor x = randn({64, 2});
  Tensor y = (x.select(1, 0) * 2.0 - x.select(1, 1) * 3.0 + 1.0).unsqueeze(1);
  Tensor w = zeros({1, 2}).requires_grad_(), b = zeros({1}).requires_grad_();
  optim::SGD opt({w, b}, optim::SGDOptions(0.1).momentum(0.9));
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    opt.zero_grad();
    Tensor loss = mse_loss(linear(x, w, b), y);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_GT(first, 1.0);
  EXPECT_LT(last, 1e-4);
  std::vector<double> wv = vals(w);
  EXPECT_NEAR(wv[0], 2.0, 1e-2);
  EXPECT_NEAR(wv[1], -3.0, 1e-2);
  EXPECT_NEAR(vals(b)[0], 1.0, 1e-2);
}

TEST(OptimErrors, TorchsMessages) {
  Tensor p = zeros({2}).requires_grad_();
  EXPECT_KILN_ERROR(optim::SGD({p}, optim::SGDOptions(-1)), "Invalid learning rate: -1");
  EXPECT_KILN_ERROR(optim::SGD({p}, optim::SGDOptions(0.1).nesterov(true)),
                    "Nesterov momentum requires a momentum and zero dampening");
  EXPECT_KILN_ERROR(optim::Adam({p}, optim::AdamOptions(0.1).betas({1.0, 0.9})), "Invalid beta parameter at index 0");
  Tensor q = p * 2.0;
  EXPECT_KILN_ERROR(optim::SGD({q}, optim::SGDOptions(0.1)), "can't optimize a non-leaf Tensor");
}

} // namespace
