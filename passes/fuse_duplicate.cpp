// Duplicating cheap elementwise producers into their consumers' groups
// (called by fuse once every node has its group; see fuse_duplicate.h).
//
// The cost model, in the order it is checked for a producer P whose result
// leaves its group G:
// - P is an elementwise op: a reduction or a contraction is never recomputed;
// - every reader of P outside G is a member of a group that can compute P
//   itself: not a graph output or write-back, not a node that runs eagerly, not
//   the contraction heading an epilogue group (its operands come from memory);
//   otherwise duplicating saves no buffer;
// - the expression to copy (P and the members of G it reads that are not
//   stored anyway) is at most kMaxCopyNodes elementwise nodes; an expensive op
//   in it (exp, tanh, erf, sqrt, pow, ...) is recomputed only on small values
//   (kMaxExpensiveElements), cheap ones (add, mul, compare, where, cast, ...)
//   on any size;
// - each receiving group takes the copy: its shape fits the group's domain and
//   the group stays under fuse's size bound. A copy whose shape only
//   broadcasts to the domain (a [T, T] mask read by a [B, H, T, T] group) is
//   computed over the domain, an operand read through an expand view, when
//   its readers there are over the whole domain and every op in it is cheap;
// - the copy reads at most kMaxReadRatio times P's elements that its group did
//   not read already (else recomputing costs more traffic than the buffer).
// Cycles cannot appear: the copy reads only values its group already depends
// on through P (P's operands and G's stored results).
#include "passes/fuse_duplicate.h"

#include <algorithm>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "runtime/log.h"
#include "runtime/op_attrs.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

constexpr size_t kMaxCopyNodes = 8;
constexpr int64_t kMaxExpensiveElements = 16384;
constexpr int64_t kMaxReadRatio = 2;

// Recomputing an op is cheaper than a round trip through memory when a vector
// unit does it in a cycle or few: the Cheap trait of its ops.def entry
// (kiln::is_cheap, runtime/op_registry.h).

std::string name_of(const Node &n) { return "%" + n.result()->name(); }


class Duplicator {
public:
  Duplicator(Graph &g, FuseGroups &groups) : g_(g), groups_(groups) { reindex(); }

  bool run() {
    bool changed = false;
    // A snapshot, in graph order: a copy reads only values of nodes before the
    // one it copies, so it never gives a node considered later a new reader.
    for (Node *n : g_.nodes()) {
      if (!consider(*n)) continue;
      changed = true;
      reindex();
    }
    return changed;
  }

private:
  // A reader of P outside P's group, grouped by the group that will hold its copy.
  struct Target {
    int group;
    std::vector<ir::Use> uses; // in graph order
    // The copy is computed over the group's domain (operands broadcast by
    // expand views) because P's own shape, a broadcast of it, does not fit.
    bool widen = false;
  };

  void refuse(const Node &p, const std::string &why) { log()->debug("fuse: not duplicating {}: {}", name_of(p), why); }
  void refuse(const Node &p, int group, const std::string &why) {
    log()->debug("fuse: not duplicating {} into the group of %{}: {}", name_of(p), groups_.seed(group), why);
  }

  // "the group of %12", "the groups of %12, %20" (see FuseGroups::seed).
  std::string groups_str(const std::vector<int> &ids) const {
    std::string s = ids.size() == 1 ? "the group of " : "the groups of ";
    for (size_t i = 0; i < ids.size(); ++i) s.append(i ? ", %" : "%").append(groups_.seed(ids[i]));
    return s;
  }

  void reindex() {
    index_.clear();
    std::vector<Node *> nodes = g_.nodes();
    for (size_t i = 0; i < nodes.size(); ++i) index_[nodes[i]] = i;
  }
  size_t order(const Node *n) const { return index_.at(n); }

  bool stored(const Value *v) const {
    for (const ir::WriteBack &w : g_.write_backs())
      if (w.value == v) return true;
    return false;
  }

  // Whether `v` (a result of a member of `group`) is read outside the group.
  bool leaves_group(const Value *v, int group) const {
    if (stored(v)) return true;
    for (const ir::Use &u : g_.uses(v))
      if (!u.user || groups_.group_of(*u.user) != group) return true;
    return false;
  }

  // Whether a node of a group other than `home` reads `v`: only then could a
  // copy replace it (and only then is a refusal worth a log line).
  bool read_by_other_group(const Value *v, int home) const {
    for (const ir::Use &u : g_.uses(v))
      if (u.user && groups_.group_of(*u.user) >= 0 && groups_.group_of(*u.user) != home) return true;
    return false;
  }

