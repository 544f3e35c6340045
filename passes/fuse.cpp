// fuse: groups elementwise chains, and reductions with their elementwise
// prologue and epilogue, into FusionGroup nodes; and attaches
// elementwise epilogues (bias, activation, residual add, scale, batch-norm in
// inference) to the contraction (matmul, mm, bmm, conv2d) that feeds them: such
// a group's body is the contraction followed by ops elementwise over its output,
// which codegen/epilogue.cpp applies tile by tile while the tile is in cache.
//
// A group has a domain: the shape D of its widest value. A member's result has
// shape D, or (row-wise groups) D with the group's reduced dims R reduced (kept
// as 1 or dropped). Every reduction of a group folds the same dims R of D: the
// last one for softmax and layer_norm, all but the channels for batch-norm
// statistics (codegen iterates the kept dims first, then R as "the row").
// Each node joins at most one group; then a cheap elementwise producer whose
// readers all sit in other groups is copied into each of them when that saves
// its buffer (passes/fuse_duplicate.cpp). Every refusal has a reason that
// KILN_LOG=debug prints. A node joins a group only when codegen can lower
// it there (passes/lowering_check.h); the group geometry (row shapes, reduced
// dims) is passes/group_geometry.h, which codegen uses too.
#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "ir/graph.h"
#include "passes/fuse_duplicate.h"
#include "passes/fusion.h"
#include "passes/group_geometry.h"
#include "passes/lowering_check.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/log.h"

namespace kiln::passes {
namespace {

using ir::Graph;
using ir::Node;
using ir::Value;

constexpr size_t kMaxGroupNodes = 64;

bool same_shape(IntArrayRef a, IntArrayRef b) { return a == b; }

// Why a reduction cannot head or join a row-wise group, or "".
std::string reduction_misfit(const Node &n) {
  int64_t rank = int64_t(n.operand(0)->type().shape.size());
  if (rank == 0) return "reduces a scalar";
  if (rank > 1 && int64_t(reduced_dims(n).size()) == rank)
    return "reduces every dim (one row: the kernel would run on one thread); left to the eager kernel";
  return "";
}

struct Group {
  int id;
  std::string seed; // the result name of its first node: logs say "the group of %seed"
  std::vector<Node *> members; // in graph order
  std::vector<size_t> members_index; // their original positions (filled when outlined)
  Dims domain;
  bool has_reduction = false;
  std::vector<int64_t> reduced; // dims of `domain` its reductions fold (when has_reduction)
  Node *contraction = nullptr; // the head of a GEMM/conv epilogue group
};

// Contractions that can head an epilogue group (the EpilogueHead trait of ops.def;
// codegen/epilogue.cpp runs them). Returns why not, or "" when it can.
std::string contraction_misfit(const Node &n) {
  OpId op = n.op();
  if (!heads_epilogue(op)) return "not a contraction that heads epilogues";
  if (n.results().size() != 1) return "has several results";
  DType t = n.result()->type().dtype;
  if (t != kFloat32 && t != kFloat64) return "not floating-point";
  // Over symbolic sizes codegen must read them per call (issue 17); where it
  // cannot, the contraction runs alone and its epilogue joins a kernel that
  // reads the batch per call.
  bool symbolic = n.result()->type().symbolic();
  for (const Value *v : n.operands()) symbolic |= v && v->type().symbolic();
  if (symbolic)
    if (std::string why = symbolic_contraction_misfit(n); !why.empty()) return "its sizes are symbolic: " + why;
  if (op == OpId::Conv2d)
    return n.operand(0)->type().shape.size() == 4 ? "" : "conv2d input is not 4-D";
  for (const Value *v : n.operands())
    if (!v || v->type().shape.size() < 2) return "an operand has fewer than 2 dims";
  return "";
}

class Fuser : public FuseGroups {
public:
  Fuser(Graph &g, bool duplicate) : g_(g), nodes_(g.nodes()), duplicate_(duplicate) {
    for (size_t i = 0; i < nodes_.size(); ++i) index_[nodes_[i]] = i;
    compute_reachability();
  }

  bool run() {
    for (Node *n : nodes_) consider(n);
    if (duplicate_ && duplicate_cheap_producers(g_, *this)) renumber();
    bool changed = false;
    for (auto &[id, grp] : groups_)
      if (grp.members.size() >= 1 && worth_a_group(grp)) changed |= outline(grp);
    return changed;
  }

