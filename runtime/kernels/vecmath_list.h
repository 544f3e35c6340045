/* The vector-math functions, one line each. Every place that needs the list
 * expands these X-macros (the kernel ops, the IR builders' declarations, the
 * eager kernels and their generator, the JIT's float32 and float64 lowering,
 * the kernel interpreter, the lowering rules, the eager ops and their adapters),
 * so a new transcendental is: its ops.def entry, one line here, its float32 math
 * (an IR builder in codegen/vecmath.cpp) and its tests. Worked example: docs/ops.md.
 *
 * KILN_VECMATH_OPS(X): X(Id, fn, f64), the transcendental kernel ops.
 *   Id   the op: OpId::Id in runtime/ops.def (traits Transcendental | Lowers; a
 *        static_assert in runtime/op_registry.cpp ties the two lists) and codegen's
 *        kernel op KOp::Id.
 *   fn   codegen::vecmath::fn(IRBuilderBase &, Value *), the float32 IR builder: the
 *        only definition of the float32 math. The JIT inlines it; kiln-vecmath-gen
 *        compiles it into the eager kernel kiln_vm_fn_f32 (vecmath_kernels.h). kiln::fn
 *        (the public op) and codegen::fn(Expr) carry the same name.
 *   f64  the float64 definition, an expression of `double v` (kiln::vecmath_f64::fn):
 *        the eager float64 kernel, the JIT's float64 code (a call to it) and the kernel
 *        interpreter's reference all evaluate it.
 *
 * Functions composed of these (silu, gelu) are one line of runtime/kernels/composed_list.h.
 *
 * Plain macros (a C header includes this too); the order is free. */
#pragma once

#define KILN_VECMATH_OPS(X)                                                                                \
  X(Exp, exp, std::exp(v))                                                                                 \
  X(Expm1, expm1, std::expm1(v))                                                                           \
  X(Log, log, std::log(v))                                                                                 \
  X(Log1p, log1p, std::log1p(v))                                                                           \
  X(Tanh, tanh, std::tanh(v))                                                                              \
  X(Erf, erf, std::erf(v))                                                                                 \
  X(Sigmoid, sigmoid, 1.0 / (1.0 + std::exp(-v)))
