// Eager and compiled results of every pointwise op of the op table agree bit
// for bit (NaN == NaN, signs of zero included): each op runs once through its
// eager kernel and once as a one-op kiln::compile'd function over a sweep of
// bit patterns (every k-th pattern of the whole float32 / float64 range, plus
// +-0, +-inf, NaNs, subnormals, the largest and smallest normals and the
// thresholds where the polynomials switch branches). Binary and ternary ops
// take the sweep against itself reversed (every special meets every other
// value class). EveryPointwiseOpIsSwept fails while an op of the table with the
// Pointwise trait has no case here.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "float_sweep_util.h"
#include <kiln/kiln.h>

#include "runtime/op_lists.h"
#include "runtime/op_registry.h"

using namespace kiln;

namespace {

// x: the sweep; y: the sweep reversed (binary and ternary ops).
using OpFn = std::function<Tensor(const Tensor &x, const Tensor &y)>;

// Inputs to leave out of an op's comparison (none today: relu(-0) and sign's
// NaN and -0 once differed, and stay swept as the specials below).
using Skip = bool (*)(double x);
bool none(double) { return false; }

struct Case {
  const char *name;
  OpId op;
  OpFn fn;
  bool binary = false; // reads y
  Skip skip = none;
};

#define UNARY(name, Id, expr) {name, OpId::Id, [](const Tensor &x, const Tensor &) { return expr; }}
#define BINARY(name, Id, expr) {name, OpId::Id, [](const Tensor &x, const Tensor &y) { return expr; }, true}

// Every pointwise op, and every lowered pow exponent. Each line of the vector-math,
// libm, binary libm and composed-op lists (runtime/ops.def) is a case by itself;
// remainder and floor division lower through the binary list's fmod.
std::vector<Case> cases() {
  return {
#define X(Id, fn, f64) UNARY(#fn, Id, kiln::fn(x)),
      KILN_VECMATH_OPS(X)
#undef X
#define X(Id, fn, def) UNARY(#fn, Id, kiln::fn(x)),
      KILN_COMPOSED_OPS(X) KILN_LIBM_OPS(X)
#undef X
#define X(Id, fn, def) BINARY(#fn, Id, kiln::fn(x, y)),
      KILN_LIBM2_OPS(X)
#undef X
      BINARY("fmod_scalar", Fmod, kiln::fmod(x, Scalar(-2.5))),
      BINARY("copysign_scalar", Copysign, kiln::copysign(x, Scalar(-0.0))),
      BINARY("atan2_broadcast_row", Atan2, kiln::atan2(x, y.slice(0, 0, 1))),
      UNARY("gelu_none", Gelu, kiln::gelu(x, "none")),
      UNARY("gelu_tanh", Gelu, kiln::gelu(x, "tanh")),
      UNARY("sqrt", Sqrt, kiln::sqrt(x)),
      UNARY("rsqrt", Rsqrt, kiln::rsqrt(x)),
      UNARY("neg", Neg, kiln::neg(x)),
      UNARY("abs", Abs, kiln::abs(x)),
      UNARY("relu", Relu, kiln::relu(x)),
      UNARY("reciprocal", Reciprocal, kiln::reciprocal(x)),
      UNARY("square", Square, kiln::square(x)),
      UNARY("floor", Floor, kiln::floor(x)),
      UNARY("ceil", Ceil, kiln::ceil(x)),
      UNARY("round", Round, kiln::round(x)),
      UNARY("sign", Sign, kiln::sign(x)),
      UNARY("logical_not", LogicalNot, kiln::logical_not(x)),
      UNARY("to_int32", Cast, kiln::to(x, kInt32)),
      UNARY("to_other_float", Cast, kiln::to(x, x.dtype() == kFloat32 ? kFloat64 : kFloat32)),
      UNARY("clamp", Clamp, kiln::clamp(x, Scalar(-2.5), Scalar(3.0))),
      UNARY("pow_2", Pow, kiln::pow(x, 2.0)),
      UNARY("pow_3", Pow, kiln::pow(x, 3.0)),
      UNARY("pow_0.5", Pow, kiln::pow(x, 0.5)),
      UNARY("pow_-1", Pow, kiln::pow(x, -1.0)),
      UNARY("pow_-0.5", Pow, kiln::pow(x, -0.5)),
      UNARY("pow_1", Pow, kiln::pow(x, 1.0)),
      BINARY("pow_tensor", Pow, kiln::pow(x, y)),
      BINARY("add", Add, kiln::add(x, y)),
      BINARY("add_alpha", Add, kiln::add(x, y, 2.5)),
      BINARY("sub", Sub, kiln::sub(x, y)),
      BINARY("sub_alpha", Sub, kiln::sub(x, y, 0.75)),
      BINARY("mul", Mul, kiln::mul(x, y)),
      BINARY("div", Div, kiln::div(x, y)),
      BINARY("div_floor", Div, kiln::div(x, y, "floor")),
      BINARY("div_trunc", Div, kiln::div(x, y, "trunc")),
      BINARY("maximum", Maximum, kiln::maximum(x, y)),
      BINARY("minimum", Minimum, kiln::minimum(x, y)),
      BINARY("remainder", Remainder, kiln::remainder(x, y)),
      BINARY("eq", Eq, kiln::eq(x, y)),
      BINARY("ne", Ne, kiln::ne(x, y)),
      BINARY("lt", Lt, kiln::lt(x, y)),
      BINARY("le", Le, kiln::le(x, y)),
      BINARY("gt", Gt, kiln::gt(x, y)),
      BINARY("ge", Ge, kiln::ge(x, y)),
      BINARY("logical_and", LogicalAnd, kiln::logical_and(x, y)),
      BINARY("logical_or", LogicalOr, kiln::logical_or(x, y)),
      BINARY("where", Where, kiln::where(kiln::lt(x, y), x, y)),
      BINARY("masked_fill", MaskedFill, kiln::masked_fill(x, kiln::gt(y, 0.5), -7.25)),
      BINARY("lerp", Lerp, kiln::lerp(x, y, 0.3)),
      BINARY("lerp_tensor", Lerp, kiln::lerp(x, y, kiln::abs(kiln::sin(y)))),
      // copy_ on a fresh tensor traces as the functional copy(self, src).
      BINARY("copy", Copy, kiln::clone(x).copy_(y)),
      BINARY("copy_cast", Copy, kiln::to(x, kInt32).copy_(y)),
  };
}

#undef UNARY
#undef BINARY

// The ops of the composed-op list, runtime/ops.def (float-only, as torch's activations).
bool is_composed(OpId id) {
#define X(Id, fn, def)                                                                                     \
  if (id == OpId::Id) return true;
  KILN_COMPOSED_OPS(X)
#undef X
  return false;
}

// Special values and branch thresholds of the float32 polynomials (both signs,
// and their neighbours one ulp away).
std::vector<double> specials() {
  double inf = std::numeric_limits<double>::infinity();
  std::vector<double> base = {0.0,         inf,          std::nan(""), 1.0,           0.5,     2.0,
                              FLT_MIN,     FLT_MAX,      FLT_TRUE_MIN, DBL_MIN,       DBL_MAX, DBL_TRUE_MIN,
                              88.72283935546875, 87.33654022216797, 88.8, 104.0, 30.0, 7.99881172180175781,
                              0.0004,      3.832506856900711, 1.4142135623730951, 20.0, 1e-6, 1e-30,
                              1e30,        0.7071067811865476, 103.97, 150.0, 1e-45};
  std::vector<double> out;
  for (double v : base) {
    for (double s : {1.0, -1.0}) {
      double x = s * v;
      out.push_back(x);
      float f = float(x);
      out.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
      out.push_back(std::nextafter(f, -std::numeric_limits<float>::infinity()));
    }
  }
  out.push_back(-std::nan(""));
  return out;
}

// Every `step`-th float32 bit pattern (both signs: all 2^32), then the specials.
// KILN_FLOAT_SWEEP_STEP=k (the sanitizer stage) thins both sweeps k-fold.
std::vector<float> f32_inputs() {
  const uint64_t kStep = 251 * uint64_t(float_sweep::sweep_step()); // 251: prime; ~17M floats
  std::vector<float> v;
  v.reserve((uint64_t(1) << 32) / kStep + 256);
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += kStep) v.push_back(std::bit_cast<float>(uint32_t(b)));
  for (double s : specials()) v.push_back(float(s));
  return v;
}

