// materialize-views: copies a strided view into a contiguous buffer before the
// fusion groups that read it, when the copy pays.
//
// Views are index maps on their readers' loads (see layout.cpp): free when the
// reader walks the view's last dim with unit stride, or reads it once. A group
// whose innermost (vectorized) loop runs along a dim where the operand has a
// stride other than 0 or 1 gathers instead (softmax(x.t()): every row is a
// column of x). A copy is one strided pass over the operand plus a contiguous
// write; it pays when the strided reads it replaces happen more than once:
// - the group reads the operand in >= 2 passes (a group with reductions reads
//   each row once per nesting level of reductions, plus once for outputs
//   stored at every element, codegen/kernel.h), or
// - >= 2 groups read the same strided value (one copy serves them all).
// Only operands of at least kMinElements elements are considered (a small view
// stays in cache whatever its strides). Kept as views, with the reason logged
// at debug level: operands of groups headed by a contraction (BLAS takes
// transposes as flags and leading dims), of groups whose rows are not the last
// dim (the kernel reads such rows down columns in tiles, and a contiguous copy
// would not make that dim unit-stride), broadcast (expanded) views, and views
// read in a single pass by a single group.
#include <algorithm>
#include <unordered_map>
#include <vector>

#include <spdlog/spdlog.h>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/log.h"
#include "runtime/trace_hook.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

constexpr int64_t kMinElements = 32 * 1024;

bool is_group(const Node *n) { return n->kind() == Node::Kind::FusionGroup; }

bool is_view_op(const Node *n) {
  return n && n->kind() == Node::Kind::Op && n->info().kind == OpKind::View && n->results().size() == 1;
}

// A meta tensor with the strides `v` has at run time, assuming graph inputs
// are contiguous: view ops are replayed on meta tensors from the nearest
// non-view producer (whose layout is contiguous, or what layout decided).
Tensor strided_meta(const Value *v) {
  const Node *p = v->producer();
  if (!is_view_op(p)) {
    const ir::TensorType &t = v->type();
    if (!t.strides) return meta_of(v);
    return detail::make_view(detail::make_tensor({0}, t.dtype, true), t.shape, *t.strides, 0);
  }
  std::vector<Tensor> ins;
  for (size_t i = 0; i < p->operands().size(); ++i) {
    const Value *o = p->operand(i);
    ins.push_back(!o ? Tensor() : i == 0 ? strided_meta(o) : meta_of(o));
  }
  detail::TracingOff off;
  return run_op(p->op(), ins, p->attrs()).at(0);
}

// How many times the group walks each row: one pass per nesting level of
// reductions, plus one for the outputs stored at every element (as the
// kernel's row schedule, codegen/row_schedule.h). Outputs of the reduced shape (a lone
// sum, batch-norm statistics) are stored once per row, in no pass of their
// own: x.permute(0, 2, 1).sum(-1) reads x once, and counting a second pass
// made this pass copy x first, which cost 10x the kernel.
int row_passes(const Graph &body) {
  std::unordered_map<const Value *, int> depth;
  int deepest = 0;
  int64_t row_space = 0; // elements of the iteration space: those of a reduction's operand
  for (const Node *n : body.nodes()) {
    int d = 0;
    for (const Value *o : n->operands())
      if (o && depth.count(o)) d = std::max(d, depth[o]);
    bool reduction = n->kind() == Node::Kind::Op && n->info().kind == OpKind::Reduction;
    if (reduction) {
      ++d;
      row_space = std::max(row_space, n->operand(0)->type().numel());
    }
    deepest = std::max(deepest, d);
    for (const Value *r : n->results()) depth[r] = d;
  }
  if (deepest == 0) return 1; // element-wise: one pass
  int passes = deepest;
  for (const Value *v : body.outputs()) {
    auto it = depth.find(v);
    int d = it == depth.end() ? 0 : it->second;
    if (v->type().numel() >= row_space) passes = std::max(passes, d + 1);
  }
  return passes;
}

// Why the group's loads cannot be made unit-stride by copying its operands,
// or nullptr: contractions keep their views, and so do groups whose
// reductions fold other dims than the last one (their row is not the
// operand's last dim).
const char *group_refusal(const Node &group) {
  const Graph &body = *group.body();
  for (const Node *n : body.nodes()) {
    if (n->kind() != Node::Kind::Op) continue;
    if (n->info().kind == OpKind::Contraction) return "its group is headed by a contraction (BLAS takes the strides)";
    if (n->info().kind != OpKind::Reduction) continue;
    int64_t rank = int64_t(n->operand(0)->type().shape.size());
    const AttrValue *dims = n->attr("dims");
    if (!dims || rank == 0) continue;
    for (int64_t d : dims->as_ints())
      if ((d < 0 ? d + rank : d) != rank - 1) return "its group reduces other dims than the last (rows read in tiles)";
  }
  return nullptr;
}

