// torch's nn functions that are compositions of kiln's ops (runtime/ops.h, "composites"):
// normalizations, 1-D convolution and pooling through their 2-D forms, padding,
// resampling and channel shuffles. As composite.cpp: each checks its arguments under
// its own name, then calls public ops, so that a traced call records those ops and a
// compiled function fuses what fuses. Index arithmetic (padding modes, interpolation
// sources) is done here on the host, once per call: the gathers are index_select with
// constant indices, which a trace records as constants.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

// Its inputs are named "input", as torch's nn functions name them.
void check_float(const Tensor &x, const char *op, const char *arg = "input") { detail::check_float(x, op, arg); }

Tensor index_tensor(const std::vector<int64_t> &idx) { return tensor(idx); }

// Normalizes x over `dims` (biased variance, as torch's norms), without affine.
Tensor standardize(const Tensor &x, const std::vector<int64_t> &dims, double eps) {
  Tensor mean = kiln::mean(x, dims, true);
  Tensor centered = x - mean;
  Tensor var = kiln::mean(centered * centered, dims, true);
  return centered * rsqrt(var + eps);
}

// Per-channel affine of an [N, C, ...] tensor: weight and bias of shape [C].
Tensor channel_affine(const Tensor &y, const Tensor &weight, const Tensor &bias, const char *op) {
  const int64_t C = y.size(1);
  std::vector<int64_t> shape(size_t(y.dim()), 1);
  shape[1] = C;
  Tensor r = y;
  for (const auto &[t, name] : {std::pair{weight, "weight"}, std::pair{bias, "bias"}}) {
    if (!t.defined()) continue;
    KILN_CHECK(t.dim() == 1 && t.size(0) == C, op, ": ", name, " of shape ", shape_str(t.sizes()),
               " must be [C] = [", C, "] for input of shape ", shape_str(y.sizes()));
    r = std::string(name) == "weight" ? r * reshape(t, shape) : r + reshape(t, shape);
  }
  return r;
}

// A 1-D op through its 2-D form: [N, C, L] (or [C, L]) as [N, C, 1, L].
Tensor as_2d(const Tensor &x, const char *op) {
  detail::check_defined(x, op, "input");
  KILN_CHECK(x.dim() == 2 || x.dim() == 3, op, ": expected a 2-D [C, L] or 3-D [N, C, L] input, got shape ",
             shape_str(x.sizes()));
  return unsqueeze(x, -2);
}
Tensor from_2d(const Tensor &y) { return squeeze(y, -2); }

int64_t one_value(IntArrayRef v, const char *op, const char *arg) {
  KILN_CHECK(v.size() == 1, op, ": ", arg, " must be one value, got ", shape_str(v));
  return v[0];
}

// Source indices of padding `left` and `right` along a dim of size n.
std::vector<int64_t> pad_indices(int64_t n, int64_t left, int64_t right, const std::string &mode) {
  std::vector<int64_t> idx;
  for (int64_t o = -left; o < n + right; ++o) {
    int64_t i = o;
    if (mode == "reflect") {
      const int64_t period = 2 * (n - 1);
      i = ((o % period) + period) % period;
      if (i >= n) i = period - i;
    } else if (mode == "replicate") {
      i = std::clamp<int64_t>(o, 0, n - 1);
    } else { // circular
      i = ((o % n) + n) % n;
    }
    idx.push_back(i);
  }
  return idx;
}

// torch's area_pixel_compute_scale: the source step per output element.
double source_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale_factor) {
  if (align_corners) return out > 1 ? double(in - 1) / double(out - 1) : 0.0;
  if (scale_factor && *scale_factor > 0) return 1.0 / *scale_factor;
  return double(in) / double(out);
}

