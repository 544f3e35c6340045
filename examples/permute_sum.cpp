#include "example.h"

using namespace kiln;

// A sum over the last dim of a permuted tensor: the reduced dim is strided
// (128 elements apart) and the kept ones are [64, 128] with the 128
// contiguous. Compiled, one kernel reads x in place, reducing 64 neighbouring
// rows side by side (codegen/lower_tile.cpp) instead of walking each strided row.
KILN_EXAMPLE(permute_sum, "permute-sum", "x.permute({0, 2, 1}).sum(-1), x [64, 256, 128]: reduce a strided dim") {
  manual_seed(0);
  return {[](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].permute({0, 2, 1}).sum({-1}, false)}; },
          {randn({64, 256, 128})}};
}
