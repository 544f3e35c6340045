#include "frontend/param_fold.h"

#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "ir/interpreter.h"
#include "passes/pass_manager.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::detail {

namespace {

using ir::Node;
using ir::Value;
using ValueMap = std::unordered_map<const Value *, Value *>;

// Random ops must run in every call.
bool deterministic(const Node &n) { return n.kind() == Node::Kind::FusionGroup || !is_random(n.op()); }

bool is_view(const Node &n) { return n.kind() == Node::Kind::Op && n.info().kind == OpKind::View; }

void clone_body(const ir::Graph &src, ir::Graph &dst, ValueMap map);

// A copy of `n` at the end of `dst`, its operands mapped through `map`, which
// learns its results.
void clone_node(const Node &n, ir::Graph &dst, ValueMap &map) {
  std::vector<Value *> operands;
  for (const Value *v : n.operands()) operands.push_back(v ? map.at(v) : nullptr);
  std::vector<ir::TensorType> types;
  for (const Value *r : n.results()) types.push_back(r->type());
  Node *c = nullptr;
  if (n.kind() == Node::Kind::Op) {
    c = dst.create(n.op(), std::move(operands), n.attrs(), types);
  } else {
    c = dst.create_group(std::move(operands), types);
    clone_body(*n.body(), *c->body(), {});
  }
  for (size_t i = 0; i < n.results().size(); ++i) map[n.result(i)] = c->result(i);
}

// A fusion group's body into the new group's (empty but for its inputs) body.
void clone_body(const ir::Graph &src, ir::Graph &dst, ValueMap map) {
  for (size_t i = 0; i < src.inputs().size(); ++i) map[src.inputs()[i]] = dst.inputs().at(i);
  for (const Value *p : src.params()) map[p] = dst.add_param(p->tensor(), p->name());
  for (const Value *c : src.consts()) map[c] = dst.add_const(c->tensor(), c->name());
  for (const Node *n : src.nodes()) clone_node(*n, dst, map);
  std::vector<Value *> outs;
  for (const Value *o : src.outputs()) outs.push_back(map.at(o));
  dst.set_outputs(std::move(outs));
}

// A tensor of v's type: its shape, dtype and (layout pass) strides.
Tensor holder_for(const Value *v) {
  const ir::TensorType &t = v->type();
  if (!t.strides) return make_tensor(t.shape, t.dtype);
  return make_tensor({t.numel()}, t.dtype).as_strided(t.shape, *t.strides, 0);
}

} // namespace

std::unique_ptr<ParamFold> ParamFold::extract(ir::Graph &g) {
  if (!g.write_backs().empty()) return nullptr;
  // fixed: parameters, constants and what nodes compute from them alone;
  // work: such a value takes more than views of parameters to compute.
  // (Not from_blob memory: the user may write it without any op.)
  std::unordered_set<const Value *> fixed(g.consts().begin(), g.consts().end());
  for (const Value *p : g.params())
    if (!is_borrowed(p->tensor())) fixed.insert(p);
  std::unordered_set<const Value *> work;
  std::vector<const Node *> folded;
  std::unordered_set<const Node *> is_folded;
  for (const Node *n : g.nodes()) {
    bool all_fixed = deterministic(*n), any_work = !is_view(*n);
    for (const Value *v : n->operands())
      if (v) {
        all_fixed &= fixed.count(v) > 0;
        any_work |= work.count(v) > 0;
      }
    if (!all_fixed) continue;
    folded.push_back(n);
    is_folded.insert(n);
    for (const Value *r : n->results()) {
      fixed.insert(r);
      if (any_work) work.insert(r);
    }
  }
  // The values the rest of the graph reads (or returns) that take work.
  std::vector<Value *> frontier;
  for (const Node *n : folded)
    for (Value *r : n->results()) {
      if (!work.count(r)) continue;
      for (const ir::Use &u : g.uses(r))
        if (!u.user || !is_folded.count(u.user)) {
          frontier.push_back(r);
          break;
        }
    }
  if (frontier.empty()) return nullptr;

  std::unique_ptr<ParamFold> fold(new ParamFold);
  fold->prologue_ = std::make_unique<ir::Graph>(g.name() + ".params");
  ir::Graph &pro = *fold->prologue_;
  ValueMap map;
  for (const Value *p : g.params()) map[p] = pro.add_param(p->tensor(), p->name());
  for (const Value *c : g.consts()) map[c] = pro.add_const(c->tensor(), c->name());
  for (const Node *n : folded) clone_node(*n, pro, map);
  std::vector<Value *> outs;
  for (Value *v : frontier) outs.push_back(map.at(v));
  pro.set_outputs(std::move(outs));
  passes::run_pipeline(pro, "dce");
  for (const Value *p : pro.params())
    if (pro.has_uses(p))
      if (VersionCounter v = watch_version(p->tensor())) fold->sources_.push_back({p->tensor(), std::move(v)});

  const bool planned = g.memory_plan().has_value();
  for (Value *v : frontier) {
    fold->holders_.push_back(holder_for(v));
    g.replace_all_uses(v, g.add_param(fold->holders_.back(), g.unique_name("folded")));
  }
  size_t before = g.num_nodes();
  passes::run_pipeline(g, planned ? "dce,plan-memory" : "dce");
  fold->nodes_ = before - g.num_nodes();
  fold->seen_ = std::make_unique<std::atomic<uint64_t>[]>(fold->sources_.size());
  fold->compute_locked();
  log()->debug("compile @{}: {} values computed from parameters once per update ({} nodes)", g.name(),
               fold->holders_.size(), fold->nodes_);
  return fold;
}

void ParamFold::recompute() const {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < sources_.size(); ++i)
    if (sources_[i].version->load(std::memory_order_acquire) != seen_[i].load(std::memory_order_relaxed)) {
      compute_locked();
      recomputes_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
}

// The versions are read before the values: an update made meanwhile shows as
// a newer version at the next call.
void ParamFold::compute_locked() const {
  std::vector<uint64_t> versions;
  for (const Source &s : sources_) versions.push_back(s.version->load(std::memory_order_acquire));
  TracingOff no_trace;
  std::vector<Tensor> outs = ir::interpret(*prologue_, {});
  for (size_t i = 0; i < holders_.size(); ++i) {
    Tensor h = holders_[i];
    kiln::copy_(h, outs.at(i));
  }
  for (size_t i = 0; i < sources_.size(); ++i) seen_[i].store(versions[i], std::memory_order_release);
}

} // namespace kiln::detail
