// Unary elementwise ops: neg .. logical_not, gelu, silu, relu_.
#include <cmath>
#include <string>
#include <type_traits>

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/loops.h"
#include "runtime/kernels/vecmath.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/version.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

using detail::Arg;
using detail::run_loop;

// out = f(x) computed in out's dtype, for the dtypes T the op accepts (Pred<T>).
template <class Pred, class F> void unary_kernel(const Tensor &out, const Tensor &x, F f) {
  dispatch_dtype(out.dtype(), [&]<class T>() {
    if constexpr (Pred::template ok<T>) {
      Arg a(x, out.dtype());
      run_loop<T, T>(out, {&a}, [&f](T v) { return static_cast<T>(f(v)); });
    } else {
      KILN_FAIL("internal: unary kernel has no ", out.dtype(), " instantiation");
    }
  });
}

struct FloatTypes {
  template <class T> static constexpr bool ok = std::is_floating_point_v<T>;
};
struct NumericTypes { // everything but bool
  template <class T> static constexpr bool ok = !std::is_same_v<T, bool>;
};
struct AllTypes {
  template <class T> static constexpr bool ok = true;
};

// Integer negation that wraps (as torch's two's-complement result) instead of being UB.
template <class T> inline T wrap_neg(T v) {
  if constexpr (std::is_integral_v<T>) return static_cast<T>(-static_cast<std::make_unsigned_t<T>>(v));
  else return -v;
}

void check_not_bool(const Tensor &x, const char *op, const char *why = "") {
  KILN_CHECK(x.dtype() != kBool, op, ": not supported on bool tensors (shape ", shape_str(x.sizes()), ")", why);
}

void check_floating(const Tensor &x, const char *op) {
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating-point tensor, got ", x.dtype(), " (shape ",
             shape_str(x.sizes()), ")");
}

// float32 goes through vecmath (branch-free polynomials the loop vectorizer
// turns into AVX-512 code); float64 keeps libm, which is correctly rounded to
// ~1 ulp and for which no cheap vectorizable version of that accuracy exists here.
#define KILN_VECMATH_OR_STD(name, std_expr)                                                                    \
  template <class T> KILN_VECMATH_INLINE T k_##name(T v) {                                                     \
    if constexpr (std::is_same_v<T, float>) return vecmath::name(v);                                           \
    else return std_expr;                                                                                      \
  }
KILN_VECMATH_OR_STD(exp, std::exp(v))
KILN_VECMATH_OR_STD(expm1, std::expm1(v))
KILN_VECMATH_OR_STD(log, std::log(v))
KILN_VECMATH_OR_STD(log1p, std::log1p(v))
KILN_VECMATH_OR_STD(tanh, std::tanh(v))
KILN_VECMATH_OR_STD(erf, std::erf(v))
KILN_VECMATH_OR_STD(sigmoid, T(1) / (T(1) + std::exp(-v)))
KILN_VECMATH_OR_STD(silu, v / (T(1) + std::exp(-v)))
KILN_VECMATH_OR_STD(gelu_tanh, T(0.5) * v * (T(1) + std::tanh(T(0.7978845608028654) * (v + T(0.044715) * v * v * v))))
KILN_VECMATH_OR_STD(gelu_erf, T(0.5) * v * (T(1) + std::erf(v * T(0.7071067811865476))))
#undef KILN_VECMATH_OR_STD

} // namespace

