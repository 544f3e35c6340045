// The LLVM optimization pipeline of kiln's generated code, in one place: the JIT
// (codegen/jit.cpp) runs it on every kernel module, and the build-time generator
// of the eager vector-math kernels (codegen/aot/vecmath_kernels_gen.cpp) on its
// module. Eager and compiled transcendentals agree bit for bit only while both
// see the same pipeline (test/unit/eager_compiled_bits_test.cpp), hence one copy.
#pragma once

namespace llvm {
class Module;
class TargetMachine;
} // namespace llvm

namespace kiln::codegen {

// O3 with the loop and SLP vectorizers, unrolling and interleaving, tuned for `tm`.
void optimize_module(llvm::Module &m, llvm::TargetMachine &tm);

} // namespace kiln::codegen
