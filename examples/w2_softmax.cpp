#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w2, "w2-softmax", "y = softmax(x, dim=-1), x [4096, 1024]") {
  manual_seed(0);
  return {[](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0], -1)}; },
          {randn({4096, 1024})}};
}
