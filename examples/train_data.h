// Datasets the training examples generate (fixed seeds): no files to download.
#pragma once

#include <cmath>
#include <memory>
#include <vector>

#include <kiln/kiln.h>

#include "example.h"

namespace kiln::examples {

// Interleaved spirals: `classes` arms of `per_class` points in 2-D with
// Gaussian noise; x [classes * per_class, 2] f32, y [classes * per_class] i64.
inline std::pair<Tensor, Tensor> spirals(int64_t classes, int64_t per_class, uint64_t seed) {
  manual_seed(seed);
  const int64_t n = classes * per_class;
  Tensor x = empty({n, 2}), y = empty({n}, kInt64);
  Tensor noise = randn({n, 2}) * 0.08;
  float *xp = x.data_ptr<float>();
  const float *np = noise.data_ptr<float>();
  int64_t *yp = y.data_ptr<int64_t>();
  for (int64_t c = 0; c < classes; ++c)
    for (int64_t i = 0; i < per_class; ++i) {
      const int64_t k = c * per_class + i;
      const double r = double(i) / double(per_class);
      const double t = 2 * M_PI * double(c) / double(classes) + 3.5 * r;
      xp[2 * k] = float(r * std::cos(t)) + np[2 * k];
      xp[2 * k + 1] = float(r * std::sin(t)) + np[2 * k + 1];
      yp[k] = c;
    }
  return {x, y};
}

// Fraction of rows whose argmax of logits is the label.
inline double accuracy_of(const Tensor &logits, const Tensor &labels) {
  return to(eq(argmax(logits, 1), labels), kFloat64).mean().item<double>();
}

// The batches of an epoch: rows shuffled once with `seed`, in order.
inline std::vector<std::vector<Tensor>> batches_of(const Tensor &x, const Tensor &y, int64_t batch, uint64_t seed) {
  manual_seed(seed);
  Tensor order = argsort(rand({x.size(0)}), 0);
  std::vector<std::vector<Tensor>> out;
  for (int64_t s = 0; s + batch <= x.size(0); s += batch) {
    Tensor idx = order.slice(0, s, s + batch);
    out.push_back({index_select(x, 0, idx).contiguous(), index_select(y, 0, idx).contiguous()});
  }
  return out;
}

// A classifier's training workload: the step is the eager loop body (zero_grad,
// cross_entropy of forward, backward, step), over an epoch of `batch`-row
// batches of (x, y); accuracy is on all of x with the parameters as they are.
template <class Forward>
Workload classifier_training(std::vector<Tensor> params, std::shared_ptr<optim::Optimizer> opt, Forward forward,
                             const Tensor &x, const Tensor &y, int64_t batch) {
  Workload w;
  w.fn = [opt, forward](const std::vector<Tensor> &in) {
    opt->zero_grad();
    Tensor loss = cross_entropy(forward(in[0]), in[1]);
    loss.backward();
    opt->step();
    return std::vector<Tensor>{loss.detach()};
  };
  w.batches = batches_of(x, y, batch, 5);
  w.inputs = w.batches.front();
  w.params = std::move(params);
  w.accuracy = [forward, x, y] {
    NoGradGuard no_grad;
    return accuracy_of(forward(x), y);
  };
  return w;
}

} // namespace kiln::examples
