#include "example.h"

using namespace kiln;

// W5's four linear shapes at M = 128 (batch 1, seq 128), weights captured as
// parameters (packed once when compiled with KILN_GEMM=jit), no bias or
// activation: the contraction rate alone, next to W5 where the same GEMMs carry
// their epilogues. qkv 768->2304, attention proj 768->768, fc 768->3072, fc proj 3072->768.
KILN_EXAMPLE(gemm_w5, "gemm-w5", "W5's four linears at M=128: 768->2304, 768->768, 768->3072, 3072->768 (no bias)") {
  manual_seed(0);
  Tensor w_qkv = 0.02 * randn({3 * 768, 768}), w_proj = 0.02 * randn({768, 768});
  Tensor w_fc = 0.02 * randn({3072, 768}), w_fc2 = 0.02 * randn({768, 3072});
  return {[=](const std::vector<Tensor> &in) {
            const Tensor &x = in[0], &h = in[1];
            return std::vector<Tensor>{linear(x, w_qkv), linear(x, w_proj), linear(x, w_fc), linear(h, w_fc2)};
          },
          {randn({128, 768}), randn({128, 3072})}};
}
