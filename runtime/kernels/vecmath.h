// float32 transcendentals for the eager kernels, written so that GCC 12
// auto-vectorizes a plain loop over them (16 floats per AVX-512 instruction
// with -O3 -march=native). libm's expf/tanhf/erff are calls the vectorizer
// cannot see through: a scalar tanhf costs ~20 ns per element here.
//
// The algorithms mirror the JIT's IR versions (codegen/vecmath.cpp) operation
// for operation, so eager and compiled code agree to within an ulp or two:
//   exp     Cephes expf: n = round(x log2e), r = x - n ln2 (two fma steps),
//           e^r = 1 + r + r^2 P5(r), times 2^n built in two halves (subnormal results).
//   expm1   same reduction, Taylor e^r - 1 to r^8, recombined as 2 (t em + t - 1/2),
//           t = 2^(n-1), exact for n = 0.
//   log     Cephes logf: x = m 2^e, m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P8(f).
//   log1p   log(u) + (x - (u - 1)) / u with u = fl(1 + x).
//   tanh    13/6-degree odd/even rational (Eigen's float tanh), clamped at +-7.9988,
//           x itself below 4e-4.
//   erf     9/12-degree odd/even rational (Eigen's float erf), +-1 past 3.8325.
//   sigmoid 1 / (1 + exp(-x)); silu x / (1 + exp(-x)); gelu 0.5 x (1 + tanh|erf(...)),
//           the formulas torch uses, with the functions above; except that gelu
//           (erf) switches to x/2 erfc(-x/sqrt(2)) (Cephes erfcf) below x = -sqrt(2),
//           where 1 + erf cancels (the JIT composes gelu from its erf, so its tail
//           is less accurate there).
//
// Rules that keep the loops vectorizable with GCC 12. Checked by compiling a plain
// `for (i) o[i] = vecmath::f(x[i]);` per function with -O3 -march=native
// -fopt-info-vec (all ten: "loop vectorized using 64 byte vectors", no calls in
// the object), and in the library by perf/objdump of the kernels (no per-element
// calls; bench/eager_bench.cpp runs them at memory speed):
//   * no calls: __builtin_fmaf (vfmadd with -mfma), no libm; everything is
//     always_inline, and loops.h's contiguous loop is [[gnu::flatten]];
//   * every path is computed and blended with ?: on values (vblendm/masked moves),
//     never an early return; clamps are `x < c ? x : c`, not fminf (x86 min is not
//     IEEE fmin, so GCC keeps fminf a call);
//   * round-to-nearest by adding and subtracting 1.5 * 2^23 (GCC 12 does not
//     vectorize __builtin_roundevenf); the low mantissa bits of the sum are the
//     integer itself, so no float->int conversion is needed either;
//   * no tables (no gathers);
//   * a float op or float `<` that feeds only one arm of a select gets sunk into
//     a branch (GCC assumes it may trap) and is then never if-converted: such
//     blends are done on the bits with integer masks (log, log1p, gelu_erf).
// Without FMA hardware (KILN_NATIVE=OFF), __builtin_fmaf becomes a libm call:
// the results stay correct, only scalar.
//
// Special values follow torch (and libm): NaN in, NaN out; exp(-inf) = 0,
// exp(+inf) = exp(>88.73) = inf; expm1(-inf) = -1; log(0) = -inf, log(<0) = NaN,
// log(inf) = inf; log1p(-1) = -inf, log1p(<-1) = NaN; tanh/erf(+-inf) = +-1;
// sigmoid(+inf) = 1, sigmoid(-inf) = 0; signed zeros are kept (f(-0) = -0 for
// expm1, log1p, tanh, erf).
//
// Measured accuracy: the table in test/unit/eager_vecmath_test.cpp, which sweeps
// every float of each range through the public eager ops (all within 3.6 float
// epsilons relative; the same as the JIT's for the shared functions).
#pragma once

#include <bit>
#include <cstdint>

// Forced inlining: a call in the loop body stops vectorization, and GCC's
// heuristics otherwise keep exp out of line once it has several callers
// (exp, sigmoid, silu, gelu in one translation unit call it through the PLT).
#define KILN_VECMATH_INLINE inline __attribute__((always_inline))

