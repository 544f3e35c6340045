// schedule: reorders the top-level nodes so that the memory plan needs a
// smaller arena. The trace order is the order eager ran in, and fusion moves
// a group to its last member: a training step's relu backward fused with the
// bias gradient (a sum traced much later) then runs after the next layer's
// im2col, and the gradient it consumes stays live across that big buffer.
//
// Moves, each keeping every operand before its readers:
// - sink: each node that allocates goes to just before its first reader (what
//   it makes is live for less time); a second variant sinks views too;
// - small-early: views and nodes making at most kSmallBytes go to just after
//   their operands' producers, so that they hold back no hoist;
// - hoist: each node whose inputs die at it and that frees more bytes than it
//   allocates goes to just after the last node it must follow (its operands'
//   producers, the other readers of what dies and, in one variant, the readers
//   of the old value of what it writes back, so that the write-back can still
//   be computed in place: ir::write_backs_in_place).
// Each round tries small-early + hoist after each sink variant and after none,
// from the best order so far (up to four rounds, while one helps). The graph
// keeps the new order only when plan-memory then needs fewer arena bytes than
// before (logged at debug with both sizes); otherwise it is unchanged. The
// graph is pure (effects are write-backs, placed by ir::write_back_points from
// whatever order results), so any topological order computes the same values.
// Over symbols an order must also need no more bytes at any size (see run).
#include "ir/memory_plan.h"
#include "passes/plan_memory.h"
#include "passes/rewrite.h"

#include <algorithm>
#include <optional>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "runtime/log.h"

namespace kiln::passes {

namespace {

using ir::Node;
using ir::Value;

using Order = std::vector<Node *>;

constexpr int64_t kSmallBytes = 64; // an optimizer step's 0-dim bias corrections

// Index of each node in `order`.
std::unordered_map<const Node *, size_t> positions(const Order &order) {
  std::unordered_map<const Node *, size_t> at;
  for (size_t i = 0; i < order.size(); ++i) at[order[i]] = i;
  return at;
}

void set_order(ir::Graph &g, const Order &order) {
  for (Node *n : order) g.move_before(n, nullptr);
}

// Readers of each node's results among the top-level nodes.
std::unordered_map<const Node *, std::vector<Node *>> readers_of(const Order &order) {
  std::unordered_map<const Node *, std::vector<Node *>> readers;
  for (Node *n : order)
    for (const Value *v : n->operands())
      if (v && v->producer()) readers[v->producer()].push_back(n);
  return readers;
}

// Whether some result of n is memory of its own (not a view of an operand):
// moving a view frees nothing, and would only hold back the nodes reading it.
bool allocates(const Node &n) {
  for (size_t r = 0; r < n.results().size(); ++r)
    if (!ir::alias_source(n, r) || ir::may_copy(n)) return true;
  return false;
}

// Sink, last node first: a node that allocates and has top-level readers
// moves to just before the first of them. Nodes read only by outputs and write-backs stay put (a
// write-back runs as soon as its value is ready).
Order sink(Order order, bool views) {
  const auto readers = readers_of(order);
  for (size_t k = order.size(); k-- > 0;) {
    Node *n = order[k];
    auto it = readers.find(n);
    if (it == readers.end() || (!views && !allocates(*n))) continue;
    const auto at = positions(order);
    size_t first = order.size();
    for (const Node *r : it->second) first = std::min(first, at.at(r));
    if (first <= k + 1) continue;
    order.erase(order.begin() + std::ptrdiff_t(k));
    order.insert(order.begin() + std::ptrdiff_t(first - 1), n);
  }
  return order;
}

// Bytes of n's results, views included.
int64_t result_bytes(const Node &n) {
  int64_t bytes = 0;
  for (const Value *r : n.results()) bytes += ir::value_bytes(r);
  return bytes;
}

// Views and nodes making a few bytes (an optimizer's bias corrections) go to
// just after their operands' producers: such a node read by one that hoist
// would move earlier must not hold it back, and moving it earlier extends no
// value's life but its own small results'.
Order small_early(Order order) {
  for (size_t i = 0; i < order.size(); ++i) {
    Node *n = order[i];
    if (allocates(*n) && result_bytes(*n) > kSmallBytes) continue;
    size_t after = 0;
    for (size_t j = 0; j < i; ++j)
      for (const Value *v : n->operands())
        if (v && v->producer() == order[j]) after = j + 1;
    if (after >= i) continue;
    order.erase(order.begin() + std::ptrdiff_t(i));
    order.insert(order.begin() + std::ptrdiff_t(after), n);
  }
  return order;
}

// Bytes the plan reserves for the fresh results of node i (escaping ones live
// outside the arena), and for the values that die at it.
struct Effect {
  int64_t allocated = 0, freed = 0;
  std::vector<const Value *> dying;
};

Effect effect_of(const ir::Liveness &live, size_t i) {
  Effect e;
  const Node &n = *live.nodes()[i];
  for (const Value *r : n.results()) {
    const ir::LiveRange *range = live.range(r);
    if (range && !range->escapes) e.allocated += ir::align_arena(ir::value_bytes(r));
  }
  for (const Value *v : live.fresh()) {
    const ir::LiveRange *range = live.range(v);
    if (range->escapes || range->last != int64_t(i) || range->def == int64_t(i)) continue;
    e.freed += ir::align_arena(ir::value_bytes(v));
    e.dying.push_back(v);
  }
  return e;
}

// Hoist, first node first: a node that frees more than it allocates moves to
// just after the last node it must follow: its operands' producers and every
// other reader of what dies at it (or of a view of it).
Order hoist(ir::Graph &g, Order order, bool follow_targets) {
  order = small_early(std::move(order));
  set_order(g, order);
  std::optional<ir::Liveness> computed;
  for (size_t i = 0; i < order.size(); ++i) {
    if (!computed) computed.emplace(g);
    const ir::Liveness &live = *computed;
    const Effect e = effect_of(live, i);
    if (e.freed <= e.allocated) continue;
    Node *n = order[i];
    // Targets n writes back: their old values are read before n (so that the
    // write-back still runs right after n, and its value can be computed into
    // the target: ir::write_backs_in_place).
    std::vector<const Value *> targets;
    for (const ir::WriteBack &w : g.write_backs())
      if (follow_targets && w.value->kind() == Value::Kind::Result && w.value->producer() == n)
        targets.push_back(w.target);
    size_t after = 0; // one past the last node n must follow
    for (size_t j = 0; j < i; ++j) {
      const Node &m = *order[j];
      bool must_follow = false;
      for (const Value *v : n->operands()) must_follow |= v && v->producer() == &m;
      for (const Value *v : m.operands()) {
        for (const Value *d : e.dying) must_follow |= v && live.shares(v, d);
        for (const Value *t : targets) must_follow |= v && live.shares(v, t);
      }
      if (must_follow) after = j + 1;
    }
    if (after >= i) continue;
    order.erase(order.begin() + std::ptrdiff_t(i));
    order.insert(order.begin() + std::ptrdiff_t(after), n);
    set_order(g, order);
    computed.reset();
  }
  return order;
}

class Schedule : public Pass {
  static constexpr int kMaxRounds = 4;

public:
  std::string_view name() const override { return "schedule"; }