  // FuseGroups, for duplicate_cheap_producers.
  int group_of(const Node &n) const override {
    auto it = group_of_.find(&n);
    return it == group_of_.end() ? -1 : it->second;
  }
  const Dims &domain(int group) const override { return groups_.at(group).domain; }
  const Node *contraction_of(int group) const override { return groups_.at(group).contraction; }
  std::string misfit(const Node &n, int group, size_t extra) const override {
    const Group &grp = groups_.at(group);
    if (grp.members.size() + extra > kMaxGroupNodes) return "group size limit reached";
    if (std::string why = lowering_misfit(n); !why.empty()) return "codegen cannot lower it: " + why;
    return shape_misfit(n, grp);
  }
  std::string seed(int group) const override { return groups_.at(group).seed; }
  void add(Node &n, int group) override { add(n, groups_.at(group)); }
  void remove(const Node &n) override {
    auto it = group_of_.find(&n);
    if (it == group_of_.end()) return;
    std::vector<Node *> &m = groups_.at(it->second).members;
    m.erase(std::remove(m.begin(), m.end(), &n), m.end());
    group_of_.erase(it);
  }

private:
  // After duplication added and erased nodes: positions, reachability, and
  // members in graph order again.
  void renumber() {
    nodes_ = g_.nodes();
    index_.clear();
    for (size_t i = 0; i < nodes_.size(); ++i) index_[nodes_[i]] = i;
    compute_reachability();
    for (auto &[id, grp] : groups_)
      std::sort(grp.members.begin(), grp.members.end(), [&](Node *x, Node *y) { return index_.at(x) < index_.at(y); });
  }

  // A single elementwise node is already one kernel; a group of one is still
  // worth making so that codegen compiles it (the executor needs one path).
  // A contraction alone stays a plain node unless the layout pass chose its
  // output strides, which only the epilogue executor honours.
  bool worth_a_group(const Group &grp) const {
    if (grp.members.empty()) return false;
    if (grp.contraction && grp.members.size() == 1) return grp.contraction->result()->type().strides.has_value();
    return true;
  }

  static bool fusible_kind(const Node &n) { return n.kind() == Node::Kind::Op && is_fusible(n.op()); }
  // The ops fusion decides about (and logs a reason for): elementwise ops and reductions.
  static bool computes_elements(const Node &n) {
    if (n.kind() != Node::Kind::Op) return false;
    OpKind k = n.info().kind;
    return k == OpKind::Elementwise || k == OpKind::Reduction;
  }

  // A value's dims as fusion compares them: the sizes, and in a symbolic
  // graph (issue 17) each symbolic dim as a negative key, one per distinct
  // expression, so that dims are equal exactly when their expressions are
  // (s0 and a static 32 differ even when s0 was traced at 32) and no
  // symbolic dim reads as 1 (sizes 0 and 1 stay static).
  Dims dims_of(const Value *v) const {
    const ir::TensorType &t = v->type();
    if (!t.symbolic()) return t.shape;
    Dims d;
    for (const ir::SymExpr &e : t.sym) {
      if (std::optional<int64_t> c = e.constant()) {
        d.push_back(*c);
        continue;
      }
      auto it = std::find(sym_keys_.begin(), sym_keys_.end(), e);
      if (it == sym_keys_.end()) it = sym_keys_.insert(sym_keys_.end(), e);
      d.push_back(-1 - int64_t(it - sym_keys_.begin()));
    }
    return d;
  }
  // dims_of's dims as the IR prints them.
  std::string show(IntArrayRef d) const {
    std::string s = "[";
    for (size_t i = 0; i < d.size(); ++i)
      s.append(i ? ", " : "").append(d[i] >= 0 ? std::to_string(d[i]) : sym_keys_[size_t(-1 - d[i])].str());
    return s + "]";
  }

  void refuse(const Node &n, const std::string &why) {
    log()->debug("fuse: not fusing %{} ({}) : {}", n.result()->name(), n.mnemonic(), why);
  }

