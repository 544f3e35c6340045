// 2-D pooling over (C, H, W) or (N, C, H, W) inputs of any strides: max_pool2d,
// avg_pool2d, adaptive_avg_pool2d (libtorch semantics) and their adapters.
// Results are contiguous; planes (n, c) are split over the thread pool.
#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>

#include "runtime/int_math.h"
#include "runtime/kernels/composite_internal.h"
#include "runtime/kernels/strided.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln {

namespace {

using Pair = std::array<int64_t, 2>;
IntArrayRef as_ref(const Pair &p) { return {p.data(), 2}; }

// A pool argument given as one int (both dims) or two; `dflt` when omitted and allowed.
Pair pair_arg(IntArrayRef v, const char *op, const char *arg, const Pair *dflt = nullptr) {
  if (v.empty() && dflt) return *dflt;
  KILN_CHECK(v.size() == 1 || v.size() == 2, op, ": ", arg, " must either be ", dflt ? "omitted, " : "",
             "a single int, or a tuple of two ints, got ", shape_str(v));
  return v.size() == 1 ? Pair{v[0], v[0]} : Pair{v[0], v[1]};
}

// The planes of a pooling input: x viewed as (planes, H, W) through its strides.
struct Planes {
  int64_t n = 1, c = 0, h = 0, w = 0;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
  bool batched = false;
  int64_t count() const { return n * c; }
  int64_t offset(int64_t p) const { return (p / c) * sn + (p % c) * sc; }
};

Planes planes_of(const Tensor &x) {
  Planes p;
  p.batched = x.dim() == 4;
  const int64_t o = p.batched ? 1 : 0;
  if (p.batched) {
    p.n = x.size(0);
    p.sn = x.stride(0);
  }
  p.c = x.size(o);
  p.h = x.size(o + 1);
  p.w = x.size(o + 2);
  p.sc = x.stride(o);
  p.sh = x.stride(o + 1);
  p.sw = x.stride(o + 2);
  return p;
}

// torch's input check: 3-D or 4-D, only the batch dim may be empty.
void check_pool_input(const Tensor &x, const char *op) {
  detail::check_defined(x, op, "self");
  KILN_CHECK(x.dim() == 3 || x.dim() == 4, op, ": expected a 3-D (C, H, W) or 4-D (N, C, H, W) input, got shape ",
             shape_str(x.sizes()));
  for (int64_t d = x.dim() - 3; d < x.dim(); ++d)
    KILN_CHECK(x.size(d) != 0, op, ": expected non-zero sizes except for the batch dimension, got shape ",
               shape_str(x.sizes()));
}

Dims pool_shape(const Planes &p, int64_t oh, int64_t ow) {
  if (p.batched) return {p.n, p.c, oh, ow};
  return {p.c, oh, ow};
}


// torch's pooling_output_shape: in ceil mode the last window must start inside
// the input or the left padding.
int64_t pool_out_size(int64_t in, int64_t k, int64_t pad, int64_t stride, int64_t dil, bool ceil_mode) {
  int64_t out = div_floor(in + 2 * pad - dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0), stride) + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad) --out;
  return out;
}

struct Window {
  Pair k, s, p, d;
  bool ceil_mode;
};

// Validates a pool window and returns the output (H, W), as torch's pool2d_shape_check.
Pair check_window(const Tensor &x, const Window &w, const char *op) {
  KILN_CHECK(w.k[0] > 0 && w.k[1] > 0, op, ": kernel_size should be greater than zero, got ", shape_str(as_ref(w.k)));
  KILN_CHECK(w.s[0] > 0 && w.s[1] > 0, op, ": stride should be greater than zero, got ", shape_str(as_ref(w.s)));
  KILN_CHECK(w.d[0] > 0 && w.d[1] > 0, op, ": dilation should be greater than zero, got ", shape_str(as_ref(w.d)));
  KILN_CHECK(w.p[0] >= 0 && w.p[1] >= 0, op, ": padding should be non-negative, got ", shape_str(as_ref(w.p)));
  KILN_CHECK(w.k[0] / 2 >= w.p[0] && w.k[1] / 2 >= w.p[1], op,
             ": padding should be at most half of the kernel size, got padding ", shape_str(as_ref(w.p)), " and kernel_size ",
             shape_str(as_ref(w.k)));
  const Planes p = planes_of(x);
  Pair out{pool_out_size(p.h, w.k[0], w.p[0], w.s[0], w.d[0], w.ceil_mode),
           pool_out_size(p.w, w.k[1], w.p[1], w.s[1], w.d[1], w.ceil_mode)};
  KILN_CHECK(out[0] >= 1 && out[1] >= 1, op, ": given input of shape ", shape_str(x.sizes()),
             ", the calculated output size ", shape_str(as_ref(out)), " is too small");
  return out;
}

