// Sliding windows (runtime/ops.h, "composites"): Tensor::unfold, a view of every window
// along one dim (as_strided over the input's own strides, as torch's), and im2col
// (torch.nn.functional.unfold), each kernel tap a strided slice of the zero-padded input,
// stacked: a traced call records pad, slices and stack, so it fuses with what follows.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

std::vector<int64_t> pair_arg(IntArrayRef v, const char *op, const char *arg) {
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, ": expected ", arg, " to have 1 or 2 values, got ", shape_str(v));
  return v.size() == 1 ? std::vector<int64_t>{v[0], v[0]} : std::vector<int64_t>{v[0], v[1]};
}

} // namespace

Tensor Tensor::unfold(int64_t dimension, int64_t size, int64_t step) const {
  const char *op = "unfold";
  detail::check_defined(*this, op, "self");
  // A 0-dim tensor unfolds as one of size 1 (torch's).
  const int64_t nd = dim();
  const int64_t d = detail::wrap_dim(dimension, std::max<int64_t>(nd, 1), op);
  const int64_t n = nd == 0 ? 1 : this->size(d);
  KILN_CHECK(size >= 0, op, ": size is ", size, " but must be >= 0");
  KILN_CHECK(size <= n, op, ": maximum size for tensor at dimension ", d, " is ", n, " but size is ", size,
             " (shape ", shape_str(sizes()), ")");
  KILN_CHECK(step > 0, op, ": step is ", step, " but must be > 0");
  std::vector<int64_t> shape(sizes().begin(), sizes().end()), stride(strides().begin(), strides().end());
  const int64_t st = nd == 0 ? 1 : stride[size_t(d)];
  if (nd > 0) {
    shape[size_t(d)] = (n - size) / step + 1;
    // A step past the int64 range leaves one window, whose stride is never used.
    if (__builtin_mul_overflow(st, step, &stride[size_t(d)])) stride[size_t(d)] = st;
  }
  shape.push_back(size);
  stride.push_back(st);
  return as_strided(shape, stride, storage_offset());
}

Tensor im2col(const Tensor &input, IntArrayRef kernel_size, IntArrayRef dilation, IntArrayRef padding,
              IntArrayRef stride) {
  const char *op = "unfold";
  detail::check_defined(input, op, "input");
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, op, ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             shape_str(input.sizes()));
  const std::vector<int64_t> k = pair_arg(kernel_size, op, "kernel_size"), d = pair_arg(dilation, op, "dilation"),
                             p = pair_arg(padding, op, "padding"), s = pair_arg(stride, op, "stride");
  const bool batched = input.dim() == 4;
  Tensor x = batched ? input : unsqueeze(input, 0);
  const int64_t N = x.size(0), C = x.size(1);
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(k[size_t(i)] > 0 && d[size_t(i)] > 0 && s[size_t(i)] > 0, op,
               ": kernel_size, dilation and stride must be positive, got kernel_size ", shape_str(k), ", dilation ",
               shape_str(d), " and stride ", shape_str(s));
    KILN_CHECK(p[size_t(i)] >= 0, op, ": padding must be non-negative, got ", shape_str(p));
    // Arguments can be anything a caller passes: keep the arithmetic below in range.
    const __int128 big = INT64_MAX / 4;
    KILN_CHECK(__int128(d[size_t(i)]) * k[size_t(i)] < big && p[size_t(i)] < big, op, ": kernel_size ", shape_str(k),
               ", dilation ", shape_str(d), " and padding ", shape_str(p), " are out of range");
    const int64_t span = d[size_t(i)] * (k[size_t(i)] - 1) + 1, padded = x.size(2 + i) + 2 * p[size_t(i)];
    KILN_CHECK(padded >= span, op, ": the padded input (", padded, " along spatial dim ", i,
               ") is smaller than the dilated kernel (", span, "), input shape ", shape_str(input.sizes()));
    out[i] = (padded - span) / s[size_t(i)] + 1;
  }
  if (p[0] > 0 || p[1] > 0) x = pad(x, {p[1], p[1], p[0], p[0]});
  // Row c * kh * kw + i * kw + j of the result is tap (i, j) of channel c: the taps stacked
  // after the channel dim, each the input seen at that tap's offset with the stride.
  std::vector<Tensor> taps;
  for (int64_t i = 0; i < k[0]; ++i)
    for (int64_t j = 0; j < k[1]; ++j) {
      Tensor t = slice(x, 2, i * d[0], i * d[0] + (out[0] - 1) * s[0] + 1, s[0]);
      taps.push_back(slice(t, 3, j * d[1], j * d[1] + (out[1] - 1) * s[1] + 1, s[1]));
    }
  Tensor r = reshape(stack(taps, 2), {N, C * k[0] * k[1], out[0] * out[1]});
  return batched ? r : squeeze(r, 0);
}

} // namespace kiln
