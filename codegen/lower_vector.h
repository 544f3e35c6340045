// INTERNAL to codegen: a KernelDesc's elementwise expression emitted on vector
// values at a caller's insert point, with the same per-node lowering as
// lower_kernel (lower_expr.cpp's emit_node), so that a generator embedding the
// expression in its own code (codegen/gemm's micro-kernels with an epilogue in
// registers) computes what a compiled elementwise kernel computes, bit for bit.
#pragma once

#include <memory>
#include <vector>

#include <llvm/IR/IRBuilder.h>

#include "codegen/kernel.h"
#include "codegen/lower.h"

namespace kiln::codegen {

namespace lower_impl {
class Lowering;
}

class VectorExpr {
public:
  // `desc` must outlive the emitter; its nodes must be elementwise (no Reduce).
  VectorExpr(const KernelDesc &desc, llvm::Module &m, const LowerTarget &target);
  ~VectorExpr();
  VectorExpr(const VectorExpr &) = delete;
  VectorExpr &operator=(const VectorExpr &) = delete;

  // Node `id` (not a Load) on `width`-lane values; vals[i] holds node i's value
  // for every operand i of node id.
  llvm::Value *emit(llvm::IRBuilder<> &b, size_t id, const std::vector<llvm::Value *> &vals, unsigned width);

private:
  const KernelDesc &desc_;
  std::unique_ptr<lower_impl::Lowering> l_;
};

} // namespace kiln::codegen
