// Lowering rules: how each elementwise op of the op table becomes a kernel
// expression. One table, indexed by OpId, and beside it the misfits: the
// nodes of an op its rule cannot lower. fuse asks both (registered below,
// passes/lowering_check.h) and leaves an op without an entry, or a node its
// rule refuses, out of every group; should a group still fail to lower here,
// it runs eagerly. The group geometry is passes/group_geometry.h, shared with fuse.
#include "codegen/op_lowering.h"

#include <algorithm>
#include <numeric>
#include <array>
#include <cmath>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "codegen/epilogue.h"
#include "codegen/lower.h"
#include "ir/graph.h"
#include "ir/sym_infer.h"
#include "passes/group_geometry.h"
#include "passes/lowering_check.h"
#include "runtime/log.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::codegen {
namespace {

// A conversion with eager's semantics (runtime/kernels/loops.h convert_value):
// NaN and out-of-range floats to integers give INT_MIN, where the kernel's own
// cast saturates (NaN -> 0), so compiled results would differ from eager.
Expr convert_like_eager(KernelBuilder &k, Expr e, DType t) {
  if (e.dtype() == t) return e;
  if (!is_floating(e.dtype()) || is_floating(t) || t == kBool) return k.cast(e, t);
  int64_t min = t == kInt32 ? int64_t(std::numeric_limits<int32_t>::min()) : std::numeric_limits<int64_t>::min();
  Expr lo = k.constant(double(min), e.dtype()); // -2^31 and -2^63 are exact in float
  Expr in_range = k.binary(KOp::And, k.binary(KOp::Ge, e, lo), k.binary(KOp::Lt, e, k.unary(KOp::Neg, lo)));
  return k.select(in_range, k.cast(e, t), k.constant_int(min, t));
}

struct Ctx {
  KernelBuilder &k;
  const ir::Node &node;
  std::vector<Expr> args;            // operand expressions
  std::vector<bool> wrapped;         // operand is a wrapped-number constant
  std::vector<std::optional<double>> const_value; // operand is a known scalar constant
  DType out;                          // result dtype