// x resampled along dim d to `out` elements, nearest (torch's "nearest": floor(dst * scale))
// or linear (torch's bilinear, one dim at a time).
Tensor resample_dim(const Tensor &x, int64_t d, int64_t out, const std::string &mode, bool align_corners,
                    std::optional<double> scale_factor) {
  const int64_t in = x.size(d);
  const double scale = source_scale(in, out, align_corners, scale_factor);
  if (mode == "nearest") {
    std::vector<int64_t> idx;
    for (int64_t o = 0; o < out; ++o) idx.push_back(std::min(int64_t(std::floor(double(o) * scale)), in - 1));
    return index_select(x, d, index_tensor(idx));
  }
  std::vector<int64_t> i0, i1;
  std::vector<double> lambda;
  for (int64_t o = 0; o < out; ++o) {
    double src = align_corners ? scale * double(o) : std::max(scale * (double(o) + 0.5) - 0.5, 0.0);
    const int64_t lo = std::min(int64_t(src), in - 1);
    i0.push_back(lo);
    i1.push_back(std::min(lo + 1, in - 1));
    lambda.push_back(src - double(lo));
  }
  std::vector<int64_t> wshape(size_t(x.dim()), 1);
  wshape[size_t(d)] = out;
  Tensor w = reshape(tensor(lambda).to(x.dtype()), wshape);
  Tensor a = index_select(x, d, index_tensor(i0)), b = index_select(x, d, index_tensor(i1));
  return a + (b - a) * w;
}
} // namespace

Tensor relu6(const Tensor &x) {
  detail::check_defined(x, "relu6", "self");
  return hardtanh(x, 0, 6);
}

// ---- normalization
Tensor group_norm(const Tensor &input, int64_t num_groups, const Tensor &weight, const Tensor &bias, double eps) {
  const char *op = "group_norm";
  check_float(input, op);
  KILN_CHECK(input.dim() >= 2, op, ": expected an input of at least 2 dims [N, C, ...], got shape ",
             shape_str(input.sizes()));
  const int64_t N = input.size(0), C = input.size(1);
  KILN_CHECK(num_groups > 0 && C % num_groups == 0, op, ": the number of channels ", C,
             " must be divisible by num_groups ", num_groups, " (input shape ", shape_str(input.sizes()), ")");
  Tensor g = reshape(input, {N, num_groups, -1});
  Tensor y = reshape(standardize(g, {2}, eps), input.sizes());
  return channel_affine(y, weight, bias, op);
}

Tensor instance_norm(const Tensor &input, const Tensor &running_mean, const Tensor &running_var, const Tensor &weight,
                     const Tensor &bias, bool use_input_stats, double momentum, double eps) {
  const char *op = "instance_norm";
  check_float(input, op);
  KILN_CHECK(input.dim() >= 3, op, ": expected an input of at least 3 dims [N, C, ...], got shape ",
             shape_str(input.sizes()));
  if (!use_input_stats) {
    KILN_CHECK(running_mean.defined() && running_var.defined(), op,
               ": use_input_stats=false needs running_mean and running_var");
    return batch_norm(input, weight, bias, running_mean, running_var, false, momentum, eps);
  }
  KILN_CHECK(!running_mean.defined() && !running_var.defined(), op,
             ": updating running statistics from the batch (use_input_stats=true with running_mean/running_var) is "
             "training, which kiln does not do yet; pass them undefined");
  std::vector<int64_t> dims;
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return channel_affine(standardize(input, dims, eps), weight, bias, op);
}

Tensor rms_norm(const Tensor &input, IntArrayRef normalized_shape, const Tensor &weight, std::optional<double> eps) {
  const char *op = "rms_norm";
  check_float(input, op);
  const int64_t k = int64_t(normalized_shape.size());
  KILN_CHECK(k >= 1 && k <= input.dim(), op, ": normalized_shape ", shape_str(normalized_shape),
             " does not fit input of shape ", shape_str(input.sizes()));
  for (int64_t i = 0; i < k; ++i)
    KILN_CHECK(input.size(input.dim() - k + i) == normalized_shape[size_t(i)], op, ": normalized_shape ",
               shape_str(normalized_shape), " is not the trailing shape of input ", shape_str(input.sizes()));
  if (weight.defined())
    KILN_CHECK(weight.sizes() == normalized_shape, op, ": weight of shape ", shape_str(weight.sizes()),
               " must be normalized_shape ", shape_str(normalized_shape));
  const double e = eps.value_or(detail::finfo_eps(input.dtype()));
  std::vector<int64_t> dims;
  for (int64_t d = input.dim() - k; d < input.dim(); ++d) dims.push_back(d);
  Tensor y = input * rsqrt(mean(input * input, dims, true) + e);
  return weight.defined() ? y * weight : y;
}