  // Would `n`, with result shape `s`, fit a group of domain `d`?
  std::string shape_misfit(const Node &n, const Group &grp) const {
    Dims s = dims_of(n.result());
    bool red = n.info().kind == OpKind::Reduction;
    if (grp.contraction) {
      if (red) return "not elementwise over the contraction's output (a reduction)";
      if (!same_shape(s, grp.domain))
        return "not elementwise over the contraction's output: shape " + show(s) + " vs " + show(grp.domain);
      return "";
    }
    if (red) {
      Dims in = dims_of(n.operand(0));
      if (std::string why = reduction_misfit(n); !why.empty()) return why;
      if (!same_shape(in, grp.domain))
        return "reduction input shape " + show(in) + " differs from the group domain " + show(grp.domain);
      if (grp.has_reduction && reduced_dims(n) != grp.reduced)
        return "reduces dims " + shape_str(reduced_dims(n)) + ", the group's reductions " + shape_str(grp.reduced);
      return "";
    }
    if (same_shape(s, grp.domain)) return misaligned_row_read(n, grp);
    if (grp.has_reduction && is_row_shape(s, grp.domain, grp.reduced)) return "";
    return "shape " + show(s) + " does not match the group domain " + show(grp.domain);
  }

  // See dropped_row_misaligned: a full-shape `n` reading such a member of `grp`.
  std::string misaligned_row_read(const Node &n, const Group &grp) const {
    if (!grp.has_reduction || !dropped_row_misaligned(grp.domain, grp.reduced)) return "";
    for (const Value *v : n.operands()) {
      if (!v || !v->producer() || v->type().shape.size() != grp.domain.size() - grp.reduced.size()) continue;
      auto it = group_of_.find(v->producer());
      if (it != group_of_.end() && it->second == grp.id && is_row_shape(dims_of(v), grp.domain, grp.reduced))
        return "reads row value %" + v->name() + " (reduced dims dropped), which broadcasting aligns with other dims";
    }
    return "";
  }

  // Whether a full-shape member of `readers` reads a dropped row value of `rows`.
  bool reads_misaligned_row(const Group &readers, const Group &rows) const {
    for (const Node *m : readers.members)
      if (m->results().size() == 1 && same_shape(dims_of(m->result()), rows.domain) &&
          !misaligned_row_read(*m, rows).empty())
        return true;
    return false;
  }

  // Joining `n` to `grp` creates a cycle when some operand of n outside the
  // group depends on the group, counting paths through other groups: a group
  // runs as one unit, so reaching any of its members reaches all its results.
  bool creates_cycle(const Node &n, const Group &grp) const {
    std::vector<const Node *> targets;
    for (const Value *v : n.operands()) {
      if (!v || !v->producer()) continue;
      auto it = group_of_.find(v->producer());
      if (it == group_of_.end() || it->second != grp.id) targets.push_back(v->producer());
    }
    return !targets.empty() && group_path(grp, -1, targets);
  }

  void consider(Node *n) {
    if (n->kind() == Node::Kind::Op && n->info().kind == OpKind::Contraction) return start_epilogue(n);
    if (!computes_elements(*n)) return;
    // Codegen cannot lower it in any group: a group around it would run eagerly whole.
    if (std::string why = lowering_misfit(*n); !why.empty()) return refuse(*n, "codegen cannot lower it: " + why);
    if (!fusible_kind(*n)) return refuse(*n, "ops.def does not mark it Fuses");
    if (n->results().size() != 1) return refuse(*n, "has several results");
    // Candidate groups: those of the producers of n's operands.
    std::vector<int> candidates;
    for (const Value *v : n->operands()) {
      if (!v || !v->producer()) continue;
      auto it = group_of_.find(v->producer());
      if (it != group_of_.end() && std::find(candidates.begin(), candidates.end(), it->second) == candidates.end())
        candidates.push_back(it->second);
    }
    // An epilogue joins its contraction before any other group.
    std::stable_sort(candidates.begin(), candidates.end(),
                     [&](int a, int b) { return groups_.at(a).contraction && !groups_.at(b).contraction; });
    int joined = -1;
    for (int id : candidates) {
      Group &grp = groups_.at(id);
      std::string why = shape_misfit(*n, grp);
      if (why.empty() && grp.members.size() >= kMaxGroupNodes) why = "group size limit reached";
      // Once n has joined a group, n's other operands are that group's business:
      // whether the two groups may become one is merge()'s cycle check (checking
      // n alone would see the path grp -> n -> n's group and call it a cycle).
      if (why.empty() && joined < 0 && creates_cycle(*n, grp))
        why = grp.contraction ? "reads the contraction's result through a node outside the group (would need the "
                                "contraction twice or create a cycle)"
                              : "would create a cycle";
      if (!why.empty()) {
        refuse(*n, "into the group of %" + grp.seed + ": " + why);
        continue;
      }
      if (joined < 0) {
        add(*n, grp);
        joined = id;
        continue;
      }
      // n bridges two groups with one domain.
      if (std::string refused = merge(joined, id); !refused.empty())
        refuse(*n, "cannot merge the group of %" + groups_.at(joined).seed + " with the group of %" + grp.seed + ": " +
                       refused);
    }
    if (joined >= 0) return;
    // Start a new group. A reduction's domain is its input shape.
    Group grp;
    grp.id = next_id_++;
    grp.seed = n->result()->name();
    bool red = n->info().kind == OpKind::Reduction;
    if (std::string why = red ? reduction_misfit(*n) : ""; !why.empty()) return refuse(*n, why);
    grp.domain = dims_of(red ? n->operand(0) : n->result());
    groups_.emplace(grp.id, grp);
    add(*n, groups_.at(grp.id));
  }

