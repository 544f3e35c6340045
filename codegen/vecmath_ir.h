// INTERNAL to codegen/*.cpp: emits the float32 approximations documented in
// codegen/vecmath.h as straight-line LLVM IR (no branches, no calls), so that the
// loop and SLP vectorizers widen them like any other arithmetic. Each function
// accepts a float or a vector-of-float value and returns the same type.
#pragma once

#include "runtime/kernels/vecmath_list.h"

namespace llvm {
class IRBuilderBase;
class Value;
} // namespace llvm

namespace kiln::codegen::vecmath {

// One per line of runtime/kernels/vecmath_list.h: exp, expm1, log, ... and the
// composite activations silu, gelu_erf, gelu_tanh, which do exactly the operations
// the JIT's lowering of silu and gelu emits (for the generated eager kernels, codegen/aot/).
#define KILN_VECMATH_DECLARE(fn) llvm::Value *fn(llvm::IRBuilderBase &b, llvm::Value *x);
#define KILN_VECMATH_DECLARE_OP(Id, fn, f64) KILN_VECMATH_DECLARE(fn)
KILN_VECMATH_OPS(KILN_VECMATH_DECLARE_OP)
KILN_VECMATH_COMPOSITES(KILN_VECMATH_DECLARE)
#undef KILN_VECMATH_DECLARE_OP
#undef KILN_VECMATH_DECLARE

} // namespace kiln::codegen::vecmath
