/* The op lists of runtime/ops.def without its entries: KILN_VECMATH_OPS(X),
 * KILN_LIBM_OPS(X), KILN_LIBM2_OPS(X), KILN_COMPOSED_OPS(X) and KILN_COMPOSED_KERNELS(X), the companion
 * lines of the vector-math functions, of the C library's functions and of the composed ops (their definitions and meaning: the
 * comment above them in ops.def). Every place that needs a list expands it from here.
 * Plain macros (C-compatible). */
#pragma once

#define KILN_OP(...)
#include "runtime/ops.def"
