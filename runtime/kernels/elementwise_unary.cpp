// Unary elementwise ops: neg .. logical_not, gelu, the composed ops (silu, ...), the C
// library's functions (sin, ...), relu_.
#include <algorithm>
#include <cmath>
#include <string>
#include <type_traits>

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/loops.h"
#include "runtime/kernels/vecmath_kernels.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/version.h"
#include "runtime/trace_hook.h"

// The float64 definitions of the vector-math list (its f64 column): compiled here,
// without fp contraction, and called by the eager kernels, the JIT's float64 code and
// the kernel interpreter alike.
#define KILN_VM_F64(Id, fn, f64)                                                                               \
  extern "C" double kiln_vm_##fn##_f64(double v) { return f64; }
KILN_VECMATH_OPS(KILN_VM_F64)
#undef KILN_VM_F64

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

template <class T> T kiln_lm_fn(T v, float (*f32)(float), double (*f64)(double)) {
  if constexpr (std::is_same_v<T, float>) return f32(v);
  else return f64(v);
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
  if constexpr (std::is_integral_v<T>) return static_cast<T>(-static_cast<wrap_uint_t<T>>(v));
  else return -v;
}

void check_not_bool(const Tensor &x, const char *op, const char *why = "") {
  KILN_CHECK(x.dtype() != kBool, op, ": not supported on bool tensors (shape ", shape_str(x.sizes()), ")", why);
}

void check_floating(const Tensor &x, const char *op) {
  KILN_CHECK(x.is_floating_point(), op, ": expected a floating-point tensor, got ", x.dtype(), " (shape ",
             shape_str(x.sizes()), ")");
}

// ---------------------------------------------------------------- generated kernels
//
// float32 transcendentals run the generated kernels of vecmath_kernels.h: the
// JIT's own IR (codegen/vecmath.cpp) compiled at build time, so that eager and
// compiled results are the same bits; float64 ones call the list's float64
// definitions, as the JIT does. The composed functions (silu, gelu: one line of
// the composed-op list (runtime/ops.def) each, their definition) run their generated
// kernels in both dtypes. This file is built with -ffp-contract=off so that the
// compiler fuses no a * b + c the JIT keeps as two roundings.

template <class T> using ArrayFn = void (*)(const T *, T *, int64_t);

// One innermost run of the elementwise loop (loops.h): contiguous runs go to the
// array kernel directly, strided ones through a block on the stack.
template <class T> void array_run(ArrayFn<T> fn, char *const *ptrs, const int64_t *st, int64_t n) {
  if (st[0] == int64_t(sizeof(T)) && st[1] == int64_t(sizeof(T)))
    return fn(reinterpret_cast<const T *>(ptrs[1]), reinterpret_cast<T *>(ptrs[0]), n);
  constexpr int64_t kBlock = 256;
  alignas(64) T in[kBlock], res[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    int64_t m = std::min(kBlock, n - b);
    for (int64_t k = 0; k < m; ++k) in[k] = *reinterpret_cast<const T *>(ptrs[1] + (b + k) * st[1]);
    fn(in, res, m);
    for (int64_t k = 0; k < m; ++k) *reinterpret_cast<T *>(ptrs[0] + (b + k) * st[0]) = res[k];
  }
}

// out = fn(x) in T (out's dtype), with run_loop's walk (loops.h): one flat run
// split over threads when both are dense, else the coalesced N-d walk.
template <class T> void array_loop(const Tensor &out, const Tensor &x, ArrayFn<T> fn) {
  Arg a(x, out.dtype());
  const TensorImpl &oi = *out.unsafeGetTensorImpl();
  const int64_t numel = oi.numel;
  if (numel == 0) return;
  char *odata = detail::impl_data(oi);
  auto inner = [fn](char *const *ptrs, const int64_t *st, int64_t n) { array_run<T>(fn, ptrs, st, n); };
  if (detail::impl_contiguous(oi) && detail::flat_arg(a, numel)) {
    const int64_t st[2] = {int64_t(sizeof(T)), a.numel == 1 ? 0 : int64_t(sizeof(T))};
    char *base[2] = {odata, a.data};
    if (numel <= detail::kGrain) return inner(base, st, numel);
    parallel_for(0, numel, detail::kGrain, [&](int64_t b, int64_t e) {
      char *ptrs[2] = {base[0] + b * st[0], base[1] + b * st[1]};
      inner(ptrs, st, e - b);
    });
    return;
  }
  detail::Plan<2> plan;
  const Arg *args[1] = {&a};
  detail::build_plan<2>(plan, out, odata, args);
  if (numel <= detail::kGrain) return detail::walk_range(plan, 0, numel, inner);
  parallel_for(0, numel, detail::kGrain, [&](int64_t b, int64_t e) { detail::walk_range(plan, b, e, inner); });
}

// A float-only transcendental: float32 through its generated kernel, float64 through f64.
template <class F64> void transcendental(const Tensor &out, const Tensor &x, ArrayFn<float> f32, F64 f64) {
  if (out.dtype() == kFloat32) return array_loop<float>(out, x, f32);
  KILN_CHECK(out.dtype() == kFloat64, "internal: transcendental kernel has no ", out.dtype(), " instantiation");
  Arg a(x, kFloat64);
  run_loop<double, double>(out, {&a}, f64);
}