// float64: every float32 input widened (the same ranges), a sparse sweep of the
// float64 patterns, and the specials.
std::vector<double> f64_inputs() {
  std::vector<double> v;
  const uint64_t kStep = ((uint64_t(1) << 43) + 12345) * uint64_t(float_sweep::sweep_step()); // ~2M patterns
  for (uint64_t b = 0; b < (uint64_t(1) << 63) - kStep; b += kStep) {
    v.push_back(std::bit_cast<double>(b));
    v.push_back(-std::bit_cast<double>(b));
  }
  const uint64_t f32_step = 4099 * uint64_t(float_sweep::sweep_step());
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += f32_step) v.push_back(double(std::bit_cast<float>(uint32_t(b))));
  for (double s : specials()) v.push_back(s);
  return v;
}

template <class T> Tensor tensor_of(std::vector<T> &v) {
  Tensor t = kiln::from_blob(v.data(), {int64_t(v.size())}, TensorOptions().dtype(dtype_of<T>));
  return t.clone();
}

// Bits of an element, NaNs (any payload or sign) mapped to one pattern.
template <class T> uint64_t bits_of(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(v)) return ~uint64_t(0);
    if constexpr (sizeof(T) == 4) return std::bit_cast<uint32_t>(v);
    else return std::bit_cast<uint64_t>(v);
  } else {
    return uint64_t(int64_t(v));
  }
}