  // A contraction starts a group of its own; elementwise consumers join it later.
  void start_epilogue(Node *n) {
    if (std::string why = contraction_misfit(*n); !why.empty()) return refuse(*n, "no epilogue: " + why);
    Group grp;
    grp.id = next_id_++;
    grp.seed = n->result()->name();
    grp.domain = dims_of(n->result());
    grp.contraction = n;
    groups_.emplace(grp.id, grp);
    add(*n, groups_.at(grp.id));
  }

  void add(Node &n, Group &grp) {
    grp.members.push_back(&n);
    if (n.info().kind == OpKind::Reduction && !grp.has_reduction) {
      grp.has_reduction = true;
      grp.reduced = reduced_dims(n);
    }
    group_of_[&n] = grp.id;
  }

  // Makes groups `into` and `from` one, or says why not.
  std::string merge(int into, int from) {
    if (into == from) return "";
    Group &a = groups_.at(into), &b = groups_.at(from);
    if (!same_shape(a.domain, b.domain)) return "different domains";
    if (creates_cycle_between(a, b)) return "would create a cycle";
    // One contraction per group, and its epilogue stays elementwise.
    if (a.contraction && b.contraction) return "two contractions";
    if ((a.contraction && b.has_reduction) || (b.contraction && a.has_reduction))
      return "a contraction's epilogue cannot hold a reduction";
    if (a.has_reduction && b.has_reduction && a.reduced != b.reduced) return "their reductions fold different dims";
    if (reads_misaligned_row(b, a) || reads_misaligned_row(a, b)) return "a member reads a misaligned row value";
    // A member feeding the contraction would have to run before it, not after it on its tiles.
    const Group &plain = a.contraction ? b : a;
    const Node *head = a.contraction ? a.contraction : b.contraction;
    if (head)
      for (const Node *m : plain.members)
        if (reaches(m, head)) return "a member feeds the contraction";
    if (!a.contraction) a.contraction = b.contraction;
    for (Node *m : b.members) group_of_[m] = into;
    a.members.insert(a.members.end(), b.members.begin(), b.members.end());
    std::sort(a.members.begin(), a.members.end(), [&](Node *x, Node *y) { return index_.at(x) < index_.at(y); });
    if (!a.has_reduction) a.reduced = b.reduced;
    a.has_reduction |= b.has_reduction;
    groups_.erase(from);
    return "";
  }

  // A path a -> outside -> b (or b -> outside -> a) forbids merging.
  bool creates_cycle_between(const Group &a, const Group &b) const {
    std::vector<const Node *> in_a(a.members.begin(), a.members.end()), in_b(b.members.begin(), b.members.end());
    return group_path(a, b.id, in_b) || group_path(b, a.id, in_a);
  }

