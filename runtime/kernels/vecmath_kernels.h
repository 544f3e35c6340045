// The eager float32 transcendental kernels, generated at build time from the
// JIT's IR builders (codegen/vecmath.cpp) by codegen/aot/vecmath_kernels_gen.cpp
// and linked into the library as an object file. Each computes y[i] = f(x[i])
// for 0 <= i < n with exactly the operations the JIT emits for the same op, so
// eager and compiled results agree bit for bit (test/unit/eager_compiled_bits_test).
// x and y may be the same array; otherwise they must not overlap. Algorithms,
// special values and measured errors: codegen/vecmath.h.
//
// A plain C interface: runtime/ sits below codegen/ and includes none of it. The list
// of functions is runtime/kernels/vecmath_list.h.
#pragma once

#include <stdint.h>

#include "runtime/kernels/vecmath_list.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One per line of runtime/kernels/vecmath_list.h: kiln_vm_exp_f32, kiln_vm_silu_f32,
 * kiln_vm_gelu_erf_f32 (gelu(x, "none")), kiln_vm_gelu_tanh_f32 (gelu(x, "tanh")), ... */
#define KILN_VM_DECLARE(fn) void kiln_vm_##fn##_f32(const float *x, float *y, int64_t n);
/* ... and for the kernel ops, their float64 definitions (the list's f64 column, defined
 * in elementwise_unary.cpp without fp contraction): kiln_vm_exp_f64(v)... The eager
 * float64 kernels, the JIT's float64 code and the kernel interpreter all call these. */
#define KILN_VM_DECLARE_OP(Id, fn, f64) KILN_VM_DECLARE(fn) double kiln_vm_##fn##_f64(double v);
KILN_VECMATH_OPS(KILN_VM_DECLARE_OP)
KILN_VECMATH_COMPOSITES(KILN_VM_DECLARE)
#undef KILN_VM_DECLARE_OP
#undef KILN_VM_DECLARE

#ifdef __cplusplus
}
#endif
