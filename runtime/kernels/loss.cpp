// Loss functions (runtime/loss.h), composed of ops of the op table.
#include "runtime/loss.h"

#include "runtime/error.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

void check_reduction(const std::string &reduction, const char *op) {
  KILN_CHECK(reduction == "mean" || reduction == "sum" || reduction == "none", op, ": ", reduction,
             " is not a valid value for reduction (\"mean\", \"sum\" or \"none\")");
}

Tensor reduce(const Tensor &loss, const std::string &reduction) {
  if (reduction == "none") return loss;
  return reduction == "sum" ? sum(loss) : mean(loss);
}

void check_floating(const Tensor &t, const char *op, const char *arg) {
  detail::check_defined(t, op, arg);
  KILN_CHECK(t.is_floating_point(), op, ": ", arg, " must be a floating tensor, got ", t.dtype());
}

// weight [C] shaped to broadcast along input's class dim.
Tensor per_class_weight(const Tensor &weight, const Tensor &input, int64_t class_dim) {
  std::vector<int64_t> shape(size_t(input.dim()), 1);
  shape[size_t(class_dim)] = input.size(class_dim);
  return weight.reshape(shape);
}

void check_same_shape(const Tensor &input, const Tensor &target, const char *op) {
  KILN_CHECK(input.sizes() == target.sizes(), op, ": target ", shape_str(target.sizes()),
             " must have the same shape as input ", shape_str(input.sizes()));
}

} // namespace

Tensor mse_loss(const Tensor &input, const Tensor &target, const std::string &reduction) {
  check_floating(input, "mse_loss", "input");
  check_floating(target, "mse_loss", "target");
  check_reduction(reduction, "mse_loss");
  return reduce(square(input - target), reduction);
}

Tensor l1_loss(const Tensor &input, const Tensor &target, const std::string &reduction) {
  check_floating(input, "l1_loss", "input");
  check_floating(target, "l1_loss", "target");
  check_reduction(reduction, "l1_loss");
  return reduce(abs(input - target), reduction);
}

Tensor nll_loss(const Tensor &input, const Tensor &target, const Tensor &weight, int64_t ignore_index,
                const std::string &reduction) {
  check_floating(input, "nll_loss", "input");
  detail::check_defined(target, "nll_loss", "target");
  check_reduction(reduction, "nll_loss");
  KILN_CHECK(target.dtype() == kInt64, "nll_loss: expected target of scalar type Long (int64) but found ",
             target.dtype());
  KILN_CHECK(input.dim() >= 1, "nll_loss: input must have at least 1 dim (classes), got a 0-dim tensor");
  const bool batched = input.dim() >= 2;
  const int64_t class_dim = batched ? 1 : 0;
  const int64_t classes = input.size(class_dim);
  if (batched) {
    KILN_CHECK(target.dim() == input.dim() - 1 && target.size(0) == input.size(0), "nll_loss: Expected input batch_size (",
               input.size(0), ") to match target batch_size (", target.dim() ? target.size(0) : 0,
               "); input ", shape_str(input.sizes()), ", target ", shape_str(target.sizes()));
    for (int64_t d = 2; d < input.dim(); ++d)
      KILN_CHECK(target.size(d - 1) == input.size(d), "nll_loss: target ", shape_str(target.sizes()),
                 " does not match input ", shape_str(input.sizes()), " outside the class dim 1");
  } else {
    KILN_CHECK(target.dim() == 0, "nll_loss: an input of shape ", shape_str(input.sizes()),
               " takes a 0-dim target, got ", shape_str(target.sizes()));
  }
  if (weight.defined()) {
    check_floating(weight, "nll_loss", "weight");
    KILN_CHECK(weight.dim() == 1 && weight.size(0) == classes, "nll_loss: weight tensor should be defined either for "
               "all ", classes, " classes or no classes but got weight tensor of shape: ", shape_str(weight.sizes()));
  }
  // Ignored targets read class 0 and weigh nothing.
  Tensor keep = ne(target, ignore_index);
  Tensor safe = where(keep, target, Scalar(int64_t(0)));
  Tensor picked = neg(gather(input, class_dim, safe.unsqueeze(class_dim)).squeeze(class_dim));
  Tensor w = to(keep, input.dtype());
  if (weight.defined()) w = w * index_select(weight, 0, safe.reshape({-1})).reshape(safe.sizes());
  Tensor loss = picked * w;
  if (reduction == "none") return loss;
  if (reduction == "sum") return sum(loss);
  return sum(loss) / sum(w);
}

