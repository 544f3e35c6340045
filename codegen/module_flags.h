// INTERNAL to codegen/*.cpp: module flags generators set for the JIT (codegen/jit.cpp).
#pragma once

namespace kiln::codegen {

// Module flag (i32 1): the module's loops are final (codegen/gemm's micro-kernels),
// so the JIT compiles it without the O3 pipeline.
inline constexpr const char *kSkipOptimizerFlag = "kiln.skip_o3";

} // namespace kiln::codegen