  bool handles_symbolic() const override { return true; }

  // Over symbols (issue 17) the moves read sizes at the traced ones, but an
  // order is kept only when its arena is smaller there and provably no larger
  // at any size (its peak formula bounded term by term by the current one's).
  bool run(ir::Graph &g) override {
    const Order original = g.nodes();
    if (original.size() < 3) return false;
    const ir::MemoryPlan first = plan_memory(g);
    const int64_t before = first.peak_bytes;
    int64_t best = before;
    ir::SymMax best_formula = first.sym_peak;
    Order chosen = original;
    // Each round tries hoist and sink-then-hoist from the best order so far.
    for (int round = 0; round < kMaxRounds; ++round) {
      const int64_t start_bytes = best;
      const Order from = chosen;
      const Order starts[] = {from, sink(from, false), sink(from, true)};
      for (const Order &start : starts)
        for (bool follow_targets : {true, false}) {
          Order candidate = hoist(g, start, follow_targets);
          set_order(g, candidate);
          const ir::MemoryPlan plan = plan_memory(g);
          if (plan.peak_bytes >= best) continue;
          if (plan.symbolic && !ir::sym_at_most(plan.sym_peak, best_formula)) {
            log()->debug("schedule: an order needing {} bytes at the traced sizes, not {}, is refused: [{}] may exceed [{}] at "
                         "other sizes",
                         plan.peak_bytes, best, plan.sym_peak.str(), best_formula.str());
            continue;
          }
          best = plan.peak_bytes;
          best_formula = plan.sym_peak;
          chosen = candidate;
        }
      if (best == start_bytes) break;
    }
    set_order(g, chosen);
    if (best == before) {
      log()->debug("schedule: kept the order (arena {} bytes)", before);
      return false;
    }
    log()->debug("schedule: reordered {} nodes; arena {} -> {} bytes", original.size(), before, best);
    return true;
  }
};

} // namespace

KILN_REGISTER_PASS(Schedule, "schedule");

} // namespace kiln::passes
