// Binary elementwise ops with broadcasting and torch's type promotion: add, sub,
// mul, div, pow, maximum, minimum, remainder, the binary libm list (atan2, hypot, fmod,
// copysign), comparisons, logical and/or, and the in-place add_, sub_, mul_, div_, atan2_...
#include <cmath>
#include <optional>
#include <string>
#include <type_traits>

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/loops.h"
#include "runtime/kernels/vecmath_kernels.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/version.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

using detail::Arg;
using detail::run_loop;

// ---------------------------------------------------------------- arithmetic that never hits UB
// Integers wrap (two's complement, as torch does) through unsigned arithmetic;
// bools follow torch: + is or, * is and.

template <class T> inline T w_add(T x, T y) {
  if constexpr (std::is_same_v<T, bool>) return x || y;
  else if constexpr (std::is_integral_v<T>) return T(wrap_uint_t<T>(x) + wrap_uint_t<T>(y));
  else return x + y;
}
template <class T> inline T w_sub(T x, T y) {
  if constexpr (std::is_integral_v<T>) return T(wrap_uint_t<T>(x) - wrap_uint_t<T>(y));
  else return x - y;
}
template <class T> inline T w_mul(T x, T y) {
  if constexpr (std::is_same_v<T, bool>) return x && y;
  else if constexpr (std::is_integral_v<T>) return T(wrap_uint_t<T>(x) * wrap_uint_t<T>(y));
  else return x * y;
}
template <class T> inline T w_neg(T x) { return w_sub(T(0), x); }

// ---------------------------------------------------------------- kernel drivers

bool same_sizes(const Dims &x, const Dims &y) {
  if (x.size() != y.size()) return false;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] != y[i]) return false;
  return true;
}

struct Shape2 {
  Dims shape;
  DType dtype;
};

// Validation shared by every binary op: both defined, shapes broadcast, result_type.
Shape2 binary_meta(const Tensor &a, const Tensor &b, const char *op) {
  detail::check_defined(a, op, "self");
  detail::check_defined(b, op, "other");
  // The common case (x + y, same shape and dtype, no Python-style scalar) skips the
  // general broadcasting and promotion code: it costs a noticeable part of a small op.
  const TensorImpl &ia = *a.unsafeGetTensorImpl(), &ib = *b.unsafeGetTensorImpl();
  if (ia.dtype == ib.dtype && !ia.wrapped_number && !ib.wrapped_number && same_sizes(ia.sizes, ib.sizes))
    return {ia.sizes, ia.dtype};
  return {detail::broadcast_shapes(a.sizes(), b.sizes(), op), detail::result_type({&a, &b})};
}

// out = f(a, b) computed in out's dtype T (Pred<T> says which dtypes the op has).
template <class Pred, class F> void binary_kernel(const Tensor &out, const Tensor &a, const Tensor &b, F f) {
  dispatch_dtype(out.dtype(), [&]<class T>() {
    if constexpr (Pred::template ok<T>) {
      Arg A(a, out.dtype()), B(b, out.dtype());
      run_loop<T, T, T>(out, {&A, &B}, [&f](T x, T y) { return static_cast<T>(f(x, y)); });
    } else {
      KILN_FAIL("internal: binary kernel has no ", out.dtype(), " instantiation");
    }
  });
}

// out (bool) = f(a, b) with a and b converted to `compute`.
template <class F> void predicate_kernel(const Tensor &out, const Tensor &a, const Tensor &b, DType compute, F f) {
  dispatch_dtype(compute, [&]<class T>() {
    Arg A(a, compute), B(b, compute);
    run_loop<bool, T, T>(out, {&A, &B}, [&f](T x, T y) { return static_cast<bool>(f(x, y)); });
  });
}

struct AllTypes {
  template <class T> static constexpr bool ok = true;
};
struct NumericTypes {
  template <class T> static constexpr bool ok = !std::is_same_v<T, bool>;
};
struct FloatTypes {
  template <class T> static constexpr bool ok = std::is_floating_point_v<T>;
};
struct IntTypes {
  template <class T> static constexpr bool ok = std::is_integral_v<T> && !std::is_same_v<T, bool>;
};