// Runs plane(p) for every plane; `work` is the cost of one plane in elements touched.
template <class F> void for_planes(int64_t planes, int64_t work, F &&plane) {
  const int64_t grain = std::max<int64_t>(1, kernels::kGrainElems / std::max<int64_t>(work, 1));
  parallel_for(0, planes, grain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) plane(i);
  });
}

// Max over one window, branch-free (random data would mispredict a branch per
// element). A NaN anywhere in the window makes the result NaN, as torch.
template <class T> struct MaxAcc {
  T best = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                 : std::numeric_limits<T>::lowest();
  bool nan = false;
  void add(T v) {
    best = v > best ? v : best;
    if constexpr (std::is_floating_point_v<T>) nan |= v != v;
  }
  T result() const { return nan ? std::numeric_limits<T>::quiet_NaN() : best; }
};

// Calls window(in, o, h0, h1, w0, w1) for output element o (flat, over all planes) of
// every plane: `in` is its plane's input, [h0, h1) x [w0, w1) its window clipped to the
// input, walked with the dilation as step.
template <class T, class F>
void for_each_max_window(const Tensor &x, const Window &w, int64_t oh, int64_t ow, F &&window) {
  const Planes p = planes_of(x);
  const T *src = static_cast<const T *>(x.raw_data());
  for_planes(p.count(), oh * ow * w.k[0] * w.k[1], [&](int64_t pl) {
    const T *in = src + p.offset(pl);
    for (int64_t i = 0; i < oh; ++i) {
      int64_t h0 = i * w.s[0] - w.p[0];
      const int64_t h1 = std::min(h0 + (w.k[0] - 1) * w.d[0] + 1, p.h);
      while (h0 < 0) h0 += w.d[0];
      for (int64_t j = 0; j < ow; ++j) {
        int64_t w0 = j * w.s[1] - w.p[1];
        const int64_t w1 = std::min(w0 + (w.k[1] - 1) * w.d[1] + 1, p.w);
        while (w0 < 0) w0 += w.d[1];
        window(in, (pl * oh + i) * ow + j, h0, h1, w0, w1);
      }
    }
  });
}

template <class T> void max_pool_kernel(const Tensor &x, const Window &w, const Tensor &out) {
  const Planes p = planes_of(x);
  T *dst = static_cast<T *>(out.raw_data());
  for_each_max_window<T>(x, w, out.size(-2), out.size(-1),
                         [&](const T *in, int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                           MaxAcc<T> acc;
                           for (int64_t y = h0; y < h1; y += w.d[0])
                             for (int64_t z = w0; z < w1; z += w.d[1]) acc.add(in[y * p.sh + z * p.sw]);
                           dst[o] = acc.result();
                         });
}

template <class T> bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return v != v;
  else return false;
}

// max_pool_kernel with the H * W position of each maximum, by torch's rule: a larger value
// or a NaN takes the place, so equal values keep the first and NaNs the last. Branchy: the
// positions are what is asked for here, not the value kernel's speed.
template <class T> void max_pool_indices_kernel(const Tensor &x, const Window &w, const Tensor &out, const Tensor &idx) {
  const Planes p = planes_of(x);
  T *dst = static_cast<T *>(out.raw_data());
  int64_t *at = static_cast<int64_t *>(idx.raw_data());
  for_each_max_window<T>(x, w, out.size(-2), out.size(-1),
                         [&](const T *in, int64_t o, int64_t h0, int64_t h1, int64_t w0, int64_t w1) {
                           T best = MaxAcc<T>{}.best;
                           int64_t pos = h0 * p.w + w0;
                           for (int64_t y = h0; y < h1; y += w.d[0])
                             for (int64_t z = w0; z < w1; z += w.d[1]) {
                               const T v = in[y * p.sh + z * p.sw];
                               if (v > best || is_nan(v)) {
                                 best = v;
                                 pos = y * p.w + z;
                               }
                             }
                           dst[o] = best;
                           at[o] = pos;
                         });
}

