// The C library's unary functions of the libm list (runtime/ops.def, KILN_LIBM_OPS), one
// definition per precision from the line: the eager kernels, the JIT's code (host
// symbols called per element, codegen/jit.cpp) and the kernel interpreter call these,
// so that eager and compiled results are the same bits. Kept out of line on purpose:
// one function, one result, whatever a caller's compiler would inline or vectorize.
#include <cmath>

#include "runtime/kernels/vecmath_kernels.h"

#define KILN_LM_DEFINE(Id, fn, def)                                                                            \
  extern "C" float kiln_lm_##fn##_f32(float v) { return def; }                                                 \
  extern "C" double kiln_lm_##fn##_f64(double v) { return def; }
KILN_LIBM_OPS(KILN_LM_DEFINE)
#undef KILN_LM_DEFINE

// The binary list (KILN_LIBM2_OPS), the same way.
#define KILN_LM2_DEFINE(Id, fn, def)                                                                           \
  extern "C" float kiln_lm2_##fn##_f32(float a, float b) { return def; }                                       \
  extern "C" double kiln_lm2_##fn##_f64(double a, double b) { return def; }
KILN_LIBM2_OPS(KILN_LM2_DEFINE)
#undef KILN_LM2_DEFINE
