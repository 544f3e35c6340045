// Conversion and copies: to, copy, copy_, contiguous, clone, fill_, zero_, and
// the helpers the other elementwise files share.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__F16C__)
#include <immintrin.h>
#endif

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/loops.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/version.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

namespace kiln {

// ---------------------------------------------------------------- shared helpers

namespace detail {

namespace {
// One element of dtype `from` at `src`, converted to `to` at `dst`.
void convert_one(const void *src, DType from, void *dst, DType to) {
  dispatch_storage_dtype(from, [&]<class S>() {
    S v = *static_cast<const S *>(src);
    dispatch_storage_dtype(to, [&]<class D>() { *static_cast<D *>(dst) = convert_value<D>(v); });
  });
}
} // namespace

void Arg::convert(const Tensor &t, DType want) {
  itemsize = int64_t(kiln::itemsize(want));
  if (t.numel() == 1) { // scalars: convert the one value, no temporary tensor
    convert_one(t.raw_data(), t.dtype(), buf, want);
    data = buf;
    return;
  }
  keep = to(t, want);
  data = static_cast<char *>(keep.raw_data());
  sizes = keep.sizes();
  strides = keep.strides();
  numel = keep.numel();
  contiguous = true;
}

namespace {
#if defined(__F16C__)
// n float32 -> float16 bits, and back, 8 at a time; the tail goes through a
// padded block so that every element takes the instruction's path.
void half_from_float(const float *x, uint16_t *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
  if (i == n) return;
  float in[8] = {};
  uint16_t out[8];
  std::memcpy(in, x + i, size_t(n - i) * sizeof(float));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(out), _mm256_cvtps_ph(_mm256_loadu_ps(in), _MM_FROUND_TO_NEAREST_INT));
  std::memcpy(y + i, out, size_t(n - i) * sizeof(uint16_t));
}
void float_from_half(const uint16_t *x, float *y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
  if (i == n) return;
  uint16_t in[8] = {};
  float out[8];
  std::memcpy(in, x + i, size_t(n - i) * sizeof(uint16_t));
  _mm256_storeu_ps(out, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(in))));
  std::memcpy(y + i, out, size_t(n - i) * sizeof(float));
}
#endif

// float32 <-> float16 between contiguous tensors with the CPU's
// conversion instructions (F16C), which every eager float16 op runs twice or
// three times: the software conversion of runtime/half.h branches on
// subnormals, overflow and NaN, which keeps its loop scalar (one thread, [4096,
// 1024]: 7.2 ms down and 11.8 ms up, against 2.3 and 3.4 ms here). vcvtps2ph rounds
// to nearest even and quiets a NaN keeping its sign and top payload bits, as
// float_to_half_bits does (ReducedFloat.BulkHalfConversionsMatchTheScalarOnes);
// vcvtph2ps quiets a signaling NaN, which the scalar conversion keeps
// signaling: a NaN either way, as the JIT's conversion (the same instruction).
bool cast_half_dense(const Tensor &out, const Tensor &src) {
#if defined(__F16C__)
  const bool down = out.dtype() == kFloat16 && src.dtype() == kFloat32;
  const bool up = out.dtype() == kFloat32 && src.dtype() == kFloat16;
  if (!(down || up) || !out.is_contiguous() || !src.is_contiguous() || out.is_alias_of(src)) return false;
  const char *x = static_cast<const char *>(src.raw_data());
  char *y = static_cast<char *>(out.raw_data());
  parallel_for(0, out.numel(), kGrain, [&](int64_t lo, int64_t hi) {
    if (down) half_from_float(reinterpret_cast<const float *>(x) + lo, reinterpret_cast<uint16_t *>(y) + lo, hi - lo);
    else float_from_half(reinterpret_cast<const uint16_t *>(x) + lo, reinterpret_cast<float *>(y) + lo, hi - lo);
  });
  return true;
#else
  (void)out, (void)src;
  return false;
#endif
}
} // namespace