  bool consider(Node &p) {
    if (p.kind() != Node::Kind::Op || p.results().size() != 1) return false;
    int home = groups_.group_of(p);
    if (home < 0 || !read_by_other_group(p.result(), home)) return false;
    if (stored(p.result())) return refuse(p, "is written back to an input, no buffer saved"), false;
    OpKind kind = p.info().kind;
    if (kind == OpKind::Reduction) return refuse(p, "would duplicate a reduction"), false;
    if (kind == OpKind::Contraction) return refuse(p, "would duplicate a contraction"), false;
    if (kind != OpKind::Elementwise) return false;
    std::vector<Target> targets;
    if (!collect_targets(p, home, targets)) return false;
    std::vector<Node *> expr;
    if (!collect_expression(p, home, targets, expr)) return false;
    for (Target &t : targets)
      if (!fits(p, expr, t)) return false;
    std::vector<int> ids;
    for (const Target &t : targets) ids.push_back(t.group);
    log()->debug("fuse: duplicating {} ({}, {} node{}) into {}: saves a buffer of {} bytes", name_of(p), p.mnemonic(),
                 expr.size(), expr.size() == 1 ? "" : "s", groups_str(ids),
                 p.result()->type().numel() * int64_t(itemsize(p.result()->type().dtype)));
    for (const Target &t : targets) copy_into(expr, t);
    erase_dead(expr);
    return true;
  }

  // Every reader of P outside `home` must be able to compute P itself.
  bool collect_targets(const Node &p, int home, std::vector<Target> &targets) {
    std::vector<ir::Use> uses = g_.uses(p.result());
    for (const ir::Use &u : uses)
      if (!u.user) return refuse(p, "is a graph output, no buffer saved"), false;
    std::stable_sort(uses.begin(), uses.end(),
                     [&](const ir::Use &a, const ir::Use &b) { return order(a.user) < order(b.user); });
    for (const ir::Use &u : uses) {
      int group = groups_.group_of(*u.user);
      if (group == home) continue;
      std::string who = (u.user->results().empty() ? "a node" : "%" + u.user->result()->name()) + " (" +
                        std::string(u.user->mnemonic());
      if (group < 0) return refuse(p, "used by " + who + ", not in a group) which cannot absorb it, no buffer saved"), false;
      if (groups_.contraction_of(group) == u.user)
        return refuse(p, "used by " + who + " operand) which cannot absorb it, no buffer saved"), false;
      auto it = std::find_if(targets.begin(), targets.end(), [&](const Target &t) { return t.group == group; });
      if (it == targets.end()) it = targets.insert(targets.end(), Target{group, {}});
      it->uses.push_back(u);
    }
    return !targets.empty();
  }

  // P and, transitively, the members of `home` it reads whose results are not
  // stored anyway, in graph order. Results that leave `home` are read from memory.
  bool collect_expression(Node &p, int home, const std::vector<Target> &targets, std::vector<Node *> &expr) {
    std::vector<int> ids;
    for (const Target &t : targets) ids.push_back(t.group);
    std::vector<Node *> todo = {&p};
    std::set<Node *> seen = {todo[0]};
    while (!todo.empty()) {
      Node *n = todo.back();
      todo.pop_back();
      if (n->info().kind == OpKind::Reduction)
        return refuse(p, "reads %" + n->result()->name() + ": would duplicate a reduction"), false;
      if (n->info().kind == OpKind::Contraction)
        return refuse(p, "reads %" + n->result()->name() + ": would duplicate a contraction"), false;
      if (n->info().kind != OpKind::Elementwise || n->results().size() != 1)
        return refuse(p, "reads %" + n->result()->name() + " (" + std::string(n->mnemonic()) +
                             "): would duplicate a non-elementwise op"),
               false;
      int64_t numel = n->result()->type().numel();
      if (!is_cheap(n->op()) && numel > kMaxExpensiveElements) {
        log()->debug("fuse: not duplicating {} into {}: expensive transcendental ({}) on {} elements", name_of(p),
                     groups_str(ids), n->mnemonic(), numel);
        return false;
      }
      expr.push_back(n);
      if (expr.size() > kMaxCopyNodes)
        return refuse(p, "expression above " + std::to_string(kMaxCopyNodes) + " nodes"), false;
      for (Value *v : n->operands()) {
        Node *q = v ? v->producer() : nullptr;
        if (!q || groups_.group_of(*q) != home || leaves_group(v, home) || !seen.insert(q).second) continue;
        todo.push_back(q);
      }
    }
    std::sort(expr.begin(), expr.end(), [&](Node *a, Node *b) { return order(a) < order(b); });
    return true;
  }

