#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w3, "w3-layernorm", "y = layer_norm(x, [1024], w, b, eps=1e-5), x [4096, 1024]") {
  manual_seed(0);
  Tensor w = 1.0 + 0.02 * randn({1024}), b = 0.02 * randn({1024});
  return {[w, b](const std::vector<Tensor> &in) {
            return std::vector<Tensor>{layer_norm(in[0], {1024}, w, b, 1e-5)};
          },
          {randn({4096, 1024})}};
}