  // Whether some node of `targets` depends on `from` through at least one node
  // outside `from` and outside group `skip` (-1: none), where the groups formed
  // so far count as single units. Node-level reachability misses a cycle that
  // closes only through groups: A -> B -> C, with C also feeding A.
  bool group_path(const Group &from, int skip, const std::vector<const Node *> &targets) const {
    std::vector<bool> seen(nodes_.size(), false), target(nodes_.size(), false);
    for (const Node *t : targets) target[index_.at(t)] = true;
    std::vector<const Node *> work;
    auto group_id = [&](const Node *n) {
      auto it = group_of_.find(n);
      return it == group_of_.end() ? -1 : it->second;
    };
    // Direct edges from `from` into `skip` are not a path through the outside.
    auto push_users = [&](const Node *n, bool from_member) {
      for (const Value *r : n->results())
        for (const ir::Use &u : g_.uses(r)) {
          if (!u.user) continue;
          int gid = group_id(u.user);
          if (gid == from.id || (from_member && skip >= 0 && gid == skip) || seen[index_.at(u.user)]) continue;
          seen[index_.at(u.user)] = true;
          work.push_back(u.user);
        }
    };
    for (const Node *m : from.members) push_users(m, true);
    while (!work.empty()) {
      const Node *n = work.back();
      work.pop_back();
      if (target[index_.at(n)]) return true;
      push_users(n, false);
      int gid = group_id(n);
      if (gid < 0) continue;
      for (const Node *m : groups_.at(gid).members) {
        if (target[index_.at(m)]) return true;
        if (!seen[index_.at(m)]) {
          seen[index_.at(m)] = true;
          work.push_back(m);
        }
      }
    }
    return false;
  }

  void compute_reachability() {
    size_t n = nodes_.size();
    reach_.assign(n, std::vector<bool>(n, false));
    for (size_t i = n; i-- > 0;) {
      for (const Value *r : nodes_[i]->results())
        for (const ir::Use &u : g_.uses(r)) {
          if (!u.user) continue;
          size_t j = index_.at(u.user);
          reach_[i][j] = true;
          for (size_t k = 0; k < n; ++k)
            if (reach_[j][k]) reach_[i][k] = true;
        }
    }
  }
  bool reaches(const Node *a, const Node *b) const { return reach_[index_.at(a)][index_.at(b)]; }

  // Whether `n` (an original node, or a group formed earlier) reads, directly or
  // not, a result of `grp`'s members.
  bool depends_on(const Node *n, const Group &grp) const {
    auto formed = formed_.find(n);
    for (size_t m : grp.members_index) {
      if (formed == formed_.end()) {
        if (reach_[m][index_.at(n)]) return true;
        continue;
      }
      for (size_t f : formed->second)
        if (reach_[m][f]) return true;
    }
    return false;
  }