  Expr to(Expr e, DType t) const { return convert_like_eager(k, e, t); }
  Expr arg(size_t i) const { return to(args.at(i), out); }
  Expr c(double v, DType t) const { return k.constant(v, t); }
  Expr c(double v) const { return k.constant(v, out); }
  // torch.result_type of two operands, honouring wrapped numbers.
  DType compute_type(size_t a, size_t b) const {
    Tensor ma = meta(a), mb = meta(b);
    return kiln::detail::result_type({&ma, &mb});
  }
  Tensor meta(size_t i) const {
    Tensor t = kiln::detail::make_tensor(wrapped[i] ? IntArrayRef() : IntArrayRef(node.operand(i)->type().shape),
                                   args[i].dtype(), true);
    t.impl().wrapped_number = wrapped[i];
    return t;
  }
};

using Rule = Expr (*)(const Ctx &);

[[noreturn]] void no_lowering(const Ctx &x, const std::string &why) {
  KILN_FAIL("codegen: no lowering for ", x.node.mnemonic(), ": ", why);
}

Expr float_unary(const Ctx &x, KOp op) { return x.k.unary(op, x.arg(0)); }

Expr cmp(const Ctx &x, KOp op) {
  DType t = x.compute_type(0, 1);
  return x.k.binary(op, x.to(x.args[0], t), x.to(x.args[1], t));
}

Expr truthy(const Ctx &x, size_t i) {
  Expr a = x.args[i];
  if (a.dtype() == kBool) return a;
  return x.k.binary(KOp::Ne, a, x.k.constant(0, a.dtype()));
}

Expr add_sub(const Ctx &x, KOp op) {
  Expr b = x.arg(1);
  Scalar alpha = op == KOp::Add ? attrs::Add{x.node}.alpha() : attrs::Sub{x.node}.alpha();
  if (alpha.toDouble() != 1.0) b = b * x.c(alpha.toDouble());
  return x.k.binary(op, x.arg(0), b);
}

// ---- misfits: why a rule cannot lower a node, from what the fuse pass knows
// too (the node, its result dtype, which operands are scalar constants and
// their values). lower_group refuses with them before it applies a rule, and
// fuse asks them (through passes/lowering_check.h) before it groups a node, so
// that the two never disagree. A rule without one lowers every node of its op.
using Consts = std::vector<std::optional<double>>; // per operand: its value, when a known scalar
using Misfit = std::string (*)(const ir::Node &n, const Consts &c);

DType out_dtype(const ir::Node &n) { return n.result()->type().dtype; }


// Kernels load and store float16 / bfloat16 and convert them to and from float32
// (the casts the upcast pass put around each op, and copies); no other op computes in them.
bool lowered_dtype(const ir::Node &n, DType t) {
  return codegen::lowered_dtype(t) || (is_reduced_float(t) && (n.op() == OpId::Cast || n.op() == OpId::Copy));
}

std::string dtype_misfit(const ir::Node &n) {
  for (const ir::Value *v : n.operands())
    if (v && !lowered_dtype(n, v->type().dtype)) return "operand of dtype " + std::string(name(v->type().dtype)) + " (runs eagerly)";
  for (const ir::Value *v : n.results())
    if (!lowered_dtype(n, v->type().dtype)) return "result of dtype " + std::string(name(v->type().dtype)) + " (runs eagerly)";
  return "";
}

std::string pow_misfit(const ir::Node &n, const Consts &c) {
  if (!c.at(1)) return "the exponent is not a constant";
  double e = *c[1];
  if (e == 1 || e == 2 || e == 3) return "";
  if (is_floating(out_dtype(n)) && (e == 0.5 || e == -1 || e == -0.5)) return "";
  return "exponent " + std::to_string(e);
}

// Integer division stays eager: a zero divisor must raise as in eager (the
// kernel's division returns 0 for it and cannot report an error).
std::string div_misfit(const ir::Node &n, const Consts &) {
  std::optional<std::string> mode = attrs::Div{n}.rounding_mode();
  return mode && !is_floating(out_dtype(n)) ? "integer division" : "";
}

// Integer fmod and remainder stay eager: a zero divisor must raise, as in eager.
std::string fmod_misfit(const ir::Node &n, const Consts &) {
  return is_floating(out_dtype(n)) ? "" : "integer " + std::string(n.mnemonic());
}

std::string mean_misfit(const ir::Node &n, const Consts &) {
  return is_floating(out_dtype(n)) ? "" : "mean of an integer type";
}

// ---- rules

Expr pow_rule(const Ctx &x) {
  double e = *x.const_value[1]; // pow_misfit: a known constant
  Expr a = x.arg(0);
  if (e == 1) return a;
  if (e == 2) return a * a;
  if (e == 3) return a * a * a;
  if (e == 0.5 && is_floating(x.out)) return x.k.unary(KOp::Sqrt, a);
  if (e == -1 && is_floating(x.out)) return x.c(1.0) / a;
  if (e == -0.5 && is_floating(x.out)) return x.k.unary(KOp::Rsqrt, a);
  no_lowering(x, "internal: pow_misfit admitted exponent " + std::to_string(e));
}

// Python's sign rule of a float fmod result r (eager's py_mod and floor_div_float):
// r is nonzero and its sign differs from the divisor b's.
Expr sign_differs_from_divisor(const Ctx &x, Expr r, Expr b) {
  Expr zero = x.c(0.0);
  Expr signs_differ = x.k.binary(KOp::Ne, x.k.binary(KOp::Lt, b, zero), x.k.binary(KOp::Lt, r, zero));
  return x.k.binary(KOp::And, x.k.binary(KOp::Ne, r, zero), signs_differ);
}

// Eager's float floor division (torch's div_floor_floating, runtime/kernels/
// elementwise_binary.cpp floor_div_float), step by step: exact through fmod, where
// floor(a / b) is not (1e30 // 3).
Expr floor_div_rule(const Ctx &x) {
  Expr a = x.arg(0), b = x.arg(1), zero = x.c(0.0);
  Expr q = a / b;
  Expr mod = x.k.binary(KOp::Fmod, a, b);
  Expr div = (a - mod) / b;
  div = x.k.select(sign_differs_from_divisor(x, mod, b), div - x.c(1.0), div);
  Expr fl = x.k.unary(KOp::Floor, div);
  Expr r = x.k.select(x.k.binary(KOp::Gt, div - fl, x.c(0.5)), fl + x.c(1.0), fl);
  r = x.k.select(x.k.binary(KOp::Eq, div, zero), x.k.binary(KOp::Copysign, zero, q), r);
  return x.k.select(x.k.binary(KOp::Eq, b, zero), q, r);
}

Expr div_rule(const Ctx &x) {
  std::optional<std::string> mode = attrs::Div{x.node}.rounding_mode();
  if (!mode) return x.arg(0) / x.arg(1);
  if (*mode == "floor") return floor_div_rule(x); // div_misfit: float results only
  Expr q = x.arg(0) / x.arg(1);
  return x.k.select(x.k.binary(KOp::Lt, q, x.c(0.0)), x.k.unary(KOp::Ceil, q), x.k.unary(KOp::Floor, q));
}

// Eager's float remainder (runtime/kernels/elementwise_binary.cpp py_mod), step by step:
// r = fmod(a, b), exact; where r is nonzero and its sign differs from b's, r + b.
Expr remainder_rule(const Ctx &x) {
  Expr a = x.arg(0), b = x.arg(1); // fmod_misfit: a float result
  Expr r = x.k.binary(KOp::Fmod, a, b);
  return x.k.select(sign_differs_from_divisor(x, r, b), r + b, r);
}

Expr clamp_rule(const Ctx &x) {
  Expr v = x.arg(0);
  if (auto lo = attrs::Clamp{x.node}.min()) v = x.k.binary(KOp::Max, v, x.c(lo->toDouble()));
  if (auto hi = attrs::Clamp{x.node}.max()) v = x.k.binary(KOp::Min, v, x.c(hi->toDouble()));
  return v;
}

Expr lerp_rule(const Ctx &x) {
  Expr s = x.arg(0), e = x.arg(1), w = x.arg(2);
  Expr d = e - s;
  // torch's two-sided form keeps lerp exact at both ends.
  return x.k.select(x.k.binary(KOp::Lt, x.k.unary(KOp::Abs, w), x.c(0.5)), s + w * d, e - d * (x.c(1.0) - w));
}

// (0 < a) - (a < 0), as eager and torch: NaN and -0 give +0.
Expr sign_rule(const Ctx &x) {
  Expr a = x.arg(0);
  Expr pos = x.k.binary(KOp::Gt, a, x.c(0.0)), neg = x.k.binary(KOp::Lt, a, x.c(0.0));
  // NaN and -0 give +0, as eager and torch's (0 < a) - (a < 0) do.
  return x.k.select(pos, x.c(1.0), x.k.select(neg, x.c(-1.0), x.c(0.0)));
}

// The two functions of the composed-op list (runtime/ops.def) gelu picks from.
Expr gelu_rule(const Ctx &x) {
  return attrs::Gelu{x.node}.approximate() == "tanh" ? gelu_tanh(x.arg(0)) : gelu_erf(x.arg(0));
}

// Reductions over the group's reduced dims (lower_group checks that every
// reduction of the group folds the same ones): per-row values.
Expr reduction(const Ctx &x, KOp combine) {
  Expr v = x.to(x.args.at(0), x.out);
  return x.k.reduce(combine, v);
}
Expr mean_rule(const Ctx &x) {
  return reduce_mean(x.to(x.args.at(0), x.out));
}

const std::array<Rule, kNumOps> &rules() {
  static const std::array<Rule, kNumOps> table = [] {
    std::array<Rule, kNumOps> t{};
    auto set = [&](OpId id, Rule r) { t[size_t(id)] = r; };
    set(OpId::Neg, [](const Ctx &x) { return -x.arg(0); });
    set(OpId::Abs, [](const Ctx &x) { return x.k.unary(KOp::Abs, x.arg(0)); });
    // Each vector-math function (the vector-math list, runtime/ops.def) is its kernel op.
#define X(Id, fn, f64) set(OpId::Id, [](const Ctx &x) { return float_unary(x, KOp::Id); });
    KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X)
#undef X
    set(OpId::Sqrt, [](const Ctx &x) { return float_unary(x, KOp::Sqrt); });
    set(OpId::Rsqrt, [](const Ctx &x) { return float_unary(x, KOp::Rsqrt); });
    // A select, not Max (llvm.maximum): relu keeps -0 and NaN as eager and torch do.
    set(OpId::Relu, [](const Ctx &x) {
      Expr a = x.arg(0);
      return x.k.select(x.k.binary(KOp::Lt, a, x.c(0.0)), x.c(0.0), a);
    });
    set(OpId::Gelu, gelu_rule);
    // Each composed op (the composed-op list, runtime/ops.def) is its function of the operand.
#define X(Id, fn, def) set(OpId::Id, [](const Ctx &x) { return fn(x.arg(0)); });
    KILN_COMPOSED_OPS(X)
#undef X
    set(OpId::Reciprocal, [](const Ctx &x) { return x.c(1.0) / x.arg(0); });
    set(OpId::Square, [](const Ctx &x) { return x.arg(0) * x.arg(0); });
    set(OpId::Floor, [](const Ctx &x) { return is_floating(x.out) ? x.k.unary(KOp::Floor, x.arg(0)) : x.arg(0); });
    set(OpId::Ceil, [](const Ctx &x) { return is_floating(x.out) ? x.k.unary(KOp::Ceil, x.arg(0)) : x.arg(0); });
    set(OpId::Round, [](const Ctx &x) { return is_floating(x.out) ? x.k.unary(KOp::Round, x.arg(0)) : x.arg(0); });
    set(OpId::Sign, sign_rule);
    set(OpId::LogicalNot, [](const Ctx &x) { return x.k.unary(KOp::Not, truthy(x, 0)); });
    set(OpId::Cast, [](const Ctx &x) { return x.arg(0); });
    set(OpId::Copy, [](const Ctx &x) { return x.arg(1); });
    set(OpId::Add, [](const Ctx &x) { return add_sub(x, KOp::Add); });
    set(OpId::Sub, [](const Ctx &x) { return add_sub(x, KOp::Sub); });
    set(OpId::Mul, [](const Ctx &x) { return x.arg(0) * x.arg(1); });
    set(OpId::Div, div_rule);
    set(OpId::Pow, pow_rule);
    set(OpId::Remainder, remainder_rule);
    // Each function of the binary libm list (runtime/ops.def) is its kernel op on the
    // operands in the result dtype (fmod_misfit keeps integer fmod out).
#define X(Id, fn, def) set(OpId::Id, [](const Ctx &x) { return x.k.binary(KOp::Id, x.arg(0), x.arg(1)); });
    KILN_LIBM2_OPS(X)
#undef X
    set(OpId::Maximum, [](const Ctx &x) { return x.k.binary(KOp::Max, x.arg(0), x.arg(1)); });
    set(OpId::Minimum, [](const Ctx &x) { return x.k.binary(KOp::Min, x.arg(0), x.arg(1)); });
    set(OpId::Eq, [](const Ctx &x) { return cmp(x, KOp::Eq); });
    set(OpId::Ne, [](const Ctx &x) { return cmp(x, KOp::Ne); });
    set(OpId::Lt, [](const Ctx &x) { return cmp(x, KOp::Lt); });
    set(OpId::Le, [](const Ctx &x) { return cmp(x, KOp::Le); });
    set(OpId::Gt, [](const Ctx &x) { return cmp(x, KOp::Gt); });
    set(OpId::Ge, [](const Ctx &x) { return cmp(x, KOp::Ge); });
    set(OpId::LogicalAnd, [](const Ctx &x) { return x.k.binary(KOp::And, truthy(x, 0), truthy(x, 1)); });
    set(OpId::LogicalOr, [](const Ctx &x) { return x.k.binary(KOp::Or, truthy(x, 0), truthy(x, 1)); });
    set(OpId::Where, [](const Ctx &x) { return x.k.select(truthy(x, 0), x.arg(1), x.arg(2)); });
    set(OpId::Clamp, clamp_rule);
    set(OpId::MaskedFill, [](const Ctx &x) {
      return x.k.select(truthy(x, 1), x.c(attrs::MaskedFill{x.node}.value().toDouble()), x.arg(0));
    });
    set(OpId::Lerp, lerp_rule);
    set(OpId::Sum, [](const Ctx &x) { return reduction(x, KOp::Add); });
    set(OpId::Prod, [](const Ctx &x) { return reduction(x, KOp::Mul); });
    set(OpId::Amax, [](const Ctx &x) { return reduction(x, KOp::Max); });
    set(OpId::Amin, [](const Ctx &x) { return reduction(x, KOp::Min); });
    set(OpId::Mean, mean_rule);
    return t;
  }();
  return table;
}

