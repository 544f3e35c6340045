// The eager float32 transcendental kernels, generated at build time from the
// JIT's IR builders (codegen/vecmath.cpp), and the eager kernels of the composed
// pointwise functions (the composed-op list, runtime/ops.def), generated from their
// definitions through the JIT's lowering, by codegen/aot/vecmath_kernels_gen.cpp
// and linked into the library as an object file. Each computes y[i] = f(x[i])
// for 0 <= i < n with exactly the operations the JIT emits for the same op, so
// eager and compiled results agree bit for bit (test/unit/eager_compiled_bits_test).
// x and y may be the same array; otherwise they must not overlap. Algorithms:
// codegen/vecmath.cpp; measured errors: test/unit/vecmath_test.cpp.
//
// A plain C interface: runtime/ sits below codegen/ and includes none of it. The list
// of functions: the vector-math and composed-op lists of runtime/ops.def (runtime/op_lists.h).
#pragma once

#include <stdint.h>

#include "runtime/op_lists.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One per line of the vector-math list (runtime/ops.def): kiln_vm_exp_f32, kiln_vm_log_f32, ... */
#define KILN_VM_DECLARE(fn) void kiln_vm_##fn##_f32(const float *x, float *y, int64_t n);
/* ... and for the kernel ops, their float64 definitions (the list's f64 column, defined
 * in elementwise_unary.cpp without fp contraction): kiln_vm_exp_f64(v)... The eager
 * float64 kernels, the JIT's float64 code and the kernel interpreter all call these. */
#define KILN_VM_DECLARE_OP(Id, fn, f64) KILN_VM_DECLARE(fn) double kiln_vm_##fn##_f64(double v);
KILN_VECMATH_OPS(KILN_VM_DECLARE_OP)
#undef KILN_VM_DECLARE_OP
#undef KILN_VM_DECLARE

/* One pair per line of the composed-op list (runtime/ops.def), both dtypes generated from the
 * line's definition through the JIT's lowering: kiln_pw_silu_f32 / kiln_pw_silu_f64,
 * kiln_pw_gelu_erf_f32 (gelu(x, "none")), kiln_pw_gelu_tanh_f64 (gelu(x, "tanh")), ...
 * y[i] = fn(x[i]) for 0 <= i < n; x == y allowed, as above. The float64 ones call the
 * kiln_vm_<fn>_f64 definitions above for the vector-math functions they use. */
#define KILN_PW_DECLARE(fn, def)                                                                           \
  void kiln_pw_##fn##_f32(const float *x, float *y, int64_t n);                                            \
  void kiln_pw_##fn##_f64(const double *x, double *y, int64_t n);
#define KILN_PW_DECLARE_OP(Id, fn, def) KILN_PW_DECLARE(fn, def)
KILN_COMPOSED_OPS(KILN_PW_DECLARE_OP)
KILN_COMPOSED_KERNELS(KILN_PW_DECLARE)
#undef KILN_PW_DECLARE_OP
#undef KILN_PW_DECLARE

/* One pair per line of the libm list (runtime/ops.def): kiln_lm_sin_f32(v), kiln_lm_sin_f64(v),
 * ..., the line's definition in each precision (runtime/kernels/libm_kernels.cpp). The eager
 * kernels, the JIT (a host symbol, called per element) and the kernel interpreter call these. */
#define KILN_LM_DECLARE_OP(Id, fn, def)                                                                    \
  float kiln_lm_##fn##_f32(float v);                                                                       \
  double kiln_lm_##fn##_f64(double v);
KILN_LIBM_OPS(KILN_LM_DECLARE_OP)
#undef KILN_LM_DECLARE_OP
/* And one pair per line of the binary libm list: kiln_lm2_atan2_f32(a, b), ... */
#define KILN_LM2_DECLARE_OP(Id, fn, def)                                                                   \
  float kiln_lm2_##fn##_f32(float a, float b);                                                             \
  double kiln_lm2_##fn##_f64(double a, double b);
KILN_LIBM2_OPS(KILN_LM2_DECLARE_OP)
#undef KILN_LM2_DECLARE_OP

#ifdef __cplusplus
}
#endif
