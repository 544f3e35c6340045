// The composed functions as graph builders: the vocabulary their definitions use,
// then the definitions themselves, expanded from the composed-op list (runtime/ops.def).
#include "passes/composed.h"

namespace kiln::passes::composed {

namespace {
// Mul, Minimum, Maximum: no attributes.
Val binary(OpId id, Val a, Val b) { return {a.b, a.b->op(id, {a.v, b.v}, {})}; }
Val unary(OpId id, Val a) { return {a.b, a.b->op(id, {a.v}, {})}; }
Val constant(Val like, double c) { return {like.b, like.b->scalar(c)}; }
} // namespace

Val operator+(Val a, Val b) { return {a.b, a.b->op<OpId::Add>({a.v, b.v}, {.alpha = 1})}; }
Val operator-(Val a, Val b) { return {a.b, a.b->op<OpId::Sub>({a.v, b.v}, {.alpha = 1})}; }
Val operator*(Val a, Val b) { return binary(OpId::Mul, a, b); }
Val operator/(Val a, Val b) {
  return {a.b, a.b->op<OpId::Div>({a.v, b.v}, {.rounding_mode = std::nullopt})};
}
Val operator-(Val a) { return unary(OpId::Neg, a); }
Val operator+(Val a, double c) { return a + constant(a, c); }
Val operator+(double c, Val a) { return a + constant(a, c); }
Val operator-(Val a, double c) { return a - constant(a, c); }
Val operator-(double c, Val a) { return constant(a, c) - a; }
Val operator*(Val a, double c) { return a * constant(a, c); }
Val operator*(double c, Val a) { return a * constant(a, c); }
Val operator/(Val a, double c) { return a / constant(a, c); }
Val min(Val a, Val b) { return binary(OpId::Minimum, a, b); }
Val max(Val a, Val b) { return binary(OpId::Maximum, a, b); }
Val min(Val a, double c) { return min(a, constant(a, c)); }
Val max(Val a, double c) { return max(a, constant(a, c)); }
Val abs(Val a) { return unary(OpId::Abs, a); }
Val sqrt(Val a) { return unary(OpId::Sqrt, a); }
Val rsqrt(Val a) { return unary(OpId::Rsqrt, a); }
#define X(Id, fn, f64)                                                                                     \
  Val fn(Val a) { return unary(OpId::Id, a); }
KILN_VECMATH_OPS(X)
#undef X

// The definitions: the list's last column, the same text codegen::fn(Expr) expands.
#define X(fn, def)                                                                                         \
  Val fn(Val x) { return def; }
#define X_OP(Id, fn, def) X(fn, def)
KILN_COMPOSED_OPS(X_OP)
KILN_COMPOSED_KERNELS(X)
#undef X_OP
#undef X

} // namespace kiln::passes::composed