const std::array<Misfit, kNumOps> &misfits() {
  static const std::array<Misfit, kNumOps> table = [] {
    std::array<Misfit, kNumOps> t{};
    t[size_t(OpId::Pow)] = pow_misfit;
    t[size_t(OpId::Div)] = div_misfit;
    t[size_t(OpId::Mean)] = mean_misfit;
    t[size_t(OpId::Fmod)] = fmod_misfit;
    t[size_t(OpId::Remainder)] = fmod_misfit;
    return t;
  }();
  return table;
}

// Why `n`'s rule cannot lower it, or "" (see Misfit).
std::string rule_misfit(const ir::Node &n, const Consts &c) {
  if (!has_lowering(n.op())) return "not in the lowering table";
  if (std::string why = dtype_misfit(n); !why.empty()) return why;
  Misfit m = misfits()[size_t(n.op())];
  return m ? m(n, c) : "";
}

// fuse's question (passes/lowering_check.h), for `n` still in the graph: an
// operand that is a scalar constant there becomes a group operand that
// lower_group folds into the kernel.
std::string misfit_in_group(const ir::Node &n) {
  Consts c;
  for (const ir::Value *v : n.operands()) {
    bool known = v && v->kind() == ir::Value::Kind::Const && v->tensor().numel() == 1;
    c.push_back(known ? std::optional<double>(v->tensor().item().toDouble()) : std::nullopt);
  }
  return rule_misfit(n, c);
}

// Registered while libkiln loads, before any pass can run.
[[maybe_unused]] const bool registered_with_fuse = (passes::register_lowering_misfit(&misfit_in_group), true);

using passes::broadcast_strides;

// A group's iteration space. Its reductions all fold the same dims R of the
// domain D (the last one for softmax and layer_norm, N, H, W for batch-norm
// statistics); the kernel iterates D permuted to the kept dims followed by R,
// so that a row is the R dims of one kept index. Without reductions R is the
// last dim and the permutation is the identity, as for last-dim reductions.
struct Space {
  std::vector<int64_t> domain;
  std::vector<int64_t> reduced; // R, ascending
  std::vector<size_t> perm;    // kernel dim i walks domain dim perm[i]

  std::vector<int64_t> kept_shape() const {
    std::vector<int64_t> kept;
    for (size_t i = 0; i + reduced.size() < perm.size(); ++i) kept.push_back(domain[perm[i]]);
    return kept;
  }
  // Domain-ordered strides in kernel order.
  std::vector<int64_t> permute(const std::vector<int64_t> &v) const {
    std::vector<int64_t> out;
    for (size_t d : perm) out.push_back(v[d]);
    return out;
  }
  std::vector<int64_t> kernel_shape() const { return permute(domain); }
  int32_t row_rank() const { return int32_t(std::max<size_t>(reduced.size(), 1)); }
  bool is_reduced(size_t d) const { return std::find(reduced.begin(), reduced.end(), int64_t(d)) != reduced.end(); }
  // A per-row shape: the reduced dims kept as 1, or dropped.
  bool is_row(IntArrayRef s) const { return passes::is_row_shape(s, domain, reduced); }
  size_t dropped_rank() const { return domain.size() - reduced.size(); }
  // A row value with the reduced dims dropped, read by a full-shape node (see
  // passes::dropped_row_misaligned).
  bool dropped_rows_align() const { return !passes::dropped_row_misaligned(domain, reduced); }
  // Row-context strides: an operand read by a node whose result dropped the
  // reduced dims ([M, N] in an [M, N, K] group, e.g. the bias added after a
  // reduction) broadcasts against the kept dims, numpy-style, and is constant
  // along the row. Returned in the domain's order, like broadcast_strides.
  std::vector<int64_t> row_strides(IntArrayRef s, IntArrayRef st) const {
    std::vector<int64_t> kept = broadcast_strides(s, st, kept_shape());
    std::vector<int64_t> out(domain.size(), 0);
    for (size_t i = 0; i < kept.size(); ++i) out[perm[i]] = kept[i];
    return out;
  }
};

// Without reductions, a group whose results are stored in a layout other than
// row-major (eager's for an elementwise op on a transposed input) iterates in
// that layout's dim order, outermost first, so that its stores (and the loads
// of inputs laid out alike) stay unit-stride in the vectorized loop. `order`:
// the strides of such a result, or null.
Space group_space(const ir::Graph &body, std::vector<int64_t> domain, const Dims *order) {
  Space sp;
  sp.domain = std::move(domain);
  const ir::Node *first = nullptr;
  for (const ir::Node *n : body.nodes()) {
    if (n->kind() != ir::Node::Kind::Op || n->info().kind != OpKind::Reduction) continue;
    KILN_CHECK(IntArrayRef(n->operand(0)->type().shape) == IntArrayRef(sp.domain), "codegen: ", n->mnemonic(),
               " reduces a ", shape_str(n->operand(0)->type().shape), " operand in a group of domain ",
               shape_str(sp.domain));
    std::vector<int64_t> dims = passes::reduced_dims(*n);
    KILN_CHECK(!first || dims == sp.reduced, "codegen: ", n->mnemonic(), " reduces other dims than ",
               first->mnemonic(), " in the same group");
    first = n;
    sp.reduced = dims;
  }
  if (!first && !sp.domain.empty() && order) {
    for (size_t d = 0; d < sp.domain.size(); ++d) sp.perm.push_back(d);
    // Larger strides outside; dims of size 1 (whose stride means nothing) outermost.
    auto key = [&](size_t d) { return sp.domain[d] == 1 ? std::numeric_limits<int64_t>::max() : (*order)[d]; };
    std::stable_sort(sp.perm.begin(), sp.perm.end(), [&](size_t a, size_t b) { return key(a) > key(b); });
    sp.reduced = {int64_t(sp.perm.back())};
    return sp;
  }
  if (!first && !sp.domain.empty()) sp.reduced = {int64_t(sp.domain.size()) - 1};
  for (size_t d = 0; d < sp.domain.size(); ++d)
    if (!sp.is_reduced(d)) sp.perm.push_back(d);
  sp.perm.insert(sp.perm.end(), sp.reduced.begin(), sp.reduced.end());
  return sp;
}