// A composed function of the composed-op list: its generated kernel for out's dtype.
void composed(const Tensor &out, const Tensor &x, ArrayFn<float> f32, ArrayFn<double> f64) {
  if (out.dtype() == kFloat32) return array_loop<float>(out, x, f32);
  KILN_CHECK(out.dtype() == kFloat64, "internal: composed kernel has no ", out.dtype(), " instantiation");
  array_loop<double>(out, x, f64);
}

} // namespace

// A float-only op: bool/integer inputs promote to float32.
#define KILN_FLOAT_OP_HEAD(fn, Id)                                                                             \
  detail::check_defined(x, #fn, "self");                                                                       \
  KILN_TRACE(Id, {x});                                                                                         \
  Tensor out = detail::make_elementwise_result(x.sizes(), detail::float_type(x.dtype()), {&x});                \
  if (out.is_meta()) return out;

#define KILN_FLOAT_UNARY(fn, Id, ...)                                                                          \
  Tensor fn(const Tensor &x) {                                                                                 \
    KILN_FLOAT_OP_HEAD(fn, Id)                                                                                 \
    unary_kernel<FloatTypes>(out, x, [](auto v) {                                                              \
      using T [[maybe_unused]] = decltype(v);                                                                  \
      return __VA_ARGS__;                                                                                      \
    });                                                                                                        \
    return out;                                                                                                \
  }

// A vector-math function of the vector-math list (runtime/ops.def): float32 by its generated
// kiln_vm_<fn>_f32, float64 by its list definition kiln_vm_<fn>_f64 (defined below).
#define KILN_TRANSCENDENTAL(Id, fn, f64)                                                                       \
  Tensor fn(const Tensor &x) {                                                                                 \
    KILN_FLOAT_OP_HEAD(fn, Id)                                                                                 \
    transcendental(out, x, kiln_vm_##fn##_f32, [](double v) { return kiln_vm_##fn##_f64(v); });                \
    return out;                                                                                                \
  }

KILN_VECMATH_OPS(KILN_TRANSCENDENTAL)
KILN_FLOAT_UNARY(sqrt, Sqrt, std::sqrt(v))
KILN_FLOAT_UNARY(rsqrt, Rsqrt, T(1) / std::sqrt(v))
// A function of the libm list (runtime/ops.def): both dtypes call the list's definitions,
// which the JIT calls too.
#define KILN_LIBM(Id, fn, def)                                                                                 \
  KILN_FLOAT_UNARY(fn, Id, kiln_lm_fn<T>(v, kiln_lm_##fn##_f32, kiln_lm_##fn##_f64))
KILN_LIBM_OPS(KILN_LIBM)
#undef KILN_LIBM
KILN_FLOAT_UNARY(reciprocal, Reciprocal, T(1) / v)
#undef KILN_TRANSCENDENTAL
#undef KILN_FLOAT_UNARY
#undef KILN_FLOAT_OP_HEAD

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
  KILN_TRACE(Gelu, {x}, .approximate = approximate);
  Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta()) return out;
  if (approximate == "tanh") composed(out, x, kiln_pw_gelu_tanh_f32, kiln_pw_gelu_tanh_f64);
  else composed(out, x, kiln_pw_gelu_erf_f32, kiln_pw_gelu_erf_f64);
  return out;
}

// torch's softsign is Python, x / (1 + |x|), whose true division promotes bool and
// integer inputs to float32; its other activations are kernels that refuse them.
constexpr bool promotes_integers(OpId id) { return id == OpId::Softsign; }

// The composed ops (the composed-op list, runtime/ops.def): float-only, as torch's
// activations (an integer input is an error, or promotes where torch's does), the
// result in the input's dtype.
#define KILN_COMPOSED_OP(Id, fn, def)                                                                          \
  Tensor fn(const Tensor &x) {                                                                                 \
    detail::check_defined(x, #fn, "self");                                                                     \
    if (!x.is_floating_point() && promotes_integers(OpId::Id)) return fn(to(x, kFloat32));                    \
    check_floating(x, #fn);                                                                                    \
    KILN_TRACE(Id, {x});                                                                                       \
    Tensor out = detail::make_elementwise_result(x.sizes(), x.dtype(), {&x});                                  \
    if (out.is_meta()) return out;                                                                             \
    composed(out, x, kiln_pw_##fn##_f32, kiln_pw_##fn##_f64);                                                  \
    return out;                                                                                                \
  }
KILN_COMPOSED_OPS(KILN_COMPOSED_OP)
#undef KILN_COMPOSED_OP

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
      using U = wrap_uint_t<T>;
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
#define KILN_VECMATH_ADAPTER(Id, fn, f64) KILN_UNARY_ADAPTER(Id, fn)
KILN_VECMATH_OPS(KILN_VECMATH_ADAPTER)
#undef KILN_VECMATH_ADAPTER
#define KILN_COMPOSED_ADAPTER(Id, fn, def) KILN_UNARY_ADAPTER(Id, fn)
KILN_COMPOSED_OPS(KILN_COMPOSED_ADAPTER)
KILN_LIBM_OPS(KILN_COMPOSED_ADAPTER)
#undef KILN_COMPOSED_ADAPTER
KILN_UNARY_ADAPTER(Neg, neg)
KILN_UNARY_ADAPTER(Abs, abs)
KILN_UNARY_ADAPTER(Sqrt, sqrt)
KILN_UNARY_ADAPTER(Rsqrt, rsqrt)
KILN_UNARY_ADAPTER(Relu, relu)
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