// ---------------------------------------------------------------- add / sub / mul

bool is_one(const Scalar &s) { return s.is_bool() ? s.to<bool>() : s.toDouble() == 1.0; }

// torch's alpha_check.
void check_alpha(DType result, const Scalar &alpha, const char *op) {
  KILN_CHECK(!alpha.is_bool() || result == kBool, op, ": boolean alpha only supported for boolean results, got ",
             result);
  KILN_CHECK(is_floating(result) || !alpha.is_floating_point(), op,
             ": for integral input tensors, argument alpha must not be a floating point number (alpha = ", alpha,
             ", result type ", result, ")");
}

// torch's sub_check.
void check_sub(const Tensor &a, const Tensor &b, const char *op) {
  KILN_CHECK(a.dtype() != kBool || b.dtype() != kBool, op,
             ": subtraction, the `-` operator, with two bool tensors is not supported; use logical_xor() instead");
  KILN_CHECK(a.dtype() != kBool && b.dtype() != kBool, op,
             ": subtraction, the `-` operator, with a bool tensor is not supported; use logical_not() to invert a "
             "mask");
}

// alpha in each dtype, so the kernel lambda converts nothing per element.
struct Alpha {
  double d;
  int64_t i;
  bool b;
  // i stays 0 for a float alpha (only float results use it; casting NaN to int is UB).
  explicit Alpha(const Scalar &s) : d(s.toDouble()), i(s.is_floating_point() ? 0 : s.toLong()), b(s.to<bool>()) {}
  template <class T> T as() const {
    if constexpr (std::is_same_v<T, bool>) return b;
    else if constexpr (std::is_floating_point_v<T>) return T(d);
    else return T(i);
  }
};

void add_kernel(const Tensor &out, const Tensor &a, const Tensor &b, const Scalar &alpha) {
  if (is_one(alpha)) return binary_kernel<AllTypes>(out, a, b, [](auto x, auto y) { return w_add(x, y); });
  binary_kernel<AllTypes>(out, a, b, [al = Alpha(alpha)](auto x, auto y) {
    return w_add(x, w_mul(al.as<decltype(x)>(), y));
  });
}

void sub_kernel(const Tensor &out, const Tensor &a, const Tensor &b, const Scalar &alpha) {
  if (is_one(alpha)) return binary_kernel<NumericTypes>(out, a, b, [](auto x, auto y) { return w_sub(x, y); });
  binary_kernel<NumericTypes>(out, a, b, [al = Alpha(alpha)](auto x, auto y) {
    return w_sub(x, w_mul(al.as<decltype(x)>(), y));
  });
}

void mul_kernel(const Tensor &out, const Tensor &a, const Tensor &b) {
  binary_kernel<AllTypes>(out, a, b, [](auto x, auto y) { return w_mul(x, y); });
}

// ---------------------------------------------------------------- div

enum class Rounding { None, Trunc, Floor };

Rounding parse_rounding(const std::optional<std::string> &mode, const char *op) {
  if (!mode) return Rounding::None;
  if (*mode == "trunc") return Rounding::Trunc;
  if (*mode == "floor") return Rounding::Floor;
  KILN_FAIL(op, ": expected rounding_mode to be one of None, 'trunc' or 'floor', but found '", *mode, "'");
}

DType div_result(DType promoted, Rounding r) { return r == Rounding::None ? detail::float_type(promoted) : promoted; }

// A function of the binary libm list in T's precision (float or double).
template <class T> T lm2(T x, T y, float (*f32)(float, float), double (*f64)(double, double)) {
  if constexpr (std::is_same_v<T, float>) return f32(x, y);
  else return f64(x, y);
}

// torch's div_floor_floating: floor(a / b) computed so that a == b * q + fmod(a, b) holds.
// The lowering rule computes the same steps (codegen/op_lowering.cpp div_rule).
template <class T> T floor_div_float(T a, T b) {
  if (b == 0) return a / b;
  T mod = lm2(a, b, kiln_lm2_fmod_f32, kiln_lm2_fmod_f64);
  T div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= T(1);
  if (div == 0) return std::copysign(T(0), a / b);
  T fl = std::floor(div);
  return div - fl > T(0.5) ? fl + T(1) : fl;
}