// A per-row result's strides along the kernel's outer (kept) dims, from its type's
// layout: eager's, e.g. x + sum(...) on a transposed x is laid out as x. The type has
// the reduced dims kept as 1 (the domain's rank) or dropped (the kept dims in order).
std::vector<int64_t> row_output_strides(const Space &sp, const ir::TensorType &t) {
  const size_t kept = sp.domain.size() - sp.reduced.size();
  const bool keepdim = t.shape.size() == sp.domain.size();
  KILN_CHECK(keepdim || t.shape.size() == kept, "codegen: row result ", t.str(), " in a group of domain ",
             shape_str(sp.domain));
  std::vector<int64_t> out;
  for (size_t i = 0; i < kept; ++i) out.push_back((*t.strides)[keepdim ? sp.perm[i] : i]);
  return out;
}

bool is_reduction(const ir::Node *n) { return n->kind() == ir::Node::Kind::Op && n->info().kind == OpKind::Reduction; }

// Body nodes whose results are per-row values with the reduced dims dropped: a
// reduction without keepdim, any node of that rank reading such a value, and any
// node of that rank read by such a node (abs(b) in sum(x, -1) + abs(b), once
// fusion merged b's group into the reduction's: the add aligns abs(b) with the
// rows, so abs(b) is computed per row too, unless numpy's alignment with the domain's
// trailing dims is the rows' anyway). Otherwise a node of that rank reading only
// plain inputs is not one: numpy aligns it with the domain's trailing dims.
// Found as a fixed point, since each rule can feed the other.
std::unordered_set<const ir::Node *> row_nodes(const ir::Graph &body, const Space &sp) {
  std::unordered_set<const ir::Node *> rows;
  auto row_rank = [&](const ir::Node *n) {
    return !sp.domain.empty() && n->results().size() == 1 && n->result()->type().shape.size() == sp.dropped_rank();
  };
  auto is_row = [&](const ir::Node *n) {
    if (is_reduction(n)) return true;
    for (const ir::Value *v : n->operands())
      if (v && v->producer() && rows.count(v->producer())) return true;
    if (sp.dropped_rows_align()) return false; // numpy's alignment is the rows' already
    for (const ir::Use &u : body.uses(n->result()))
      if (u.user && rows.count(u.user) && !is_reduction(u.user)) return true;
    return false;
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (const ir::Node *n : body.nodes())
      if (!rows.count(n) && row_rank(n) && is_row(n)) changed = rows.insert(n).second;
  }
  return rows;
}

// Whether body input `in` is read only by row nodes (a reduction, although a
// row node, reads its operand at every element). An input read both per row
// and per element cannot be one load: throws (the group runs eagerly).
bool read_per_row(const ir::Graph &body, const ir::Value *in, const std::unordered_set<const ir::Node *> &rows) {
  bool row = false, full = false;
  for (const ir::Use &u : body.uses(in)) (u.user && rows.count(u.user) && !is_reduction(u.user) ? row : full) = true;
  bool scalar = in->type().numel() == 1;
  KILN_CHECK(!(row && full) || scalar, "codegen: operand %", in->name(),
             " is read both per element and per row of the group");
  return row && !full && !scalar;
}

} // namespace

// The dtypes kernels compute in; uint8, int8 and int16 run eagerly (a value of them
// meets a group only at its boundary: x.to(kFloat32) reading a uint8 image is an eager step).
bool lowered_dtype(DType t) {
  switch (t) {
  case DType::Bool:
  case DType::Int32:
  case DType::Int64:
  case DType::Float32:
  case DType::Float64: return true;
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16:
  case DType::Float16:
  case DType::BFloat16: return false;
  }
  return false;
}

bool has_lowering(OpId id) { return rules()[size_t(id)] != nullptr; }

// The group's iteration space: its widest value (a row group's reductions read
// full rows while some of its results are per-row).
std::vector<int64_t> group_domain(const ir::Graph &body) {
  const ir::TensorType *widest = nullptr;
  auto consider = [&](const ir::TensorType &t) {
    if (!widest || t.numel() > widest->numel() || (t.numel() == widest->numel() && t.shape.size() > widest->shape.size()))
      widest = &t;
  };
  for (const ir::Value *v : body.inputs()) consider(v->type());
  for (const ir::Node *n : body.nodes())
    for (const ir::Value *r : n->results()) consider(r->type());
  KILN_CHECK(widest, "codegen: empty fusion group");
  return {widest->shape.begin(), widest->shape.end()};
}

KernelDesc lower_group(const ir::Node &group, const std::vector<Tensor> &operands,
                       std::vector<size_t> &buffer_operands) {
  buffer_operands.clear();
  const ir::Graph &body = *group.body();
  KILN_CHECK(!group.results().empty(), "codegen: fusion group without results");
  std::vector<int64_t> domain = group_domain(body);
  KILN_CHECK(domain.size() <= size_t(kMaxKernelRank), "codegen: rank ", domain.size(), " is above ", kMaxKernelRank);
  // The first result laid out otherwise than row-major sets the iteration order.
  const Dims *order = nullptr;
  for (const ir::Value *r : group.results())
    if (!order && r->type().strides && IntArrayRef(r->type().shape) == IntArrayRef(domain)) order = &*r->type().strides;
  const Space sp = group_space(body, domain, order);
  for (const ir::Value *r : group.results())
    KILN_CHECK(IntArrayRef(r->type().shape) == IntArrayRef(domain) || sp.is_row(r->type().shape),
               "codegen: group result ", shape_str(r->type().shape), " is neither the domain ", shape_str(domain),
               " nor one of its rows");

  KernelBuilder k(sp.kernel_shape(), sp.row_rank());
  const std::unordered_set<const ir::Node *> rows = row_nodes(body, sp);
  std::unordered_map<const ir::Value *, Expr> expr;
  std::unordered_set<const ir::Value *> wrapped;
  std::unordered_map<const ir::Value *, double> known;
  for (size_t i = 0; i < body.inputs().size(); ++i) {
    const ir::Value *outer = group.operand(i), *in = body.inputs()[i];
    const Tensor &t = operands.at(i);
    KILN_CHECK(t.dim() <= int64_t(domain.size()), "codegen: operand ", i, " has more dims than the group");
    if (outer->kind() == ir::Value::Kind::Const && outer->tensor().numel() == 1) {
      // Known scalars become constants of the kernel.
      const Tensor &c = outer->tensor();
      double v = c.item().toDouble();
      expr.emplace(in, k.constant(v, c.dtype()));
      known[in] = v;
      if (c.impl().wrapped_number) wrapped.insert(in);
      continue;
    }
    bool row = read_per_row(body, in, rows);
    KILN_CHECK(!row || t.dim() < int64_t(domain.size()), "codegen: per-row operand ", i, " has too many dims");
    expr.emplace(in, k.input(t.dtype(), sp.permute(row ? sp.row_strides(t.sizes(), t.strides())
                                                       : broadcast_strides(t.sizes(), t.strides(), domain))));
    buffer_operands.push_back(i);
  }
  for (const ir::Node *n : body.nodes()) {
    KILN_CHECK(n->kind() == ir::Node::Kind::Op && n->results().size() == 1, "codegen: unsupported node ",
               n->mnemonic(), " in a fusion group");
    Rule rule = rules()[size_t(n->op())];
    Ctx x{k, *n, {}, {}, {}, n->result()->type().dtype};
    for (const ir::Value *v : n->operands()) {
      KILN_CHECK(v, "codegen: ", n->mnemonic(), " has an absent operand");
      KILN_CHECK(IntArrayRef(v->type().shape).size() <= domain.size(), "codegen: operand rank above the group's");
      x.args.push_back(expr.at(v));
      x.wrapped.push_back(wrapped.count(v) > 0);
      auto kv = known.find(v);
      x.const_value.push_back(kv == known.end() ? std::nullopt : std::optional<double>(kv->second));
    }
    if (std::string why = rule_misfit(*n, x.const_value); !why.empty()) no_lowering(x, why);
    IntArrayRef rs = n->result()->type().shape;
    KILN_CHECK(rs == IntArrayRef(domain) || sp.is_row(rs) || n->result()->type().numel() == 1, "codegen: ",
               n->mnemonic(), " result shape ", shape_str(rs), " fits neither the domain ", shape_str(domain),
               " nor its rows");
    if (!rows.count(n) && !sp.dropped_rows_align())
      for (const ir::Value *v : n->operands())
        KILN_CHECK(!(v->producer() && rows.count(v->producer())), "codegen: ", n->mnemonic(), " reads row value %",
                   v->name(), " (reduced dims dropped), which broadcasting aligns with other dims");
    expr.emplace(n->result(), x.to(rule(x), x.out));
  }
  // Results are stored in their type's layout (eager's), else contiguous in
  // the domain's order, whatever the kernel's.
  for (size_t i = 0; i < body.outputs().size(); ++i) {
    const ir::Value *o = body.outputs()[i];
    const ir::TensorType &t = group.results().at(i)->type();
    if (IntArrayRef(o->type().shape) != IntArrayRef(domain)) {
      k.output_per_row(expr.at(o), t.strides ? row_output_strides(sp, t) : std::vector<int64_t>{});
      continue;
    }
    std::vector<int64_t> st = t.strides ? std::vector<int64_t>(t.strides->begin(), t.strides->end())
                                        : contiguous_strides(domain);
    k.output(expr.at(o), sp.permute(st));
  }
  return k.build();
}

