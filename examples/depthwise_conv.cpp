#include "example.h"

using namespace kiln;

// MobileNet's depthwise step at a mid-network size: every channel convolved
// with its own 3x3 taps (groups = channels), bias, relu. 3.2 MB in and out,
// 14.5 MFLOP: far below the FMA peak per byte, so bound by memory / L2, not compute.
KILN_EXAMPLE(depthwise_conv, "depthwise-conv",
             "depthwise 3x3 conv (groups = channels = 128, pad 1) + bias + relu on [8, 128, 28, 28]") {
  manual_seed(0);
  Tensor w = 0.3 * randn({128, 1, 3, 3}), b = 0.1 * randn({128});
  return {[=](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(conv2d(in[0], w, b, 1, 1, 1, 128))}; },
          {randn({8, 128, 28, 28})}};
}
