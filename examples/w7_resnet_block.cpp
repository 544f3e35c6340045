#include "example.h"

using namespace kiln;

namespace {
struct BatchNorm {
  Tensor weight, bias, mean, var;
  explicit BatchNorm(int64_t c)
      : weight(1.0 + 0.1 * randn({c})), bias(0.1 * randn({c})), mean(0.1 * randn({c})),
        var(1.0 + 0.1 * rand({c})) {}
  Tensor operator()(const Tensor &x) const { return batch_norm(x, weight, bias, mean, var, false, 0.1, 1e-5); }
};
} // namespace

KILN_EXAMPLE(w7, "w7-resnet-block", "ResNet basic block: conv3x3-bn-relu-conv3x3-bn, + x, relu; x [8, 64, 56, 56]") {
  manual_seed(0);
  Tensor c1 = 0.05 * randn({64, 64, 3, 3}), c2 = 0.05 * randn({64, 64, 3, 3});
  BatchNorm bn1(64), bn2(64);
  return {[=](const std::vector<Tensor> &in) {
            const Tensor &x = in[0];
            Tensor h = relu(bn1(conv2d(x, c1, {}, 1, 1)));
            h = bn2(conv2d(h, c2, {}, 1, 1));
            return std::vector<Tensor>{relu(h + x)};
          },
          {randn({8, 64, 56, 56})}};
}