// Results compared element by element in their dtype (float bits, integers, bools);
// T is the input's element type (for the message).
template <class T>
void expect_bitwise_equal(const Case &cs, const Tensor &x, const Tensor &eager, const Tensor &jit) {
  const char *name = cs.name;
  ASSERT_EQ(eager.dtype(), jit.dtype()) << name;
  ASSERT_EQ(eager.numel(), jit.numel()) << name;
  const T *in = x.data_ptr<T>();
  const Tensor e = eager.contiguous(), c = jit.contiguous();
  int64_t differ = 0, first = -1;
  std::string first_e, first_c;
  dispatch_dtype(e.dtype(), [&]<class R>() {
    const R *ep = e.data_ptr<R>(), *cp = c.data_ptr<R>();
    for (int64_t i = 0; i < e.numel(); ++i) {
      if (bits_of(ep[i]) == bits_of(cp[i]) || cs.skip(double(in[i]))) continue;
      if (differ++) continue;
      first = i;
      std::ostringstream es, cs_;
      es << std::hexfloat << double(ep[i]);
      cs_ << std::hexfloat << double(cp[i]);
      first_e = es.str();
      first_c = cs_.str();
    }
  });
  if (differ == 0) return;
  ADD_FAILURE() << name << " (" << x.dtype() << "): " << differ << " of " << eager.numel()
                << " results differ; first at i=" << first << ", x=" << std::hexfloat << in[first] << " ("
                << std::defaultfloat << in[first] << "): eager " << first_e << ", compiled " << first_c;
}

template <class T> std::vector<T> reversed(std::vector<T> v) {
  std::reverse(v.begin(), v.end());
  return v;
}

Tensor run(const Case &c, const Tensor &x, const Tensor &y) { return c.fn(x, y); }

CompiledFunction compiled(const Case &c, const CompileOptions &o) {
  OpFn fn = c.fn;
  return kiln::compile([fn](const std::vector<Tensor> &in) { return std::vector<Tensor>{fn(in[0], in[1])}; }, o);
}

template <class T> void sweep(std::vector<T> inputs) {
  std::vector<T> other = reversed(inputs);
  Tensor x = tensor_of(inputs), y = tensor_of(other);
  CompileOptions o;
  o.fallback = Fallback::Off;
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor eager = run(c, x, y);
    auto f = compiled(c, o);
    Tensor jit = f({x, y}).at(0);
    int64_t kernels = f.kernels_per_call({x, y});
    std::printf("%-14s %s: %lld JIT kernel(s)\n", c.name, x.dtype() == kFloat32 ? "f32" : "f64",
                static_cast<long long>(kernels));
    expect_bitwise_equal<T>(c, x, eager, jit);
  }
}

TEST(EagerCompiledBits, Float32) { sweep(f32_inputs()); }
TEST(EagerCompiledBits, Float64) { sweep(f64_inputs()); }

// The sweep covers the op table: a new pointwise op needs a case above.
TEST(EagerCompiledBits, EveryPointwiseOpIsSwept) {
  std::set<OpId> swept;
  for (const Case &c : cases()) swept.insert(c.op);
  int pointwise = 0;
  for (int i = 0; i < kNumOps; ++i) {
    OpId id = OpId(i);
    if (!has_trait(id, OpTrait::Pointwise)) continue;
    ++pointwise;
    EXPECT_TRUE(swept.count(id)) << op_info(id).mnemonic << " is Pointwise but has no case in the sweep";
  }
  EXPECT_GE(pointwise, 40);
}