struct Candidate {
  Value *value;
  int64_t stride; // along the innermost iteration dim
  std::vector<Node *> groups;
};

class Materializer {
public:
  explicit Materializer(Graph &g) : g_(g) {}

  bool run() {
    collect();
    bool changed = false;
    for (Candidate &c : candidates_) changed |= decide(c);
    return changed;
  }

private:
  // Strided operands of groups, in the order of their first reading group.
  void collect() {
    for (Node *n : g_.nodes()) {
      if (!is_group(n)) continue;
      for (Value *v : n->operands()) {
        if (!v || !is_view_op(v->producer())) continue;
        const char *why_group = group_refusal(*n);
        auto it = std::find_if(candidates_.begin(), candidates_.end(), [&](const Candidate &c) { return c.value == v; });
        if (it != candidates_.end()) {
          if (!why_group && std::find(it->groups.begin(), it->groups.end(), n) == it->groups.end()) it->groups.push_back(n);
          continue;
        }
        std::optional<int64_t> stride = inner_stride(*v, *n);
        if (!stride) continue;
        if (why_group) {
          keep(*v, *n, why_group);
          continue;
        }
        candidates_.push_back({v, *stride, {n}});
      }
    }
  }

  // The stride of a strided view along the innermost dim, or nothing (with the
  // reason logged when the view is a candidate at all).
  std::optional<int64_t> inner_stride(const Value &v, const Node &group) {
    const ir::TensorType &t = v.type();
    if (t.shape.empty() || t.shape[t.shape.size() - 1] <= 1) return std::nullopt; // broadcast along the row
    Tensor m = strided_meta(&v);
    int64_t s = m.strides().back();
    if (s == 1 || s == 0) return std::nullopt;
    if (t.numel() < kMinElements) {
      keep(v, group, detail::concat(t.numel(), " elements is below the threshold of ", kMinElements));
      return std::nullopt;
    }
    for (size_t d = 0; d < t.shape.size(); ++d)
      if (t.shape[d] > 1 && m.strides()[d] == 0) {
        keep(v, group, "an expanded view (a copy would materialize the broadcast)");
        return std::nullopt;
      }
    return s;
  }

  bool decide(const Candidate &c) {
    int passes = 0;
    for (const Node *n : c.groups) passes = std::max(passes, row_passes(*n->body()));
    if (passes < 2 && c.groups.size() < 2) {
      keep(*c.value, *c.groups[0], detail::concat("read in 1 pass by 1 group with stride ", c.stride, " along the row"));
      return false;
    }
    Node *first = c.groups[0];
    Value *copy = Builder(g_, first).op<OpId::Contiguous>({c.value}, {});
    for (Node *n : c.groups) {
      for (size_t i = 0; i < n->operands().size(); ++i)
        if (n->operand(i) == c.value) n->set_operand(i, copy);
      int p = row_passes(*n->body());
      log()->debug("materialize-views: materialize %{} for group %{}: read in {} pass{} by {} group{} with stride {} "
                   "along the row",
                   c.value->name(), n->result()->name(), p, p == 1 ? "" : "es", c.groups.size(),
                   c.groups.size() == 1 ? "" : "s", c.stride);
    }
    return true;
  }

  static void keep(const Value &v, const Node &group, const std::string &why) {
    log()->debug("materialize-views: keep %{} as a view for group %{}: {}", v.name(), group.result()->name(), why);
  }

  Graph &g_;
  std::vector<Candidate> candidates_;
};

class MaterializeViewsPass : public Pass {
public:
  std::string_view name() const override { return "materialize-views"; }
  // In a symbolic graph its choices read the traced sizes (a view's strides,
  // the element threshold) and hold for every size: a copy changes speed, not
  // values, and the Builder gives it the view's symbolic type.
  bool handles_symbolic() const override { return true; }
  bool run(Graph &g) override { return Materializer(g).run(); }
};

} // namespace

KILN_REGISTER_PASS(MaterializeViewsPass, "materialize-views");

} // namespace kiln::passes
