#include "example.h"

using namespace kiln;

KILN_EXAMPLE(w9, "w9-big-add", "z = x + y with 4,194,304-element tensors: memory bandwidth") {
  manual_seed(0);
  return {[](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + in[1]}; },
          {randn({4194304}), randn({4194304})}};
}