// Integer division never traps: a zero divisor throws, x / -1 wraps (INT_MIN / -1).
template <class T> T int_div(T a, T b, Rounding r, const char *op) {
  KILN_CHECK(b != 0, op, ": integer division by zero");
  if (b == -1) return w_neg(a);
  T q = a / b;
  if (r == Rounding::Floor && (a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

void div_kernel(const Tensor &out, const Tensor &a, const Tensor &b, Rounding r, const char *op) {
  if (r == Rounding::None) return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto y) { return x / y; });
  if (is_floating(out.dtype())) {
    if (r == Rounding::Trunc)
      return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto y) { return std::trunc(x / y); });
    return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto y) { return floor_div_float(x, y); });
  }
  binary_kernel<IntTypes>(out, a, b, [r, op](auto x, auto y) { return int_div(x, y, r, op); });
}

// ---------------------------------------------------------------- pow

// torch's powi: exponentiation by squaring; negative exponents give 0 unless |base| is 1.
template <class T> T int_pow(T base, T exp) {
  if (exp < 0) {
    if (base == 1) return 1;
    if (base == -1) return (exp % 2) ? T(-1) : T(1);
    return 0;
  }
  using U = wrap_uint_t<T>;
  U result = 1, b = U(base);
  while (exp) {
    if (exp & 1) result *= b;
    exp /= 2;
    b *= b;
  }
  return T(result);
}

// The value of a one-element exponent, if it is one (read once: x ** 2 is common).
std::optional<double> scalar_value(const Tensor &t) {
  if (t.numel() != 1 || t.is_meta()) return std::nullopt;
  return t.item().toDouble();
}

void pow_kernel(const Tensor &out, const Tensor &a, const Tensor &b) {
  if (!out.is_floating_point())
    return binary_kernel<IntTypes>(out, a, b, [](auto x, auto y) { return int_pow(x, y); });
  std::optional<double> e = scalar_value(b);
  // The exponents torch (pow_tensor_scalar_optimized_kernel) and the JIT's pow
  // rule (codegen/op_lowering.cpp) turn into arithmetic, in the JIT's operation
  // order, so that eager and compiled results agree bit for bit; e.g. pow(-0, 0.5)
  // is sqrt(-0) = -0 and pow(x, 3) is (x * x) * x, two roundings.
  if (e && *e == 1.0) return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return x; });
  if (e && *e == 2.0) return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return x * x; });
  if (e && *e == 3.0) return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return x * x * x; });
  if (e && *e == 0.5) return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return std::sqrt(x); });
  if (e && *e == -1.0)
    return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return decltype(x)(1) / x; });
  if (e && *e == -0.5)
    return binary_kernel<FloatTypes>(out, a, b, [](auto x, auto) { return decltype(x)(1) / std::sqrt(x); });
  binary_kernel<FloatTypes>(out, a, b, [](auto x, auto y) { return std::pow(x, y); });
}

// ---------------------------------------------------------------- remainder

// C's %, torch's integer fmod: the result takes the dividend's sign.
template <class T> T int_fmod(T a, T b, const char *op) {
  KILN_CHECK(b != 0, op, ": integer division by zero");
  if (b == -1) return 0; // INT_MIN % -1 would trap
  return a % b;
}

// Python's %: the result takes the divisor's sign. The float form is the lowering
// rule's too (codegen/op_lowering.cpp remainder_rule): the list's fmod, then + b.
template <class T> T py_mod(T a, T b, const char *op) {
  if constexpr (std::is_integral_v<T>) {
    T r = int_fmod(a, b, op);
    return (r != 0 && ((r < 0) != (b < 0))) ? T(r + b) : r;
  } else {
    T r = lm2(a, b, kiln_lm2_fmod_f32, kiln_lm2_fmod_f64);
    return (r != 0 && ((b < 0) != (r < 0))) ? r + b : r;
  }
}

// ---------------------------------------------------------------- the binary libm list