Tensor local_response_norm(const Tensor &input, int64_t size, double alpha, double beta, double k) {
  const char *op = "local_response_norm";
  check_float(input, op);
  KILN_CHECK(input.dim() >= 3, op, ": expected an input of at least 3 dims [N, C, ...], got shape ",
             shape_str(input.sizes()));
  KILN_CHECK(size > 0, op, ": size must be positive, got ", size);
  // torch's: the mean of x^2 over a window of `size` channels (zero-padded size/2 before,
  // (size-1)/2 after), times alpha, plus k, to the power beta, divides x.
  const int64_t C = input.size(1);
  Tensor sq = input * input;
  std::vector<int64_t> zshape(input.sizes().begin(), input.sizes().end());
  Tensor padded = sq;
  if (size / 2 > 0) {
    zshape[1] = size / 2;
    padded = cat({zeros(zshape, input.dtype()), padded}, 1);
  }
  if ((size - 1) / 2 > 0) {
    zshape[1] = (size - 1) / 2;
    padded = cat({padded, zeros(zshape, input.dtype())}, 1);
  }
  Tensor acc = narrow(padded, 1, 0, C);
  for (int64_t j = 1; j < size; ++j) acc = acc + narrow(padded, 1, j, C);
  return input / pow(acc * (alpha / double(size)) + k, beta);
}

Tensor normalize(const Tensor &input, double p, int64_t dim, double eps) {
  check_float(input, "normalize");
  const int64_t d = detail::wrap_dim(dim, input.dim(), "normalize");
  return input / clamp_min(norm(input, p, {d}, true), eps);
}

Tensor cosine_similarity(const Tensor &x1, const Tensor &x2, int64_t dim, double eps) {
  check_float(x1, "cosine_similarity", "x1");
  check_float(x2, "cosine_similarity", "x2");
  Tensor a = x1 * x1, b = x2 * x2; // broadcast first: dim counts in the broadcast shape
  const int64_t nd = std::max(x1.dim(), x2.dim());
  const int64_t d = detail::wrap_dim(dim, nd, "cosine_similarity");
  // torch's: sum(x1 x2) / sqrt(clamp_min(sum(x1^2) sum(x2^2), eps^2)).
  Tensor w12 = sum(x1 * x2, {d}), w1 = sum(a, {d}), w2 = sum(b, {d});
  return w12 / sqrt(clamp_min(w1 * w2, eps * eps));
}

Tensor pairwise_distance(const Tensor &x1, const Tensor &x2, double p, double eps, bool keepdim) {
  check_float(x1, "pairwise_distance", "x1");
  check_float(x2, "pairwise_distance", "x2");
  const int64_t nd = std::max(x1.dim(), x2.dim());
  KILN_CHECK(nd >= 1, "pairwise_distance: expected inputs of at least 1 dim, got shapes ", shape_str(x1.sizes()),
             " and ", shape_str(x2.sizes()));
  return norm(x1 - x2 + eps, p, {nd - 1}, keepdim);
}

// ---- 1-D convolution and pooling
Tensor conv1d(const Tensor &input, const Tensor &weight, const Tensor &bias, IntArrayRef stride, IntArrayRef padding,
              IntArrayRef dilation, int64_t groups) {
  const char *op = "conv1d";
  Tensor x = as_2d(input, op);
  detail::check_defined(weight, op, "weight");
  KILN_CHECK(weight.dim() == 3, op, ": expected a 3-D weight [O, C/groups, K], got shape ", shape_str(weight.sizes()));
  // conv2d checks these too, but would name itself and the 4-D shapes it is given.
  detail::check_float(input, op, "input");
  KILN_CHECK(groups >= 1, op, ": groups must be >= 1, got ", groups);
  KILN_CHECK(input.size(-2) == weight.size(1) * groups, op, ": given groups=", groups, ", weight of size ",
             shape_str(weight.sizes()), ", expected input", shape_str(input.sizes()), " to have ",
             weight.size(1) * groups, " channels, but got ", input.size(-2), " channels instead");
  const int64_t s = one_value(stride, op, "stride"), p = one_value(padding, op, "padding");
  const int64_t dl = one_value(dilation, op, "dilation");
  return from_2d(conv2d(x, unsqueeze(weight, 2), bias, {1, s}, {0, p}, {1, dl}, groups));
}

