// Loss functions with libtorch's names, arguments and semantics (issue 18). Each
// is built from ops of the op table, so autograd differentiates it, and tracing
// records it, with nothing of its own. `reduction` is torch's "mean" (default),
// "sum" or "none".
#pragma once

#include <optional>
#include <string>

#include "runtime/tensor.h"

namespace kiln {

// mean((input - target)^2); input and target broadcast.
Tensor mse_loss(const Tensor &input, const Tensor &target, const std::string &reduction = "mean");
// mean(|input - target|).
Tensor l1_loss(const Tensor &input, const Tensor &target, const std::string &reduction = "mean");
// -input[n, target[n]] (weighted by weight[target[n]]), for input [N, C] or [N, C, d1, ...] of
// log-probabilities (or [C] with a 0-dim target), target int64 class indices. Targets equal to
// ignore_index take no part; "mean" divides by the sum of the weights taken part.
Tensor nll_loss(const Tensor &input, const Tensor &target, const Tensor &weight = {}, int64_t ignore_index = -100,
                const std::string &reduction = "mean");
// nll_loss(log_softmax(input, 1), target) for int64 class indices; for a floating target of
// input's shape (class probabilities), -sum(target * log_softmax(input, 1), 1). label_smoothing
// mixes the target with the uniform distribution over classes, as torch's.
Tensor cross_entropy(const Tensor &input, const Tensor &target, const Tensor &weight = {},
                     int64_t ignore_index = -100, const std::string &reduction = "mean",
                     double label_smoothing = 0.0);
// The numerically stable -[t log sigmoid(x) + (1 - t) log(1 - sigmoid(x))], with torch's
// weight (per element, broadcast) and pos_weight (per class, broadcast over the last dim).
Tensor binary_cross_entropy_with_logits(const Tensor &input, const Tensor &target, const Tensor &weight = {},
                                        const std::string &reduction = "mean", const Tensor &pos_weight = {});

} // namespace kiln