namespace {

// The symbols a group's operand and result types mention.
std::vector<int> group_symbols(const ir::Node &group) {
  std::vector<int> ids;
  auto add = [&](const ir::TensorType &t) {
    for (const ir::SymExpr &e : t.sym)
      for (int id : e.symbols())
        if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  };
  for (const ir::Value *v : group.operands())
    if (v) add(v->type());
  for (const ir::Value *r : group.results()) add(r->type());
  std::sort(ids.begin(), ids.end());
  return ids;
}

// The step by which the probes move the symbols: 1, or where the group's sizes
// hold floor divisions (a strided conv's output), a period of all of them, so
// that each size is a polynomial in the moves and the fits' argument holds
// (floordiv(s1 + 3, 8) does not change when s1 moves by one).
int64_t probe_step(const ir::Node &group, const std::string &name) {
  int64_t step = 1;
  auto add = [&](const ir::TensorType &t) {
    for (const ir::SymExpr &e : t.sym) {
      const int64_t p = e.period();
      KILN_CHECK(p > 0, "codegen: ", name, ": the size ", e.str(), " has no period of at most ",
                 ir::SymExpr::kMaxPeriod, " (a symbolic divisor, or divisions too far apart)");
      step = std::lcm(step, p);
      KILN_CHECK(step <= ir::SymExpr::kMaxPeriod, "codegen: ", name, ": its sizes' floor divisions have no common ",
                 "period of at most ", ir::SymExpr::kMaxPeriod);
    }
  };
  for (const ir::Value *v : group.operands())
    if (v) add(v->type());
  for (const ir::Value *r : group.results()) add(r->type());
  for (const ir::Node *n : group.body()->nodes())
    for (const ir::Value *r : n->results()) add(r->type());
  return step;
}

} // namespace

// The operands of node `index` of static graph `at` as the symbolic executor
// passes them: inputs and fusion groups' results contiguous, params and consts
// as they are, eager ops' results with the layouts eager gives them (a
// permute's result is strided; the kernel reads it in place). Every op runs on
// META tensors.
std::vector<Tensor> operand_metas(const ir::Graph &at, size_t index) {
  auto as_meta = [](const Tensor &t) {
    return kiln::detail::make_view(kiln::detail::make_tensor({0}, t.dtype(), true), t.sizes(), t.strides(), 0);
  };
  std::unordered_map<const ir::Value *, Tensor> meta;
  auto meta_of = [&](const ir::Value *v) -> Tensor {
    if (!v) return Tensor();
    if (v->kind() == ir::Value::Kind::Param || v->kind() == ir::Value::Kind::Const) return as_meta(v->tensor());
    auto it = meta.find(v);
    return it != meta.end() ? it->second : kiln::detail::make_tensor(v->type().shape, v->type().dtype, true);
  };
  kiln::detail::TracingOff no_trace;
  const std::vector<ir::Node *> nodes = at.nodes();
  for (size_t i = 0; i < index; ++i) {
    const ir::Node &n = *nodes[i];
    if (n.kind() != ir::Node::Kind::Op) continue;
    std::vector<Tensor> ins;
    for (const ir::Value *v : n.operands()) ins.push_back(meta_of(v));
    std::vector<Tensor> outs = run_op(n.op(), ins, n.attrs());
    for (size_t r = 0; r < outs.size() && r < n.results().size(); ++r) meta[n.results()[r]] = outs[r];
  }
  std::vector<Tensor> operands;
  for (const ir::Value *v : nodes.at(index)->operands()) {
    const bool captured = v && (v->kind() == ir::Value::Kind::Param || v->kind() == ir::Value::Kind::Const);
    operands.push_back(captured ? v->tensor() : meta_of(v));
  }
  return operands;
}

