// Eager and compiled results of every elementwise op with a JIT lowering agree
// bit for bit (NaN == NaN, signs of zero included): each op runs once through
// its eager kernel and once as a one-op kiln::compile'd function over a sweep of
// bit patterns (every k-th pattern of the whole float32 / float64 range, plus
// +-0, +-inf, NaNs, subnormals, the largest and smallest normals and the
// thresholds where the polynomials switch branches).
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "float_sweep_util.h"
#include <kiln/kiln.h>

#include "runtime/kernels/vecmath_list.h"

using namespace kiln;

namespace {

using OpFn = std::function<Tensor(const Tensor &)>;

// Inputs to leave out of an op's comparison (none today: relu(-0) and sign's
// NaN and -0 once differed, and stay swept as the specials below).
using Skip = bool (*)(double x);
bool none(double) { return false; }

struct Case {
  const char *name;
  OpFn fn;
  Skip skip = none;
};

// Every unary elementwise op and every lowered pow exponent; sin/cos have no
// lowering (they run eagerly inside a compiled function too) and are swept anyway.
// Each line of the vector-math list (runtime/kernels/vecmath_list.h) is a case by itself.
std::vector<Case> cases() {
  return {
#define X(Id, fn, f64) {#fn, [](const Tensor &x) { return kiln::fn(x); }},
      KILN_VECMATH_OPS(X)
#undef X
      {"silu", [](const Tensor &x) { return kiln::silu(x); }},
      {"gelu_none", [](const Tensor &x) { return kiln::gelu(x, "none"); }},
      {"gelu_tanh", [](const Tensor &x) { return kiln::gelu(x, "tanh"); }},
      {"sqrt", [](const Tensor &x) { return kiln::sqrt(x); }},
      {"rsqrt", [](const Tensor &x) { return kiln::rsqrt(x); }},
      {"sin", [](const Tensor &x) { return kiln::sin(x); }},
      {"cos", [](const Tensor &x) { return kiln::cos(x); }},
      {"neg", [](const Tensor &x) { return kiln::neg(x); }},
      {"abs", [](const Tensor &x) { return kiln::abs(x); }},
      {"relu", [](const Tensor &x) { return kiln::relu(x); }},
      {"reciprocal", [](const Tensor &x) { return kiln::reciprocal(x); }},
      {"square", [](const Tensor &x) { return kiln::square(x); }},
      {"floor", [](const Tensor &x) { return kiln::floor(x); }},
      {"ceil", [](const Tensor &x) { return kiln::ceil(x); }},
      {"round", [](const Tensor &x) { return kiln::round(x); }},
      {"sign", [](const Tensor &x) { return kiln::sign(x); }},
      {"pow_2", [](const Tensor &x) { return kiln::pow(x, 2.0); }},
      {"pow_3", [](const Tensor &x) { return kiln::pow(x, 3.0); }},
      {"pow_0.5", [](const Tensor &x) { return kiln::pow(x, 0.5); }},
      {"pow_-1", [](const Tensor &x) { return kiln::pow(x, -1.0); }},
      {"pow_-0.5", [](const Tensor &x) { return kiln::pow(x, -0.5); }},
      {"pow_1", [](const Tensor &x) { return kiln::pow(x, 1.0); }},
  };
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

// Bits of element i, NaNs (any payload or sign) mapped to one pattern.
template <class T> uint64_t bits_of(T v) {
  if (std::isnan(v)) return ~uint64_t(0);
  if constexpr (sizeof(T) == 4) return std::bit_cast<uint32_t>(v);
  else return std::bit_cast<uint64_t>(v);
}

template <class T>
void expect_bitwise_equal(const Case &cs, const Tensor &x, const Tensor &eager, const Tensor &jit) {
  const char *name = cs.name;
  ASSERT_EQ(eager.dtype(), jit.dtype()) << name;
  ASSERT_EQ(eager.numel(), jit.numel()) << name;
  const T *in = x.data_ptr<T>();
  const T *e = eager.contiguous().data_ptr<T>();
  const T *c = jit.contiguous().data_ptr<T>();
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < eager.numel(); ++i) {
    if (bits_of(e[i]) == bits_of(c[i]) || cs.skip(double(in[i]))) continue;
    if (!differ++) first = i;
  }
  if (differ == 0) return;
  ADD_FAILURE() << name << " (" << x.dtype() << "): " << differ << " of " << eager.numel()
                << " results differ; first at x=" << std::hexfloat << in[first] << " (" << std::defaultfloat
                << in[first] << "): eager " << std::hexfloat << e[first] << ", compiled " << c[first]
                << std::defaultfloat;
}

template <class T> void sweep(std::vector<T> inputs) {
  Tensor x = tensor_of(inputs);
  CompileOptions o;
  o.fallback = Fallback::Off;
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    Tensor eager = c.fn(x);
    OpFn fn = c.fn;
    auto f = kiln::compile([fn](const std::vector<Tensor> &in) { return std::vector<Tensor>{fn(in[0])}; }, o);
    Tensor jit = f({x}).at(0);
    int64_t kernels = f.kernels_per_call({x});
    std::printf("%-10s %s: %lld JIT kernel(s)\n", c.name, x.dtype() == kFloat32 ? "f32" : "f64",
                static_cast<long long>(kernels));
    expect_bitwise_equal<T>(c, x, eager, jit);
  }
}

TEST(EagerCompiledBits, Float32) { sweep(f32_inputs()); }
TEST(EagerCompiledBits, Float64) { sweep(f64_inputs()); }

// The sweep reaches each lowered transcendental through a JIT kernel (not an
// eager fallback inside the compiled function, which would agree trivially).
TEST(EagerCompiledBits, TranscendentalsAreCompiled) {
  std::vector<float> v(64, 0.5f);
  Tensor x = tensor_of(v);
  for (const Case &c : cases()) {
    std::string n = c.name;
    if (n == "sin" || n == "cos") continue;
    OpFn fn = c.fn;
    auto f = kiln::compile([fn](const std::vector<Tensor> &in) { return std::vector<Tensor>{fn(in[0])}; });
    EXPECT_GE(f.kernels_per_call({x}), 1) << n;
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
    OpFn fn = c.fn;
    auto f = kiln::compile([fn](const std::vector<Tensor> &in) { return std::vector<Tensor>{fn(in[0])}; }, o);
    for (const auto &[layout, x] : inputs) {
      SCOPED_TRACE(std::string(c.name) + " " + layout);
      std::string name = c.name;
      bool float_only = name == "silu" || name.rfind("gelu", 0) == 0; // as torch: no integer inputs
      if (x.dtype() == kInt32 && float_only) continue;
      Tensor eager = c.fn(x);
      Tensor dense = c.fn(x.contiguous());
      Tensor jit = f({x}).at(0);
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
    const Case c{dim == 0 ? "softmax(dim=0)" : "softmax(dim=-1)", {}};
    expect_bitwise_equal<float>(c, x.contiguous(), kiln::softmax(x, dim), f({x}).at(0));
  }
}

} // namespace
