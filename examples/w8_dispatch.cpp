#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w8, "w8-dispatch", "z = x + y with 1-element tensors: the fixed cost of one call") {
  manual_seed(0);
  return {[](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + in[1]}; },
          {randn({1}), randn({1})}};
}