Tensor max_pool1d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  const char *op = "max_pool1d";
  Tensor y = as_2d(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/true);
  const int64_t k = one_value(kernel_size, op, "kernel_size");
  const int64_t s = stride.empty() ? k : one_value(stride, op, "stride");
  return from_2d(max_pool2d(y, {1, k}, {1, s}, {0, one_value(padding, op, "padding")},
                            {1, one_value(dilation, op, "dilation")}, ceil_mode));
}

std::tuple<Tensor, Tensor> max_pool1d_with_indices(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const char *op = "max_pool1d_with_indices";
  Tensor y = as_2d(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/true);
  const int64_t k = one_value(kernel_size, op, "kernel_size");
  const int64_t s = stride.empty() ? k : one_value(stride, op, "stride");
  // With H = 1 the index into H * W is the index into L.
  auto [v, i] = max_pool2d_with_indices(y, {1, k}, {1, s}, {0, one_value(padding, op, "padding")},
                                        {1, one_value(dilation, op, "dilation")}, ceil_mode);
  return {from_2d(v), from_2d(i)};
}

Tensor avg_pool1d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                  bool count_include_pad) {
  const char *op = "avg_pool1d";
  Tensor y = as_2d(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/false);
  const int64_t k = one_value(kernel_size, op, "kernel_size");
  const int64_t s = stride.empty() ? k : one_value(stride, op, "stride");
  return from_2d(avg_pool2d(y, {1, k}, {1, s}, {0, one_value(padding, op, "padding")}, ceil_mode, count_include_pad));
}

Tensor adaptive_avg_pool1d(const Tensor &x, IntArrayRef output_size) {
  const char *op = "adaptive_avg_pool1d";
  Tensor y = as_2d(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/false);
  return from_2d(adaptive_avg_pool2d(y, {1, one_value(output_size, op, "output_size")}));
}

// ---- padding and resampling
Tensor pad(const Tensor &x, IntArrayRef pad, const std::string &mode, std::optional<double> value) {
  const char *op = "pad";
  detail::check_defined(x, op, "input");
  KILN_CHECK(pad.size() % 2 == 0 && int64_t(pad.size()) / 2 <= x.dim(), op, ": pad ", shape_str(pad),
             " must have an even length of at most 2 * the input's dims (input shape ", shape_str(x.sizes()), ")");
  KILN_CHECK(mode == "constant" || mode == "reflect" || mode == "replicate" || mode == "circular", op,
             ": mode must be constant, reflect, replicate or circular, got \"", mode, "\"");
  KILN_CHECK(mode == "constant" || !value || *value == 0, op, ": a padding value is only for mode constant, got ",
             *value, " with mode ", mode);
  Tensor r = x;
  // pad pairs run from the last dim backwards: (left, right) of dim -1, then of dim -2, ...
  for (size_t i = 0; i < pad.size() / 2; ++i) {
    const int64_t d = x.dim() - 1 - int64_t(i), left = pad[2 * i], right = pad[2 * i + 1];
    const int64_t n = r.size(d);
    if (mode == "constant") {
      // Negative padding crops, as torch's.
      if (left < 0) r = narrow(r, d, -left, r.size(d) + left);
      if (right < 0) r = narrow(r, d, 0, r.size(d) + right);
      std::vector<int64_t> shape(r.sizes().begin(), r.sizes().end());
      std::vector<Tensor> parts;
      if (left > 0) {
        shape[size_t(d)] = left;
        parts.push_back(full(shape, value.value_or(0.0), r.dtype()));
      }
      parts.push_back(r);
      if (right > 0) {
        shape[size_t(d)] = right;
        parts.push_back(full(shape, value.value_or(0.0), r.dtype()));
      }
      if (parts.size() > 1) r = cat(parts, d);
      continue;
    }
    KILN_CHECK(left >= 0 && right >= 0, op, ": mode ", mode, " needs non-negative padding, got ", shape_str(pad));
    if (mode == "reflect")
      KILN_CHECK(left < n && right < n, op, ": reflect padding (", left, ", ", right, ") must be less than dim ", d,
                 "'s size ", n, " (input shape ", shape_str(x.sizes()), ")");
    if (mode == "circular")
      KILN_CHECK(left <= n && right <= n, op, ": circular padding (", left, ", ", right,
                 ") must be at most dim ", d, "'s size ", n, " (input shape ", shape_str(x.sizes()), ")");
    KILN_CHECK(n > 0, op, ": mode ", mode, " cannot pad an empty dim ", d, " (input shape ", shape_str(x.sizes()), ")");
    if (left == 0 && right == 0) continue;
    r = index_select(r, d, index_tensor(pad_indices(n, left, right, mode)));
  }
  return r;
}

