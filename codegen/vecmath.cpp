// kiln's float32 transcendentals (the vector-math list of runtime/ops.def, KILN_VECMATH_OPS),
// emitted as branch-free LLVM IR polynomials (Cephes-style range reduction with roundeven
// and fma): all paths are computed and blended with selects, which is what lets the loop
// vectorizer turn them into 16-wide AVX-512 code. This IR is their only definition: the
// JIT inlines it into its kernels, and the eager kernels are the same IR compiled at
// build time (codegen/aot/vecmath_kernels_gen.cpp -> runtime/kernels/vecmath_kernels.h),
// so eager and compiled results agree bit for bit (test/unit/eager_compiled_bits_test.cpp;
// docs/vecmath.md). float64 evaluates the list's f64 column (libm) instead.
//   exp     Cephes expf: n = roundeven(x log2e), r = x - n ln2 (two-step, fma),
//           e^r = 1 + r + r^2 P5(r), times 2^n by adding n to its exponent bits;
//           results that would be subnormal (x < ln(FLT_MIN) = -87.3365) are 0;
//           NaN in, NaN out.
//   exp2    n = roundeven(x), f = x - n (exact), 2^f = 1 + f P5(f) (Cephes exp2f),
//           times 2^n as two exact power-of-two factors, so that the last multiply is
//           the only rounding: subnormal results and overflow to inf come out right.
//   expm1   same reduction, Taylor e^r - 1 to r^8, recombined as 2(t em + t - 1/2),
//           t = 2^(n-1), exact for n = 0.
//   log     Cephes logf: x = m 2^e, m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P8(f).
//   log1p   log(u) + (x - (u - 1))/u with u = fl(1 + x).
//   tanh    13/6-degree odd/even rational (Eigen's float tanh), clamped at +-7.9988,
//           x itself below 4e-4. (An expm1-based tanh measured 1.27e-7 but made
//           a tanh-GELU kernel ~20% slower; 2.5 ulp was judged the better trade.)
//   erf     9/12-degree rational interpolant (Eigen's float erf), +-1 past 3.8325.
//   sigmoid 1 / (1 + exp(-x)).
// Each function's error bound, measured over an exhaustive float32 sweep against
// double-precision std::, is asserted next to its sweep in test/unit/vecmath_test.cpp
// (the table of measured maxima is there too); a new function adds its sweep there.
#include "codegen/vecmath_ir.h"

#include <initializer_list>

#include <llvm/IR/Constants.h>
#include <llvm/IR/DerivedTypes.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>

namespace kiln::codegen::vecmath {
namespace {

using llvm::IRBuilderBase;
using llvm::Value;

Value *c(Value *like, double v) { return llvm::ConstantFP::get(like->getType(), v); }

// The i32 (or <N x i32>) type with the shape of `x`.
llvm::Type *int_type(IRBuilderBase &b, Value *x) {
  llvm::Type *i32 = b.getInt32Ty();
  if (auto *vt = llvm::dyn_cast<llvm::VectorType>(x->getType()))
    return llvm::VectorType::get(i32, vt->getElementCount());
  return i32;
}
Value *ci(IRBuilderBase &b, Value *like, int v) {
  return llvm::ConstantInt::get(int_type(b, like), uint64_t(int64_t(v)), true);
}

Value *unary(IRBuilderBase &b, llvm::Intrinsic::ID id, Value *x) {
  return b.CreateUnaryIntrinsic(id, x);
}
Value *fma(IRBuilderBase &b, Value *x, Value *y, Value *z) {
  return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
}
Value *fmin(IRBuilderBase &b, Value *x, double v) {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::minnum, x, c(x, v));
}
Value *fmax(IRBuilderBase &b, Value *x, double v) {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::maxnum, x, c(x, v));
}
Value *copysign(IRBuilderBase &b, Value *mag, Value *sign) {
  return b.CreateBinaryIntrinsic(llvm::Intrinsic::copysign, mag, sign);
}
Value *is_nan(IRBuilderBase &b, Value *x) { return b.CreateFCmpUNO(x, x); }

// Horner's rule with fma; coefficients from the highest degree down.
Value *poly(IRBuilderBase &b, Value *x, std::initializer_list<double> coeffs) {
  auto it = coeffs.begin();
  Value *acc = c(x, *it++);
  for (; it != coeffs.end(); ++it) acc = fma(b, acc, x, c(x, *it));
  return acc;
}

