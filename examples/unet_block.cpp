#include "example.h"

using namespace kiln;

// A U-Net decoder step as diffusion and segmentation models write it: two 3x3 convs,
// each followed by group norm and silu, a 1x1 skip, nearest x2 upsampling, reflect
// padding and the 3x3 conv after it (issue 16: group_norm, interpolate and pad are
// composites, traced as the ops they call).
KILN_EXAMPLE(unet_block, "unet-block",
             "conv3x3 + group_norm + silu (x2), 1x1 skip, nearest x2 upsample, reflect pad, conv3x3 on [2, 32, 32, 32]") {
  manual_seed(0);
  Tensor c1 = 0.06 * randn({64, 32, 3, 3}), c2 = 0.04 * randn({64, 64, 3, 3}), c3 = 0.04 * randn({32, 64, 3, 3});
  Tensor skip = 0.15 * randn({64, 32, 1, 1});
  Tensor g1 = 1.0 + 0.1 * randn({64}), b1 = 0.1 * randn({64}), g2 = 1.0 + 0.1 * randn({64}), b2 = 0.1 * randn({64});
  return {[=](const std::vector<Tensor> &in) {
            const Tensor &x = in[0];
            Tensor h = silu(group_norm(conv2d(x, c1, {}, 1, 1), 8, g1, b1));
            h = silu(group_norm(conv2d(h, c2, {}, 1, 1), 8, g2, b2)) + conv2d(x, skip);
            h = interpolate(h, std::nullopt, std::vector<double>{2.0}, "nearest");
            return std::vector<Tensor>{conv2d(pad(h, {1, 1, 1, 1}, "reflect"), c3)};
          },
          {randn({2, 32, 32, 32})}};
}
