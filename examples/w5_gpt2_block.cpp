#include "example.h"

#include <cmath>

using namespace kiln;

namespace {
// One GPT-2-small decoder block (d_model 768, 12 heads, causal), as in nanoGPT.
struct Gpt2Block {
  int64_t d = 768, heads = 12, hidden = 3072;
  Tensor ln1_w = ones({768}), ln1_b = zeros({768});
  Tensor w_qkv = 0.02 * randn({3 * 768, 768}), b_qkv = zeros({3 * 768});
  Tensor w_proj = 0.02 * randn({768, 768}), b_proj = zeros({768});
  Tensor ln2_w = ones({768}), ln2_b = zeros({768});
  Tensor w_fc = 0.02 * randn({3072, 768}), b_fc = zeros({3072});
  Tensor w_fc2 = 0.02 * randn({768, 3072}), b_fc2 = zeros({768});
  Tensor causal = tril(ones({128, 128}, kBool)); // true = may attend

  Tensor attention(const Tensor &x) const {
    int64_t B = x.size(0), T = x.size(1), hd = d / heads;
    std::vector<Tensor> qkv = linear(x, w_qkv, b_qkv).split(d, -1);
    Tensor q = qkv[0].view({B, T, heads, hd}).transpose(1, 2);
    Tensor k = qkv[1].view({B, T, heads, hd}).transpose(1, 2);
    Tensor v = qkv[2].view({B, T, heads, hd}).transpose(1, 2);
    Tensor att = matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(hd)));
    att = att.masked_fill(causal.slice(0, 0, T).slice(1, 0, T).logical_not(), -INFINITY);
    Tensor y = matmul(softmax(att, -1), v);
    y = y.transpose(1, 2).reshape({B, T, d});
    return linear(y, w_proj, b_proj);
  }

  Tensor forward(const Tensor &x0) const {
    Tensor x = x0 + attention(layer_norm(x0, {d}, ln1_w, ln1_b));
    Tensor h = gelu(linear(layer_norm(x, {d}, ln2_w, ln2_b), w_fc, b_fc), "tanh");
    return x + linear(h, w_fc2, b_fc2);
  }
};
} // namespace

KILN_EXAMPLE(w5, "w5-gpt2-block", "one GPT-2-small decoder block, batch 1, seq 128, d_model 768, 12 heads, causal") {
  manual_seed(0);
  auto block = std::make_shared<Gpt2Block>();
  return {[block](const std::vector<Tensor> &in) { return std::vector<Tensor>{block->forward(in[0])}; },
          {randn({1, 128, 768})}};
}