// 2^n for an integer-valued float n with -126 <= n <= 127, built in the exponent bits.
Value *pow2i(IRBuilderBase &b, Value *n_int) {
  Value *biased = b.CreateShl(b.CreateAdd(n_int, ci(b, n_int, 127)), ci(b, n_int, 23));
  llvm::Type *ft = b.getFloatTy();
  if (auto *vt = llvm::dyn_cast<llvm::VectorType>(n_int->getType()))
    ft = llvm::VectorType::get(ft, vt->getElementCount());
  return b.CreateBitCast(biased, ft);
}

constexpr double kLog2e = 1.44269504088896341;
// ln 2 split so that n * kLn2Hi is exact for |n| < 2^9 (Cephes' C1, C2).
constexpr double kLn2Hi = 0.693359375;
constexpr double kLn2Lo = -2.12194440e-4;

// x = n ln2 + r with |r| <= ln2/2; returns {n as float, r}.
std::pair<Value *, Value *> reduce_ln2(IRBuilderBase &b, Value *x) {
  Value *n = unary(b, llvm::Intrinsic::roundeven, b.CreateFMul(x, c(x, kLog2e)));
  Value *r = fma(b, n, c(x, -kLn2Hi), x);
  r = fma(b, n, c(x, -kLn2Lo), r);
  return {n, r};
}

// e^r - 1 for |r| <= ln2/2: r + r^2 (1/2 + r/6 + ... + r^6/8!). Truncation error
// r^9/9! / r < 1e-9, far below float resolution.
Value *expm1_reduced(IRBuilderBase &b, Value *r) {
  Value *p = poly(b, r,
                  {1.0 / 40320, 1.0 / 5040, 1.0 / 720, 1.0 / 120, 1.0 / 24, 1.0 / 6, 0.5});
  return fma(b, b.CreateFMul(r, r), p, r);
}

} // namespace

Value *exp(IRBuilderBase &b, Value *x) {
  // n = roundeven(x log2e) by the 1.5 * 2^23 trick: the sum's low mantissa bits
  // are n (two's complement), so shifting its bits left by 23 puts n into an
  // exponent field without a float-to-int conversion (whose NaN result is
  // poison in IR). 2^n is then applied by adding that to e^r's bits: exact
  // while the result is a normal float, which the two selects below ensure.
  // Compared with two multiplications by 2^(n/2) halves, this is ~12 fewer
  // vector instructions per exp, which is most of a softmax row's work.
  constexpr double kMagic = 12582912.0; // 1.5 * 2^23
  Value *t = fma(b, x, c(x, kLog2e), c(x, kMagic));
  Value *n = b.CreateFSub(t, c(x, kMagic));
  Value *r = fma(b, n, c(x, -kLn2Hi), x);
  r = fma(b, n, c(x, -kLn2Lo), r);
  // Cephes expf: e^r = 1 + r + r^2 P(r), in [sqrt(1/2), sqrt(2)].
  Value *p = poly(b, r,
                  {1.9875691500E-4, 1.3981999507E-3, 8.3334519073E-3, 4.1665795894E-2,
                   1.6666665459E-1, 5.0000001201E-1});
  Value *er = b.CreateFAdd(fma(b, p, b.CreateFMul(r, r), r), c(x, 1.0));
  llvm::Type *it = int_type(b, x);
  Value *scale = b.CreateShl(b.CreateBitCast(t, it), ci(b, x, 23));
  Value *y = b.CreateBitCast(b.CreateAdd(b.CreateBitCast(er, it), scale), x->getType());
  // The exponent add is right for n in [-126, 128] as long as the result stays
  // normal: above ln(FLT_MAX) the result is inf (from the largest float whose
  // exponential rounds to inf); below ln(FLT_MIN) = -126 ln2, where the result
  // would be subnormal, it is flushed to 0 (an absolute error below 1.2e-38).
  // A NaN x must be caught too: er is NaN, but adding t's payload bits shifted
  // by 23 to its bits can carry out of the exponent field and leave a finite
  // number (exp(NaN) was 0x1.000004p-127). So the overflow test is unordered
  // (true for NaN) and picks x + inf: inf for a large x, x's NaN for a NaN, at
  // the cost of one add (a separate NaN select made softmax ~10% slower).
  double inf = __builtin_inf();
  y = b.CreateSelect(b.CreateFCmpUGE(x, c(x, 88.72283935546875)), b.CreateFAdd(x, c(x, inf)), y);
  return b.CreateSelect(b.CreateFCmpOLT(x, c(x, -87.33654022216797)), c(x, 0.0), y);
}

