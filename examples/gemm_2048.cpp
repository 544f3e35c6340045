#include "example.h"

#include <cmath>

using namespace kiln;

// sgemm 2048^3 as a compiled matmul of two inputs: the GEMM row of `kiln bench`,
// compared with the FMA peak (its gflops / fma_fraction columns). b is scaled by
// 1/sqrt(K) so that every output is ~N(0, 1), as a model's activations are: with
// two N(0, 1) operands the outputs reach ~45 and float32 rounding (which grows
// with K) shows as a large absolute compiled-vs-eager difference.
KILN_EXAMPLE(gemm_2048, "gemm-2048", "sgemm 2048^3: c = a @ b with a, b [2048, 2048] inputs") {
  manual_seed(0);
  constexpr int64_t n = 2048;
  return {[](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], in[1])}; },
          {randn({n, n}), randn({n, n}).mul_(1.0 / std::sqrt(double(n)))}};
}
