// INTERNAL to codegen/*.cpp: emits the float32 approximations documented in
// codegen/vecmath.h as straight-line LLVM IR (no branches, no calls), so that the
// loop and SLP vectorizers widen them like any other arithmetic. Each function
// accepts a float or a vector-of-float value and returns the same type.
#pragma once

namespace llvm {
class IRBuilderBase;
class Value;
} // namespace llvm

namespace kiln::codegen::vecmath {

llvm::Value *exp(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *expm1(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *log(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *log1p(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *tanh(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *erf(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *sigmoid(llvm::IRBuilderBase &b, llvm::Value *x);
// Composite activations: exactly the operations the JIT's lowering of silu and
// gelu emits (for the generated eager kernels, codegen/aot/).
llvm::Value *silu(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *gelu_erf(llvm::IRBuilderBase &b, llvm::Value *x);
llvm::Value *gelu_tanh(llvm::IRBuilderBase &b, llvm::Value *x);

} // namespace kiln::codegen::vecmath
