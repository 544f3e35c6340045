// Accuracy of kiln's float32 transcendentals (KOp::Exp, Expm1, Log, Log1p, Tanh,
// Erf, Sigmoid on float32). They are emitted as branch-free LLVM IR polynomials
// (codegen/vecmath.cpp) that vectorize to 16-wide AVX-512 code. That IR is their
// only definition: the JIT inlines it into its kernels, and the eager kernels are
// the same IR compiled at build time (codegen/aot/vecmath_kernels_gen.cpp ->
// runtime/kernels/vecmath_kernels.h), so eager and compiled results agree bit for
// bit (test/unit/eager_compiled_bits_test.cpp; docs/vecmath.md):
//   exp     Cephes expf: n = roundeven(x log2e), r = x - n ln2 (two-step, fma),
//           e^r = 1 + r + r^2 P5(r), times 2^n by adding n to its exponent bits;
//           results that would be subnormal (x < ln(FLT_MIN) = -87.3365) are 0;
//           NaN in, NaN out.
//   expm1   same reduction, Taylor e^r - 1 to r^8, recombined as 2(t em + t - 1/2),
//           t = 2^(n-1), exact for n = 0.
//   log     Cephes logf: x = m 2^e, m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P8(f).
//   log1p   log(u) + (x - (u - 1))/u with u = fl(1 + x).
//   tanh    13/6-degree odd/even rational (Eigen's float tanh), clamped at +-7.9988,
//           x itself below 4e-4. (An expm1-based tanh measured 1.27e-7 but made
//           a tanh-GELU kernel ~20% slower; 2.5 ulp was judged the better trade.)
//   erf     9/12-degree rational interpolant (Eigen's float erf), +-1 past 3.8325.
//   sigmoid 1 / (1 + exp(-x)).
//   silu, gelu (both approximations): composed from the above as the JIT's
//           lowering composes them (torch's formulas; see vecmath_ir.h).
// float64 kernels call libm instead (correctly rounded to ~1 ulp).
//
// The bounds below are measured by test/unit/vecmath_test.cpp against double
// precision std:: functions, sweeping EVERY float32 x in the listed range whose
// magnitude is >= 2^-12, and every 61st float below 2^-12 (including subnormals);
// the test fails if a bound is exceeded. Relative error is taken where the
// reference is a normal float (|ref| >= FLT_MIN).
// Measured maxima on this AMD EPYC host (LLVM 19.1.7 reports znver4, AVX-512) (floats tested; max abs error; max relative error):
//   exp      x in [-87.3, 88.7]     340M   abs n/a (outputs up to 3e38)   rel 8.5e-8
//   expm1    x in [-20, 88.7]       322M   abs n/a                         rel 1.21e-7
//   log      x in [1e-6, 1e6]       269M   abs 5.0e-7 (|log x| ~ 13.5)      rel 8.2e-8
//   log1p    x in [-0.999999, 1e4]  344M   abs 5.1e-7 (|log1p x| ~ 8.3)     rel 1.34e-7
//   tanh     x in [-20, 20]         304M   abs 2.9e-7 (near |x| = 5.1)      rel 2.9e-7
//   erf      x in [-10, 10]         287M   abs 4.0e-7 (near |x| = 3.80,     rel 4.0e-7
//                                          just below the +-1 clamp)
//   sigmoid  x in [-30, 30]         315M   abs 8.9e-8                      rel 1.48e-7
// (float32 epsilon is 1.19e-7: every relative error is below 3.5 epsilon; inf/nan results match
// std:: exactly, which the sweep also checks.)
#pragma once

namespace kiln::codegen::vecmath_bounds {

// Asserted by the sweep test (measured value rounded up, with a little headroom).
struct Bound {
  double max_abs; // <= 0: not checked (unbounded outputs)
  double max_rel;
};
inline constexpr Bound kExp{0, 1.0e-7};
inline constexpr Bound kExpm1{0, 1.4e-7};
inline constexpr Bound kLog{5.5e-7, 1.0e-7};
inline constexpr Bound kLog1p{5.5e-7, 1.5e-7};
inline constexpr Bound kTanh{3.3e-7, 3.3e-7};
inline constexpr Bound kErf{4.5e-7, 4.5e-7};
inline constexpr Bound kSigmoid{1.0e-7, 1.7e-7};

} // namespace kiln::codegen::vecmath_bounds