void cast_into(const Tensor &out, const Tensor &src) {
  if (cast_half_dense(out, src)) return;
  dispatch_storage_dtype(out.dtype(), [&]<class O>() {
    dispatch_storage_dtype(src.dtype(), [&]<class S>() {
      Arg a(src, src.dtype());
      run_loop<O, S>(out, {&a}, [](S v) { return convert_value<O>(v); });
    });
  });
}

void check_no_internal_overlap(const Tensor &self, const char *op) {
  for (int64_t d = 0; d < self.dim(); ++d)
    KILN_CHECK(self.sizes()[d] <= 1 || self.strides()[d] != 0, op,
               ": unsupported operation: more than one element of the written-to tensor refers to a single "
               "memory location (shape ",
               shape_str(self.sizes()), ", strides ", shape_str(self.strides()), "); clone it first");
}

void check_inplace(const Tensor &self, IntArrayRef other_shape, DType result, const char *op) {
  Dims shape = broadcast_shapes(self.sizes(), other_shape, op);
  KILN_CHECK(IntArrayRef(shape) == self.sizes(), op, ": output with shape ", shape_str(self.sizes()),
             " doesn't match the broadcast shape ", shape_str(shape));
  KILN_CHECK(can_cast(result, self.dtype()), op, ": result type ", result,
             " can't be cast to the desired output type ", self.dtype());
  check_no_internal_overlap(self, op);
}

Tensor unalias(const Tensor &self, const Tensor &other) {
  if (!other.is_alias_of(self)) return other;
  bool same_view = other.storage_offset() == self.storage_offset() && other.sizes() == self.sizes() &&
                   other.strides() == self.strides();
  return same_view ? other : clone(other);
}

void check_num_inputs(const std::vector<Tensor> &in, size_t n, const char *op) {
  KILN_CHECK(in.size() == n, op, ": expected ", n, " inputs, got ", in.size());
}

} // namespace detail

// ---------------------------------------------------------------- ops

Tensor to(const Tensor &x, DType dtype) {
  detail::check_defined(x, "to", "self");
  if (x.dtype() == dtype) return x; // as torch: no copy when nothing changes
  KILN_TRACE(Cast, {x}, .dtype = dtype);
  Tensor out = detail::make_elementwise_result(x.sizes(), dtype, {&x});
  if (out.is_meta()) return out;
  detail::cast_into(out, x);
  return out;
}

Tensor copy(const Tensor &self, const Tensor &src) {
  detail::check_defined(self, "copy", "self");
  detail::check_defined(src, "copy", "src");
  Dims shape = detail::broadcast_shapes(self.sizes(), src.sizes(), "copy");
  KILN_CHECK(IntArrayRef(shape) == self.sizes(), "copy: src of shape ", shape_str(src.sizes()),
             " cannot be broadcast to self's shape ", shape_str(self.sizes()));
  KILN_TRACE(Copy, KILN_INPUTS(self, src));
  // self's layout, as torch's functional copy (clone_preserve_strides of self);
  // a self with gaps or overlaps gets a dense layout of the same dim order.
  Dims st;
  const bool strided = detail::elementwise_strides(self.sizes(), {&self}, st);
  Tensor out = detail::make_strided_result(self.sizes(), strided ? &st : nullptr, self.dtype(), {&self, &src});
  if (out.is_meta()) return out;
  detail::cast_into(out, src);
  return out;
}

Tensor &copy_(Tensor &self, const Tensor &src) {
  detail::check_defined(self, "copy_", "self");
  detail::check_defined(src, "copy_", "src");
  Dims shape = detail::broadcast_shapes(self.sizes(), src.sizes(), "copy_");
  KILN_CHECK(IntArrayRef(shape) == self.sizes(), "copy_: src of shape ", shape_str(src.sizes()),
             " cannot be broadcast to self's shape ", shape_str(self.sizes()));
  detail::check_no_internal_overlap(self, "copy_");
  KILN_TRACE_INPLACE(self, Copy, KILN_INPUTS(self, src));
  if (detail::any_meta({&self, &src}) || src.is_same(self)) return self;
  detail::bump_version(self);
  detail::cast_into(self, detail::unalias(self, src));
  return self;
}