// torch's result dtype of each: atan2 and copysign promote integers and bools to
// float32; hypot is defined for floating types only; fmod keeps integer types
// (computed exactly, C's %) but not bool.
DType libm2_result(OpId id, DType promoted, const Tensor &a, const Tensor &b, const char *op) {
  if (id == OpId::Atan2 || id == OpId::Copysign) return detail::float_type(promoted);
  bool ok = is_floating(promoted) || (id == OpId::Fmod && promoted != kBool);
  KILN_CHECK(ok, op, ": not supported for ", promoted, " inputs (self ", a.dtype(), " ", shape_str(a.sizes()),
             ", other ", b.dtype(), " ", shape_str(b.sizes()), "); ",
             id == OpId::Fmod ? "fmod takes numbers, not bool" : "it takes floating-point tensors");
  return promoted;
}

// out = fn(a, b): the list's function for float results, int_fmod for integer ones.
void libm2_kernel(const Tensor &out, const Tensor &a, const Tensor &b, float (*f32)(float, float),
                  double (*f64)(double, double), const char *op) {
  if (!is_floating(out.dtype())) {
    binary_kernel<IntTypes>(out, a, b, [op](auto x, auto y) { return int_fmod(x, y, op); });
    return;
  }
  binary_kernel<FloatTypes>(out, a, b, [f32, f64](auto x, auto y) { return lm2(x, y, f32, f64); });
}

} // namespace

// ---------------------------------------------------------------- ops

Tensor add(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  Shape2 m = binary_meta(a, b, "add");
  check_alpha(m.dtype, alpha, "add");
  KILN_TRACE(Add, KILN_INPUTS(a, b), .alpha = alpha);
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  add_kernel(out, a, b, alpha);
  return out;
}
Tensor add(const Tensor &a, const Scalar &b, const Scalar &alpha) { return add(a, detail::wrap_scalar(b), alpha); }

Tensor sub(const Tensor &a, const Tensor &b, const Scalar &alpha) {
  Shape2 m = binary_meta(a, b, "sub");
  check_sub(a, b, "sub");
  check_alpha(m.dtype, alpha, "sub");
  KILN_TRACE(Sub, KILN_INPUTS(a, b), .alpha = alpha);
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  sub_kernel(out, a, b, alpha);
  return out;
}
Tensor sub(const Tensor &a, const Scalar &b, const Scalar &alpha) { return sub(a, detail::wrap_scalar(b), alpha); }

Tensor mul(const Tensor &a, const Tensor &b) {
  Shape2 m = binary_meta(a, b, "mul");
  KILN_TRACE(Mul, KILN_INPUTS(a, b));
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  mul_kernel(out, a, b);
  return out;
}
Tensor mul(const Tensor &a, const Scalar &b) { return mul(a, detail::wrap_scalar(b)); }

Tensor div(const Tensor &a, const Tensor &b, std::optional<std::string> rounding_mode) {
  Shape2 m = binary_meta(a, b, "div");
  Rounding r = parse_rounding(rounding_mode, "div");
  KILN_CHECK(r == Rounding::None || m.dtype != kBool, "div: rounding_mode '", *rounding_mode,
             "' is not supported for bool tensors");
  KILN_TRACE(Div, KILN_INPUTS(a, b), .rounding_mode = rounding_mode);
  Tensor out = detail::make_elementwise_result(m.shape, div_result(m.dtype, r), {&a, &b});
  if (out.is_meta()) return out;
  div_kernel(out, a, b, r, "div");
  return out;
}
Tensor div(const Tensor &a, const Scalar &b, std::optional<std::string> rounding_mode) {
  return div(a, detail::wrap_scalar(b), std::move(rounding_mode));
}