namespace {

// The group at position `index` of g lowered with the symbols at `values`,
// its operands as operand_metas gives them (returned in `operands`).
KernelDesc lower_group_at(const ir::Graph &g, size_t index, std::span<const int64_t> values,
                          std::vector<size_t> &buffer_operands, std::vector<Tensor> *operands = nullptr) {
  std::unique_ptr<ir::Graph> at = ir::instantiate(g, values);
  std::vector<Tensor> metas = operand_metas(*at, index);
  KernelDesc d = lower_group(*at->nodes().at(index), metas, buffer_operands);
  if (operands) *operands = std::move(metas);
  return d;
}

std::vector<int64_t> &strides_of(KernelDesc &k, size_t b) {
  return k.buffer(b).strides;
}

// Dims [from, to) of k walked as one dim of their product's extent. Each
// buffer must walk them as one: a dim's stride is the next (inner) dim's
// stride times that dim's size, size-1 dims aside, as in a row-major
// [s0, s1, 64] buffer or one broadcast over all of them. Folding row dims
// lowers the row rank to match. Returns "", or why a buffer does not (k is
// then left half folded).
std::string fold_dims(KernelDesc &k, size_t from, size_t to) {
  const size_t first_row = k.shape.size() - size_t(k.row_rank);
  KILN_CHECK(!k.has_reductions() || to <= first_row || from >= first_row, "internal: codegen: folding dims ", from,
             "..", to - 1, " of kernel shape ", shape_str(k.shape), " mixes outer and row dims");
  int64_t extent = 1;
  for (size_t d = from; d < to; ++d) extent *= k.shape[d];
  for (size_t b = 0; b < k.num_buffers(); ++b) {
    std::vector<int64_t> &st = strides_of(k, b);
    int64_t inner = -1, step = 0; // the inner neighbour of size > 1 among the folded dims; the innermost's stride
    for (size_t d = to; d-- > from;) {
      if (k.shape[d] == 1) continue;
      if (inner >= 0 && st[d] != st[size_t(inner)] * k.shape[size_t(inner)])
        return "buffer " + std::to_string(b) + " (strides " + shape_str(st) + ") does not walk dims " +
               std::to_string(from) + ".." + std::to_string(to - 1) + " of kernel shape " + shape_str(k.shape) +
               " as one";
      if (inner < 0) step = st[d];
      inner = int64_t(d);
    }
    st.erase(st.begin() + int64_t(from), st.begin() + int64_t(to));
    st.insert(st.begin() + int64_t(from), step);
  }
  if (k.has_reductions() && from >= first_row) k.row_rank -= int32_t(to - from) - 1;
  k.shape.erase(k.shape.begin() + int64_t(from), k.shape.begin() + int64_t(to));
  k.shape.insert(k.shape.begin() + int64_t(from), extent);
  return "";
}

// k with an outer dim of 1 in front (stride 0 in every buffer).
void prepend_unit_dim(KernelDesc &k) {
  k.shape.insert(k.shape.begin(), 1);
  for (size_t b = 0; b < k.num_buffers(); ++b) strides_of(k, b).insert(strides_of(k, b).begin(), 0);
}

std::string symbol_name(int s) {
  std::string sym = "s";
  sym += std::to_string(s); // (not "s" + ...: GCC 12 warns -Wrestrict on that)
  return sym;
}

// Which candidate product of symbolic sizes (times a constant) gives
// `extent(values)` at `values` and at each probe's values, for sizes of the
// kernel the probes moved: a monomial that agrees at a point and after each
// symbol moved by one step (probe_step) agrees everywhere. The candidates are dims of the
// group's operand and result types: all symbolic dims of one type, all but
// its last, or single dims and products of its trailing ones; and last, no dim (a constant).
template <class Extent>
RuntimeExtent fit_extent(const ir::Node &group, bool single_dims, bool all_but_last, std::span<const int64_t> values,
                         const std::vector<std::vector<int64_t>> &probe_values, Extent &&extent, const std::string &name,
                         const char *what) {
  std::vector<std::vector<ir::SymExpr>> candidates;
  auto add = [&](const ir::TensorType &t) {
    if (!t.symbolic()) return;
    std::vector<ir::SymExpr> all;
    for (const ir::SymExpr &e : t.sym)
      if (!e.is_constant()) all.push_back(e);
    if (single_dims) { // and the trailing ones' products: a row of several dims folded into one
      for (const ir::SymExpr &e : all) candidates.push_back({e});
      for (size_t k = 2; k <= all.size(); ++k) candidates.push_back(std::vector<ir::SymExpr>(all.end() - k, all.end()));
      return;
    }
    candidates.push_back(all);
    if (all_but_last && !t.sym.empty() && !t.sym.back().is_constant())
      candidates.push_back(std::vector<ir::SymExpr>(all.begin(), all.end() - 1));
  };
  for (const ir::Value *r : group.results()) add(r->type());
  for (const ir::Value *v : group.operands())
    if (v) add(v->type());
  candidates.emplace_back(); // a constant (the 8 columns whose sums over a symbolic batch a kernel's rows are)
  for (std::vector<ir::SymExpr> &c : candidates) {
    RuntimeExtent f{std::move(c), 1};
    const int64_t p = f.at(values), want = extent(size_t(0));
    if (p <= 0 || want % p != 0) continue;
    f.factor = want / p;
    bool fits = true;
    for (size_t i = 0; i < probe_values.size() && fits; ++i) fits = f.at(probe_values[i]) == extent(i + 1);
    if (fits) return f;
  }
  KILN_FAIL("codegen: ", name, ": its kernel's ", what, " (", extent(size_t(0)),
            ") is no product of the symbolic sizes of its operands and results");
}

// A runtime row (KernelDesc::runtime_row): per buffer that walks the row, the
// mask of outer dims it steps by a multiple of the row's length at the traced
// sizes. (The probes then check the masks and multiples at other lengths.)
std::vector<uint8_t> row_strided_buffers(KernelDesc &k) {
  std::vector<uint8_t> masks(k.num_buffers(), 0);
  const int64_t length = k.shape.back();
  for (size_t b = 0; b < k.num_buffers() && length > 0; ++b) {
    const std::vector<int64_t> &st = strides_of(k, b);
    for (size_t d = 0; d + 1 < st.size() && st.back() != 0; ++d)
      if (st[d] != 0 && st[d] % length == 0) masks[b] |= uint8_t(1u << d);
  }
  return masks;
}

// A group lowered with one symbol moved (lower_symbolic_group).
struct Probe {
  int symbol;
  std::vector<int64_t> values;
  KernelDesc desc;
  std::vector<size_t> buffers;
  std::vector<Tensor> metas;
};

// The products of every subset of the symbolic dims of each of the group's
// operand and result types: what a row-major buffer's extents and strides are
// made of. The empty product (a constant) comes first.
std::vector<ir::SymExpr> layout_candidates(const ir::Node &group) {
  std::vector<ir::SymExpr> out = {ir::SymExpr(1)};
  auto add = [&](const ir::TensorType &t) {
    std::vector<ir::SymExpr> dims;
    for (const ir::SymExpr &e : t.sym)
      if (!e.is_constant()) dims.push_back(e);
    if (dims.size() > 8) return;
    for (uint32_t mask = 1; mask < (1u << dims.size()); ++mask) {
      ir::SymExpr p(1);
      for (size_t i = 0; i < dims.size(); ++i)
        if (mask >> i & 1) p = p * dims[i];
      if (std::find(out.begin(), out.end(), p) == out.end()) out.push_back(p);
    }
  };
  for (const ir::Value *r : group.results()) add(r->type());
  for (const ir::Value *v : group.operands())
    if (v) add(v->type());
  return out;
}

// The formula (a candidate times a constant) of a layout word whose value at
// point i (0: `values`, then the probes') is word(i), or nullopt.
template <class Word>
std::optional<ir::SymExpr> fit_word(const std::vector<ir::SymExpr> &candidates, std::span<const int64_t> values,
                                    const std::vector<std::vector<int64_t>> &probe_values, Word &&word) {
  const int64_t want = word(size_t(0));
  for (const ir::SymExpr &c : candidates) {
    const int64_t p = c.evaluate(values);
    if (p <= 0 || want % p != 0) continue;
    const int64_t factor = want / p;
    bool fits = true;
    for (size_t i = 0; i < probe_values.size() && fits; ++i) fits = factor * c.evaluate(probe_values[i]) == word(i + 1);
    if (fits) return ir::SymExpr(factor) * c;
  }
  return std::nullopt;
}

// The uncollapsed layout of kernel k as formulas: extents, then per buffer its
// strides, each fitted at `values` and the probes'.
std::vector<ir::SymExpr> fit_layout(const ir::Node &group, const std::string &name, const KernelDesc &k,
                                    std::span<const int64_t> values, const std::vector<Probe> &probes) {
  const std::vector<ir::SymExpr> candidates = layout_candidates(group);
  std::vector<std::vector<int64_t>> probe_values;
  for (const Probe &p : probes) probe_values.push_back(p.values);
  const size_t rank = k.shape.size();
  std::vector<ir::SymExpr> out;
  for (size_t w = 0; w < k.layout_words(); ++w) {
    auto word = [&](const KernelDesc &d) { return w < rank ? d.shape[w] : d.buffer(w / rank - 1).strides[w % rank]; };
    std::optional<ir::SymExpr> f = fit_word(candidates, values, probe_values, [&](size_t i) {
      return word(i == 0 ? k : probes[i - 1].desc);
    });
    const std::string what = w < rank ? "extent " + std::to_string(w)
                                      : "stride of buffer " + std::to_string(w / rank - 1) + " in dim " +
                                            std::to_string(w % rank);
    KILN_CHECK(f, "codegen: ", name, ": its kernel's ", what, " (", word(k),
               ") is no product of the symbolic sizes of its operands and results");
    out.push_back(*f);
  }
  return out;
}

// k's layout with the shape and strides blanked: what must not change with the symbols.
std::string key_but_layout(KernelDesc k) {
  std::fill(k.shape.begin(), k.shape.end(), -1);
  for (size_t b = 0; b < k.num_buffers(); ++b) std::fill(k.buffer(b).strides.begin(), k.buffer(b).strides.end(), -1);
  return k.key();
}

// An element-wise group as a kernel with a runtime layout (KernelDesc::runtime_layout):
// `a` and the probes are its uncollapsed kernels. Dims whose extent is 1 at every size
// are dropped, and neighbours merge where every buffer walks them as one at every size
// (the formulas say so); the innermost dim's strides must not change.
KernelDesc runtime_layout_kernel(const ir::Graph &g, size_t index, const ir::Node &group, const std::string &name,
                                 std::span<const int64_t> values, const KernelDesc &a, const std::vector<Probe> &probes,
                                 const std::vector<size_t> &buffer_operands, RuntimeExtents &f) {
  KILN_CHECK(!a.has_reductions() && !a.shape.empty(), "codegen: ", name, ": only element-wise kernels take a runtime layout");
  const std::string key = key_but_layout(a);
  for (const Probe &p : probes)
    KILN_CHECK(key_but_layout(p.desc) == key && p.buffers == buffer_operands, "codegen: ", name,
               ": its kernel changes with ", symbol_name(p.symbol), " beyond its extents and strides (a constant)");
  const size_t rank = a.shape.size(), nbuf = a.num_buffers();
  const std::vector<ir::SymExpr> words = fit_layout(group, name, a, values, probes);
  // One more point, every symbol moved by two steps: the formulas must give its kernel too.
  {
    const int64_t step = probe_step(group, name);
    std::vector<int64_t> far(values.begin(), values.end());
    for (int64_t &v : far) v += 2 * step;
    std::vector<size_t> buffers;
    KernelDesc d = lower_group_at(g, index, far, buffers);
    KILN_CHECK(d.shape.size() == rank && key_but_layout(d) == key, "codegen: ", name,
               ": its kernel changes beyond its layout away from the traced sizes");
    for (size_t w = 0; w < words.size(); ++w) {
      const int64_t got = w < rank ? d.shape[w] : d.buffer(w / rank - 1).strides[w % rank];
      KILN_CHECK(words[w].evaluate(far) == got, "codegen: ", name, ": layout word ", w, " is ", got,
                 " away from the traced sizes, not ", words[w].str());
    }
  }
  auto stride = [&](size_t b, size_t d) -> const ir::SymExpr & { return words[rank * (1 + b) + d]; };
  std::vector<ir::SymExpr> shape;                 // innermost first while building
  std::vector<std::vector<ir::SymExpr>> st(nbuf); // per buffer, innermost first
  for (size_t d = rank; d-- > 0;) {
    if (words[d] == ir::SymExpr(1)) continue;
    bool merge = !shape.empty();
    for (size_t b = 0; merge && b < nbuf; ++b) merge = stride(b, d) == st[b].back() * shape.back();
    if (merge) {
      shape.back() = shape.back() * words[d];
      continue;
    }
    shape.push_back(words[d]);
    for (size_t b = 0; b < nbuf; ++b) st[b].push_back(stride(b, d));
  }
  while (shape.size() < 2) { // an outer dim of 1
    shape.push_back(ir::SymExpr(1));
    for (size_t b = 0; b < nbuf; ++b) st[b].push_back(ir::SymExpr(0));
  }
  KILN_CHECK(shape.size() <= size_t(kMaxKernelRank), "internal: codegen: ", name, ": runtime layout of rank ", shape.size());
  for (size_t b = 0; b < nbuf; ++b)
    KILN_CHECK(st[b].front().is_constant(), "codegen: ", name, ": buffer ", b, "'s innermost stride ",
               st[b].front().str(), " changes with the symbols");
  KernelDesc k = a;
  const size_t r = shape.size();
  f = RuntimeExtents{};
  k.shape.assign(r, 0);
  for (size_t d = 0; d < r; ++d) {
    f.layout.push_back(shape[r - 1 - d]);
    k.shape[d] = shape[r - 1 - d].evaluate(values);
  }
  for (size_t b = 0; b < nbuf; ++b) {
    std::vector<int64_t> &bs = k.buffer(b).strides;
    bs.assign(r, 0);
    for (size_t d = 0; d < r; ++d) {
      f.layout.push_back(st[b][r - 1 - d]);
      bs[d] = st[b][r - 1 - d].evaluate(values);
    }
  }
  k.row_rank = 1;
  k.runtime_layout = true;
  k.validate();
  return k;
}

} // namespace