// The sweep reaches each lowered op through a JIT kernel (not an eager
// fallback inside the compiled function, which would agree trivially).
TEST(EagerCompiledBits, LoweredOpsAreCompiled) {
  std::vector<float> v(64, 0.5f), w(64, 1.5f);
  Tensor x = tensor_of(v), y = tensor_of(w);
  for (const Case &c : cases()) {
    std::string n = c.name;
    // No lowering (Eager ops), not fusing (copy), or a misfit of the rule (a tensor
    // exponent). Composites (gelu, silu) are decomposed into fusing ops.
    bool kernel = lowering_expected(c.op) && (is_fusible(c.op) || op_kind(c.op) == OpKind::Composite);
    if (!kernel || n == "pow_tensor") continue;
    auto f = compiled(c, CompileOptions());
    EXPECT_GE(f.kernels_per_call({x, y}), 1) << n;
  }
}

// Non-contiguous inputs (transposed, sliced, expanded with stride 0, integer
// promoted to float32) take the eager loop's strided walk through the array
// kernels: the same bits as the contiguous eager call and as compiled code.
TEST(EagerCompiledBits, StridedAndPromotedInputs) {
  std::vector<float> base(70 * 40);
  for (size_t i = 0; i < base.size(); ++i) base[i] = -9.0f + 18.0f * float(i) / float(base.size()) + 1e-3f * float(i % 7);
  Tensor t = tensor_of(base).view({70, 40});
  std::vector<int32_t> ints(300);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = int32_t(i % 21) - 10;
  Tensor iv = kiln::from_blob(ints.data(), {int64_t(ints.size())}, TensorOptions().dtype(kInt32)).clone();
  const std::vector<std::pair<const char *, Tensor>> inputs = {
      {"transposed", t.transpose(0, 1)},
      {"sliced", t.slice(1, 1, 39, 3)},
      {"expanded", t.select(0, 5).unsqueeze(0).expand({50, 40})},
      {"int32", iv},
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  for (const Case &c : cases()) {
    if (c.binary) continue; // the unary ops: the array kernels' strided walk
    auto f = compiled(c, o);
    for (const auto &[layout, x] : inputs) {
      SCOPED_TRACE(std::string(c.name) + " " + layout);
      bool float_only = c.op == OpId::Gelu || is_composed(c.op); // as torch: no integer inputs
      if (x.dtype() == kInt32 && float_only) continue;
      Tensor eager = run(c, x, x);
      Tensor dense = run(c, x.contiguous(), x.contiguous());
      Tensor jit = f({x, x}).at(0);
      if (eager.dtype() != kFloat32) continue; // pow/abs/... of int32 stay integer: not vector math
      Tensor xf = x.to(kFloat32).contiguous();
      expect_bitwise_equal<float>(c, xf, dense, eager.contiguous());
      expect_bitwise_equal<float>(c, xf, eager.contiguous(), jit.contiguous());
    }
  }
}

} // namespace

namespace {

// Eager softmax (and SDPA's row softmax, the same row kernel) computes its
// exponentials with the shared vector-math exp, so rows whose sum has a single
// rounding (two elements: 1 + e) give the compiled softmax's bits: both compute
// e = exp(x - max) and e * (1 / sum). Swept over ~2^17 gaps d in [0, 104] per
// layout, along the last dim (row kernels) and along dim 0 (the strided eager
// kernel, the compiled column tiles).
TEST(EagerCompiledBits, SoftmaxExponentialsAreTheSharedExp) {
  const int64_t n = int64_t(1) << 17;
  std::vector<float> rows(size_t(2 * n));
  for (int64_t i = 0; i < n; ++i) {
    const float d = 104.0f * float(i) / float(n) + 1e-7f * float(i % 13);
    rows[size_t(2 * i)] = (i % 2) ? 0.0f : -d; // the max on either side
    rows[size_t(2 * i + 1)] = (i % 2) ? -d : 0.0f;
  }
  Tensor last = tensor_of(rows).view({n, 2});
  CompileOptions o;
  o.fallback = Fallback::Off;
  for (int64_t dim : {int64_t(-1), int64_t(0)}) {
    Tensor x = dim == 0 ? last.transpose(0, 1).contiguous() : last;
    auto f = kiln::compile([dim](const std::vector<Tensor> &in) { return std::vector<Tensor>{kiln::softmax(in[0], dim)}; },
                           o);
    ASSERT_GE(f.kernels_per_call({x}), 1) << "softmax must run as a JIT kernel";
    const Case c{dim == 0 ? "softmax(dim=0)" : "softmax(dim=-1)", OpId::Softmax, {}};
    expect_bitwise_equal<float>(c, x.contiguous(), kiln::softmax(x, dim), f({x}).at(0));
  }
}

} // namespace