Tensor cross_entropy(const Tensor &input, const Tensor &target, const Tensor &weight, int64_t ignore_index,
                     const std::string &reduction, double label_smoothing) {
  check_floating(input, "cross_entropy", "input");
  detail::check_defined(target, "cross_entropy", "target");
  check_reduction(reduction, "cross_entropy");
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be between 0.0 and 1.0. Got: ", label_smoothing);
  KILN_CHECK(input.dim() >= 1, "cross_entropy: input must have at least 1 dim (classes), got a 0-dim tensor");
  const int64_t class_dim = input.dim() >= 2 ? 1 : 0;
  const int64_t classes = input.size(class_dim);
  Tensor logp = log_softmax(input, class_dim);
  if (target.is_floating_point()) {
    // Class probabilities.
    check_same_shape(input, target, "cross_entropy");
    Tensor t = label_smoothing > 0 ? target * (1 - label_smoothing) + label_smoothing / double(classes) : target;
    Tensor terms = weight.defined() ? logp * t * per_class_weight(weight, input, class_dim) : logp * t;
    Tensor loss = neg(sum(terms, {class_dim}));
    if (reduction == "none") return loss;
    if (reduction == "sum") return sum(loss);
    return input.dim() >= 2 ? sum(loss) / double(input.numel() / classes) : loss;
  }
  Tensor nll = nll_loss(logp, target, weight, ignore_index, reduction);
  if (label_smoothing == 0) return nll;
  // torch's smoothing term: the (weighted) mean over classes of -log p, over kept targets.
  Tensor keep = to(ne(target, ignore_index), input.dtype());
  Tensor per_class = weight.defined() ? logp * per_class_weight(weight, input, class_dim) : logp;
  Tensor smooth = neg(sum(per_class, {class_dim})) * keep;
  Tensor smooth_red;
  if (reduction == "none") smooth_red = smooth;
  else if (reduction == "sum") smooth_red = sum(smooth);
  else if (weight.defined()) {
    Tensor safe = where(ne(target, ignore_index), target, Scalar(int64_t(0)));
    smooth_red = sum(smooth) / sum(index_select(weight, 0, safe.reshape({-1})).reshape(safe.sizes()) * keep);
  } else {
    smooth_red = sum(smooth) / sum(keep);
  }
  return nll * (1 - label_smoothing) + smooth_red * (label_smoothing / double(classes));
}

Tensor binary_cross_entropy_with_logits(const Tensor &input, const Tensor &target, const Tensor &weight,
                                        const std::string &reduction, const Tensor &pos_weight) {
  check_floating(input, "binary_cross_entropy_with_logits", "input");
  check_floating(target, "binary_cross_entropy_with_logits", "target");
  check_reduction(reduction, "binary_cross_entropy_with_logits");
  check_same_shape(input, target, "binary_cross_entropy_with_logits");
  // log(1 + exp(-x)) without overflow: max(-x, 0) + log1p(exp(-|x|)).
  Tensor softplus_neg = clamp(neg(input), Scalar(0.0), std::nullopt) + log1p(exp(neg(abs(input))));
  Tensor loss;
  if (pos_weight.defined()) {
    check_floating(pos_weight, "binary_cross_entropy_with_logits", "pos_weight");
    Tensor lw = (pos_weight - 1) * target + 1;
    loss = (1 - target) * input + lw * softplus_neg;
  } else {
    loss = (1 - target) * input + softplus_neg;
  }
  if (weight.defined()) loss = loss * weight;
  return reduce(loss, reduction);
}

} // namespace kiln
