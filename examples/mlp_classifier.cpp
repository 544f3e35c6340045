#include "example.h"

using namespace kiln;

KILN_EXAMPLE(mlp, "mlp-classifier", "MNIST-style MLP 784-256-10 with relu and log_softmax, batch 64") {
  manual_seed(0);
  Tensor w1 = 0.05 * randn({256, 784}), b1 = zeros({256});
  Tensor w2 = 0.05 * randn({10, 256}), b2 = zeros({10});
  return {[=](const std::vector<Tensor> &in) {
            Tensor h = relu(linear(in[0], w1, b1));
            return std::vector<Tensor>{log_softmax(linear(h, w2, b2), -1)};
          },
          {randn({64, 784})}};
}
