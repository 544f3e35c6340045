// Selection and bounds: where, clamp, clamp_, masked_fill, lerp.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/loops.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/version.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

using detail::Arg;
using detail::run_loop;

// ---------------------------------------------------------------- clamp

// result_type(x, min, max) with the bounds as wrapped numbers: only a floating
// bound on an integer tensor changes the dtype (to the default float32).
DType clamp_result(DType x, const std::optional<Scalar> &lo, const std::optional<Scalar> &hi) {
  bool float_bound = (lo && lo->is_floating_point()) || (hi && hi->is_floating_point());
  return !is_floating(x) && float_bound ? kFloat32 : x;
}

void check_clamp(const Tensor &x, const std::optional<Scalar> &lo, const std::optional<Scalar> &hi,
                 const char *op) {
  detail::check_defined(x, op, "self");
  KILN_CHECK(lo || hi, op, ": at least one of 'min' or 'max' must not be None");
  KILN_CHECK(x.dtype() != kBool, op, ": not supported on bool tensors (shape ", shape_str(x.sizes()), ")");
}

// A missing bound is the dtype's extreme (infinity for floats), so one loop serves all cases.
template <class T> T bound_or(const std::optional<Scalar> &s, bool upper) {
  if (s) return s->to<T>();
  if constexpr (std::is_floating_point_v<T>)
    return upper ? std::numeric_limits<T>::infinity() : -std::numeric_limits<T>::infinity();
  else return upper ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
}

void clamp_kernel(const Tensor &out, const Tensor &x, const std::optional<Scalar> &lo,
                  const std::optional<Scalar> &hi) {
  dispatch_dtype(out.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) {
      const T l = bound_or<T>(lo, false), h = bound_or<T>(hi, true);
      Arg a(x, out.dtype());
      // std::max(v, l) keeps a NaN v (the comparison is false), as torch propagates NaN.
      run_loop<T, T>(out, {&a}, [l, h](T v) { return std::min(std::max(v, l), h); });
    }
  });
}

} // namespace

// ---------------------------------------------------------------- ops

Tensor where(const Tensor &condition, const Tensor &a, const Tensor &b) {
  detail::check_defined(condition, "where", "condition");
  detail::check_defined(a, "where", "self");
  detail::check_defined(b, "where", "other");
  KILN_CHECK(condition.dtype() == kBool, "where: expected condition to be a boolean tensor, but got a tensor with dtype ",
             condition.dtype(), " (shape ", shape_str(condition.sizes()), ")");
  Dims shape = detail::broadcast_shapes(detail::broadcast_shapes(condition.sizes(), a.sizes(), "where"), b.sizes(),
                                        "where");
  DType dt = detail::result_type({&a, &b});
  KILN_TRACE(Where, KILN_INPUTS(condition, a, b));
  Tensor out = detail::make_elementwise_result(shape, dt, {&condition, &a, &b});
  if (out.is_meta()) return out;
  dispatch_dtype(dt, [&]<class T>() {
    Arg c(condition, kBool), x(a, dt), y(b, dt);
    run_loop<T, bool, T, T>(out, {&c, &x, &y}, [](bool k, T p, T q) { return k ? p : q; });
  });
  return out;
}
Tensor where(const Tensor &condition, const Tensor &a, const Scalar &b) {
  return where(condition, a, detail::wrap_scalar(b));
}
Tensor where(const Tensor &condition, const Scalar &a, const Tensor &b) {
  return where(condition, detail::wrap_scalar(a), b);
}

Tensor clamp(const Tensor &x, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_clamp(x, min, max, "clamp");
  KILN_TRACE(Clamp, {x}, .min = min, .max = max);
  Tensor out = detail::make_elementwise_result(x.sizes(), clamp_result(x.dtype(), min, max), {&x});
  if (out.is_meta()) return out;
  clamp_kernel(out, x, min, max);
  return out;
}

