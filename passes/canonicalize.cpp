// canonicalize: constant folding and algebraic identities, as a table of
// rewrite rules (pattern -> rewrite) applied until nothing changes.
//
// A rule looks at one node and returns the value that replaces its (single)
// result, or null when it does not apply. A replacement must have exactly the
// node's result type: an identity never changes a shape or a dtype.
#include <algorithm>
#include <numeric>
#include <unordered_set>
#include <spdlog/spdlog.h>

#include "passes/rewrite.h"
#include "runtime/log.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::passes {

namespace {

using ir::Node;
using ir::Value;

// Constants up to this many elements are folded (and folding may create them).
constexpr int64_t kFoldLimit = 4096;

bool is_const(const Value *v, double want) {
  auto c = const_scalar(v);
  return c && *c == want;
}

// The producer of v when it is the op `id`, else null.
const Node *producer_is(const Value *v, OpId id) {
  const Node *p = v ? v->producer() : nullptr;
  return p && p->kind() == Node::Kind::Op && p->op() == id ? p : nullptr;
}

// n: add or sub.
bool alpha_is_one(const Node &n) {
  Scalar alpha = n.op() == OpId::Add ? attrs::Add{n}.alpha() : attrs::Sub{n}.alpha();
  return alpha.toDouble() == 1.0;
}

// ---- identities

// x * 1, 1 * x
Value *mul_by_one(ir::Graph &, Node &n) {
  if (is_const(n.operand(1), 1)) return n.operand(0);
  if (is_const(n.operand(0), 1)) return n.operand(1);
  return nullptr;
}

// x + 0, 0 + x (alpha 1 only: the rule is kept literal)
Value *add_zero(ir::Graph &, Node &n) {
  if (!alpha_is_one(n)) return nullptr;
  if (is_const(n.operand(1), 0)) return n.operand(0);
  if (is_const(n.operand(0), 0)) return n.operand(1);
  return nullptr;
}

// x - 0
Value *sub_zero(ir::Graph &, Node &n) { return alpha_is_one(n) && is_const(n.operand(1), 0) ? n.operand(0) : nullptr; }

// x / 1 (true division)
Value *div_one(ir::Graph &, Node &n) {
  return !attrs::Div{n}.rounding_mode() && is_const(n.operand(1), 1) ? n.operand(0) : nullptr;
}

// transpose(transpose(x, a, b), a, b) -> x (either order of a, b)
Value *transpose_transpose(ir::Graph &, Node &n) {
  const Node *inner = producer_is(n.operand(0), OpId::Transpose);
  if (!inner) return nullptr;
  auto dims = [](const Node &t) {
    int64_t rank = int64_t(t.operand(0)->type().shape.size());
    int64_t a = attrs::Transpose{t}.dim0(), b = attrs::Transpose{t}.dim1();
    if (a < 0) a += rank;
    if (b < 0) b += rank;
    return std::pair(std::min(a, b), std::max(a, b));
  };
  return dims(n) == dims(*inner) ? inner->operand(0) : nullptr;
}

// permute(x, identity) -> x; permute(permute(x, p), q) -> permute(x, p[q]) or x
Value *permute_permute(ir::Graph &g, Node &n) {
  const auto &q = attrs::Permute{n}.dims();
  std::vector<int64_t> iota(q.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (q == iota) return n.operand(0);
  const Node *inner = producer_is(n.operand(0), OpId::Permute);
  if (!inner) return nullptr;
  const auto &p = attrs::Permute{*inner}.dims();
  std::vector<int64_t> composed;
  for (int64_t d : q) composed.push_back(p.at(size_t(d)));
  if (composed == iota) return inner->operand(0);
  return Builder(g, &n).op<OpId::Permute>({inner->operand(0)}, {.dims = composed});
}

// view/reshape to the same shape -> x; a chain of view/reshape -> one reshape
Value *reshape_chain(ir::Graph &g, Node &n) {
  Value *x = n.operand(0);
  if (x->type() == n.result()->type()) return x;
  const Node *inner = producer_is(x, OpId::Reshape);
  if (!inner) inner = producer_is(x, OpId::View);
  if (!inner) return nullptr;
  Value *src = inner->operand(0);
  if (src->type() == n.result()->type()) return src;
  return Builder(g, &n).reshape(src, n.result()->type());
}

// expand to the input's own shape -> x
Value *expand_same(ir::Graph &, Node &n) {
  return n.operand(0)->type() == n.result()->type() ? n.operand(0) : nullptr;
}

// to(x, x's dtype) -> x
Value *cast_same(ir::Graph &, Node &n) {
  return attrs::Cast{n}.dtype() == n.operand(0)->type().dtype ? n.operand(0) : nullptr;
}

// copy(x, y) -> y when y has x's shape and dtype: the copy overwrites every
// element of x with y's (a gradient written into its buffer, which the
// write-back then stores once instead of twice)
Value *copy_whole(ir::Graph &, Node &n) {
  return n.operand(1)->type() == n.result()->type() ? n.operand(1) : nullptr;
}

// contiguous(contiguous(x)) -> contiguous(x)
Value *contiguous_contiguous(ir::Graph &, Node &n) {
  return producer_is(n.operand(0), OpId::Contiguous) ? n.operand(0) : nullptr;
}

// sym_numel(x) -> its count, when x's sizes are constants (a static graph, or
// a value of a symbolic one that no symbol reaches)
Value *numel_of_static(ir::Graph &g, Node &n) {
  const ir::TensorType &t = n.operand(0)->type();
  const bool constant = std::all_of(t.sym.begin(), t.sym.end(), [](const ir::SymExpr &e) { return e.is_constant(); });
  if (!constant) return nullptr;
  detail::TracingOff off; // a pass may run while some caller traces
  return g.add_const(full({}, t.numel(), kInt64), "cst");
}

struct Rule {
  OpId op;
  const char *name;
  Value *(*rewrite)(ir::Graph &, Node &);
};

const Rule kRules[] = {
    {OpId::Mul, "x*1 -> x", mul_by_one},
    {OpId::Add, "x+0 -> x", add_zero},
    {OpId::Sub, "x-0 -> x", sub_zero},
    {OpId::Div, "x/1 -> x", div_one},
    {OpId::Transpose, "transpose(transpose(x)) -> x", transpose_transpose},
    {OpId::Permute, "permute(permute(x)) -> permute(x)", permute_permute},
    {OpId::Reshape, "reshape chain -> reshape", reshape_chain},
    {OpId::View, "view chain -> reshape", reshape_chain},
    {OpId::Expand, "expand to same shape -> x", expand_same},
    {OpId::Cast, "to(same dtype) -> x", cast_same},
    {OpId::Contiguous, "contiguous(contiguous(x)) -> contiguous(x)", contiguous_contiguous},
    {OpId::Copy, "copy(x, y of x's type) -> y", copy_whole},
    {OpId::SymNumel, "sym_numel(x of constant sizes) -> x.numel()", numel_of_static},
};

// ---- constant folding: every operand a small constant, every result small.
bool foldable(const Node &n) {
  if (n.kind() != Node::Kind::Op || n.results().empty()) return false;
  for (const Value *v : n.operands())
    if (v && (v->kind() != Value::Kind::Const || v->type().numel() > kFoldLimit || !v->tensor().defined() ||
              v->tensor().is_meta()))
      return false;
  for (const Value *r : n.results())
    if (r->type().numel() > kFoldLimit) return false;
  return true;
}

// Runs the node's eager kernel on the constants; false when a result's type
// would differ from the node's (then the node is left alone).
bool fold(ir::Graph &g, Node &n) {
  std::vector<Tensor> args;
  for (const Value *v : n.operands()) args.push_back(v ? v->tensor() : Tensor());
  std::vector<Tensor> out;
  try {
    detail::TracingOff off;
    out = run_op(n.op(), args, n.attrs());
  } catch (const Error &e) {
    // An op that fails on these constants fails at run time too; leave it there.
    log()->debug("canonicalize: not folding {}: {}", n.mnemonic(), e.what());
    return false;
  }
  if (out.size() != n.results().size()) return false;
  for (size_t i = 0; i < out.size(); ++i)
    if (!(ir::TensorType::of(out[i]) == n.result(i)->type())) return false;
  for (size_t i = 0; i < out.size(); ++i) {
    Tensor value = contiguous_copy(out[i]);
    value.impl().wrapped_number = false;
    g.replace_all_uses(n.result(i), g.add_const(value, "cst"));
  }
  return true;
}

bool apply_rules(ir::Graph &g, Node &n) {
  if (n.kind() != Node::Kind::Op || n.results().size() != 1) return false;
  for (const Rule &r : kRules) {
    if (r.op != n.op()) continue;
    Value *rep = r.rewrite(g, n);
    if (!rep || rep == n.result() || !(rep->type() == n.result()->type())) continue;
    g.replace_all_uses(n.result(), rep);
    return true;
  }
  return false;
}

// Erases n if nothing uses it, then the producers that n alone kept alive
// (the inner transpose of a removed transpose pair, ...).
void erase_if_dead(ir::Graph &g, Node *n, std::unordered_set<Node *> &erased) {
  if (erased.count(n)) return; // reached again through another of its users (a diamond)
  for (const Value *r : n->results())
    if (g.has_uses(r)) return;
  std::vector<Node *> producers;
  for (const Value *v : n->operands())
    if (v && v->producer() && std::find(producers.begin(), producers.end(), v->producer()) == producers.end())
      producers.push_back(v->producer());
  g.erase(n);
  erased.insert(n);
  for (Node *p : producers) erase_if_dead(g, p, erased);
}

class Canonicalize : public Pass {
public:
  std::string_view name() const override { return "canonicalize"; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      std::unordered_set<Node *> erased; // skipped for the rest of the sweep
      for (Node *n : g.nodes()) {
        if (erased.count(n)) continue;
        bool rewritten = foldable(*n) ? fold(g, *n) : apply_rules(g, *n);
        if (!rewritten) continue;
        erase_if_dead(g, n, erased);
        again = changed = true;
      }
    }
    return changed;
  }
};

} // namespace

KILN_REGISTER_PASS(Canonicalize, "canonicalize");

} // namespace kiln::passes