// Sums in double for floating inputs, in int64 for integer ones (torch divides integers truncating).
template <class T> using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T> void avg_pool_kernel(const Tensor &x, const Window &w, bool count_include_pad, const Tensor &out) {
  const Planes p = planes_of(x);
  const int64_t oh = out.size(-2), ow = out.size(-1);
  const T *src = static_cast<const T *>(x.raw_data());
  T *dst = static_cast<T *>(out.raw_data());
  for_planes(p.count(), oh * ow * w.k[0] * w.k[1], [&](int64_t pl) {
    const T *in = src + p.offset(pl);
    T *o = dst + pl * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      // The padded window may run past the padding in ceil mode; that part never counts.
      int64_t h0 = i * w.s[0] - w.p[0], h1 = std::min(h0 + w.k[0], p.h + w.p[0]);
      const int64_t hpad = h1 - h0;
      h0 = std::max<int64_t>(h0, 0);
      h1 = std::min(h1, p.h);
      for (int64_t j = 0; j < ow; ++j) {
        int64_t w0 = j * w.s[1] - w.p[1], w1 = std::min(w0 + w.k[1], p.w + w.p[1]);
        const int64_t pool = hpad * (w1 - w0);
        w0 = std::max<int64_t>(w0, 0);
        w1 = std::min(w1, p.w);
        if (h0 >= h1 || w0 >= w1) {
          o[i * ow + j] = T(0);
          continue;
        }
        Acc<T> sum = 0;
        for (int64_t y = h0; y < h1; ++y)
          for (int64_t z = w0; z < w1; ++z) sum += Acc<T>(in[y * p.sh + z * p.sw]);
        const int64_t divisor = count_include_pad ? pool : (h1 - h0) * (w1 - w0);
        o[i * ow + j] = T(sum / Acc<T>(divisor));
      }
    }
  });
}

template <class T> void adaptive_avg_kernel(const Tensor &x, const Tensor &out) {
  const Planes p = planes_of(x);
  const int64_t oh = out.size(-2), ow = out.size(-1);
  const T *src = static_cast<const T *>(x.raw_data());
  T *dst = static_cast<T *>(out.raw_data());
  // Each output cell covers [floor(i*H/OH), ceil((i+1)*H/OH)); summed over the plane once.
  for_planes(p.count(), p.h * p.w + oh * ow, [&](int64_t pl) {
    const T *in = src + p.offset(pl);
    T *o = dst + pl * oh * ow;
    for (int64_t i = 0; i < oh; ++i) {
      const int64_t h0 = (i * p.h) / oh, h1 = ((i + 1) * p.h + oh - 1) / oh;
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t w0 = (j * p.w) / ow, w1 = ((j + 1) * p.w + ow - 1) / ow;
        Acc<T> sum = 0;
        for (int64_t y = h0; y < h1; ++y)
          for (int64_t z = w0; z < w1; ++z) sum += Acc<T>(in[y * p.sh + z * p.sw]);
        o[i * ow + j] = T(sum / Acc<T>((h1 - h0) * (w1 - w0)));
      }
    }
  });
}

// dispatch_dtype restricted to the dtypes a pool accepts (checked before).
template <class F> void dispatch_pool(DType t, F &&f) {
  dispatch_dtype(t, [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) f.template operator()<T>();
  });
}

} // namespace

namespace {
// max_pool2d's checks and window, for both forms.
Window max_window(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode, const char *op) {
  check_pool_input(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/true);
  Window w;
  w.k = pair_arg(kernel_size, op, "kernel_size");
  w.s = pair_arg(stride, op, "stride", &w.k);
  w.p = pair_arg(padding, op, "padding");
  w.d = pair_arg(dilation, op, "dilation");
  w.ceil_mode = ceil_mode;
  return w;
}
} // namespace

