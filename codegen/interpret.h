// A plain C++ evaluator of KernelDescs: the reference the JIT is checked against
// (differential tests) and a slow but dependable fallback for one kernel.
// Same semantics as the compiled code (codegen/kernel.h), element by element,
// with each float32 operation rounded to float. Transcendentals use double
// precision std:: functions (so they differ from the JIT's float32 polynomials
// by the errors documented in codegen/vecmath.h).
#pragma once

#include "codegen/kernel.h"

namespace kiln::codegen {

// buffers: inputs then outputs, as for CompiledKernel::run. Throws kiln::Error
// if the description is invalid.
void interpret(const KernelDesc &desc, void *const *buffers);

} // namespace kiln::codegen