Tensor pow(const Tensor &a, const Tensor &exponent) {
  Shape2 m = binary_meta(a, exponent, "pow");
  // As torch: pow has no bool kernel (square(bool) promotes through an int64 exponent).
  KILN_CHECK(m.dtype != kBool, "pow: not supported on bool tensors (shapes ", shape_str(a.sizes()), " and ",
             shape_str(exponent.sizes()), ")");
  // torch refuses a negative integer *scalar* exponent on integers (a tensor exponent gives 0s).
  if (is_integral(m.dtype) && exponent.impl().wrapped_number && !exponent.is_floating_point()) {
    std::optional<double> e = scalar_value(exponent);
    KILN_CHECK(!e || *e >= 0, "pow: integers to negative integer powers are not allowed (base ", a.dtype(),
               " of shape ", shape_str(a.sizes()), ", exponent ", *e, ")");
  }
  KILN_TRACE(Pow, KILN_INPUTS(a, exponent));
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &exponent});
  if (out.is_meta()) return out;
  pow_kernel(out, a, exponent);
  return out;
}
Tensor pow(const Tensor &a, const Scalar &exponent) { return pow(a, detail::wrap_scalar(exponent)); }
Tensor pow(const Scalar &a, const Tensor &exponent) { return pow(detail::wrap_scalar(a), exponent); }

Tensor maximum(const Tensor &a, const Tensor &b) {
  Shape2 m = binary_meta(a, b, "maximum");
  KILN_TRACE(Maximum, KILN_INPUTS(a, b));
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  binary_kernel<AllTypes>(out, a, b, [](auto x, auto y) { return (x > y || x != x) ? x : y; }); // NaN wins
  return out;
}

Tensor minimum(const Tensor &a, const Tensor &b) {
  Shape2 m = binary_meta(a, b, "minimum");
  KILN_TRACE(Minimum, KILN_INPUTS(a, b));
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  binary_kernel<AllTypes>(out, a, b, [](auto x, auto y) { return (x < y || x != x) ? x : y; });
  return out;
}

Tensor remainder(const Tensor &a, const Tensor &b) {
  Shape2 m = binary_meta(a, b, "remainder");
  KILN_CHECK(m.dtype != kBool, "remainder: not supported on bool tensors (shapes ", shape_str(a.sizes()), " and ",
             shape_str(b.sizes()), ")");
  KILN_TRACE(Remainder, KILN_INPUTS(a, b));
  Tensor out = detail::make_elementwise_result(m.shape, m.dtype, {&a, &b});
  if (out.is_meta()) return out;
  binary_kernel<NumericTypes>(out, a, b, [](auto x, auto y) { return py_mod(x, y, "remainder"); });
  return out;
}
Tensor remainder(const Tensor &a, const Scalar &b) { return remainder(a, detail::wrap_scalar(b)); }