  // The copy joins t.group: shapes (widened to the domain if need be), size
  // bound, and the new reads it brings.
  bool fits(const Node &p, const std::vector<Node *> &expr, Target &t) {
    for (const Node *n : expr) {
      std::string why = groups_.misfit(*n, t.group, expr.size());
      if (why.empty()) continue;
      if (std::string no = widen_misfit(*n, expr, t); !no.empty())
        return refuse(p, t.group, "%" + n->result()->name() + ": " + why + " (" + no + ")"), false;
      t.widen = true;
    }
    // Widened, the copy computes each value of P once per element of the
    // domain it broadcasts to: only cheap ops are worth that.
    if (t.widen)
      for (const Node *n : expr)
        if (!is_cheap(n->op()))
          return refuse(p, t.group,
                        "expensive transcendental (" + std::string(n->mnemonic()) + ") widened to the group domain " +
                            shape_str(groups_.domain(t.group))),
                 false;
    std::unordered_set<const Value *> read, inside(expr.size());
    for (const Node *n : expr) inside.insert(n->result());
    for (const Node *n : g_.nodes())
      if (groups_.group_of(*n) == t.group)
        for (const Value *v : n->operands()) read.insert(v);
    int64_t extra = 0;
    for (const Node *n : expr)
      for (const Value *v : n->operands())
        if (v && !inside.count(v) && read.insert(v).second) extra += v->type().numel();
    int64_t saved = p.result()->type().numel();
    if (extra > kMaxReadRatio * saved)
      return refuse(p, t.group,
                    "would read " + std::to_string(extra) + " new elements to save reading " + std::to_string(saved)),
             false;
    return true;
  }

  // Why a copy of `n` cannot be computed over t's domain D instead, or "":
  // n's shape broadcasts to D; the readers of P in t are D-shaped already (so
  // reading a D-shaped P changes nothing for them); each node of the copy has
  // an operand of rank >= 1 to expand (a 0-dim one would change type promotion).
  std::string widen_misfit(const Node &n, const std::vector<Node *> &expr, const Target &t) const {
    const Dims &d = groups_.domain(t.group);
    if (std::any_of(d.begin(), d.end(), [](int64_t k) { return k < 0; }))
      return "the domain has symbolic dims (the expand's sizes would be per call)";
    if (!broadcasts_to(n.result()->type().shape, d)) return "does not broadcast to it";
    for (const ir::Use &u : t.uses)
      if (IntArrayRef(u.user->result()->type().shape) != IntArrayRef(d)) return "a reader is not over the whole domain";
    for (const Node *m : expr)
      if (std::none_of(m->operands().begin(), m->operands().end(),
                       [](const Value *v) { return v && !v->type().shape.empty(); }))
        return "%" + m->result()->name() + " has only 0-dim operands";
    return "";
  }

  static bool broadcasts_to(IntArrayRef s, IntArrayRef d) {
    if (s.size() > d.size()) return false;
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t a = s[s.size() - 1 - i], b = d[d.size() - 1 - i];
      if (a != b && a != 1) return false;
    }
    return true;
  }

  // For a widened copy: `ops` with one of rank >= 1 expanded to `d` (before
  // `before`) unless one has shape d already.
  void widen_operands(std::vector<Value *> &ops, const Dims &d, Node *before) {
    for (Value *v : ops)
      if (v && IntArrayRef(v->type().shape) == IntArrayRef(d)) return;
    for (Value *&v : ops) {
      if (!v || v->type().shape.empty()) continue;
      ir::TensorType type{v->type().dtype, d, std::nullopt};
      v = g_.create(OpId::Expand, {v}, attrs::ExpandArgs{.shape = IntArrayRef(d)}.to_attrs(), {type}, before)->result();
      return;
    }
  }

  // Copies `expr` before t's first reader of P, into t's group, and rewires the readers.
  void copy_into(const std::vector<Node *> &expr, const Target &t) {
    Node *before = t.uses.front().user;
    std::unordered_map<const Value *, Value *> map;
    for (const Node *n : expr) {
      std::vector<Value *> ops;
      for (Value *v : n->operands()) {
        auto it = v ? map.find(v) : map.end();
        ops.push_back(it == map.end() ? v : it->second);
      }
      ir::TensorType type = n->result()->type();
      if (t.widen) {
        type = {type.dtype, groups_.domain(t.group), std::nullopt};
        widen_operands(ops, type.shape, before);
      }
      Node *copy = g_.create(n->op(), ops, n->attrs(), {type}, before);
      groups_.add(*copy, t.group);
      map[n->result()] = copy->result();
    }
    Value *p_copy = map.at(expr.back()->result());
    for (const ir::Use &u : t.uses) u.user->set_operand(u.index, p_copy);
  }

  // Expression nodes nothing reads any more leave their group, last first.
  void erase_dead(const std::vector<Node *> &expr) {
    for (auto it = expr.rbegin(); it != expr.rend(); ++it) {
      if (g_.has_uses((*it)->result()) || stored((*it)->result())) continue;
      groups_.remove(**it);
      g_.erase(*it);
    }
  }

  Graph &g_;
  FuseGroups &groups_;
  std::unordered_map<const Node *, size_t> index_; // position in the graph
};

} // namespace

bool duplicate_cheap_producers(ir::Graph &g, FuseGroups &groups) { return Duplicator(g, groups).run(); }

} // namespace kiln::passes
