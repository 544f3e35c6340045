/* The composed pointwise functions, one line each: float-only unary elementwise
 * functions built from existing kernel math. The last column IS the function's
 * definition, and the only one: an expression of `Expr x` in codegen's kernel
 * expression API (codegen/kernel.h: + - * / with Expr or double operands, min,
 * max, abs, sqrt, rsqrt, and the vector-math functions exp, tanh, erf, sigmoid... of
 * vecmath_list.h). From it:
 *   - codegen::fn(Expr x) (codegen/kernel.h; defined in codegen/kernel.cpp);
 *   - the op's lowering rule, fn(x.arg(0)) (codegen/op_lowering.cpp);
 *   - the eager kernels kiln_pw_fn_f32 and kiln_pw_fn_f64, generated at build time by
 *     kiln-vecmath-gen (codegen/aot/vecmath_kernels_gen.cpp) from that same Expr
 *     through the JIT's own lowering (codegen/lower_expr.cpp) and optimizer, so eager
 *     and compiled results agree bit for bit (runtime/kernels/vecmath_kernels.h;
 *     test/unit/eager_compiled_bits_test.cpp);
 *   - passes::composed::fn(Val x) (passes/composed.h), the same expression over graph
 *     values: decompose rewrites silu and gelu into its nodes (not a second copy);
 *   - for KILN_COMPOSED_OPS, the eager op kiln::fn (refuses non-float inputs, as
 *     torch's activations do; traces; runs the generated kernel) and its adapter
 *     (runtime/kernels/elementwise_unary.cpp).
 *
 * KILN_COMPOSED_OPS(X): X(Id, fn, definition), an op of runtime/ops.def (OpId::Id)
 *   that is exactly this function. Adding one: docs/ops.md, worked example (a).
 * KILN_COMPOSED_KERNELS(X): X(fn, definition), a function that an op with
 *   attributes picks by attribute (gelu's approximate = "none" / "tanh"); that op's
 *   lowering rule and eager function are written by hand and call fn.
 *
 * Plain macros (a C header includes this too); the order is free. */
#pragma once

/* hardsigmoid: torch's relu6(x + 3) / 6; NaN stays NaN (min and max propagate it). */
#define KILN_COMPOSED_OPS(X)                                                                               \
  X(Silu, silu, x * sigmoid(x))                                                                            \
  X(Hardsigmoid, hardsigmoid, min(max(x + 3.0, 0.0), 6.0) / 6.0)

/* gelu_erf: torch's gelu(x), x/2 (1 + erf(x / sqrt(2)));
 * gelu_tanh: torch's gelu(x, "tanh"), x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
#define KILN_COMPOSED_KERNELS(X)                                                                           \
  X(gelu_erf, (x * 0.5) * (1.0 + erf(x * 0.70710678118654752440)))                                         \
  X(gelu_tanh, (x * 0.5) * (1.0 + tanh((x + x * x * x * 0.044715) * 0.7978845608028654)))