Tensor max_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding,
                  IntArrayRef dilation, bool ceil_mode) {
  const char *op = "max_pool2d";
  const Window w = max_window(x, kernel_size, stride, padding, dilation, ceil_mode, op);
  const Pair o = check_window(x, w, op);
  KILN_TRACE(MaxPool2d, {x}, .kernel_size = as_ref(w.k), .stride = as_ref(w.s), .padding = as_ref(w.p),
             .dilation = as_ref(w.d), .ceil_mode = ceil_mode);
  Tensor out = detail::make_result(pool_shape(planes_of(x), o[0], o[1]), x.dtype(), {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  dispatch_pool(x.dtype(), [&]<class T>() { max_pool_kernel<T>(x, w, out); });
  return out;
}

std::tuple<Tensor, Tensor> max_pool2d_with_indices(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride,
                                                   IntArrayRef padding, IntArrayRef dilation, bool ceil_mode) {
  const char *op = "max_pool2d_with_indices";
  const Window w = max_window(x, kernel_size, stride, padding, dilation, ceil_mode, op);
  const Pair o = check_window(x, w, op);
  KILN_TRACE(MaxPool2dWithIndices, {x}, .kernel_size = as_ref(w.k), .stride = as_ref(w.s), .padding = as_ref(w.p),
             .dilation = as_ref(w.d), .ceil_mode = ceil_mode);
  const Dims shape = pool_shape(planes_of(x), o[0], o[1]);
  Tensor out = detail::make_result(shape, x.dtype(), {&x});
  Tensor idx = detail::make_result(shape, kInt64, {&x});
  if (out.is_meta() || out.numel() == 0) return {out, idx};
  dispatch_pool(x.dtype(), [&]<class T>() { max_pool_indices_kernel<T>(x, w, out, idx); });
  return {out, idx};
}

Tensor avg_pool2d(const Tensor &x, IntArrayRef kernel_size, IntArrayRef stride, IntArrayRef padding, bool ceil_mode,
                  bool count_include_pad) {
  const char *op = "avg_pool2d";
  check_pool_input(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/false);
  Window w;
  w.k = pair_arg(kernel_size, op, "kernel_size");
  w.s = pair_arg(stride, op, "stride", &w.k);
  w.p = pair_arg(padding, op, "padding");
  w.d = {1, 1};
  w.ceil_mode = ceil_mode;
  const Pair o = check_window(x, w, op);
  KILN_TRACE(AvgPool2d, {x}, .kernel_size = as_ref(w.k), .stride = as_ref(w.s), .padding = as_ref(w.p),
             .ceil_mode = ceil_mode, .count_include_pad = count_include_pad);
  Tensor out = detail::make_result(pool_shape(planes_of(x), o[0], o[1]), x.dtype(), {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  dispatch_pool(x.dtype(), [&]<class T>() { avg_pool_kernel<T>(x, w, count_include_pad, out); });
  return out;
}

Tensor adaptive_avg_pool2d(const Tensor &x, IntArrayRef output_size) {
  const char *op = "adaptive_avg_pool2d";
  check_pool_input(x, op);
  detail::check_pool_dtype(x, op, /*allow_int32=*/false);
  const Pair o = pair_arg(output_size, op, "output_size");
  KILN_CHECK(o[0] >= 0 && o[1] >= 0, op, ": elements of output_size must be non-negative, got ", shape_str(as_ref(o)));
  KILN_TRACE(AdaptiveAvgPool2d, {x}, .output_size = as_ref(o));
  Tensor out = detail::make_result(pool_shape(planes_of(x), o[0], o[1]), x.dtype(), {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  dispatch_pool(x.dtype(), [&]<class T>() { adaptive_avg_kernel<T>(x, out); });
  return out;
}

namespace adapters {

std::vector<Tensor> MaxPool2d(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::MaxPool2d at{a};
  return {max_pool2d(in.at(0), at.kernel_size(), at.stride(), at.padding(), at.dilation(), at.ceil_mode())};
}
std::vector<Tensor> MaxPool2dWithIndices(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::MaxPool2dWithIndices at{a};
  auto [values, indices] = max_pool2d_with_indices(in.at(0), at.kernel_size(), at.stride(), at.padding(),
                                                   at.dilation(), at.ceil_mode());
  return {values, indices};
}
std::vector<Tensor> AvgPool2d(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::AvgPool2d at{a};
  return {avg_pool2d(in.at(0), at.kernel_size(), at.stride(), at.padding(), at.ceil_mode(), at.count_include_pad())};
}
std::vector<Tensor> AdaptiveAvgPool2d(const std::vector<Tensor> &in, const Attrs &a) {
  return {adaptive_avg_pool2d(in.at(0), attrs::AdaptiveAvgPool2d{a}.output_size())};
}

} // namespace adapters

} // namespace kiln
