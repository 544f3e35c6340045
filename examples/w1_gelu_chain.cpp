#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w1, "w1-gelu-chain", "y = gelu_tanh(x * a + b), x [4096, 1024], a and b broadcast over rows") {
  manual_seed(0);
  Tensor a = randn({1024}), b = randn({1024});
  return {[a, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * a + b, "tanh")}; },
          {randn({4096, 1024})}};
}
