#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w4, "w4-mlp-block", "y = x + (gelu_tanh(x @ W1 + b1) @ W2 + b2), x [64, 1024], hidden 4096") {
  manual_seed(0);
  Tensor w1 = 0.02 * randn({1024, 4096}), b1 = zeros({4096});
  Tensor w2 = 0.02 * randn({4096, 1024}), b2 = zeros({1024});
  return {[=](const std::vector<Tensor> &in) {
            const Tensor &x = in[0];
            Tensor h = gelu(matmul(x, w1) + b1, "tanh");
            return std::vector<Tensor>{x + (matmul(h, w2) + b2)};
          },
          {randn({64, 1024})}};
}