// The binary libm list (runtime/ops.def): atan2, hypot, fmod, copysign.
#define KILN_LM2_OP(Id, fn, def)                                                                               \
  Tensor fn(const Tensor &a, const Tensor &b) {                                                                \
    Shape2 m = binary_meta(a, b, #fn);                                                                         \
    DType dt = libm2_result(OpId::Id, m.dtype, a, b, #fn);                                                     \
    KILN_TRACE(Id, KILN_INPUTS(a, b));                                                                         \
    Tensor out = detail::make_elementwise_result(m.shape, dt, {&a, &b});                                       \
    if (out.is_meta()) return out;                                                                             \
    libm2_kernel(out, a, b, kiln_lm2_##fn##_f32, kiln_lm2_##fn##_f64, #fn);                                    \
    return out;                                                                                                \
  }
KILN_LIBM2_OPS(KILN_LM2_OP)
#undef KILN_LM2_OP
Tensor fmod(const Tensor &a, const Scalar &b) { return fmod(a, detail::wrap_scalar(b)); }
Tensor copysign(const Tensor &a, const Scalar &b) { return copysign(a, detail::wrap_scalar(b)); }

// Comparisons and logical ops: compute in the promoted dtype, produce bool.
#define KILN_PREDICATE(fn, Id, ...)                                                                            \
  Tensor fn(const Tensor &a, const Tensor &b) {                                                                \
    Shape2 m = binary_meta(a, b, #fn);                                                                         \
    KILN_TRACE(Id, KILN_INPUTS(a, b));                                                                         \
    Tensor out = detail::make_elementwise_result(m.shape, kBool, {&a, &b});                                    \
    if (out.is_meta()) return out;                                                                             \
    predicate_kernel(out, a, b, m.dtype, [](auto x, auto y) { return __VA_ARGS__; });                          \
    return out;                                                                                                \
  }
KILN_PREDICATE(eq, Eq, x == y)
KILN_PREDICATE(ne, Ne, x != y)
KILN_PREDICATE(lt, Lt, x < y)
KILN_PREDICATE(le, Le, x <= y)
KILN_PREDICATE(gt, Gt, x > y)
KILN_PREDICATE(ge, Ge, x >= y)
KILN_PREDICATE(logical_and, LogicalAnd, static_cast<bool>(x) && static_cast<bool>(y))
KILN_PREDICATE(logical_or, LogicalOr, static_cast<bool>(x) || static_cast<bool>(y))
#undef KILN_PREDICATE

Tensor eq(const Tensor &a, const Scalar &b) { return eq(a, detail::wrap_scalar(b)); }
Tensor ne(const Tensor &a, const Scalar &b) { return ne(a, detail::wrap_scalar(b)); }
Tensor lt(const Tensor &a, const Scalar &b) { return lt(a, detail::wrap_scalar(b)); }
Tensor le(const Tensor &a, const Scalar &b) { return le(a, detail::wrap_scalar(b)); }
Tensor gt(const Tensor &a, const Scalar &b) { return gt(a, detail::wrap_scalar(b)); }
Tensor ge(const Tensor &a, const Scalar &b) { return ge(a, detail::wrap_scalar(b)); }

// ---------------------------------------------------------------- in-place

// The in-place op computes in the promoted dtype; when that is self's dtype the
// kernel writes into self directly, otherwise (int32 self += int64 other) the
// result is computed out of place and converted into self.
Tensor &add_(Tensor &self, const Tensor &other, const Scalar &alpha) {
  Shape2 m = binary_meta(self, other, "add_");
  check_alpha(m.dtype, alpha, "add_");
  detail::check_inplace(self, other.sizes(), m.dtype, "add_");
  KILN_TRACE_INPLACE(self, Add, KILN_INPUTS(self, other), .alpha = alpha);
  if (detail::any_meta({&self, &other})) return self;
  detail::bump_version(self);
  Tensor o = detail::unalias(self, other);
  if (m.dtype == self.dtype()) add_kernel(self, self, o, alpha);
  else detail::cast_into(self, add(self, o, alpha));
  return self;
}
Tensor &add_(Tensor &self, const Scalar &other, const Scalar &alpha) {
  return add_(self, detail::wrap_scalar(other), alpha);
}

Tensor &sub_(Tensor &self, const Tensor &other, const Scalar &alpha) {
  Shape2 m = binary_meta(self, other, "sub_");
  check_sub(self, other, "sub_");
  check_alpha(m.dtype, alpha, "sub_");
  detail::check_inplace(self, other.sizes(), m.dtype, "sub_");
  KILN_TRACE_INPLACE(self, Sub, KILN_INPUTS(self, other), .alpha = alpha);
  if (detail::any_meta({&self, &other})) return self;
  detail::bump_version(self);
  Tensor o = detail::unalias(self, other);
  if (m.dtype == self.dtype()) sub_kernel(self, self, o, alpha);
  else detail::cast_into(self, sub(self, o, alpha));
  return self;
}
Tensor &sub_(Tensor &self, const Scalar &other, const Scalar &alpha) {
  return sub_(self, detail::wrap_scalar(other), alpha);
}

Tensor &mul_(Tensor &self, const Tensor &other) {
  Shape2 m = binary_meta(self, other, "mul_");
  detail::check_inplace(self, other.sizes(), m.dtype, "mul_");
  KILN_TRACE_INPLACE(self, Mul, KILN_INPUTS(self, other));
  if (detail::any_meta({&self, &other})) return self;
  detail::bump_version(self);
  Tensor o = detail::unalias(self, other);
  if (m.dtype == self.dtype()) mul_kernel(self, self, o);
  else detail::cast_into(self, mul(self, o));
  return self;
}
Tensor &mul_(Tensor &self, const Scalar &other) { return mul_(self, detail::wrap_scalar(other)); }

Tensor &div_(Tensor &self, const Tensor &other) {
  Shape2 m = binary_meta(self, other, "div_");
  DType dt = div_result(m.dtype, Rounding::None);
  detail::check_inplace(self, other.sizes(), dt, "div_");
  KILN_TRACE_INPLACE(self, Div, KILN_INPUTS(self, other), .rounding_mode = std::optional<std::string>());
  if (detail::any_meta({&self, &other})) return self;
  detail::bump_version(self);
  Tensor o = detail::unalias(self, other);
  if (dt == self.dtype()) div_kernel(self, self, o, Rounding::None, "div_");
  else detail::cast_into(self, div(self, o));
  return self;
}
Tensor &div_(Tensor &self, const Scalar &other) { return div_(self, detail::wrap_scalar(other)); }

// self = fn(self, other) for the binary libm list: an Error when fn's result dtype
// cannot be cast to self's (atan2_ on an int64 tensor), as torch's.
#define KILN_LM2_INPLACE(Id, fn, def)                                                                          \
  Tensor &fn##_(Tensor &self, const Tensor &other) {                                                           \
    Shape2 m = binary_meta(self, other, #fn "_");                                                              \
    DType dt = libm2_result(OpId::Id, m.dtype, self, other, #fn "_");                                          \
    detail::check_inplace(self, other.sizes(), dt, #fn "_");                                                   \
    KILN_TRACE_INPLACE(self, Id, KILN_INPUTS(self, other));                                                    \
    if (detail::any_meta({&self, &other})) return self;                                                        \
    detail::bump_version(self);                                                                                \
    detail::cast_into(self, fn(self, detail::unalias(self, other)));                                           \
    return self;                                                                                               \
  }
KILN_LIBM2_OPS(KILN_LM2_INPLACE)
#undef KILN_LM2_INPLACE
Tensor &fmod_(Tensor &self, const Scalar &other) { return fmod_(self, detail::wrap_scalar(other)); }
Tensor &copysign_(Tensor &self, const Scalar &other) { return copysign_(self, detail::wrap_scalar(other)); }

// ---------------------------------------------------------------- adapters

namespace adapters {
std::vector<Tensor> Add(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 2, "add");
  return {add(in[0], in[1], attrs::Add{a}.alpha())};
}
std::vector<Tensor> Sub(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 2, "sub");
  return {sub(in[0], in[1], attrs::Sub{a}.alpha())};
}
std::vector<Tensor> Div(const std::vector<Tensor> &in, const Attrs &a) {
  detail::check_num_inputs(in, 2, "div");
  return {div(in[0], in[1], attrs::Div{a}.rounding_mode())};
}
#define KILN_BINARY_ADAPTER(Id, fn)                                                                            \
  std::vector<Tensor> Id(const std::vector<Tensor> &in, const Attrs &) {                                        \
    detail::check_num_inputs(in, 2, #fn);                                                                      \
    return {fn(in[0], in[1])};                                                                                 \
  }
KILN_BINARY_ADAPTER(Mul, mul)
KILN_BINARY_ADAPTER(Pow, pow)
KILN_BINARY_ADAPTER(Maximum, maximum)
KILN_BINARY_ADAPTER(Minimum, minimum)
KILN_BINARY_ADAPTER(Remainder, remainder)
#define KILN_LM2_ADAPTER(Id, fn, def) KILN_BINARY_ADAPTER(Id, fn)
KILN_LIBM2_OPS(KILN_LM2_ADAPTER)
#undef KILN_LM2_ADAPTER
KILN_BINARY_ADAPTER(Eq, eq)
KILN_BINARY_ADAPTER(Ne, ne)
KILN_BINARY_ADAPTER(Lt, lt)
KILN_BINARY_ADAPTER(Le, le)
KILN_BINARY_ADAPTER(Gt, gt)
KILN_BINARY_ADAPTER(Ge, ge)
KILN_BINARY_ADAPTER(LogicalAnd, logical_and)
KILN_BINARY_ADAPTER(LogicalOr, logical_or)
#undef KILN_BINARY_ADAPTER
} // namespace adapters

} // namespace kiln
