// Transposed convolutions (runtime/ops.h, "composites") through conv2d. As
// composite_nn.cpp: each checks its arguments under its own name, then calls public ops,
// so that a traced call records those ops (zero insertion, padding, the weight's flip)
// and a compiled function fuses the conv's epilogue. The geometry is done on the host.
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {

// A per-dim argument of one value or `n` values, as torch's ExpandingArray.
std::vector<int64_t> expand_arg(IntArrayRef v, size_t n, const char *op, const char *arg) {
  KILN_CHECK(v.size() == 1 || v.size() == n, op, ": expected ", arg, " to have ", n == 1 ? "1 value" : "1 or 2 values",
             ", got ", shape_str(v));
  return v.size() == 1 ? std::vector<int64_t>(n, v[0]) : std::vector<int64_t>(v.begin(), v.end());
}

// weight and bias in input's dtype, as conv2d wants them (checked here under op's name).
void check_same_dtype(const char *op, const Tensor &input, const Tensor &weight, const Tensor &bias) {
  KILN_CHECK(weight.dtype() == input.dtype(), op, ": expected weight to have dtype ", input.dtype(),
             " (as input), got ", weight.dtype());
  KILN_CHECK(!bias.defined() || bias.dtype() == input.dtype(), op, ": expected bias to have dtype ", input.dtype(),
             " (as input), got ", bias.dtype());
}

// x [N, C, H, W] with stride - 1 zeros between neighbouring elements of H and W:
// [N, C, H, 1, W, 1] padded to [N, C, H, sh, W, sw], merged, cut after the last element.
Tensor zero_insert(const Tensor &x, int64_t sh, int64_t sw) {
  if (sh == 1 && sw == 1) return x;
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  Tensor y = pad(reshape(x, {N, C, H, 1, W, 1}), {0, sw - 1, 0, 0, 0, sh - 1});
  y = reshape(y, {N, C, H * sh, W * sw});
  return narrow(narrow(y, 2, 0, (H - 1) * sh + 1), 3, 0, (W - 1) * sw + 1);
}

// The transposed convolution of a 4-D input with per-dim (H, W) arguments, checked
// and named as `op` (conv_transpose1d passes its 1-D arguments as (1, value)).
Tensor conv_transpose(const char *op, const Tensor &input, const Tensor &weight, const Tensor &bias,
                      const std::vector<int64_t> &s, const std::vector<int64_t> &p, const std::vector<int64_t> &op_,
                      int64_t groups, const std::vector<int64_t> &d) {
  const int64_t C = input.size(1), H = input.size(2), W = input.size(3);
  KILN_CHECK(groups > 0, op, ": groups must be positive, got ", groups);
  KILN_CHECK(weight.size(0) == C, op, ": weight of shape ", shape_str(weight.sizes()), " expects ", weight.size(0),
             " input channels (weight [C_in, C_out / groups, k...]), but the input has ", C);
  KILN_CHECK(C % groups == 0, op, ": in_channels ", C, " must be divisible by groups ", groups);
  const int64_t C_out = weight.size(1) * groups;
  if (bias.defined())
    KILN_CHECK(bias.dim() == 1 && bias.size(0) == C_out, op, ": expected bias of shape [", C_out, "], got ",
               shape_str(bias.sizes()));
  const int64_t k[2] = {weight.size(2), weight.size(3)}, in[2] = {H, W};
  int64_t out[2];
  for (int i = 0; i < 2; ++i) {
    KILN_CHECK(s[size_t(i)] > 0 && d[size_t(i)] > 0, op, ": stride and dilation must be positive, got stride ",
               shape_str(s), " and dilation ", shape_str(d));
    KILN_CHECK(p[size_t(i)] >= 0 && op_[size_t(i)] >= 0, op, ": padding and output_padding must be non-negative, got ",
               shape_str(p), " and ", shape_str(op_));
    KILN_CHECK(op_[size_t(i)] < s[size_t(i)] || op_[size_t(i)] < d[size_t(i)], op,
               ": output padding must be smaller than either stride or dilation, got output_padding ", shape_str(op_),
               ", stride ", shape_str(s), " and dilation ", shape_str(d));
    KILN_CHECK(in[i] > 0, op, ": expected a non-empty spatial input, got shape ", shape_str(input.sizes()));
    // Arguments can be anything a caller passes: keep the geometry's arithmetic in range.
    const __int128 big = INT64_MAX / 4;
    KILN_CHECK(__int128(in[i]) * s[size_t(i)] < big && __int128(d[size_t(i)]) * k[i] < big && p[size_t(i)] < big &&
                   op_[size_t(i)] < big,
               op, ": stride ", shape_str(s), ", padding ", shape_str(p), ", dilation ", shape_str(d),
               " and kernel of shape ", shape_str(weight.sizes()), " are out of range");
    out[i] = (in[i] - 1) * s[size_t(i)] - 2 * p[size_t(i)] + d[size_t(i)] * (k[i] - 1) + op_[size_t(i)] + 1;
    KILN_CHECK(out[i] > 0 && k[i] > 0, op, ": the output size ", out[i], " (spatial dim ", i, ") for input of shape ",
               shape_str(input.sizes()), " and weight of shape ", shape_str(weight.sizes()), " is too small");
  }
  // The transposed convolution is the convolution of the zero-inserted input, padded by
  // d (k - 1) - p on each side (+ output_padding after), with the flipped kernel whose
  // in and out channels swap within each group. Negative padding crops, as pad's.
  Tensor x = zero_insert(input, s[0], s[1]);
  const int64_t lh = d[0] * (k[0] - 1) - p[0], lw = d[1] * (k[1] - 1) - p[1];
  if (lh != 0 || lw != 0 || op_[0] != 0 || op_[1] != 0) x = pad(x, {lw, lw + op_[1], lh, lh + op_[0]});
  const int64_t Cg = C / groups, Og = weight.size(1);
  Tensor w = reshape(weight, {groups, Cg, Og, k[0], k[1]}).transpose(1, 2);
  w = flip(reshape(w, {C_out, Cg, k[0], k[1]}), {2, 3});
  return conv2d(x, w, bias, 1, 0, {d[0], d[1]}, groups);
}

} // namespace

