// fuse-horizontal: merges independent elementwise fusion groups that read a
// common input over the same iteration space into one group, so the shared
// input is read once and one kernel runs instead of two.
//
// Two groups merge when
//   - every node of both bodies is elementwise (row-wise groups keep their own
//     row structure: merging them would need one row loop for two domains),
//   - all results of both groups have one shape (the iteration space; in a
//     symbolic graph, the same expression per dim),
//   - they share at least one operand (it is read once), or both iterate over
//     at most kSmallElements elements: such kernels cost their dispatch more
//     than their loop, so one dispatch instead of two is the saving (an
//     optimizer's per-parameter step counts and bias updates, as torch's
//     multi-tensor "foreach" optimizers batch them),
//   - neither reaches the other (merging would create a cycle),
//   - the merged group stays within kMaxNodes body nodes (kMaxSmallNodes for
//     small groups that share nothing) and kMaxBuffers buffers.
// Refusals among groups that share an operand are logged at debug level.
#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/log.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

constexpr size_t kMaxNodes = 64;
// Small groups' bodies are mostly scalar arithmetic (an optimizer's bias
// corrections: ~11 nodes per parameter); a kernel of twice as many nodes still
// compiles in milliseconds, and merges six parameters' step counts into one.
constexpr size_t kMaxSmallNodes = 128;
constexpr size_t kMaxBuffers = 32; // operands + results of the merged kernel
constexpr int64_t kSmallElements = 4096;

bool is_group(const Node *n) { return n->kind() == Node::Kind::FusionGroup; }

// Same dims: the sizes, and in a symbolic graph the same expression per dim
// (s0 and a static 32 differ even where s0 was traced at 32).
bool same_dims(const ir::TensorType &a, const ir::TensorType &b) {
  return IntArrayRef(a.shape) == IntArrayRef(b.shape) && a.sym == b.sym;
}

// The common type (dims) of all results of an elementwise-only group, or nullptr.
const ir::TensorType *elementwise_domain(const Node &n) {
  const Graph &body = *n.body();
  if (!body.params().empty() || !body.consts().empty()) return nullptr;
  for (const Node *m : body.nodes())
    if (m->kind() != Node::Kind::Op || m->info().kind != OpKind::Elementwise) return nullptr;
  const ir::TensorType &d = n.result(0)->type();
  for (const Value *r : n.results())
    if (!same_dims(r->type(), d)) return nullptr;
  return &d;
}

// A known scalar constant is baked into the kernel (codegen/op_lowering.cpp), not passed as a buffer.
bool is_buffer(const Value *v) { return !v || !(v->kind() == Value::Kind::Const && v->tensor().numel() == 1); }

bool shares_operand(const Node &a, const Node &b) {
  for (const Value *v : a.operands())
    if (v && std::find(b.operands().begin(), b.operands().end(), v) != b.operands().end()) return true;
  return false;
}

class HorizontalFuser {
public:
  explicit HorizontalFuser(Graph &g) : g_(g) {}

  bool run() {
    bool changed = false;
    // Each merge changes the node list; start over until no pair merges.
    while (merge_one()) changed = true;
    return changed;
  }

private:
  bool merge_one() {
    std::vector<Node *> order = g_.nodes();
    for (size_t i = 0; i < order.size(); ++i) {
      if (!is_group(order[i]) || !elementwise_domain(*order[i])) continue;
      for (size_t j = i + 1; j < order.size(); ++j) {
        if (!is_group(order[j])) continue;
        bool shared = shares_operand(*order[i], *order[j]);
        if (!shared && !(small(*order[i]) && small(*order[j]))) continue;
        if (const char *why = refusal(order, i, j)) {
          // Small groups that share nothing are many pairs; only sharing pairs are worth a line each.
          if (shared)
            kiln::log()->debug("fuse-horizontal: not merging %{} and %{}: {}", order[i]->result()->name(),
                               order[j]->result()->name(), why);
          continue;
        }
        merge(order, i, j);
        return true;
      }
    }
    return false;
  }

  // A group whose kernel iterates over at most kSmallElements elements.
  static bool small(const Node &n) {
    const ir::TensorType *d = elementwise_domain(n);
    return d && !d->symbolic() && d->numel() <= kSmallElements;
  }

