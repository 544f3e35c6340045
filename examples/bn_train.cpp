#include "example.h"

using namespace kiln;

// Batch norm in training mode normalizes with the batch's own statistics: a
// mean and a variance per channel over N, H and W, then the affine output.
// Compiled, that is one kernel whose rows are the channels.
KILN_EXAMPLE(bn_train, "bn-train", "batch_norm(x, w, b, training=true), x [8, 64, 56, 56]: batch statistics") {
  manual_seed(0);
  Tensor w = 1.0 + 0.1 * randn({64}), b = 0.1 * randn({64}), mean = zeros({64}), var = ones({64});
  return {[=](const std::vector<Tensor> &in) {
            return std::vector<Tensor>{batch_norm(in[0], w, b, mean, var, /*training=*/true, 0.1, 1e-5)};
          },
          {2.0 * randn({8, 64, 56, 56}) + 0.5}};
}
