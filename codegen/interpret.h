// A plain C++ evaluator of KernelDescs: the reference the JIT is checked against
// (differential tests) and a slow but dependable fallback for one kernel.
// Same semantics as the compiled code (codegen/kernel.h), element by element,
// with each float32 operation rounded to float. Transcendentals use double
// precision std:: functions (so they differ from the JIT's float32 polynomials
// by the errors measured in test/unit/vecmath_test.cpp). Row reductions fold each row
// left to right from the identity, each step rounded to the dtype (float32
// sums accumulate in float32); the compiled code's order differs (vector partial
// sums), so float sums and products agree only up to rounding.
#pragma once

#include "codegen/kernel.h"

namespace kiln::codegen {

// buffers: inputs then outputs (then dim 0's extent for a runtime dim 0), as for CompiledKernel::run. Throws kiln::Error
// if the description is invalid.
void interpret(const KernelDesc &desc, void *const *buffers);

} // namespace kiln::codegen
