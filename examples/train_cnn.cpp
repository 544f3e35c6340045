#include "example.h"
#include "train_data.h"

using namespace kiln;

namespace {
// 16x16 single-channel images of one of three strokes (a row, a column, the
// diagonal) at a random offset, with noise: x [n, 1, 16, 16], y [n].
std::pair<Tensor, Tensor> strokes(int64_t n, uint64_t seed) {
  manual_seed(seed);
  Tensor x = randn({n, 1, 16, 16}) * 0.3, y = randint(3, {n});
  Tensor at = randint(2, 14, {n});
  float *xp = x.data_ptr<float>();
  const int64_t *yp = y.data_ptr<int64_t>(), *ap = at.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < 16; ++k) {
      const int64_t r = yp[i] == 0 ? ap[i] : k, c = yp[i] == 1 ? ap[i] : (yp[i] == 0 ? k : (k + ap[i]) % 16);
      xp[i * 256 + r * 16 + c] += 1.0f;
    }
  return {x, y};
}
} // namespace

// The conv variant of train-mlp: two 3x3 convolutions, a pool and a linear,
// SGD with momentum; the contractions (convolutions and their gradients) dominate.
KILN_EXAMPLE(train_cnn, "train-cnn",
             "training step: conv 1->16->32 (3x3) + pool + linear on 16x16 strokes, batch 64, SGD momentum") {
  auto [x, y] = strokes(768, 21);
  manual_seed(0);
  std::vector<Tensor> p = {randn({16, 1, 3, 3}) * 0.3, zeros({16}), randn({32, 16, 3, 3}) * 0.08, zeros({32}),
                           randn({3, 32 * 8 * 8}) * 0.02, zeros({3})};
  for (Tensor &t : p) t.requires_grad_();
  auto opt = std::make_shared<optim::SGD>(p, optim::SGDOptions(0.05).momentum(0.9));
  auto forward = [p](const Tensor &in) {
    Tensor h = relu(conv2d(in, p[0], p[1], 1, 1));
    h = max_pool2d(relu(conv2d(h, p[2], p[3], 1, 1)), {2, 2});
    return linear(flatten(h, 1), p[4], p[5]);
  };
  return examples::classifier_training(p, opt, forward, x, y, 64);
}
