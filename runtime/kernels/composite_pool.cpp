// Adaptive max pooling (runtime/ops.h, "composites"): every window gathered from the
// flattened H * W plane with constant indices (windows shorter than the longest repeat
// their last element, which changes no max), then max over the window with its position,
// which a constant table maps back to an index into H * W. A traced call records the
// gather, max and the table lookup. As torch's pooling kernels: max propagates NaN,
// equal values keep the first position, and among NaNs the last one's position is taken.
#include <algorithm>
#include <tuple>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

// Window i of `out` windows over `in` elements: [floor(i * in / out), ceil((i + 1) * in / out)).
int64_t window_start(int64_t i, int64_t in, int64_t out) { return (i * in) / out; }
int64_t window_end(int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; }

int64_t longest_window(int64_t in, int64_t out) {
  int64_t k = 0;
  for (int64_t i = 0; i < out; ++i) k = std::max(k, window_end(i, in, out) - window_start(i, in, out));
  return k;
}

// x [N, C, H, W] -> values and indices [N, C, oh, ow]; `op` names errors.
std::tuple<Tensor, Tensor> adaptive_max(const char *op, const Tensor &x, int64_t oh, int64_t ow) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  KILN_CHECK(C > 0 && H > 0 && W > 0, op, ": expected input to have non-zero size for non-batch dimensions, got shape ",
             shape_str(x.sizes()));
  // The window arithmetic multiplies output and input sizes; the table holds oh * ow * K entries.
  const __int128 big = int64_t(1) << 40;
  KILN_CHECK(__int128(oh) * H < big && __int128(ow) * W < big, op, ": output_size [", oh, ", ", ow,
             "] is too large for input of shape ", shape_str(x.sizes()));
  const int64_t kh = longest_window(H, oh), kw = longest_window(W, ow), K = kh * kw;
  std::vector<int64_t> table; // [oh, ow, K]: the H * W index of each window element
  table.reserve(size_t(oh * ow * K));
  for (int64_t i = 0; i < oh; ++i) {
    const int64_t hs = window_start(i, H, oh), he = window_end(i, H, oh);
    for (int64_t j = 0; j < ow; ++j) {
      const int64_t ws = window_start(j, W, ow), we = window_end(j, W, ow);
      for (int64_t a = 0; a < kh; ++a)
        for (int64_t b = 0; b < kw; ++b) table.push_back(std::min(hs + a, he - 1) * W + std::min(ws + b, we - 1));
    }
  }
  Tensor idx = tensor(table);
  Tensor windows = reshape(index_select(reshape(x, {N, C, H * W}), 2, idx), {N, C, oh, ow, K});
  auto [values, pos] = max(windows, -1);
  Tensor where_in = expand(reshape(idx, {1, 1, oh, ow, K}), {N, C, oh, ow, K});
  Tensor indices = squeeze(gather(where_in, -1, unsqueeze(pos, -1)), -1);
  // max's position is the first NaN's; torch's kernels take the last one's. Positions grow
  // along the window's row-major walk, so the last NaN has the largest.
  Tensor last_nan = amax(where(isnan(windows), where_in, int64_t(-1)), -1);
  indices = where(isnan(values), last_nan, indices);
  return {values, indices};
}

int64_t positive_size(int64_t v, const char *op) {
  KILN_CHECK(v > 0, op, ": output_size must be positive, got ", v);
  return v;
}

} // namespace

std::tuple<Tensor, Tensor> adaptive_max_pool2d(const Tensor &x, IntArrayRef output_size) {
  const char *op = "adaptive_max_pool2d";
  detail::check_float(x, op, "input");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             shape_str(x.sizes()));
  KILN_CHECK(output_size.size() == 1 || output_size.size() == 2, op, ": output_size must have 1 or 2 values, got ",
             shape_str(output_size));
  const int64_t oh = positive_size(output_size[0], op), ow = positive_size(output_size.back(), op);
  if (x.dim() == 4) return adaptive_max(op, x, oh, ow);
  auto [v, i] = adaptive_max(op, unsqueeze(x, 0), oh, ow);
  return {squeeze(v, 0), squeeze(i, 0)};
}

std::tuple<Tensor, Tensor> adaptive_max_pool1d(const Tensor &x, IntArrayRef output_size) {
  const char *op = "adaptive_max_pool1d";
  detail::check_float(x, op, "input");
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, op, ": expected a 2-D [C, L] or 3-D [N, C, L] input, got shape ",
             shape_str(x.sizes()));
  KILN_CHECK(output_size.size() == 1, op, ": output_size must be one value, got ", shape_str(output_size));
  const int64_t ol = positive_size(output_size[0], op);
  Tensor x4 = unsqueeze(x.dim() == 3 ? x : unsqueeze(x, 0), 2); // [N, C, 1, L]
  auto [v, i] = adaptive_max(op, x4, 1, ol);
  v = squeeze(v, 2);
  i = squeeze(i, 2);
  if (x.dim() == 3) return {v, i};
  return {squeeze(v, 0), squeeze(i, 0)};
}

} // namespace kiln