namespace kiln::vecmath {

namespace detail {

KILN_VECMATH_INLINE float fma(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

// Round-to-nearest-even for |t| < 2^22 (the default rounding mode does the
// work); returns the rounded float, and its integer value through `n`.
KILN_VECMATH_INLINE float round_i(float t, int32_t &n) {
  constexpr float kMagic = 12582912.0f; // 1.5 * 2^23: the sum's ulp is 1
  float s = t + kMagic;
  // The mantissa of s holds 2^22 + n in its low 23 bits: n sign-extended from 22 bits.
  n = (std::bit_cast<int32_t>(s) << 10) >> 10;
  return s - kMagic;
}

// 2^n for an integer -126 <= n <= 127, built in the exponent bits.
KILN_VECMATH_INLINE float pow2i(int32_t n) { return std::bit_cast<float>((n + 127) << 23); }

KILN_VECMATH_INLINE bool is_nan(float x) { return x != x; }

constexpr float kLog2e = 1.44269504088896341f;
// ln 2 split so that n * kLn2Hi is exact for |n| < 2^9 (Cephes' C1, C2).
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;

// e^r - 1 for |r| <= ln2/2: r + r^2 (1/2 + r/6 + ... + r^6/8!). Truncation error
// r^9/9! / r < 1e-9, far below float resolution.
KILN_VECMATH_INLINE float expm1_reduced(float r) {
  float p = float(1.0 / 40320);
  p = fma(p, r, float(1.0 / 5040));
  p = fma(p, r, float(1.0 / 720));
  p = fma(p, r, float(1.0 / 120));
  p = fma(p, r, float(1.0 / 24));
  p = fma(p, r, float(1.0 / 6));
  p = fma(p, r, 0.5f);
  return fma(r * r, p, r);
}

} // namespace detail

KILN_VECMATH_INLINE float exp(float x) {
  using namespace detail;
  // Clamp so that n stays in [-150, 128]; exp overflows above 88.72 and
  // underflows to 0 below -103.97, both of which the clamped path reproduces.
  float xc = x < 88.8f ? x : 88.8f;
  xc = xc > -104.0f ? xc : -104.0f;
  int32_t ni;
  float n = round_i(xc * kLog2e, ni);
  float r = fma(n, -kLn2Hi, xc);
  r = fma(n, -kLn2Lo, r);
  // Cephes expf: e^r = 1 + r + r^2 P(r).
  float p = 1.9875691500E-4f;
  p = fma(p, r, 1.3981999507E-3f);
  p = fma(p, r, 8.3334519073E-3f);
  p = fma(p, r, 4.1665795894E-2f);
  p = fma(p, r, 1.6666665459E-1f);
  p = fma(p, r, 5.0000001201E-1f);
  float er = fma(p, r * r, r) + 1.0f;
  // 2^n in two factors: each half is a normal float even when 2^n is not.
  int32_t n1 = ni >> 1, n2 = ni - n1;
  float y = er * pow2i(n1) * pow2i(n2);
  return is_nan(x) ? x : y;
}

KILN_VECMATH_INLINE float expm1(float x) {
  using namespace detail;
  // Below -30, expm1 is -1 in float; above 88.8 it is inf. Keeps n in [-44, 128].
  float xc = x < 88.8f ? x : 88.8f;
  xc = xc > -30.0f ? xc : -30.0f;
  int32_t ni;
  float n = round_i(xc * kLog2e, ni);
  float r = fma(n, -kLn2Hi, xc);
  r = fma(n, -kLn2Lo, r);
  float em = expm1_reduced(r);
  // expm1(x) = 2^n (em + 1) - 1 = 2 (t em + (t - 1/2)) with t = 2^(n-1), so that
  // n = 128 needs no unrepresentable 2^128 and n = 0 returns em exactly.
  float t = pow2i(ni - 1);
  float y = fma(t, em, t - 0.5f) * 2.0f;
  // x == 0: keep the sign of zero (r = -0 - 0 * ln2 rounds to +0).
  return is_nan(x) | (x == 0.0f) ? x : y;
}

KILN_VECMATH_INLINE float log(float x) {
  using namespace detail;
  // GCC treats float arithmetic and compares as possibly trapping (-ftrapping-math)
  // and will not if-convert them when they sit in only one arm of a select (it
  // sinks them into a branch): then the loop does not vectorize. So the selects
  // here pick constants that feed unconditional arithmetic, and the tests are
  // integer compares of the bits.
  // Subnormals (and zero and negatives, whose results are replaced below): scale
  // into the normal range first, remember the 23 in the exponent.
  int32_t xb = std::bit_cast<int32_t>(x);
  bool subnormal = xb < 0x00800000; // x < FLT_MIN
  // x * (2^23 or 1), the factor built from integer bits so that no select of
  // float constants remains for GCC to turn back into a branch.
  float xs = x * std::bit_cast<float>(0x3f800000 + (-int32_t(subnormal) & (23 << 23)));
  int32_t bits = std::bit_cast<int32_t>(xs);
  int32_t e = (bits >> 23) - 126 - (subnormal ? 23 : 0);
  // Mantissa m in [0.5, 1); move it to [sqrt(1/2), sqrt(2)) so that f = m - 1 is small.
  int32_t mbits = (bits & 0x007fffff) | 0x3f000000;
  float m = std::bit_cast<float>(mbits);
  bool small = mbits < std::bit_cast<int32_t>(0.707106781186547524f); // m < sqrt(1/2), m > 0
  e -= small ? 1 : 0;
  // (2m or m) - 1, one rounding as in codegen; the factor again from integer bits.
  float f = fma(m, std::bit_cast<float>(0x3f800000 + (-int32_t(small) & (1 << 23))), -1.0f);
  // Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f).
  float z = f * f;
  float p = 7.0376836292E-2f;
  p = fma(p, f, -1.1514610310E-1f);
  p = fma(p, f, 1.1676998740E-1f);
  p = fma(p, f, -1.2420140846E-1f);
  p = fma(p, f, 1.4249322787E-1f);
  p = fma(p, f, -1.6668057665E-1f);
  p = fma(p, f, 2.0000714765E-1f);
  p = fma(p, f, -2.4999993993E-1f);
  p = fma(p, f, 3.3333331174E-1f);
  float y = f * z * p;
  float fe = float(e);
  y = fma(fe, kLn2Lo, y);
  y = fma(z, -0.5f, y);
  float r = fma(fe, kLn2Hi, f + y);
  // Special values: log(+inf) = inf, log(+-0) = -inf, log(<0) = log(nan) = nan.
  // One select at the end, on integer tests: with a chain of selects GCC sank the
  // whole computation into a branch and then would not if-convert it.
  // The blend is done on the bits with a mask for the same reason.
  constexpr int32_t kInf = 0x7f800000, kNegInf = int32_t(0xff800000u), kNan = 0x7fc00000;
  int32_t special = (xb << 1) == 0 ? kNegInf : (xb == kInf ? kInf : kNan);
  int32_t ok = -int32_t((xb > 0) & (xb < kInf)); // all ones when 0 < x < inf
  return std::bit_cast<float>((std::bit_cast<int32_t>(r) & ok) | (special & ~ok));
}

KILN_VECMATH_INLINE float log1p(float x) {
  // log1p(x) = log(u) + (x - (u - 1)) / u with u = fl(1 + x): the second term
  // corrects, to first order, for the rounding of 1 + x.
  float u = x + 1.0f;
  float d = u - 1.0f;
  float r = vecmath::log(u) + (x - d) / u;
  // Blends on the bits with masks (see log): |x| < ulp(1)/2 gives x (keeps -0
  // too), +inf gives inf, x = -1 gives -inf.
  int32_t keep_x = -int32_t((d == 0.0f) | (x == __builtin_inff()));
  int32_t neg_inf = -int32_t(u == 0.0f);
  int32_t rb = (std::bit_cast<int32_t>(r) & ~keep_x) | (std::bit_cast<int32_t>(x) & keep_x);
  rb = (rb & ~neg_inf) | (int32_t(0xff800000u) & neg_inf);
  return std::bit_cast<float>(rb);
}

KILN_VECMATH_INLINE float tanh(float x) {
  using namespace detail;
  // A 13/6-degree odd/even rational interpolant (Eigen's float tanh; one
  // division, no exp). Clamped at the smallest |x| where it evaluates to
  // exactly 1; tanh(x) = x below 4e-4.
  constexpr float kClamp = 7.99881172180175781f;
  float xc = x < kClamp ? x : kClamp;
  xc = xc > -kClamp ? xc : -kClamp;
  float z = xc * xc;
  float p = -2.76076847742355e-16f;
  p = fma(p, z, 2.00018790482477e-13f);
  p = fma(p, z, -8.60467152213735e-11f);
  p = fma(p, z, 5.12229709037114e-08f);
  p = fma(p, z, 1.48572235717979e-05f);
  p = fma(p, z, 6.37261928875436e-04f);
  p = fma(p, z, 4.89352455891786e-03f);
  p *= xc;
  float q = 1.19825839466702e-06f;
  q = fma(q, z, 1.18534705686654e-04f);
  q = fma(q, z, 2.26843463243900e-03f);
  q = fma(q, z, 4.89352518554385e-03f);
  float ax = x < 0.0f ? -x : x;
  float y = ax < 0.0004f ? x : p / q;
  return is_nan(x) ? x : y;
}

KILN_VECMATH_INLINE float erf(float x) {
  using namespace detail;
  // A 9/12-degree odd/even rational interpolant (the one Eigen uses for float),
  // clamped to +-1 where erf rounds to 1 in float (|x| >= erfinv(1 - 2^-23)).
  float z = x * x;
  float p = 0.00022905065861350646f;
  p = fma(p, z, 0.0034082910107109506f);
  p = fma(p, z, 0.050955695062380861f);
  p = fma(p, z, 0.18520832239976145f);
  p = fma(p, z, 1.128379143519084f);
  p *= x;
  float q = -1.1791602954361697e-7f;
  q = fma(q, z, 0.000023547966471313185f);
  q = fma(q, z, 0.0010179625278914885f);
  q = fma(q, z, 0.014070470171167667f);
  q = fma(q, z, 0.11098505178285362f);
  q = fma(q, z, 0.49746925110067538f);
  q = fma(q, z, 1.0f);
  float ax = x < 0.0f ? -x : x;
  // NaN: the compare is false and p / q is NaN.
  return ax >= 3.832506856900711f ? __builtin_copysignf(1.0f, x) : p / q;
}

// 1 / (1 + e^-x): for x -> -inf, e^-x -> inf and the quotient -> 0 exactly.
KILN_VECMATH_INLINE float sigmoid(float x) { return 1.0f / (1.0f + vecmath::exp(-x)); }

// x sigmoid(x), written as torch does: x / (1 + e^-x).
KILN_VECMATH_INLINE float silu(float x) { return x / (1.0f + vecmath::exp(-x)); }

// gelu(x, "tanh") = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), torch's formula.
KILN_VECMATH_INLINE float gelu_tanh(float x) {
  const float k = 0.7978845608028654f; // sqrt(2 / pi)
  float inner = k * (x + 0.044715f * x * x * x);
  return 0.5f * x * (1.0f + vecmath::tanh(inner));
}

// erfc(a) for a >= 1 (Cephes erfcf): exp(-a^2) / a P(1/a^2), with one
// polynomial below 2 and another above; the caller passes z = exp(-a^2), whose
// accuracy dominates at large a.
KILN_VECMATH_INLINE float erfc_ge1(float a, float z) {
  using detail::fma;
  float q = 1.0f / a, y = q * q;
  float p = 2.326819970068386E-2f; // 1 <= a < 2
  p = fma(p, y, -1.387039388740657E-1f);
  p = fma(p, y, 3.687424674597105E-1f);
  p = fma(p, y, -5.824733027278666E-1f);
  p = fma(p, y, 6.210004621745983E-1f);
  p = fma(p, y, -4.944515323274145E-1f);
  p = fma(p, y, 3.404879937665872E-1f);
  p = fma(p, y, -2.741127028184656E-1f);
  p = fma(p, y, 5.638259427386472E-1f);
  float r = -1.047766399936249E+1f; // a >= 2
  r = fma(r, y, 1.297719955372516E+1f);
  r = fma(r, y, -7.495518717768503E+0f);
  r = fma(r, y, 2.921019019210786E+0f);
  r = fma(r, y, -1.015265279202700E+0f);
  r = fma(r, y, 4.218463358204948E-1f);
  r = fma(r, y, -2.820767439740514E-1f);
  r = fma(r, y, 5.641895067754075E-1f);
  return z * q * (a < 2.0f ? p : r);
}

// gelu(x, "none") = x/2 (1 + erf(x / sqrt(2))). Below x = -sqrt(2), 1 + erf(..)
// cancels (to 2e-3 at x = -3.1, where erf's 1-ulp error would be 5e-5 of the
// result): there it is x/2 erfc(-x / sqrt(2)) instead.
KILN_VECMATH_INLINE float gelu_erf(float x) {
  using detail::fma;
  float a = x * 0.7071067811865476f;
  float head = 1.0f + vecmath::erf(a);
  // The tail is 0 in float well before x = -20; clamping keeps x^2 finite (for
  // x <= -1.9e19 it overflows, lo = -inf and z * lo = 0 * inf = NaN).
  float xt = x < -20.0f ? -20.0f : x;
  // exp(-x^2/2) with x^2 split exactly (hi + lo, fma): rounding a or a^2 first
  // would cost a relative error of x^2 eps (1e-5 at x = -12).
  float hi = xt * xt, lo = fma(xt, xt, -hi);
  float z = vecmath::exp(-0.5f * hi);
  z = fma(z, -0.5f * lo, z); // exp(-lo/2) ~ 1 - lo/2, |lo| <= ulp(x^2)/2
  float tail = erfc_ge1(xt * -0.7071067811865476f, z);
  // Integer-mask blend (see log): both arms are always computed.
  int32_t use_tail = -int32_t(a < -1.0f);
  float w = std::bit_cast<float>((std::bit_cast<int32_t>(tail) & use_tail) |
                                 (std::bit_cast<int32_t>(head) & ~use_tail));
  return 0.5f * x * w;
}

} // namespace kiln::vecmath
