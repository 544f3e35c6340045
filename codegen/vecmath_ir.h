// INTERNAL to codegen/*.cpp: emits the float32 approximations documented in
// codegen/vecmath.cpp as straight-line LLVM IR (no branches, no calls), so that the
// loop and SLP vectorizers widen them like any other arithmetic. Each function
// accepts a float or a vector-of-float value and returns the same type.
#pragma once

#include "runtime/op_lists.h"

namespace llvm {
class IRBuilderBase;
class Value;
} // namespace llvm

namespace kiln::codegen::vecmath {

// One per line of the vector-math list (runtime/ops.def): exp, expm1, log, ... (the composed
// functions built from these, silu and gelu, are the composed-op list, runtime/ops.def).
#define KILN_VECMATH_DECLARE_OP(Id, fn, f64) llvm::Value *fn(llvm::IRBuilderBase &b, llvm::Value *x);
KILN_VECMATH_OPS(KILN_VECMATH_DECLARE_OP)
#undef KILN_VECMATH_DECLARE_OP

} // namespace kiln::codegen::vecmath