Tensor interpolate(const Tensor &x, std::optional<std::vector<int64_t>> size,
                   std::optional<std::vector<double>> scale_factor, const std::string &mode,
                   std::optional<bool> align_corners) {
  const char *op = "interpolate";
  check_float(x, op);
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D [N, C, L] or 4-D [N, C, H, W] input, got shape ",
             shape_str(x.sizes()));
  const bool linear = mode == "bilinear" || mode == "linear";
  KILN_CHECK(mode == "nearest" || (mode == "linear" && x.dim() == 3) || (mode == "bilinear" && x.dim() == 4), op,
             ": mode \"", mode, "\" is not supported for a ", x.dim(), "-D input (nearest; linear for 3-D, bilinear for 4-D)");
  KILN_CHECK(linear || !align_corners, op, ": align_corners is only for the linear modes, not \"", mode, "\"");
  KILN_CHECK(size.has_value() != scale_factor.has_value(), op, ": give exactly one of size and scale_factor");
  const int64_t spatial = x.dim() - 2;
  std::vector<int64_t> out(static_cast<size_t>(spatial));
  std::vector<std::optional<double>> scales(static_cast<size_t>(spatial));
  for (int64_t i = 0; i < spatial; ++i) {
    const int64_t in = x.size(2 + i);
    if (size) {
      KILN_CHECK(size->size() == 1 || int64_t(size->size()) == spatial, op, ": size ", shape_str(*size),
                 " must have 1 or ", spatial, " values");
      out[size_t(i)] = (*size)[size->size() == 1 ? 0 : size_t(i)];
    } else {
      KILN_CHECK(scale_factor->size() == 1 || int64_t(scale_factor->size()) == spatial, op,
                 ": scale_factor must have 1 or ", spatial, " values");
      const double s = (*scale_factor)[scale_factor->size() == 1 ? 0 : size_t(i)];
      KILN_CHECK(s > 0, op, ": scale_factor must be positive, got ", s);
      out[size_t(i)] = int64_t(std::floor(double(in) * s));
      scales[size_t(i)] = s;
    }
    KILN_CHECK(out[size_t(i)] > 0 && in > 0, op, ": input and output sizes must be positive, got input shape ",
               shape_str(x.sizes()), " and output size ", out[size_t(i)]);
  }
  Tensor r = x;
  for (int64_t i = 0; i < spatial; ++i)
    r = resample_dim(r, 2 + i, out[size_t(i)], linear ? "linear" : "nearest", align_corners.value_or(false),
                     scales[size_t(i)]);
  return r;
}