namespace {
// Transposes each of n images from `x` ([rows, cols], contiguous) into `out`
// ([cols, rows]) in 32 x 32 tiles, spread over the pool, so that the strided
// side stays within 32 cache lines, where the generic strided copy walks it
// across the whole image. NCHW -> NHWC is rows = C, cols = H*W; NHWC -> NCHW
// the other way round. (W7's x, 1 thread: 1.6 ms and 0.8 ms.)
template <class T> void transpose_images(const T *x, T *out, int64_t n, int64_t rows, int64_t cols) {
  constexpr int64_t kB = 32;
  const int64_t rtiles = (rows + kB - 1) / kB, ctiles = (cols + kB - 1) / kB;
  parallel_for(0, n * rtiles * ctiles, 64, [&](int64_t lo, int64_t hi) {
    for (int64_t it = lo; it < hi; ++it) {
      const int64_t img = it / (rtiles * ctiles), i0 = it / ctiles % rtiles * kB, j0 = it % ctiles * kB;
      const int64_t i1 = std::min(rows, i0 + kB), j1 = std::min(cols, j0 + kB);
      const T *src = x + img * rows * cols;
      T *dst = out + img * rows * cols;
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t j = j0; j < j1; ++j) dst[j * rows + i] = src[i * cols + j];
    }
  });
}

// out = x through transpose_images when both are float/double images of [rows, cols] / [cols, rows].
bool transpose_floats(const Tensor &x, const Tensor &out, int64_t rows, int64_t cols) {
  if (x.dtype() != kFloat32 && x.dtype() != kFloat64) return false;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      transpose_images(static_cast<const T *>(x.raw_data()), static_cast<T *>(out.raw_data()), x.size(0), rows,
                       cols);
  });
  return true;
}
} // namespace

bool detail::nchw_to_channels_last_into(const Tensor &x, void *dst) {
  if (x.dim() != 4 || !x.is_contiguous() || (x.dtype() != kFloat32 && x.dtype() != kFloat64)) return false;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>)
      transpose_images(static_cast<const T *>(x.raw_data()), static_cast<T *>(dst), x.size(0), x.size(1),
                       x.size(2) * x.size(3));
  });
  return true;
}

Tensor contiguous(const Tensor &x) {
  detail::check_defined(x, "contiguous", "self");
  if (x.is_contiguous()) return x;
  KILN_TRACE(Contiguous, {x});
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  // Channels-last back to NCHW (a graph-output conversion): whole images at once.
  if (x.dim() == 4 && x.is_contiguous(MemoryFormat::ChannelsLast) &&
      transpose_floats(x, out, x.size(2) * x.size(3), x.size(1)))
    return out;
  detail::cast_into(out, x);
  return out;
}

Tensor contiguous(const Tensor &x, MemoryFormat format) {
  if (format == MemoryFormat::Contiguous) return contiguous(x);
  detail::check_defined(x, "contiguous", "self");
  KILN_CHECK(x.dim() == 4, "contiguous: ChannelsLast needs a 4-D [N, C, H, W] tensor, got shape ",
             shape_str(x.sizes()));
  if (x.is_meta() || x.is_contiguous(MemoryFormat::ChannelsLast)) return x;
  Tensor flat = detail::make_result({x.numel()}, x.dtype(), {&x});
  Tensor out = detail::make_view(flat, x.sizes(), detail::channels_last_strides(x.sizes()), 0);
  if (x.is_contiguous() && transpose_floats(x, out, x.size(1), x.size(2) * x.size(3))) return out;
  detail::cast_into(out, x);
  return out;
}