  // Moves the group's members into a FusionGroup body, in place of the last member.
  bool outline(Group &grp) {
    std::set<const Node *> inside(grp.members.begin(), grp.members.end());
    grp.members_index.clear();
    for (Node *m : grp.members) grp.members_index.push_back(index_.at(m));
    // Operands from outside, in first-use order; results used outside (or graph outputs).
    std::vector<Value *> ext_in, ext_out;
    for (Node *m : grp.members)
      for (Value *v : m->operands())
        if (v && (!v->producer() || !inside.count(v->producer())) &&
            std::find(ext_in.begin(), ext_in.end(), v) == ext_in.end())
          ext_in.push_back(v);
    for (Node *m : grp.members)
      for (Value *r : m->results())
        for (const ir::Use &u : g_.uses(r))
          if ((!u.user || !inside.count(u.user)) && std::find(ext_out.begin(), ext_out.end(), r) == ext_out.end())
            ext_out.push_back(r);
    for (const ir::WriteBack &w : g_.write_backs())
      for (Node *m : grp.members)
        for (Value *r : m->results())
          if (w.value == r && std::find(ext_out.begin(), ext_out.end(), r) == ext_out.end()) ext_out.push_back(r);
    if (ext_out.empty()) return false; // dead group: dce's business

    std::vector<ir::TensorType> out_types;
    for (Value *r : ext_out) out_types.push_back(r->type());
    // Insert after the last member so every external operand is defined before it.
    Node *last = grp.members.back();
    std::vector<Node *> order = g_.nodes();
    auto pos = std::find(order.begin(), order.end(), last);
    Node *before = (pos + 1 == order.end()) ? nullptr : *(pos + 1);
    // Nodes between the members that read a member's result (and so must run after
    // the group) move behind it, in order; they cannot feed the group (no cycles).
    // A node reading a mover's result moves too (a group formed earlier can be a
    // mover, and its readers come after it).
    std::vector<Node *> movers;
    std::set<const Node *> moving;
    auto reads_mover = [&](const Node *n) {
      for (const Value *v : n->operands())
        if (v && v->producer() && moving.count(v->producer())) return true;
      return false;
    };
    bool after_first = false;
    for (Node *n : order) {
      if (n == last) break;
      if (inside.count(n)) {
        after_first = true;
        continue;
      }
      if (after_first && (depends_on(n, grp) || reads_mover(n))) {
        movers.push_back(n);
        moving.insert(n);
      }
    }
    Node *group = g_.create_group(ext_in, out_types, before);
    for (Node *m : movers) g_.move_before(m, before);
    formed_[group] = grp.members_index;
    Graph &body = *group->body();

    std::unordered_map<const Value *, Value *> map;
    for (size_t i = 0; i < ext_in.size(); ++i) map[ext_in[i]] = body.inputs()[i];
    for (Node *m : grp.members) {
      std::vector<Value *> ops;
      for (Value *v : m->operands()) ops.push_back(v ? map.at(v) : nullptr);
      std::vector<ir::TensorType> types;
      for (Value *r : m->results()) types.push_back(r->type());
      Node *copy = body.create(m->op(), ops, m->attrs(), types);
      for (size_t i = 0; i < m->results().size(); ++i) map[m->results()[i]] = copy->results()[i];
    }
    std::vector<Value *> body_outs;
    for (Value *r : ext_out) body_outs.push_back(map.at(r));
    body.set_outputs(body_outs);
    for (size_t i = 0; i < ext_out.size(); ++i) g_.replace_all_uses(ext_out[i], group->results()[i]);
    log_outlined(grp, *group, ext_out);
    for (auto it = grp.members.rbegin(); it != grp.members.rend(); ++it) g_.erase(*it);
    return true;
  }

  // "fuse: %86 = fusion_group, formed as the group of %12: %12 (mul), %13 (add);
  // results %86 <- %13": the %id that the dump, the dot cluster and the trace
  // slice give the group, its members under their names before fusion, and
  // which member's value each result carries.
  void log_outlined(const Group &grp, const Node &group, const std::vector<Value *> &ext_out) const {
    if (!log()->should_log(spdlog::level::debug)) return;
    std::string results, members, carried;
    for (const Value *r : group.results()) results.append(results.empty() ? "%" : ", %").append(r->name());
    for (const Node *m : grp.members)
      members.append(members.empty() ? "%" : ", %")
          .append(m->results().empty() ? std::string("?") : m->result()->name())
          .append(" (")
          .append(m->mnemonic())
          .append(")");
    for (size_t i = 0; i < ext_out.size(); ++i)
      carried.append(i ? ", %" : "%").append(group.result(i)->name()).append(" <- %").append(ext_out[i]->name());
    log()->debug("fuse: {} = fusion_group, formed as the group of %{}: {}; results {}", results, grp.seed, members,
                 carried);
  }

  Graph &g_;
  std::vector<Node *> nodes_;
  std::unordered_map<const Node *, size_t> index_;
  std::vector<std::vector<bool>> reach_;
  std::map<int, Group> groups_;
  std::unordered_map<const Node *, int> group_of_;
  // Group nodes made so far -> original indices of their members.
  std::unordered_map<const Node *, std::vector<size_t>> formed_;
  int next_id_ = 0;
  bool duplicate_;
  mutable std::vector<ir::SymExpr> sym_keys_; // dims_of's key -1 - i is sym_keys_[i]
};

class FusePass : public Pass {
public:
  std::string_view name() const override { return "fuse"; }
  // Its decisions compare dims (symbolic ones by their expressions) and never
  // read a symbolic size, except fuse_duplicate's cost estimate at the traced
  // sizes, which then holds for every size (it changes speed, not results).
  bool handles_symbolic() const override { return true; }
  bool run(Graph &g) override { return Fuser(g, true).run(); }
};

} // namespace

bool fuse(ir::Graph &g, bool duplicate) { return Fuser(g, duplicate).run(); }

KILN_REGISTER_PASS(FusePass, "fuse");

} // namespace kiln::passes
