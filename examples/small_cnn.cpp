#include "example.h"

using namespace kiln;

namespace {
struct ConvBnRelu {
  Tensor w, bn_w, bn_b, mean, var;
  ConvBnRelu(int64_t cin, int64_t cout)
      : w(0.1 * randn({cout, cin, 3, 3})), bn_w(ones({cout})), bn_b(zeros({cout})), mean(zeros({cout})),
        var(ones({cout})) {}
  Tensor operator()(const Tensor &x) const {
    return relu(batch_norm(conv2d(x, w, {}, 1, 1), bn_w, bn_b, mean, var, false, 0.1, 1e-5));
  }
};
} // namespace

KILN_EXAMPLE(cnn, "small-cnn", "three conv-bn-relu (3->16->32->64), max pool, global average pool, linear to 10") {
  manual_seed(0);
  ConvBnRelu l1(3, 16), l2(16, 32), l3(32, 64);
  Tensor fc_w = 0.1 * randn({10, 64}), fc_b = zeros({10});
  return {[=](const std::vector<Tensor> &in) {
            Tensor h = max_pool2d(l2(l1(in[0])), {2, 2});
            h = adaptive_avg_pool2d(l3(h), {1, 1}).flatten(1);
            return std::vector<Tensor>{linear(h, fc_w, fc_b)};
          },
          {randn({8, 3, 32, 32})}};
}
