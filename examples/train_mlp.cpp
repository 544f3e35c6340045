#include "example.h"
#include "train_data.h"

using namespace kiln;

// A whole training step, written as the eager loop body: kiln::compile traces
// the forward, the loss, the backward and Adam's update into one graph.
KILN_EXAMPLE(train_mlp, "train-mlp",
             "training step: MLP 2->128->128->3 on 3 spirals, batch 128, cross_entropy, Adam (one graph compiled)") {
  auto [x, y] = examples::spirals(3, 256, 11);
  manual_seed(0);
  std::vector<Tensor> p = {randn({128, 2}) * 0.7, zeros({128}), randn({128, 128}) * 0.09, zeros({128}),
                           randn({3, 128}) * 0.09, zeros({3})};
  for (Tensor &t : p) t.requires_grad_();
  auto opt = std::make_shared<optim::Adam>(p, optim::AdamOptions(0.01));
  auto forward = [p](const Tensor &in) {
    Tensor h = relu(linear(in, p[0], p[1]));
    h = relu(linear(h, p[2], p[3]));
    return linear(h, p[4], p[5]);
  };
  return examples::classifier_training(p, opt, forward, x, y, 128);
}