// A float-only op: bool/integer inputs promote to float32.
#define KILN_FLOAT_UNARY(fn, Id, ...)                                                                          \
  Tensor fn(const Tensor &x) {                                                                                 \
    detail::check_defined(x, #fn, "self");                                                                     \
    KILN_TRACE(Id, {x});                                                                                       \
    Tensor out = detail::make_elementwise_result(x.sizes(), detail::float_type(x.dtype()), {&x});              \
    if (out.is_meta()) return out;                                                                             \
    unary_kernel<FloatTypes>(out, x, [](auto v) {                                                              \
      using T [[maybe_unused]] = decltype(v);                                                                  \
      return __VA_ARGS__;                                                                                      \
    });                                                                                                        \
    return out;                                                                                                \
  }

KILN_FLOAT_UNARY(exp, Exp, k_exp(v))
KILN_FLOAT_UNARY(log, Log, k_log(v))
KILN_FLOAT_UNARY(log1p, Log1p, k_log1p(v))
KILN_FLOAT_UNARY(expm1, Expm1, k_expm1(v))
KILN_FLOAT_UNARY(sqrt, Sqrt, std::sqrt(v))
KILN_FLOAT_UNARY(rsqrt, Rsqrt, T(1) / std::sqrt(v))
KILN_FLOAT_UNARY(sin, Sin, std::sin(v))
KILN_FLOAT_UNARY(cos, Cos, std::cos(v))
KILN_FLOAT_UNARY(tanh, Tanh, k_tanh(v))
KILN_FLOAT_UNARY(sigmoid, Sigmoid, k_sigmoid(v))
KILN_FLOAT_UNARY(erf, Erf, k_erf(v))
KILN_FLOAT_UNARY(reciprocal, Reciprocal, T(1) / v)
#undef KILN_FLOAT_UNARY

Tensor neg(const Tensor &x) {
  detail::check_defined(x, "neg", "self");
  check_not_bool(x, "neg",
                 ": negation, the `-` operator, on a bool tensor is not supported; use logical_not() to invert a mask");
  KILN_TRACE(Neg, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  unary_kernel<NumericTypes>(out, x, [](auto v) { return wrap_neg(v); });
  return out;
}

Tensor abs(const Tensor &x) {
  detail::check_defined(x, "abs", "self");
  KILN_TRACE(Abs, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  unary_kernel<AllTypes>(out, x, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, bool>) return v; // as torch: abs of a bool is itself
    else if constexpr (std::is_integral_v<T>) return v < 0 ? wrap_neg(v) : v;
    else return std::fabs(v);
  });
  return out;
}

Tensor relu(const Tensor &x) {
  detail::check_defined(x, "relu", "self");
  check_not_bool(x, "relu");
  KILN_TRACE(Relu, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  // `v < 0 ? 0 : v` keeps NaN, as torch's clamp_min(x, 0).
  unary_kernel<NumericTypes>(out, x, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
  return out;
}

Tensor &relu_(Tensor &self) {
  detail::check_defined(self, "relu_", "self");
  check_not_bool(self, "relu_");
  detail::check_no_internal_overlap(self, "relu_");
  KILN_TRACE_INPLACE(self, Relu, {self});
  if (self.is_meta()) return self;
  detail::bump_version(self);
  unary_kernel<NumericTypes>(self, self, [](auto v) { return v < 0 ? decltype(v)(0) : v; });
  return self;
}

Tensor gelu(const Tensor &x, const std::string &approximate) {
  detail::check_defined(x, "gelu", "self");
  KILN_CHECK(approximate == "none" || approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '",
             approximate, "'");
  check_floating(x, "gelu");
  KILN_TRACE(Gelu, {x}, approximate);
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  if (approximate == "tanh") {
    unary_kernel<FloatTypes>(out, x, [](auto v) { return k_gelu_tanh(v); });
    return out;
  }
  unary_kernel<FloatTypes>(out, x, [](auto v) { return k_gelu_erf(v); }); // 0.5 x (1 + erf(x / sqrt(2)))
  return out;
}

Tensor silu(const Tensor &x) {
  detail::check_defined(x, "silu", "self");
  check_floating(x, "silu");
  KILN_TRACE(Silu, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  unary_kernel<FloatTypes>(out, x, [](auto v) { return k_silu(v); }); // x / (1 + exp(-x)), as torch
  return out;
}

Tensor square(const Tensor &x) {
  detail::check_defined(x, "square", "self");
  KILN_TRACE(Square, {x});
  // torch: square is pow(x, 2), so a bool tensor squares to int64.
  DType dt = x.dtype() == kBool ? kInt64 : x.dtype();
  Tensor out = detail::make_elementwise_result(x.sizes(), dt, {&x});
  if (out.is_meta()) return out;
  unary_kernel<NumericTypes>(out, x, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_integral_v<T>) { // wraps on overflow instead of UB
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(U(v) * U(v));
    } else {
      return v * v;
    }
  });
  return out;
}

// floor/ceil/round: integers are already whole (a copy, as torch); bool is an error.
#define KILN_ROUNDING_UNARY(fn, Id, FN)                                                                        \
  Tensor fn(const Tensor &x) {                                                                                 \
    detail::check_defined(x, #fn, "self");                                                                     \
    check_not_bool(x, #fn);                                                                                    \
    KILN_TRACE(Id, {x});                                                                                       \
    Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});                                  \
    if (out.is_meta()) return out;                                                                             \
    if (!x.is_floating_point()) {                                                                              \
      detail::cast_into(out, x);                                                                               \
      return out;                                                                                              \
    }                                                                                                          \
    unary_kernel<FloatTypes>(out, x, [](auto v) { return FN(v); });                                            \
    return out;                                                                                                \
  }

KILN_ROUNDING_UNARY(floor, Floor, std::floor)
KILN_ROUNDING_UNARY(ceil, Ceil, std::ceil)
KILN_ROUNDING_UNARY(round, Round, std::nearbyint) // the default rounding mode: half to even, as torch
#undef KILN_ROUNDING_UNARY

Tensor sign(const Tensor &x) {
  detail::check_defined(x, "sign", "self");
  KILN_TRACE(Sign, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  unary_kernel<AllTypes>(out, x, [](auto v) {
    using T = decltype(v);
    if constexpr (std::is_same_v<T, bool>) return v;
    else return static_cast<T>((T(0) < v) - (v < T(0)));
  });
  return out;
}

Tensor logical_not(const Tensor &x) {
  detail::check_defined(x, "logical_not", "self");
  KILN_TRACE(LogicalNot, {x});
  Tensor out = detail::make_elementwise_result(x.sizes(), kBool, {&x});
  if (out.is_meta()) return out;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    Arg a(x, x.dtype());
    run_loop<bool, T>(out, {&a}, [](T v) { return !v; });
  });
  return out;
}

// ---------------------------------------------------------------- adapters

namespace adapters {
#define KILN_UNARY_ADAPTER(Id, fn)                                                                             \
  std::vector<Tensor> Id(const std::vector<Tensor> &in, const Attrs &) {                                        \
    detail::check_num_inputs(in, 1, #fn);                                                                      \
    return {fn(in[0])};                                                                                        \
  }
KILN_UNARY_ADAPTER(Neg, neg)
KILN_UNARY_ADAPTER(Abs, abs)
KILN_UNARY_ADAPTER(Exp, exp)
KILN_UNARY_ADAPTER(Log, log)
KILN_UNARY_ADAPTER(Log1p, log1p)
KILN_UNARY_ADAPTER(Expm1, expm1)
KILN_UNARY_ADAPTER(Sqrt, sqrt)
KILN_UNARY_ADAPTER(Rsqrt, rsqrt)
KILN_UNARY_ADAPTER(Sin, sin)
KILN_UNARY_ADAPTER(Cos, cos)
KILN_UNARY_ADAPTER(Tanh, tanh)
KILN_UNARY_ADAPTER(Sigmoid, sigmoid)
KILN_UNARY_ADAPTER(Relu, relu)
KILN_UNARY_ADAPTER(Silu, silu)
KILN_UNARY_ADAPTER(Erf, erf)
KILN_UNARY_ADAPTER(Reciprocal, reciprocal)
KILN_UNARY_ADAPTER(Square, square)
KILN_UNARY_ADAPTER(Floor, floor)
KILN_UNARY_ADAPTER(Ceil, ceil)
KILN_UNARY_ADAPTER(Round, round)
KILN_UNARY_ADAPTER(Sign, sign)
KILN_UNARY_ADAPTER(LogicalNot, logical_not)
#undef KILN_UNARY_ADAPTER

std::vector<Tensor> Gelu(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 1, "gelu");
  return {gelu(in[0], attrs::Gelu{a}.approximate())};
}
} // namespace adapters

} // namespace kiln
