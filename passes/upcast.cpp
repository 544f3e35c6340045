// upcast: float16 and bfloat16 values are computed in float32, as eager computes
// them (runtime/trace_hook.h, torch's opmath): an op reading one, other than the
// views and the conversions, becomes to(f32) of its 16-bit operands, the op in
// float32, and to() of each result back to the dtype the op gave. Each op's
// result is still rounded where eager rounds it, so compiled results equal
// eager's bit for bit; the passes after this one see float32 ops and casts, and
// the casts fuse into the groups around them.
#include "passes/rewrite.h"
#include "runtime/trace_hook.h"

namespace kiln::passes {

namespace {

using ir::Node;
using ir::Value;

bool reads_reduced_float(const Node &n) {
  for (const Value *v : n.operands())
    if (v && is_reduced_float(v->type().dtype)) return true;
  return false;
}

Value *cast(Builder &b, Value *v, DType to) { return b.op<OpId::Cast>({v}, {.dtype = to}); }

void upcast_node(ir::Graph &g, Node &n) {
  Builder b(g, &n);
  std::vector<Value *> operands;
  for (Value *v : n.operands())
    operands.push_back(v && is_reduced_float(v->type().dtype) ? cast(b, v, kFloat32) : v);
  std::vector<Value *> wide = b.op_n(n.op(), operands, n.attrs());
  for (size_t i = 0; i < wide.size(); ++i) {
    const ir::TensorType &want = n.result(i)->type();
    Value *r = wide[i];
    if (r->type().dtype != want.dtype) {
      r = cast(b, r, want.dtype);
      ir::TensorType t = r->type(); // the layout the op gave its result
      t.strides = want.strides;
      r->set_type(t);
    }
    g.replace_all_uses(n.result(i), r);
  }
  g.erase(&n);
}

class Upcast : public Pass {
public:
  std::string_view name() const override { return "upcast"; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    bool changed = false;
    for (Node *n : g.nodes()) {
      if (n->kind() != Node::Kind::Op || !detail::computes_in_float32(n->op()) || !reads_reduced_float(*n)) continue;
      upcast_node(g, *n);
      changed = true;
    }
    return changed;
  }
};

} // namespace

KILN_REGISTER_PASS(Upcast, "upcast");

} // namespace kiln::passes
