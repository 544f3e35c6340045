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