Tensor conv_transpose2d(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
                        IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation) {
  const char *op = "conv_transpose2d";
  detail::check_defined(input, op, "input");
  detail::check_defined(weight, op, "weight");
  KILN_CHECK(input.dim() == 3 || input.dim() == 4, op, ": expected a 3-D [C, H, W] or 4-D [N, C, H, W] input, got shape ",
             shape_str(input.sizes()));
  KILN_CHECK(weight.dim() == 4, op, ": expected a 4-D weight [C_in, C_out / groups, kH, kW], got shape ",
             shape_str(weight.sizes()));
  detail::check_float(input, op, "input");
  check_same_dtype(op, input, weight, bias);
  const bool batched = input.dim() == 4;
  Tensor r = conv_transpose(op, batched ? input : unsqueeze(input, 0), weight, bias, expand_arg(stride, 2, op, "stride"),
                            expand_arg(padding, 2, op, "padding"), expand_arg(output_padding, 2, op, "output_padding"),
                            groups, expand_arg(dilation, 2, op, "dilation"));
  return batched ? r : squeeze(r, 0);
}

Tensor conv_transpose1d(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride,
                        IntArrayRef padding, IntArrayRef output_padding, int64_t groups, IntArrayRef dilation) {
  const char *op = "conv_transpose1d";
  detail::check_defined(input, op, "input");
  detail::check_defined(weight, op, "weight");
  KILN_CHECK(input.dim() == 2 || input.dim() == 3, op, ": expected a 2-D [C, L] or 3-D [N, C, L] input, got shape ",
             shape_str(input.sizes()));
  KILN_CHECK(weight.dim() == 3, op, ": expected a 3-D weight [C_in, C_out / groups, K], got shape ",
             shape_str(weight.sizes()));
  detail::check_float(input, op, "input");
  check_same_dtype(op, input, weight, bias);
  const bool batched = input.dim() == 3;
  Tensor x = unsqueeze(batched ? input : unsqueeze(input, 0), 2); // [N, C, 1, L]
  auto pair = [&](IntArrayRef v, int64_t h, const char *arg) {
    return std::vector<int64_t>{h, expand_arg(v, 1, op, arg)[0]};
  };
  Tensor r = conv_transpose(op, x, unsqueeze(weight, 2), bias, pair(stride, 1, "stride"), pair(padding, 0, "padding"),
                            pair(output_padding, 0, "output_padding"), groups, pair(dilation, 1, "dilation"));
  r = squeeze(r, 2);
  return batched ? r : squeeze(r, 0);
}

} // namespace kiln
