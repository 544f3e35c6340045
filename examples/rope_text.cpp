#include <cmath>

#include "example.h"

using namespace kiln;

// A decoder layer of a small Llama-style text model: token embedding, rms_norm,
// q/k/v projections, rotary position embedding written with slice, cat and mul
// (rotate-half, as users write it), causal attention, output projection and
// residual (issue 16: rms_norm is a composite).
KILN_EXAMPLE(rope_text, "rope-text",
             "embedding [4096, 256] + rms_norm + q/k/v + rotary (slice/cat/mul) + causal attention, tokens [4, 128]") {
  manual_seed(0);
  const int64_t B = 4, T = 128, D = 256, H = 4, Dh = D / H, V = 4096;
  Tensor emb = 0.02 * randn({V, D}), norm_w = 1.0 + 0.02 * randn({D});
  Tensor wq = 0.05 * randn({D, D}), wk = 0.05 * randn({D, D}), wv = 0.05 * randn({D, D}), wo = 0.05 * randn({D, D});
  // cos/sin tables [T, Dh] for positions 0..T-1, frequencies 10000^(-2i/Dh), each half repeated.
  Tensor pos = arange(T, kFloat32).unsqueeze(1);
  Tensor freq = exp(arange(0, Dh / 2, 1, kFloat32) * (-2.0 * std::log(10000.0) / double(Dh)));
  Tensor ang = cat({pos * freq, pos * freq}, 1);
  Tensor cos_t = cos(ang), sin_t = sin(ang);
  auto rotate_half = [Dh](const Tensor &t) {
    return cat({neg(t.slice(-1, Dh / 2, Dh)), t.slice(-1, 0, Dh / 2)}, -1);
  };
  auto heads = [=](const Tensor &t) { return t.view({B, T, H, Dh}).transpose(1, 2); };
  return {[=](const std::vector<Tensor> &in) {
            Tensor x = embedding(emb, in[0]);
            Tensor h = rms_norm(x, {D}, norm_w, 1e-6);
            Tensor q = heads(linear(h, wq)), k = heads(linear(h, wk)), v = heads(linear(h, wv));
            q = q * cos_t + rotate_half(q) * sin_t;
            k = k * cos_t + rotate_half(k) * sin_t;
            Tensor a = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
            return std::vector<Tensor>{x + linear(a.transpose(1, 2).reshape({B, T, D}), wo)};
          },
          {randint(0, V, {B, T})}};
}