  const char *refusal(const std::vector<Node *> &order, size_t i, size_t j) const {
    const ir::TensorType *da = elementwise_domain(*order[i]), *db = elementwise_domain(*order[j]);
    if (!db) return "not an elementwise group";
    if (!same_dims(*da, *db)) return "different iteration spaces";
    const size_t limit = shares_operand(*order[i], *order[j]) ? kMaxNodes : kMaxSmallNodes;
    if (order[i]->body()->num_nodes() + order[j]->body()->num_nodes() > limit) return "group too large";
    std::vector<Value *> ops = merged_operands(*order[i], *order[j]);
    size_t buffers = size_t(std::count_if(ops.begin(), ops.end(), is_buffer));
    if (buffers + order[i]->results().size() + order[j]->results().size() > kMaxBuffers)
      return "too many buffers";
    if (reaches(order, i, j)) return "one group reads the other's result";
    return nullptr;
  }

  // Whether order[j] depends (transitively) on order[i]; i < j, so never the reverse.
  bool reaches(const std::vector<Node *> &order, size_t i, size_t j) const {
    std::unordered_set<const Node *> tainted = {order[i]};
    for (size_t k = i + 1; k <= j; ++k) {
      bool reads = false;
      for (const Value *v : order[k]->operands())
        if (v && v->producer() && tainted.count(v->producer())) reads = true;
      if (!reads) continue;
      if (k == j) return true;
      tainted.insert(order[k]);
    }
    return false;
  }

  static std::vector<Value *> merged_operands(const Node &a, const Node &b) {
    std::vector<Value *> ops;
    for (const Node *n : {&a, &b})
      for (Value *v : n->operands())
        if (std::find(ops.begin(), ops.end(), v) == ops.end()) ops.push_back(v);
    return ops;
  }

  // Replaces order[i] and order[j] by one group at order[j]'s place; nodes in
  // between that read order[i]'s results move behind it (none of them feeds
  // order[j], or the two would not be independent).
  void merge(const std::vector<Node *> &order, size_t i, size_t j) {
    Node *a = order[i], *b = order[j];
    std::vector<Value *> ops = merged_operands(*a, *b);
    std::vector<ir::TensorType> types;
    for (const Node *n : {a, b})
      for (const Value *r : n->results()) types.push_back(r->type());
    Node *before = j + 1 < order.size() ? order[j + 1] : nullptr;
    Node *merged = g_.create_group(ops, types, before);

    std::unordered_set<const Node *> after_a = {a};
    for (size_t k = i + 1; k < j; ++k) {
      bool reads = false;
      for (const Value *v : order[k]->operands())
        if (v && v->producer() && after_a.count(v->producer())) reads = true;
      if (!reads) continue;
      after_a.insert(order[k]);
      g_.move_before(order[k], before);
    }

    Graph &body = *merged->body();
    std::vector<Value *> outs;
    for (const Node *n : {a, b}) {
      std::unordered_map<const Value *, Value *> map;
      const Graph &src = *n->body();
      for (size_t k = 0; k < src.inputs().size(); ++k) {
        size_t at = size_t(std::find(ops.begin(), ops.end(), n->operand(k)) - ops.begin());
        map[src.inputs()[k]] = body.inputs()[at];
      }
      for (const Node *m : src.nodes()) {
        std::vector<Value *> mops;
        for (const Value *v : m->operands()) mops.push_back(v ? map.at(v) : nullptr);
        std::vector<ir::TensorType> rt;
        for (const Value *r : m->results()) rt.push_back(r->type());
        Node *copy = body.create(m->op(), mops, m->attrs(), rt);
        for (size_t k = 0; k < m->results().size(); ++k) map[m->results()[k]] = copy->results()[k];
      }
      for (const Value *o : src.outputs()) outs.push_back(map.at(o));
    }
    body.set_outputs(outs);

    size_t r = 0;
    std::string carried;
    for (Node *n : {a, b})
      for (Value *old : n->results()) {
        carried.append(r ? ", %" : "%").append(merged->result(r)->name()).append(" <- %").append(old->name());
        g_.replace_all_uses(old, merged->results()[r++]);
      }
    // The merged group's %id replaces the two in the dumps and traces that follow.
    kiln::log()->debug("fuse-horizontal: %{} = fusion_group merging %{} and %{}; results {}",
                       merged->result()->name(), a->result()->name(), b->result()->name(), carried);
    g_.erase(b);
    g_.erase(a);
  }

  Graph &g_;
};

class FuseHorizontalPass : public Pass {
public:
  std::string_view name() const override { return "fuse-horizontal"; }
  // Its decisions compare dims (symbolic ones by their expressions) and count nodes and buffers.
  bool handles_symbolic() const override { return true; }
  bool run(Graph &g) override { return HorizontalFuser(g).run(); }
};

} // namespace

KILN_REGISTER_PASS(FuseHorizontalPass, "fuse-horizontal");

} // namespace kiln::passes
