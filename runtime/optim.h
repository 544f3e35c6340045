// Optimizers with libtorch's names, options and update rules (torch::optim):
//
//   kiln::optim::SGD opt(params, kiln::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
//   opt.zero_grad();  loss.backward();  opt.step();
//
// step() updates each parameter that has a gradient, in place and without
// autograd (NoGradGuard), with torch's algorithms (the formulas in
// torch.optim's documentation), keeping per-parameter state (momentum buffers,
// Adam's moments and step count). zero_grad() resets each grad to undefined,
// as torch's default set_to_none = true does.
//
// Under kiln::compile (a whole training step traced as one graph), state is
// allocated as real tensors outside the trace and updated in place, so every
// update becomes a write-back; the step count and "first step" flags are
// tensors, so the compiled step needs no Python-style guard on them.
#pragma once

#include <functional>
#include <memory>
#include <tuple>
#include <vector>

#include "runtime/options_arg.h"
#include "runtime/tensor.h"

namespace kiln::optim {


using Betas = std::tuple<double, double>;

class SGDOptions {
public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  KILN_ARG(SGDOptions, double, lr, 0.0)
  KILN_ARG(SGDOptions, double, momentum, 0.0)
  KILN_ARG(SGDOptions, double, dampening, 0.0)
  KILN_ARG(SGDOptions, double, weight_decay, 0.0)
  KILN_ARG(SGDOptions, bool, nesterov, false)
};

class AdamOptions {
public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  KILN_ARG(AdamOptions, double, lr, 1e-3)
  KILN_ARG(AdamOptions, Betas, betas, (std::make_tuple(0.9, 0.999)))
  KILN_ARG(AdamOptions, double, eps, 1e-8)
  KILN_ARG(AdamOptions, double, weight_decay, 0.0)
  KILN_ARG(AdamOptions, bool, amsgrad, false)
};

class AdamWOptions {
public:
  explicit AdamWOptions(double lr = 1e-3) : lr_(lr) {}
  KILN_ARG(AdamWOptions, double, lr, 1e-3)
  KILN_ARG(AdamWOptions, Betas, betas, (std::make_tuple(0.9, 0.999)))
  KILN_ARG(AdamWOptions, double, eps, 1e-8)
  KILN_ARG(AdamWOptions, double, weight_decay, 1e-2)
  KILN_ARG(AdamWOptions, bool, amsgrad, false)
};

using LossClosure = std::function<Tensor()>;

class Optimizer {
public:
  explicit Optimizer(std::vector<Tensor> params, const char *name);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer &) = delete;
  Optimizer &operator=(const Optimizer &) = delete;

  // Resets every parameter's gradient: to undefined (torch's default), or to zeros in place.
  void zero_grad(bool set_to_none = true);
  // One update; the closure, when given, re-evaluates the loss first (with grad mode on) and
  // its result is returned.
  Tensor step(const LossClosure &closure = nullptr);
  const std::vector<Tensor> &parameters() const { return params_; }

protected:
  // Updates parameter i from its gradient g (grad mode off).
  virtual void update(size_t i, Tensor &param, const Tensor &g) = 0;
  std::vector<Tensor> params_;
};

class SGD : public Optimizer {
public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  const SGDOptions &options() const { return options_; }

private:
  void update(size_t i, Tensor &param, const Tensor &g) override;
  SGDOptions options_;
  // Per parameter: the momentum buffer, and a 0-dim bool of whether it holds a
  // first step's gradient yet (a tensor, so compiled steps read and set it).
  std::vector<Tensor> momentum_buffer_, momentum_started_;
};

// Adam and AdamW share the moments; AdamW decays the weights directly (decoupled).
class AdamBase : public Optimizer {
protected:
  struct Hyper {
    double lr, beta1, beta2, eps, weight_decay;
    bool amsgrad, decoupled;
  };
  AdamBase(std::vector<Tensor> params, Hyper h, const char *name);
  void update(size_t i, Tensor &param, const Tensor &g) override;
  Hyper h_;

private:
  // The step count is a 0-dim float64 tensor (torch's capturable form): a
  // compiled training step increments it and reads it in the bias corrections.
  struct State {
    Tensor step, exp_avg, exp_avg_sq, max_exp_avg_sq;
  };
  std::vector<State> state_;
};

class Adam : public AdamBase {
public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  const AdamOptions &options() const { return options_; }

private:
  AdamOptions options_;
};

class AdamW : public AdamBase {
public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
  const AdamWOptions &options() const { return options_; }

private:
  AdamWOptions options_;
};

} // namespace kiln::optim
