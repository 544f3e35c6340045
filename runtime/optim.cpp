#include "runtime/optim.h"

#include <cmath>

#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/step_phase.h"
#include "runtime/trace_hook.h"

namespace kiln::optim {

Optimizer::Optimizer(std::vector<Tensor> params, const char *name) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor &p = params_[i];
    detail::check_defined(p, name, "params");
    KILN_CHECK(p.is_floating_point(), name, ": parameter ", i, " has dtype ", p.dtype(),
               "; only floating tensors can be optimized");
    KILN_CHECK(p.is_leaf(), name, ": can't optimize a non-leaf Tensor (parameter ", i, ")");
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (Tensor &p : params_) {
    if (!p.grad().defined()) continue;
    if (set_to_none) {
      p.mutable_grad() = Tensor();
      continue;
    }
    NoGradGuard off;
    p.mutable_grad().zero_();
  }
}

Tensor Optimizer::step(const LossClosure &closure) {
  Tensor loss;
  if (closure) {
    AutoGradMode on(true);
    loss = closure();
  }
  NoGradGuard off;
  detail::StepPhaseScope phase(StepPhase::Update);
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor &g = params_[i].grad();
    if (g.defined()) update(i, params_[i], g);
  }
  return loss;
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), "SGD"), options_(options), momentum_buffer_(params_.size()),
      momentum_started_(params_.size()) {
  const SGDOptions &o = options_;
  KILN_CHECK(o.lr() >= 0, "SGD: Invalid learning rate: ", o.lr());
  KILN_CHECK(o.momentum() >= 0, "SGD: Invalid momentum value: ", o.momentum());
  KILN_CHECK(o.weight_decay() >= 0, "SGD: Invalid weight_decay value: ", o.weight_decay());
  KILN_CHECK(!o.nesterov() || (o.momentum() > 0 && o.dampening() == 0),
             "SGD: Nesterov momentum requires a momentum and zero dampening");
}

namespace {
// Zeros of `sizes` and `dtype`, allocated outside any trace: optimizer state that a compiled
// step reads and writes back.
Tensor real_zeros(IntArrayRef sizes, DType dtype) {
  detail::TracingOff off;
  return zeros(sizes, TensorOptions().dtype(dtype));
}
} // namespace

// torch.optim.SGD: g += wd p; b = mu b + (1 - dampening) g (b = g at the first step);
// g = nesterov ? g + mu b : b; p -= lr g.
void SGD::update(size_t i, Tensor &param, const Tensor &grad) {
  const SGDOptions &o = options_;
  Tensor g = o.weight_decay() != 0 ? grad + param * o.weight_decay() : grad;
  if (o.momentum() != 0) {
    Tensor &buf = momentum_buffer_[i], &started = momentum_started_[i];
    if (detail::tracing()) {
      // The first-step branch as data: a compiled step takes it while the flag is false.
      if (!buf.defined()) {
        buf = real_zeros(param.sizes(), param.dtype());
        started = real_zeros({}, kBool);
      }
      buf.copy_(where(started, buf * o.momentum() + g * (1 - o.dampening()), g));
      started.fill_(true);
    } else if (!buf.defined() || !started.item<bool>()) {
      if (buf.defined()) buf.copy_(g);
      else buf = g.clone();
      started = full({}, true, TensorOptions().dtype(kBool));
    } else {
      buf.mul_(o.momentum());
      buf.add_(g, 1 - o.dampening());
    }
    g = o.nesterov() ? g + buf * o.momentum() : buf;
  }
  param.add_(g, -o.lr());
}

AdamBase::AdamBase(std::vector<Tensor> params, Hyper h, const char *name)
    : Optimizer(std::move(params), name), h_(h), state_(params_.size()) {
  KILN_CHECK(h.lr >= 0, name, ": Invalid learning rate: ", h.lr);
  KILN_CHECK(h.eps >= 0, name, ": Invalid epsilon value: ", h.eps);
  KILN_CHECK(h.beta1 >= 0 && h.beta1 < 1, name, ": Invalid beta parameter at index 0: ", h.beta1);
  KILN_CHECK(h.beta2 >= 0 && h.beta2 < 1, name, ": Invalid beta parameter at index 1: ", h.beta2);
  KILN_CHECK(h.weight_decay >= 0, name, ": Invalid weight_decay value: ", h.weight_decay);
}

// torch.optim.Adam / AdamW: m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v') / sqrt(1 - b2^t) + eps), v' = v or its running
// max (amsgrad). Adam adds wd p to g; AdamW multiplies p by 1 - lr wd first.
void AdamBase::update(size_t i, Tensor &param, const Tensor &grad) {
  State &s = state_[i];
  if (!s.step.defined()) {
    s.step = real_zeros({}, kFloat64);
    s.exp_avg = real_zeros(param.sizes(), param.dtype());
    s.exp_avg_sq = real_zeros(param.sizes(), param.dtype());
    if (h_.amsgrad) s.max_exp_avg_sq = real_zeros(param.sizes(), param.dtype());
  }
  s.step.add_(1);
  Tensor g = grad;
  if (h_.weight_decay != 0) {
    if (h_.decoupled) param.mul_(1 - h_.lr * h_.weight_decay);
    else g = grad + param * h_.weight_decay;
  }
  s.exp_avg.mul_(h_.beta1);
  s.exp_avg.add_(g, 1 - h_.beta1);
  s.exp_avg_sq.mul_(h_.beta2);
  s.exp_avg_sq.add_(g * g, 1 - h_.beta2);
  // The bias corrections 1 - beta^t from the step tensor, in float64, eager
  // and compiled alike (as exp(t ln beta): exp compiles, a scalar's pow does not).
  const Tensor bc1 = 1.0 - exp(s.step * std::log(h_.beta1));
  const Tensor bc2 = 1.0 - exp(s.step * std::log(h_.beta2));
  Tensor v = s.exp_avg_sq;
  if (h_.amsgrad) {
    s.max_exp_avg_sq.copy_(maximum(s.max_exp_avg_sq, s.exp_avg_sq));
    v = s.max_exp_avg_sq;
  }
  Tensor denom = sqrt(v) / sqrt(bc2) + h_.eps;
  param.sub_(s.exp_avg / denom * (h_.lr / bc1));
}

Adam::Adam(std::vector<Tensor> params, AdamOptions o)
    : AdamBase(std::move(params),
               {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), o.amsgrad(), false},
               "Adam"),
      options_(o) {}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : AdamBase(std::move(params),
               {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), o.amsgrad(), true},
               "AdamW"),
      options_(o) {}

} // namespace kiln::optim