void RuntimeExtents::fill(std::span<const int64_t> values, int64_t *out) const {
  if (layout.empty()) {
    out[0] = dim0.at(values);
    out[1] = row ? row->at(values) : 0;
    return;
  }
  for (size_t w = 0; w < layout.size(); ++w) out[w] = layout[w].evaluate(values);
}

int64_t RuntimeExtent::at(std::span<const int64_t> values) const {
  int64_t n = factor;
  for (const ir::SymExpr &e : dims) n *= e.evaluate(values);
  return n;
}

namespace {

// lower_symbolic_group's kernels with one runtime dim 0 (and row).
KernelDesc fold_into_dim0(const ir::Node &group, const std::string &name, const std::string &syms,
                          std::span<const int64_t> values, size_t j, KernelDesc &a, std::vector<Probe> &probes,
                          std::vector<Tensor> &metas, const std::vector<size_t> &buffer_operands,
                          std::vector<Tensor> *operands, RuntimeExtents *extents) {
  KILN_CHECK(j > 0, "codegen: ", name, ": its kernel's outermost dim is not sized by ", syms, " (kernel shape ",
             shape_str(a.shape), ")");
  size_t outer = a.has_reductions() ? a.shape.size() - size_t(a.row_rank) : a.shape.size();
  // Symbols in the row: every outer dim folds into dim 0, and the row's
  // length is read per call too. A whole-tensor reduction gets an outer dim of 1.
  const bool runtime_row = j > outer;
  // A row of several dims that every buffer walks as one (a global average
  // pool's [H, W] of an NCHW image) is a row of one dim of their product.
  if (runtime_row && a.row_rank > 1) {
    const size_t rank = a.shape.size();
    if (std::string why = fold_dims(a, outer, rank); !why.empty())
      KILN_FAIL("codegen: ", name, ": the symbols ", syms, " size its row of ", rank - outer,
                " dims, which a kernel reads as one row only where every buffer walks them as one: ", why);
    for (Probe &p : probes)
      if (std::string why = fold_dims(p.desc, outer, rank); !why.empty())
        KILN_FAIL("codegen: ", name, ": its row of ", rank - outer, " dims is not one row at ",
                  symbol_name(p.symbol), " = ", p.values[size_t(p.symbol)], ": ", why);
  }
  if (runtime_row && outer == 0 && a.row_rank == 1) {
    prepend_unit_dim(a);
    for (Probe &p : probes) prepend_unit_dim(p.desc);
    outer = 1;
  }
  KILN_CHECK(!runtime_row || (a.row_rank == 1 && outer >= 1), "codegen: ", name, ": the symbols ", syms,
             " size its row of ", a.row_rank, " dims (kernel shape ", shape_str(a.shape),
             "); a kernel reads its outer extent per call, and the length of a row of one dim");
  if (runtime_row) {
    // All outer dims as one where every buffer walks them so; else only the
    // leading ones the symbols size (the row's length scales the others'
    // strides: a per-channel operand of an NCHW pool walks [s0, C] otherwise
    // than the image).
    size_t sized = 0;
    for (const Probe &p : probes)
      for (size_t d = 0; d < outer; ++d)
        if (p.desc.shape[d] != a.shape[d]) sized = std::max(sized, d + 1);
    KernelDesc all = a;
    j = fold_dims(all, 0, outer).empty() ? outer : std::max<size_t>(sized, 1);
    // Rows walked with a stride (a mean over the sequence of [s0, s1, D]) run
    // in tiles of neighbouring rows, as the static kernel's do. Where they
    // cannot (fewer than 16 rows side by side), a runtime row would read them
    // element by element, 3-6x slower than eager (measured on [8, 128, 256]):
    // eager keeps them.
    for (size_t b = 0; b < a.num_buffers() && j < outer && !wants_row_tiles(a); ++b) {
      const int64_t st = strides_of(a, b).back();
      KILN_CHECK(st == 0 || st == 1, "codegen: ", name, ": its rows are strided (buffer ", b, " walks them by ", st,
                 ") and its outer dims ", shape_str(a.shape), " do not fold into one; a kernel would read them ",
                 "element by element");
    }
  }
  if (std::string why = fold_dims(a, 0, j); !why.empty())
    KILN_FAIL("codegen: ", name, ": its kernel changes with ", syms, " beyond its outermost dim: ", why);
  a.runtime_dim0 = true;
  if (runtime_row) {
    a.runtime_row = true;
    a.row_strided = row_strided_buffers(a);
  }
  for (Probe &p : probes) {
    const std::string sym = symbol_name(p.symbol);
    if (std::string why = fold_dims(p.desc, 0, j); !why.empty())
      KILN_FAIL("codegen: ", name, ": its kernel changes with ", sym, " beyond its outermost dim: ", why);
    p.desc.runtime_dim0 = true;
    if (runtime_row) {
      p.desc.runtime_row = true;
      p.desc.row_strided = row_strided_buffers(p.desc);
    }
    KILN_CHECK(p.desc.key() == a.key() && p.buffers == buffer_operands, "codegen: ", name,
               ": its kernel changes with ", sym,
               runtime_row ? " beyond its outer extent and row length (a constant or a stride)"
                           : " beyond its outermost dim (an inner size or a stride)");
  }
  std::vector<std::vector<int64_t>> probe_values;
  for (const Probe &p : probes) probe_values.push_back(p.values);
  RuntimeExtents f;
  f.dim0 = fit_extent(group, false, runtime_row, values, probe_values,
                      [&](size_t i) { return i == 0 ? a.shape[0] : probes[i - 1].desc.shape[0]; }, name, "dim 0");
  if (runtime_row)
    f.row = fit_extent(group, true, false, values, probe_values,
                       [&](size_t i) { return i == 0 ? a.shape.back() : probes[i - 1].desc.shape.back(); }, name,
                       "row length");
  a.validate();
  if (operands) *operands = std::move(metas);
  if (extents) *extents = std::move(f);
  return a;
}

} // namespace

