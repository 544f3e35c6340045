#include "example.h"

using namespace kiln;

// bn-train at batch 16 on 32x32 images: the row of a channel is [16, 1024],
// 16 sub-rows. Its bench row is about compile time (cold ms, target <= 150):
// LLVM used to unroll the loop over the 16 sub-rows, one copy of the vector
// loop each, and took 1.4 s to compile this one kernel.
KILN_EXAMPLE(bn_train_b16, "bn-train-b16", "batch_norm(x, w, b, training=true), x [16, 64, 32, 32]: compile time") {
  manual_seed(0);
  Tensor w = 1.0 + 0.1 * randn({64}), b = 0.1 * randn({64}), mean = zeros({64}), var = ones({64});
  return {[=](const std::vector<Tensor> &in) {
            return std::vector<Tensor>{batch_norm(in[0], w, b, mean, var, /*training=*/true, 0.1, 1e-5)};
          },
          {2.0 * randn({16, 64, 32, 32}) + 0.5}};
}