Value *exp2(IRBuilderBase &b, Value *x) {
  // Clamped to [-152, 129] by compare-and-select (a NaN x stays NaN, where
  // minnum/maxnum would replace it): 2^x is already 0 below -151 and inf above 128.
  Value *xc = b.CreateSelect(b.CreateFCmpOLT(x, c(x, -152.0)), c(x, -152.0), x);
  xc = b.CreateSelect(b.CreateFCmpOGT(xc, c(x, 129.0)), c(x, 129.0), xc);
  // n = roundeven(x) by the 1.5 * 2^23 trick (as exp): t's bits are those of 1.5 * 2^23
  // plus n, so n needs no float-to-int conversion (poison for a NaN in IR).
  constexpr double kMagic = 12582912.0; // 1.5 * 2^23, bits 0x4b400000
  Value *t = b.CreateFAdd(xc, c(x, kMagic));
  Value *f = b.CreateFSub(xc, b.CreateFSub(t, c(x, kMagic))); // in [-1/2, 1/2], exact
  // Cephes exp2f: 2^f = 1 + f P(f) on [-1/2, 1/2].
  Value *p = fma(b, f,
                 poly(b, f,
                      {1.535336188319500E-4, 1.339887440266574E-3, 9.618437357674640E-3,
                       5.550332471162809E-2, 2.402264791363012E-1, 6.931472028550421E-1}),
                 c(x, 1.0));
  // 2^n = 2^n1 2^n2 with n1 = floor(n / 2), n2 = n - n1, both in [-76, 65] (normal
  // powers of two). p 2^n1 is exact (a normal float), so (p 2^n1) 2^n2 rounds once,
  // correctly even where the result is subnormal or overflows. For a NaN x, n is
  // garbage but p is NaN, and so is the product.
  Value *n = b.CreateSub(b.CreateBitCast(t, int_type(b, x)), ci(b, x, 0x4b400000));
  Value *n1 = b.CreateAShr(n, ci(b, x, 1));
  Value *n2 = b.CreateSub(n, n1);
  return b.CreateFMul(b.CreateFMul(p, pow2i(b, n1)), pow2i(b, n2));
}

Value *expm1(IRBuilderBase &b, Value *x) {
  // Below -30, expm1 is -1 in float; above 88.8 it is inf. Keeps n in [-44, 128].
  Value *xc = fmax(b, fmin(b, x, 88.8), -30.0);
  auto [n, r] = reduce_ln2(b, xc);
  Value *em = expm1_reduced(b, r);
  // expm1(x) = 2^n (em + 1) - 1 = 2 (t em + (t - 1/2)) with t = 2^(n-1), so that
  // n = 128 needs no unrepresentable 2^128 and n = 0 returns em exactly.
  Value *ni = b.CreateFPToSI(n, int_type(b, x));
  Value *t = pow2i(b, b.CreateSub(ni, ci(b, x, 1)));
  Value *y = b.CreateFMul(fma(b, t, em, b.CreateFSub(t, c(x, 0.5))), c(x, 2.0));
  // NaN or +-0 (unordered or equal): x itself; r = -0 - 0 ln2 rounds to +0,
  // which would lose the sign of expm1(-0) = -0.
  return b.CreateSelect(b.CreateFCmpUEQ(x, c(x, 0.0)), x, y);
}

Value *log(IRBuilderBase &b, Value *x) {
  llvm::Type *it = int_type(b, x);
  // Subnormals: scale into the normal range first, remember the 23 in the exponent.
  Value *subnormal = b.CreateFCmpOLT(x, c(x, 1.17549435e-38));
  Value *xs = b.CreateSelect(subnormal, b.CreateFMul(x, c(x, 8388608.0)), x);
  Value *bits = b.CreateBitCast(xs, it);
  Value *e = b.CreateSub(b.CreateAShr(bits, ci(b, x, 23)), ci(b, x, 126));
  e = b.CreateSub(e, b.CreateSelect(subnormal, ci(b, x, 23), ci(b, x, 0)));
  // Mantissa m in [0.5, 1); move it to [sqrt(1/2), sqrt(2)) so that f = m - 1 is small.
  Value *mbits = b.CreateOr(b.CreateAnd(bits, ci(b, x, 0x007fffff)), ci(b, x, 0x3f000000));
  Value *m = b.CreateBitCast(mbits, x->getType());
  Value *small = b.CreateFCmpOLT(m, c(x, 0.707106781186547524));
  e = b.CreateSub(e, b.CreateSelect(small, ci(b, x, 1), ci(b, x, 0)));
  Value *f = b.CreateFSub(b.CreateSelect(small, b.CreateFAdd(m, m), m), c(x, 1.0));
  // Cephes logf: log(1+f) = f - f^2/2 + f^3 P(f).
  Value *z = b.CreateFMul(f, f);
  Value *p = poly(b, f,
                  {7.0376836292E-2, -1.1514610310E-1, 1.1676998740E-1, -1.2420140846E-1,
                   1.4249322787E-1, -1.6668057665E-1, 2.0000714765E-1, -2.4999993993E-1,
                   3.3333331174E-1});
  Value *y = b.CreateFMul(b.CreateFMul(f, z), p);
  Value *fe = b.CreateSIToFP(e, x->getType());
  y = fma(b, fe, c(x, kLn2Lo), y);
  y = fma(b, z, c(x, -0.5), y);
  Value *r = fma(b, fe, c(x, kLn2Hi), b.CreateFAdd(f, y));
  // Special values: log(+inf) = inf, log(0) = -inf, log(<0) = log(nan) = nan.
  double inf = __builtin_inf();
  r = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, inf)), c(x, inf), r);
  r = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, 0.0)), c(x, -inf), r);
  Value *bad = b.CreateOr(b.CreateFCmpOLT(x, c(x, 0.0)), is_nan(b, x));
  return b.CreateSelect(bad, c(x, __builtin_nan("")), r);
}