Tensor &clamp_(Tensor &self, std::optional<Scalar> min, std::optional<Scalar> max) {
  check_clamp(self, min, max, "clamp_");
  detail::check_inplace(self, self.sizes(), clamp_result(self.dtype(), min, max), "clamp_");
  KILN_TRACE_INPLACE(self, Clamp, {self}, .min = min, .max = max);
  if (self.is_meta()) return self;
  detail::bump_version(self);
  clamp_kernel(self, self, min, max); // castable means the result dtype is self's
  return self;
}

Tensor masked_fill(const Tensor &x, const Tensor &mask, const Scalar &value) {
  detail::check_defined(x, "masked_fill", "self");
  detail::check_defined(mask, "masked_fill", "mask");
  KILN_CHECK(mask.dtype() == kBool, "masked_fill: only supports boolean masks, but got mask with dtype ",
             mask.dtype(), " (shape ", shape_str(mask.sizes()), ")");
  // As torch's out-of-place masked_fill: self and mask broadcast together.
  Dims shape = detail::broadcast_shapes(x.sizes(), mask.sizes(), "masked_fill");
  detail::check_scalar_fits(value, x.dtype(), "masked_fill");
  KILN_TRACE(MaskedFill, KILN_INPUTS(x, mask), .value = value);
  Tensor out = detail::make_elementwise_result(shape, x.dtype(), {&x, &mask});
  if (out.is_meta()) return out;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    const T v = value.to<T>();
    Arg a(x, x.dtype()), m(mask, kBool);
    run_loop<T, T, bool>(out, {&a, &m}, [v](T p, bool k) { return k ? v : p; });
  });
  return out;
}

Tensor lerp(const Tensor &start, const Tensor &end, const Tensor &weight) {
  detail::check_defined(start, "lerp", "self");
  detail::check_defined(end, "lerp", "end");
  detail::check_defined(weight, "lerp", "weight");
  KILN_CHECK(start.is_floating_point(), "lerp: expected a floating-point tensor, got ", start.dtype(), " (shape ",
             shape_str(start.sizes()), ")");
  KILN_CHECK(end.dtype() == start.dtype(), "lerp: expected dtype ", start.dtype(), " for `end` but got dtype ",
             end.dtype());
  KILN_CHECK(weight.impl().wrapped_number || weight.dtype() == start.dtype(), "lerp: expected dtype ",
             start.dtype(), " for `weight` but got dtype ", weight.dtype());
  Dims shape = detail::broadcast_shapes(detail::broadcast_shapes(start.sizes(), end.sizes(), "lerp"),
                                        weight.sizes(), "lerp");
  KILN_TRACE(Lerp, KILN_INPUTS(start, end, weight));
  Tensor out = detail::make_elementwise_result(shape, start.dtype(), {&start, &end, &weight});
  if (out.is_meta()) return out;
  dispatch_dtype(start.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      Arg s(start, start.dtype()), e(end, start.dtype()), w(weight, start.dtype());
      // torch's two-sided form: exact at both ends (w = 0 gives start, w = 1 gives end).
      run_loop<T, T, T, T>(out, {&s, &e, &w}, [](T a, T b, T t) {
        return std::abs(t) < T(0.5) ? a + t * (b - a) : b - (b - a) * (T(1) - t);
      });
    }
  });
  return out;
}
Tensor lerp(const Tensor &start, const Tensor &end, const Scalar &weight) {
  return lerp(start, end, detail::wrap_scalar(weight));
}

// ---------------------------------------------------------------- adapters

namespace adapters {
std::vector<Tensor> Where(const std::vector<Tensor> &in, const Attrs &) {
  detail::check_num_inputs(in, 3, "where");
  return {where(in[0], in[1], in[2])};
}
std::vector<Tensor> Clamp(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Clamp at{a};
  detail::check_num_inputs(in, 1, "clamp");
  return {clamp(in[0], at.min(), at.max())};
}
std::vector<Tensor> MaskedFill(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 2, "masked_fill");
  return {masked_fill(in[0], in[1], attrs::MaskedFill{a}.value())};
}
std::vector<Tensor> Lerp(const std::vector<Tensor> &in, const Attrs &) {
  detail::check_num_inputs(in, 3, "lerp");
  return {lerp(in[0], in[1], in[2])};
}
} // namespace adapters

} // namespace kiln
