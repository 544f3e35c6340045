// Liveness and aliasing rules of the memory plan, shared by the plan-memory
// pass, the verifier and the executor.
#include "ir/memory_plan.h"

#include <algorithm>

#include "ir/graph.h"
#include "runtime/error.h"

namespace kiln::ir {

const BufferAssignment *MemoryPlan::find(const Value *v) const {
  for (const auto &[value, slot] : entries)
    if (value == v) return &slot;
  return nullptr;
}

int64_t value_bytes(const Value *v) { return v->type().numel() * int64_t(itemsize(v->type().dtype)); }

SymExpr value_sym_bytes(const Value *v) {
  const TensorType &t = v->type();
  if (!t.symbolic()) return value_bytes(v);
  SymExpr n = int64_t(itemsize(t.dtype));
  for (const SymExpr &d : t.sym) n = n * d;
  return n;
}

SymExpr align_arena(const SymExpr &bytes) {
  return SymExpr::floordiv(bytes + (kArenaAlignment - 1), kArenaAlignment) * kArenaAlignment;
}

namespace {

// The body input a fusion body's output shares memory with, or nullptr.
const Value *body_alias(const Value *out) {
  while (out && out->kind() == Value::Kind::Result) {
    const Node *p = out->producer();
    out = alias_source(*p, out->result_index());
  }
  return out && out->kind() == Value::Kind::Input ? out : nullptr;
}

bool elementwise_op(const Node &n) { return n.kind() == Node::Kind::Op && n.info().kind == OpKind::Elementwise; }

bool reduction_op(const Node &n) { return n.kind() == Node::Kind::Op && n.info().kind == OpKind::Reduction; }

// A fusion body of elementwise ops and reductions, computed row by row in
// passes (codegen/row_schedule.h): pass p folds the reductions of operands of
// level p (a value's level is the nesting depth of reductions below it) and
// stores the full-size outputs of level p. `out` may overwrite a body input
// read at the same index only if it is full-size and stored in the last pass:
// no later pass reads the input again.
bool stored_in_last_pass(const Graph &body, const Value *out) {
  std::unordered_map<const Value *, int> level;
  auto level_of = [&](const Value *v) {
    auto it = level.find(v);
    return it == level.end() ? 0 : it->second;
  };
  int last = 0;
  for (const Node *n : body.nodes()) {
    if (!elementwise_op(*n) && !reduction_op(*n)) return false;
    int l = 0;
    for (const Value *v : n->operands())
      if (v) l = std::max(l, level_of(v));
    if (reduction_op(*n)) last = std::max(last, l); // folded in pass l
    for (const Value *r : n->results()) level[r] = l + (reduction_op(*n) ? 1 : 0);
  }
  for (const Value *o : body.outputs()) {
    if (!o) continue;
    if (o->type().numel() < out->type().numel()) continue; // per-row: stored at a stage, reads no row
    last = std::max(last, level_of(o));
  }
  for (const Node *n : body.nodes())
    for (const Value *v : n->operands())
      if (v && v->type().numel() > out->type().numel()) return false; // `out` is not full-size
  return level_of(out) >= last;
}

bool same_layout(const Value *a, const Value *b) {
  return IntArrayRef(a->type().shape) == IntArrayRef(b->type().shape) &&
         itemsize(a->type().dtype) == itemsize(b->type().dtype) && !a->type().strides && !b->type().strides;
}

} // namespace

Value *alias_source(const Node &n, size_t result) {
  if (n.kind() == Node::Kind::FusionGroup) {
    if (!n.body() || result >= n.body()->outputs().size()) return nullptr;
    const Graph &body = *n.body();
    const Value *in = body_alias(body.outputs()[result]);
    if (!in) return nullptr;
    for (size_t i = 0; i < body.inputs().size() && i < n.operands().size(); ++i)
      if (body.inputs()[i] == in) return n.operand(i);
    return nullptr;
  }
  if (n.operands().empty() || !n.operand(0)) return nullptr;
  // The eager kernels of these may return their operand's storage.
  if (n.info().kind == OpKind::View || n.op() == OpId::Contiguous) return n.operand(0);
  if (n.op() == OpId::Cast && n.operand(0)->type().dtype == n.result(result)->type().dtype) return n.operand(0);
  return nullptr;
}

namespace {
// Whether v is dense row-major wherever it lives: stack, cat and full make
// their results so, and a fusion group writes a fresh result in its type's
// layout (dense when the type names no strides). A reshape of it is a view.
// (Were it not, the reshape would copy into memory of its own, outside the
// arena: slower, never wrong.)
bool always_contiguous(const Value *v) {
  const Node *p = v ? v->producer() : nullptr;
  if (!p || v->type().strides) return false;
  if (p->kind() == Node::Kind::FusionGroup) {
    const auto &rs = p->results();
    const size_t r = size_t(std::find(rs.begin(), rs.end(), v) - rs.begin());
    return r < rs.size() && !alias_source(*p, r);
  }
  return p->kind() == Node::Kind::Op && (p->op() == OpId::Stack || p->op() == OpId::Cat || p->op() == OpId::Full);
}
} // namespace

bool may_copy(const Node &n) {
  if (n.kind() != Node::Kind::Op) return false;
  if (n.op() == OpId::Contiguous) return true;
  return n.op() == OpId::Reshape && !always_contiguous(n.operand(0));
}

std::vector<int64_t> write_back_points(const Graph &g) {
  const std::vector<Node *> &nodes = g.nodes();
  const int64_t end = int64_t(nodes.size());
  std::unordered_map<const Value *, int64_t> def, last_read;
  std::unordered_map<const Value *, const Value *> parent;
  // A read of v reads what v may share memory with, up to its root.
  auto read = [&](const Value *v, int64_t at) {
    for (; v; v = parent.count(v) ? parent.at(v) : nullptr) last_read[v] = std::max(last_read[v], at);
  };
  for (int64_t i = 0; i < end; ++i) {
    const Node &n = *nodes[size_t(i)];
    for (const Value *v : n.operands()) read(v, i);
    for (size_t r = 0; r < n.results().size(); ++r) {
      def[n.result(r)] = i;
      if (const Value *src = alias_source(n, r)) parent[n.result(r)] = src;
    }
  }
  for (const Value *o : g.outputs()) read(o, end);
  std::unordered_map<const Value *, int> targets;
  for (const WriteBack &w : g.write_backs()) {
    read(w.value, end); // another write-back's copy, at the end, may read a target through it
    ++targets[w.target];
  }
  std::vector<int64_t> points;
  for (const WriteBack &w : g.write_backs()) {
    int64_t at = end;
    const Value *root = w.value;
    while (parent.count(root)) root = parent.at(root);
    if (root->kind() == Value::Kind::Result && targets[w.target] == 1) {
      auto r = last_read.find(w.target);
      at = std::max(def.at(w.value), r == last_read.end() ? -1 : r->second);
    }
    points.push_back(std::min(at, end));
  }
  return points;
}

namespace {

// Whether every body node that depends on body input `k` is elementwise with a
// result of `shape`, and the body has no reduction.
bool reads_input_only_in_place(const Graph &body, const Value *k, IntArrayRef shape) {
  std::unordered_set<const Value *> tainted{k};
  for (const Node *m : body.nodes()) {
    if (reduction_op(*m)) return false;
    bool reads = false;
    for (const Value *v : m->operands()) reads |= v && tainted.count(v);
    if (!reads) continue;
    if (!elementwise_op(*m)) return false;
    for (const Value *r : m->results()) {
      if (IntArrayRef(r->type().shape) != shape) return false;
      tainted.insert(r);
    }
  }
  return true;
}

// Whether v is a view (or other alias) of t.
bool views(const Value *v, const Value *t) {
  while (v->kind() == Value::Kind::Result) {
    v = alias_source(*v->producer(), v->result_index());
    if (!v) return false;
    if (v == t) return true;
  }
  return false;
}

// Whether parameter t is dense row-major (its type names no strides: a kernel
// writes the value so) and shares its memory with no other parameter (a read
// of that one would not be seen as a read of t).
bool own_dense_param(const Graph &g, const Value *t) {
  const Tensor &live = t->tensor();
  if (!live.defined() || !(live.is_meta() || live.is_contiguous())) return false;
  for (const Value *p : g.params())
    if (p != t && p->tensor().defined() && !live.is_meta() && p->tensor().is_alias_of(live)) return false;
  return true;
}

// Whether group n may store result r over parameter t, which it reads at most
// element for element (see write_backs_in_place).
bool group_writes_over(const Node &n, size_t r, const Value *t) {
  if (n.kind() != Node::Kind::FusionGroup || !n.body()) return false;
  const Value *v = n.result(r);
  if (!same_layout(v, t) || alias_source(n, r)) return false;
  for (const Value *o : n.results())
    if (IntArrayRef(o->type().shape) != IntArrayRef(v->type().shape)) return false;
  const Graph &body = *n.body();
  for (size_t k = 0; k < n.operands().size(); ++k) {
    const Value *op = n.operand(k);
    if (!op) continue;
    if (op != t) {
      if (views(op, t)) return false; // reads other indices, or t's bytes under another shape
      continue;
    }
    if (k >= body.inputs().size() || !reads_input_only_in_place(body, body.inputs()[k], IntArrayRef(v->type().shape)))
      return false;
  }
  return true;
}

} // namespace

std::vector<bool> write_backs_in_place(const Graph &g) {
  const std::vector<int64_t> points = write_back_points(g);
  const std::vector<Node *> nodes = g.nodes();
  std::unordered_map<const Node *, int64_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = int64_t(i);
  std::unordered_set<const Value *> outputs(g.outputs().begin(), g.outputs().end());
  std::unordered_map<const Value *, int> written;
  for (const WriteBack &w : g.write_backs()) ++written[w.value];
  std::vector<bool> in_place;
  for (size_t k = 0; k < points.size(); ++k) {
    const WriteBack &w = g.write_backs()[k];
    const Node *n = w.value->kind() == Value::Kind::Result ? w.value->producer() : nullptr;
    in_place.push_back(n && w.target->kind() == Value::Kind::Param && own_dense_param(g, w.target) &&
                       index.count(n) && index.at(n) == points[k] &&
                       !outputs.count(w.value) && written.at(w.value) == 1 &&
                       group_writes_over(*n, w.value->result_index(), w.target));
  }
  return in_place;
}

Liveness::Liveness(const Graph &g) : nodes_(g.nodes()) {
  const int64_t end = int64_t(nodes_.size());
  // A read of v reads v and everything v may share memory with.
  auto each_base = [&](const Value *v, auto &&fn) {
    for (; v; v = parent(v)) {
      auto it = ranges_.find(v);
      if (it != ranges_.end()) fn(it->second);
    }
  };
  // A value computed into its write-back target lives in the target's memory.
  std::unordered_map<const Value *, const Value *> into_target;
  const std::vector<bool> in_place = write_backs_in_place(g);
  for (size_t k = 0; k < in_place.size(); ++k)
    if (in_place[k]) into_target[g.write_backs()[k].value] = g.write_backs()[k].target;
  for (int64_t i = 0; i < end; ++i) {
    const Node &n = *nodes_[size_t(i)];
    for (size_t r = 0; r < n.results().size(); ++r) {
      Value *v = n.result(r);
      if (auto it = into_target.find(v); it != into_target.end()) {
        parents_[v] = it->second;
        continue;
      }
      const Value *src = alias_source(n, r);
      if (src) parents_[v] = src;
      if (src && !may_copy(n)) continue;
      fresh_.push_back(v);
      ranges_[v] = LiveRange{i, i, false};
    }
    for (const Value *v : n.operands())
      each_base(v, [i](LiveRange &r) { r.last = std::max(r.last, i); });
  }
  for (const Value *o : g.outputs()) each_base(o, [](LiveRange &r) { r.escapes = true; });
  // A write-back reads its value when it runs: after node `at`, before node at + 1.
  const std::vector<int64_t> points = write_back_points(g);
  for (size_t k = 0; k < points.size(); ++k) {
    const int64_t last = std::min(points[k] + 1, end);
    each_base(g.write_backs()[k].value, [last](LiveRange &r) { r.last = std::max(r.last, last); });
  }
}

const LiveRange *Liveness::range(const Value *v) const {
  auto it = ranges_.find(v);
  return it == ranges_.end() ? nullptr : &it->second;
}

const Value *Liveness::parent(const Value *v) const {
  auto it = parents_.find(v);
  return it == parents_.end() ? nullptr : it->second;
}

bool Liveness::shares(const Value *v, const Value *base) const {
  for (; v; v = parent(v))
    if (v == base) return true;
  return false;
}

bool Liveness::in_place_ok(int64_t i, size_t result, const Value *v) const {
  if (i < 0 || i >= int64_t(nodes_.size())) return false;
  const Node &n = *nodes_[size_t(i)];
  if (result >= n.results().size() || !same_layout(n.result(result), v)) return false;
  bool reads = false;
  for (size_t k = 0; k < n.operands().size(); ++k) {
    const Value *op = n.operand(k);
    if (!op || !shares(op, v)) continue;
    if (op != v) return false; // a view of v reads other indices
    reads = true;
  }
  if (!reads) return false;
  if (elementwise_op(n)) return true;
  if (n.kind() != Node::Kind::FusionGroup || !n.body()) return false;
  const Graph &body = *n.body();
  if (result >= body.outputs().size() || !stored_in_last_pass(body, body.outputs()[result])) return false;
  // Each body input standing for v must be read at the index the result is written.
  for (size_t k = 0; k < n.operands().size() && k < body.inputs().size(); ++k)
    if (n.operand(k) == v && !same_layout(body.inputs()[k], n.result(result))) return false;
  return true;
}

namespace {

std::string slot_str(const Value *v, const BufferAssignment &s) {
  return detail::concat("%", v->name(), " {buffer = ", s.buffer, ", offset = ", s.offset, ", size = ", s.size, "}");
}

} // namespace

namespace {

// The plan's numbers where its symbols take `values` (a static plan: as given).
struct PlanAt {
  int64_t peak = 0;
  std::vector<BufferAssignment> slots;
  std::vector<int64_t> bytes; // per entry: its value's bytes
};

PlanAt plan_at(const MemoryPlan &plan, const std::vector<int64_t> *values) {
  PlanAt at;
  at.peak = values ? plan.sym_peak.evaluate(*values) : plan.peak_bytes;
  for (const auto &[v, s] : plan.entries) {
    BufferAssignment a = s;
    if (values) {
      a.offset = s.sym_offset.evaluate(*values);
      a.size = s.sym_size.evaluate(*values);
      at.bytes.push_back(value_sym_bytes(v).evaluate(*values));
    } else {
      at.bytes.push_back(value_bytes(v));
    }
    at.slots.push_back(a);
  }
  return at;
}

// Sizes to check a symbolic plan at besides the traced ones: its formulas
// must hold at every size, and a wrong one shows at few.
std::vector<std::vector<int64_t>> check_points(const std::vector<int64_t> &hints) {
  std::vector<std::vector<int64_t>> points{hints};
  for (int64_t k : {2, 3, 17, 1000}) {
    std::vector<int64_t> p(hints.size(), k);
    points.push_back(p);
  }
  for (size_t i = 0; i < hints.size(); ++i) { // one symbol far from the others
    std::vector<int64_t> p = hints;
    p[i] = hints[i] * 7 + 5;
    points.push_back(p);
  }
  return points;
}

} // namespace

void verify_memory_plan(const Graph &g) {
  if (!g.memory_plan()) return;
  const MemoryPlan &plan = *g.memory_plan();
  auto fail = [&](const std::string &msg) { KILN_FAIL("verify: @", g.name(), ": memory plan: ", msg); };
  if (plan.symbolic && g.symbol_hints().empty()) fail("a symbolic plan in a graph without symbols");
  if (!plan.symbolic && !g.symbol_hints().empty()) fail("a graph with symbols needs a symbolic plan");
  Liveness live(g);
  std::unordered_map<const Value *, const BufferAssignment *> seen;
  for (const auto &[v, s] : plan.entries) {
    const LiveRange *r = live.range(v);
    if (!r) fail(detail::concat(slot_str(v, s), ": not a fresh result of a node of @", g.name(),
                                " (views share their base's buffer)"));
    if (r->escapes) fail(detail::concat(slot_str(v, s), ": a graph output is or views it; outputs are not in the arena"));
    if (!seen.emplace(v, &s).second) fail(detail::concat("%", v->name(), " is planned twice"));
  }
  // The numbers printed for the traced sizes are the formulas' values there.
  if (plan.symbolic) {
    const std::vector<int64_t> &hints = g.symbol_hints();
    auto at_hints = [&](const auto &formula) -> int64_t {
      try {
        return formula.evaluate(hints);
      } catch (const Error &e) {
        KILN_FAIL("verify: @", g.name(), ": memory plan: cannot evaluate [", formula.str(), "] at the traced sizes: ",
                  e.what());
      }
    };
    if (at_hints(plan.sym_peak) != plan.peak_bytes)
      fail(detail::concat("peak_bytes ", plan.peak_bytes, " is not sym_peak [", plan.sym_peak.str(),
                          "] at the traced sizes"));
    for (const auto &[v, s] : plan.entries)
      if (at_hints(s.sym_offset) != s.offset || at_hints(s.sym_size) != s.size)
        fail(detail::concat(slot_str(v, s), ": sym_offset [", s.sym_offset.str(), "] or sym_size [", s.sym_size.str(),
                            "] differs at the traced sizes"));
  }
  std::vector<std::vector<int64_t>> points;
  if (plan.symbolic) points = check_points(g.symbol_hints());
  const size_t rounds = plan.symbolic ? points.size() : 1;
  for (size_t round = 0; round < rounds; ++round) {
    const std::vector<int64_t> *values = plan.symbolic ? &points[round] : nullptr;
    PlanAt at;
    try {
      at = plan_at(plan, values);
    } catch (const Error &e) {
      if (round == 0) fail(detail::concat("cannot evaluate its formulas at the traced sizes: ", e.what()));
      continue; // a size no call can have (a division by zero there)
    }
    std::string where;
    if (values) {
      where = " (with";
      for (size_t k = 0; k < values->size(); ++k) where += detail::concat(" s", k, " = ", (*values)[k]);
      where += ")";
    }
    if (at.peak < 0) fail(detail::concat("negative peak bytes ", at.peak, where));
    for (size_t e = 0; e < plan.entries.size(); ++e) {
      const Value *v = plan.entries[e].first;
      const BufferAssignment &s = at.slots[e];
      if (s.offset < 0 || s.offset % kArenaAlignment)
        fail(detail::concat(slot_str(v, s), ": offset is not a multiple of ", kArenaAlignment, where));
      if (s.size < at.bytes[e])
        fail(detail::concat(slot_str(v, s), ": ", v->type().str(), " needs ", at.bytes[e], " bytes", where));
      if (s.offset + s.size > at.peak)
        fail(detail::concat(slot_str(v, s), ": ends past the arena's ", at.peak, " bytes", where));
    }
    for (size_t a = 0; a < plan.entries.size(); ++a) {
      for (size_t b = a + 1; b < plan.entries.size(); ++b) {
        const Value *va = plan.entries[a].first, *vb = plan.entries[b].first;
        const BufferAssignment &sa = at.slots[a], &sb = at.slots[b];
        if (sa.offset >= sb.offset + sb.size || sb.offset >= sa.offset + sa.size) continue;
        const LiveRange &ra = *live.range(va), &rb = *live.range(vb);
        if (ra.last < rb.def || rb.last < ra.def) continue;
        // In place: the later value is written over the earlier one by the node that reads it last.
        const Value *first = ra.def <= rb.def ? va : vb, *second = first == va ? vb : va;
        const LiveRange &rf = *live.range(first), &rs = *live.range(second);
        const BufferAssignment &sf = first == va ? sa : sb, &ss = first == va ? sb : sa;
        // (The symbolic executor gives no kernel an aliased output yet: no in place there.)
        if (!plan.symbolic && rf.last == rs.def && sf.offset == ss.offset &&
            live.in_place_ok(rs.def, second->result_index(), first))
          continue;
        fail(detail::concat(slot_str(va, sa), " and ", slot_str(vb, sb), " overlap while both are live (nodes ",
                            ra.def, "..", ra.last, " and ", rb.def, "..", rb.last, ")", where));
      }
    }
  }
}

} // namespace kiln::ir