KernelDesc lower_symbolic_group(const ir::Graph &g, const ir::Node &group, std::span<const int64_t> values,
                                std::vector<size_t> &buffer_operands, std::vector<Tensor> *operands,
                                RuntimeExtents *extents) {
  const std::vector<ir::Node *> nodes = g.nodes();
  const size_t index = size_t(std::find(nodes.begin(), nodes.end(), &group) - nodes.begin());
  KILN_CHECK(index < nodes.size() && group.kind() == ir::Node::Kind::FusionGroup, "codegen: not a fusion group of @",
             g.name());
  const std::string name = "fusion group %" + group.result()->name();
  KILN_CHECK(!is_epilogue_group(group), "codegen: ", name,
             " is a contraction with its epilogue: an epilogue step runs it (codegen/epilogue.h), not a kernel");
  const std::vector<int> ids = group_symbols(group);
  KILN_CHECK(!ids.empty(), "codegen: ", name, " mentions no symbol: its static kernel serves every call");
  std::vector<Tensor> metas;
  KernelDesc a = lower_group_at(g, index, values, buffer_operands, &metas);
  // The kernel at each symbol moved by one (by probe_step where sizes hold
  // floor divisions): the dims that change are the ones
  // the symbols size. They must be outer dims, leading the kernel's, or those
  // and the row of a row reduction.
  const int64_t step = probe_step(group, name);
  std::vector<Probe> probes;
  size_t j = 0; // dims [0, j) are sized by symbols (or lie between such dims)
  for (int s : ids) {
    Probe p{s, std::vector<int64_t>(values.begin(), values.end()), {}, {}, {}};
    p.values.at(size_t(s)) += step;
    p.desc = lower_group_at(g, index, p.values, p.buffers, &p.metas);
    KILN_CHECK(p.desc.shape.size() == a.shape.size(), "codegen: ", name, ": its kernel's rank changes with ",
               symbol_name(s), " (kernel shape ", shape_str(a.shape), " at ", symbol_name(s), " = ",
               values[size_t(s)], ", ", shape_str(p.desc.shape), " at ", p.values[size_t(s)], ")");
    for (size_t d = 0; d < a.shape.size(); ++d)
      if (p.desc.shape[d] != a.shape[d]) j = std::max(j, d + 1);
    probes.push_back(std::move(p));
  }
  const std::string syms = [&] {
    std::string out;
    for (int s : ids) out += (out.empty() ? "" : ", ") + symbol_name(s);
    return out;
  }();
  // A strided operand (an eager op's result) is read in its traced layout at
  // every size; a contiguous one is contiguous at each.
  for (const Probe &p : probes)
    for (size_t i : buffer_operands)
      KILN_CHECK(metas[i].is_contiguous() || metas[i].strides() == p.metas[i].strides(), "codegen: ", name,
                 ": the layout of operand ", i, " changes with ", symbol_name(p.symbol), " (strides ",
                 shape_str(metas[i].strides()), ", then ", shape_str(p.metas[i].strides()), ")");
  if (!a.has_reductions()) { // element-wise: one runtime dim 0 where every buffer folds, else a runtime layout
    const KernelDesc raw = a;
    std::vector<Probe> raw_probes = probes;
    try {
      return fold_into_dim0(group, name, syms, values, j, a, probes, metas, buffer_operands, operands, extents);
    } catch (const Error &fold) {
      RuntimeExtents f;
      KernelDesc k;
      try {
        k = runtime_layout_kernel(g, index, group, name, values, raw, raw_probes, buffer_operands, f);
      } catch (const Error &e) {
        KILN_FAIL(fold.what(), "; nor with a runtime layout: ", e.what());
      }
      kiln::log()->debug("codegen: {} takes a runtime layout: {}", name, fold.what());
      if (operands) *operands = std::move(metas);
      if (extents) *extents = std::move(f);
      return k;
    }
  }
  return fold_into_dim0(group, name, syms, values, j, a, probes, metas, buffer_operands, operands, extents);
}

KernelDesc lower_group_for_every_size(const ir::Graph &g, const ir::Node &group, std::span<const int64_t> values,
                                      std::vector<size_t> &buffer_operands, std::optional<RuntimeExtents> &extents,
                                      std::vector<Tensor> &operands) {
  extents.reset();
  if (!group_symbols(group).empty() || is_epilogue_group(group)) {
    RuntimeExtents f;
    KernelDesc d = lower_symbolic_group(g, group, values, buffer_operands, &operands, &f);
    extents = std::move(f);
    return d;
  }
  const std::vector<ir::Node *> nodes = g.nodes();
  const size_t index = size_t(std::find(nodes.begin(), nodes.end(), &group) - nodes.begin());
  KILN_CHECK(index < nodes.size(), "codegen: not a fusion group of @", g.name());
  return lower_group_at(g, index, values, buffer_operands, &operands);
}

} // namespace kiln::codegen