Value *log1p(IRBuilderBase &b, Value *x) {
  // log1p(x) = log(u) + (x - (u - 1)) / u with u = fl(1 + x): the second term
  // corrects, to first order, for the rounding of 1 + x.
  Value *u = b.CreateFAdd(x, c(x, 1.0));
  Value *d = b.CreateFSub(u, c(x, 1.0));
  Value *r = b.CreateFAdd(log(b, u), b.CreateFDiv(b.CreateFSub(x, d), u));
  double inf = __builtin_inf();
  r = b.CreateSelect(b.CreateFCmpOEQ(d, c(x, 0.0)), x, r); // |x| < ulp(1)/2: log1p(x) = x
  r = b.CreateSelect(b.CreateFCmpOEQ(x, c(x, inf)), x, r);
  return b.CreateSelect(b.CreateFCmpOEQ(u, c(x, 0.0)), c(x, -inf), r);
}

Value *tanh(IRBuilderBase &b, Value *x) {
  // A 13/6-degree odd/even rational interpolant (Eigen's float tanh; one
  // division, no exp, about half the work of an expm1-based tanh). Clamped at
  // the smallest |x| where it evaluates to exactly 1; tanh(x) = x below 4e-4.
  // Clamped by compare-and-select, which keeps a NaN x (both comparisons fail)
  // where minnum/maxnum would replace it: the NaN then flows through p / q and
  // needs no select of its own at the end.
  constexpr double kClamp = 7.99881172180175781;
  Value *xc = b.CreateSelect(b.CreateFCmpOGT(x, c(x, kClamp)), c(x, kClamp), x);
  xc = b.CreateSelect(b.CreateFCmpOLT(xc, c(x, -kClamp)), c(x, -kClamp), xc);
  Value *z = b.CreateFMul(xc, xc);
  Value *p = b.CreateFMul(xc, poly(b, z,
                                   {-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                                    5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                                    4.89352455891786e-03}));
  Value *q = poly(b, z,
                  {1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                   4.89352518554385e-03});
  Value *tiny = b.CreateFCmpOLT(unary(b, llvm::Intrinsic::fabs, x), c(x, 0.0004));
  return b.CreateSelect(tiny, x, b.CreateFDiv(p, q));
}

Value *erf(IRBuilderBase &b, Value *x) {
  // A 9/12-degree odd/even rational interpolant (the one Eigen uses for float),
  // clamped to +-1 where erf rounds to 1 in float (|x| >= erfinv(1 - 2^-23)).
  Value *z = b.CreateFMul(x, x);
  Value *p = b.CreateFMul(x, poly(b, z,
                                  {0.00022905065861350646, 0.0034082910107109506,
                                   0.050955695062380861, 0.18520832239976145,
                                   1.128379143519084}));
  Value *q = poly(b, z,
                  {-1.1791602954361697e-7, 0.000023547966471313185, 0.0010179625278914885,
                   0.014070470171167667, 0.11098505178285362, 0.49746925110067538, 1.0});
  Value *clamp = b.CreateFCmpOGE(unary(b, llvm::Intrinsic::fabs, x), c(x, 3.832506856900711));
  return b.CreateSelect(clamp, copysign(b, c(x, 1.0), x), b.CreateFDiv(p, q));
}

Value *sigmoid(IRBuilderBase &b, Value *x) {
  // 1 / (1 + e^-x): for x -> -inf, e^-x -> inf and the quotient -> 0 exactly.
  Value *e = exp(b, b.CreateFNeg(x));
  return b.CreateFDiv(c(x, 1.0), b.CreateFAdd(c(x, 1.0), e));
}

} // namespace kiln::codegen::vecmath
