// The eager float32 transcendental kernels, generated at build time from the
// JIT's IR builders (codegen/vecmath.cpp) by codegen/aot/vecmath_kernels_gen.cpp
// and linked into the library as an object file. Each computes y[i] = f(x[i])
// for 0 <= i < n with exactly the operations the JIT emits for the same op, so
// eager and compiled results agree bit for bit (test/unit/eager_compiled_bits_test).
// x and y may be the same array; otherwise they must not overlap. Algorithms,
// special values and measured errors: codegen/vecmath.h.
//
// A plain C interface: runtime/ sits below codegen/ and includes none of it.
#pragma once

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

void kiln_vm_exp_f32(const float *x, float *y, int64_t n);
void kiln_vm_expm1_f32(const float *x, float *y, int64_t n);
void kiln_vm_log_f32(const float *x, float *y, int64_t n);
void kiln_vm_log1p_f32(const float *x, float *y, int64_t n);
void kiln_vm_tanh_f32(const float *x, float *y, int64_t n);
void kiln_vm_erf_f32(const float *x, float *y, int64_t n);
void kiln_vm_sigmoid_f32(const float *x, float *y, int64_t n);
void kiln_vm_silu_f32(const float *x, float *y, int64_t n);      // x sigmoid(x)
void kiln_vm_gelu_erf_f32(const float *x, float *y, int64_t n);  // gelu(x, "none")
void kiln_vm_gelu_tanh_f32(const float *x, float *y, int64_t n); // gelu(x, "tanh")

#ifdef __cplusplus
}
#endif
