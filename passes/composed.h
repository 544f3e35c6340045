// The composed pointwise functions (silu, gelu's two forms, hardsigmoid, ... of
// the composed-op list of runtime/ops.def) as graph builders, for passes that rewrite an op
// into its parts (decompose: silu and gelu, so that the parts fuse and CSE with
// their neighbours). The list's definitions are written against a small generic
// vocabulary (+ - * / with a value or a double, min, max, abs, sqrt, rsqrt and the
// vector-math functions); `Val` provides that vocabulary over graph values, each
// operator emitting one op node through a Builder, and the list's lines are
// expanded with it. So passes::composed::silu(x) is literally the list's
// `x * sigmoid(x)`, the same text codegen expands into its kernel Expr and the
// eager kernels are generated from: the math exists once.
#pragma once

#include "passes/rewrite.h"
#include "runtime/op_lists.h"

namespace kiln::passes::composed {

// A graph value under construction and the builder its operators emit through.
struct Val {
  Builder *b;
  ir::Value *v;
};

// Each emits one node (a double becomes a 0-dim wrapped-number constant, as the
// scalar overloads of the eager ops record it). A constant operand of + and * is
// put on the right (x + c, c * x -> mul(x, c)): they commute bit for bit, and the
// rewritten graphs keep their constants where the passes have always put them.
Val operator+(Val a, Val b);
Val operator-(Val a, Val b);
Val operator*(Val a, Val b);
Val operator/(Val a, Val b);
Val operator-(Val a);
Val operator+(Val a, double c);
Val operator+(double c, Val a);
Val operator-(Val a, double c);
Val operator-(double c, Val a);
Val operator*(Val a, double c);
Val operator*(double c, Val a);
Val operator/(Val a, double c);
// minimum / maximum: NaN propagates (torch's semantics), as codegen's Expr min/max.
Val min(Val a, Val b);
Val max(Val a, Val b);
Val min(Val a, double c);
Val max(Val a, double c);
Val abs(Val a);
Val sqrt(Val a);
Val rsqrt(Val a);
// One per vector-math function: exp(a) is the op exp(a), tanh, sigmoid, ...
#define X(Id, fn, f64) Val fn(Val a);
KILN_VECMATH_OPS(X)
#undef X

// One per composed function: silu(x), hardsigmoid(x), gelu_erf(x), gelu_tanh(x), ...
#define X(fn, def) Val fn(Val x);
#define X_OP(Id, fn, def) X(fn, def)
KILN_COMPOSED_OPS(X_OP)
KILN_COMPOSED_KERNELS(X)
#undef X_OP
#undef X

} // namespace kiln::passes::composed
