#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w6, "w6-tiny-mlp", "3 linear layers 64->64 with relu between, input [1, 64] (per-op overhead)") {
  manual_seed(0);
  std::vector<Tensor> w, b;
  for (int i = 0; i < 3; ++i) {
    w.push_back(0.1 * randn({64, 64}));
    b.push_back(0.1 * randn({64}));
  }
  return {[w, b](const std::vector<Tensor> &in) {
            Tensor h = relu(linear(in[0], w[0], b[0]));
            h = relu(linear(h, w[1], b[1]));
            return std::vector<Tensor>{linear(h, w[2], b[2])};
          },
          {randn({1, 64})}};
}