Tensor clone(const Tensor &x) {
  detail::check_defined(x, "clone", "self");
  KILN_TRACE(Clone, {x});
  // torch's preserve_format: x's strides when they are non-overlapping and
  // dense, else a dense layout of the same dim order.
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  detail::cast_into(out, x);
  return out;
}

namespace {
// torch's c10::overflows for int32 and narrower: within [min, max], and for an unsigned
// type also negatives down to -max, which wrap (uint8: -1 is 255).
bool small_int_fits(DType dtype, double v) {
  return dispatch_dtype(dtype, [&]<class T>() {
    const double lo = double(std::numeric_limits<T>::lowest()), hi = double(std::numeric_limits<T>::max());
    if constexpr (std::is_unsigned_v<T>) return v <= hi && v >= -hi;
    else return v >= lo && v <= hi;
  });
}
} // namespace

void detail::check_scalar_fits(const Scalar &value, DType dtype, const char *op) {
  if (dtype == kBool || dtype == kFloat64) return;
  double v = value.toDouble();
  bool fits = true;
  if (dtype == kFloat32) fits = !std::isfinite(v) || std::fabs(v) <= double(std::numeric_limits<float>::max());
  else if (dtype == kFloat16) fits = !std::isfinite(v) || std::fabs(v) <= 65504.0;
  else if (dtype == kBFloat16) fits = !std::isfinite(v) || std::fabs(v) <= double(float(BFloat16::from_bits(0x7F7F)));
  else if (value.is_floating_point()) {
    // Bounds as doubles: 2^63 and 2^31 are exact, the maxima are not.
    double hi = dtype == kInt64 ? 9223372036854775808.0 : 2147483648.0;
    fits = v >= -hi && v < hi; // false for NaN
    if (fits && dtype != kInt64 && dtype != kInt32) fits = small_int_fits(dtype, v);
  } else if (dtype != kInt64) {
    fits = small_int_fits(dtype, double(value.toLong()));
  }
  KILN_CHECK(fits, op, ": value ", value, " cannot be converted to type ", dtype, " without overflow");
}

namespace {
void fill_kernel(Tensor &self, const Scalar &value) {
  dispatch_storage_dtype(self.dtype(), [&]<class T>() {
    const T v = value.to<T>();
    detail::run_loop<T>(self, {}, [v]() { return v; });
  });
}
} // namespace

Tensor &fill_(Tensor &self, const Scalar &value) {
  detail::check_defined(self, "fill_", "self");
  detail::check_no_internal_overlap(self, "fill_");
  detail::check_scalar_fits(value, self.dtype(), "fill_");
  KILN_TRACE_INPLACE(self, Full, {}, .size = self.sizes(), .value = value, .dtype = self.dtype());
  if (self.is_meta()) return self;
  detail::bump_version(self);
  fill_kernel(self, value);
  return self;
}

Tensor &zero_(Tensor &self) {
  detail::check_defined(self, "zero_", "self");
  detail::check_no_internal_overlap(self, "zero_");
  KILN_TRACE_INPLACE(self, Full, {}, .size = self.sizes(), .value = Scalar(0), .dtype = self.dtype());
  if (self.is_meta()) return self;
  detail::bump_version(self);
  fill_kernel(self, Scalar(0));
  return self;
}

// ---------------------------------------------------------------- adapters

namespace adapters {
std::vector<Tensor> Cast(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 1, "to");
  return {to(in[0], attrs::Cast{a}.dtype())};
}
std::vector<Tensor> Copy(const std::vector<Tensor> &in, const Attrs &) {
  detail::check_num_inputs(in, 2, "copy");
  return {copy(in[0], in[1])};
}
std::vector<Tensor> Contiguous(const std::vector<Tensor> &in, const Attrs &) {
  detail::check_num_inputs(in, 1, "contiguous");
  return {contiguous(in[0])};
}
std::vector<Tensor> Clone(const std::vector<Tensor> &in, const Attrs &) {
  detail::check_num_inputs(in, 1, "clone");
  return {clone(in[0])};
}
} // namespace adapters

} // namespace kiln