Tensor pixel_shuffle(const Tensor &x, int64_t upscale_factor) {
  const char *op = "pixel_shuffle";
  detail::check_defined(x, op, "self");
  const int64_t r = upscale_factor;
  KILN_CHECK(x.dim() >= 3 && r > 0 && x.size(-3) % (r * r) == 0, op, ": expected [..., C * r^2, H, W] with r = ",
             r, ", got shape ", shape_str(x.sizes()));
  const int64_t nd = x.dim(), C = x.size(-3) / (r * r), H = x.size(-2), W = x.size(-1);
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 3);
  std::vector<int64_t> split = lead;
  split.insert(split.end(), {C, r, r, H, W});
  std::vector<int64_t> order;
  for (int64_t i = 0; i < nd - 3; ++i) order.push_back(i);
  const int64_t b = nd - 3;
  order.insert(order.end(), {b, b + 3, b + 1, b + 4, b + 2}); // C, H, r, W, r
  std::vector<int64_t> out = lead;
  out.insert(out.end(), {C, H * r, W * r});
  return reshape(permute(reshape(x, split), order), out);
}

Tensor pixel_unshuffle(const Tensor &x, int64_t downscale_factor) {
  const char *op = "pixel_unshuffle";
  detail::check_defined(x, op, "self");
  const int64_t r = downscale_factor;
  KILN_CHECK(x.dim() >= 3 && r > 0 && x.size(-2) % r == 0 && x.size(-1) % r == 0, op,
             ": expected [..., C, H, W] with H and W divisible by ", r, ", got shape ", shape_str(x.sizes()));
  const int64_t nd = x.dim(), C = x.size(-3), H = x.size(-2) / r, W = x.size(-1) / r;
  std::vector<int64_t> lead(x.sizes().begin(), x.sizes().end() - 3);
  std::vector<int64_t> split = lead;
  split.insert(split.end(), {C, H, r, W, r});
  std::vector<int64_t> order;
  for (int64_t i = 0; i < nd - 3; ++i) order.push_back(i);
  const int64_t b = nd - 3;
  order.insert(order.end(), {b, b + 2, b + 4, b + 1, b + 3}); // C, r, r, H, W
  std::vector<int64_t> out = lead;
  out.insert(out.end(), {C * r * r, H, W});
  return reshape(permute(reshape(x, split), order), out);
}

// ---- indexing
Tensor flip(const Tensor &x, IntArrayRef dims) {
  detail::check_defined(x, "flip", "self");
  std::vector<bool> seen(size_t(std::max<int64_t>(x.dim(), 1)), false);
  Tensor r = x;
  for (int64_t dim : dims) {
    const int64_t d = detail::wrap_dim(dim, x.dim(), "flip");
    KILN_CHECK(!seen[size_t(d)], "flip: dim ", dim, " appears more than once in dims ", shape_str(dims));
    seen[size_t(d)] = true;
    std::vector<int64_t> idx;
    for (int64_t i = x.size(d) - 1; i >= 0; --i) idx.push_back(i);
    r = index_select(r, d, index_tensor(idx));
  }
  return r;
}

Tensor one_hot(const Tensor &indices, int64_t num_classes) {
  const char *op = "one_hot";
  detail::check_defined(indices, op, "self");
  KILN_CHECK(indices.dtype() == kInt64, op, ": expected int64 class indices, got ", indices.dtype(), " (shape ",
             shape_str(indices.sizes()), ")");
  if (num_classes < 0) { // torch's: max + 1, read from the values (a traced call reports it as item() is)
    KILN_CHECK(indices.numel() > 0, op, ": cannot infer num_classes from an empty tensor");
    num_classes = amax(indices).item<int64_t>() + 1;
  }
  // The range check reads values: eager calls only (a trace keeps one_hot in the graph).
  if (indices.numel() > 0 && !indices.is_meta() && !detail::tracing()) {
    const int64_t lo = amin(indices).item<int64_t>(), hi = amax(indices).item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < num_classes, op, ": class values must be in [0, ", num_classes, "), got [", lo, ", ",
               hi, "] (shape ", shape_str(indices.sizes()), ")");
  }
  return to(eq(unsqueeze(indices, -1), arange(num_classes, kInt64)), kInt64);
}

} // namespace kiln
