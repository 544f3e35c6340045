// INTERNAL to codegen/*.cpp: lowers a KernelDesc to an LLVM module.
#pragma once

#include <memory>
#include <string>

namespace llvm {
class LLVMContext;
class Module;
} // namespace llvm

namespace kiln::codegen {

struct KernelDesc;

// Where the module will run; stamped on the module and its functions so that the
// optimizer's cost model sees the real CPU (vector width, FMA...).
struct LowerTarget {
  std::string triple, data_layout, cpu, features;
};

// Host functions the generated code calls; jit.cpp defines them as absolute symbols.
// float64 transcendentals go through these (scalar libm); float32 ones are inline.
inline constexpr const char *kParallelForSymbol = "kiln_parallel_for";
inline constexpr const char *kLibmSymbolPrefix = "kiln_libm_"; // + exp, sigmoid...: kiln_vm_<fn>_f64

// Builds `void <symbol>(void* const* buffers)`, which splits the outer loop with
// kiln_parallel_for over the internal `<symbol>.body(ctx, begin, end)`.
// Throws kiln::Error if the description is invalid or the IR does not verify.
std::unique_ptr<llvm::Module> lower_kernel(const KernelDesc &desc, const std::string &symbol,
                                           const LowerTarget &target, llvm::LLVMContext &ctx);

// Whether a row reduction's rows are evaluated in tiles of neighbouring rows
// (rows that run down columns: codegen/lower_tile.cpp). A runtime row
// (KernelDesc::runtime_row) takes them too.
bool wants_row_tiles(const KernelDesc &desc);

// Run after the optimizer: marks the stores into streamed outputs
// (KernelDesc::stream_stores) non-temporal. Before vectorization, the loop
// vectorizer would refuse to widen them (a scalar float store is not aligned
// enough for a vector non-temporal store), so lower_kernel only tags the
// outputs' pointers and this pass tags the widened stores.
void mark_streamed_stores(llvm::Module &m);

} // namespace kiln::codegen
