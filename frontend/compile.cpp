#include "frontend/compile.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <shared_mutex>
#include <sstream>

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include "codegen/executable.h"
#include "frontend/param_fold.h"
#include "runtime/autograd_trace.h"
#include "frontend/symbolize.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/sym_infer.h"
#include "ir/verifier.h"
#include "passes/dump_names.h"
#include "passes/pass_manager.h"
#include "runtime/log.h"
#include "runtime/op_registry.h"
#include "runtime/ops.h"
#include "runtime/random_stream.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

Fallback fallback_from_env() {
  const char *v = std::getenv("KILN_FALLBACK");
  if (!v) return Fallback::Allow;
  std::string s(v);
  if (s == "off") return Fallback::Off;
  if (s == "force") return Fallback::Force;
  if (s != "allow" && !s.empty()) log()->warn("KILN_FALLBACK={} is not off|allow|force; using allow", s);
  return Fallback::Allow;
}

// KILN_FOLD=off keeps values computed from captured tensors alone in every
// call (see detail::ParamFold), to measure what folding them saves.
bool fold_params_from_env() {
  const char *v = std::getenv("KILN_FOLD");
  return !v || std::string(v) != "off";
}

// a == b, inline: every call compares a few short shapes, where an
// out-of-line compare and its memcmp cost more than the loop.
inline bool same_dims(IntArrayRef a, const Dims &b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// The part of an input a specialization depends on.
struct InputGuard {
  DType dtype;
  Dims sizes, strides;
  bool matches(const Tensor &t) const {
    return t.defined() && t.dtype() == dtype && same_dims(t.sizes(), sizes) && same_dims(t.strides(), strides);
  }
};

// A captured tensor's metadata at compile time: the graph reads it live, so
// only its shape and dtype are guarded.
struct ParamGuard {
  Tensor live;
  DType dtype;
  Dims sizes;
  bool holds() const { return live.dtype() == dtype && same_dims(live.sizes(), sizes); }
};

// For each input, the first tensor among the inputs and captured tensors that
// shares its memory (its own index when none does). A plan traced for distinct
// inputs must not run on aliased ones: an in-place update of one input would
// be invisible to reads of the other (and eager would see it).
int first_alias(const std::vector<Tensor> &in, const std::vector<ParamGuard> &params, size_t i) {
  if (!in[i].defined()) return int(i);
  for (size_t j = 0; j < i; ++j)
    if (in[j].defined() && in[i].is_alias_of(in[j])) return int(j);
  for (size_t p = 0; p < params.size(); ++p)
    if (in[i].is_alias_of(params[p].live)) return int(in.size() + p);
  return int(i);
}

std::vector<int> alias_pattern(const std::vector<Tensor> &in, const std::vector<ParamGuard> &params) {
  std::vector<int> pattern(in.size());
  for (size_t i = 0; i < in.size(); ++i) pattern[i] = first_alias(in, params, i);
  return pattern;
}

// The memory a tensor views; null for an undefined or meta tensor (which alias nothing).
inline const Storage *storage_of(const Tensor &t) { return t.defined() ? t.impl().storage.get() : nullptr; }

// alias_pattern(in, params) is the identity: no input shares memory with an
// earlier input or a captured tensor. The common pattern, checked on every
// call: storage pointers compared inline.
bool no_aliases(const std::vector<Tensor> &in, const std::vector<ParamGuard> &params) {
  for (size_t i = 0; i < in.size(); ++i) {
    const Storage *s = storage_of(in[i]);
    if (!s) continue;
    for (size_t j = 0; j < i; ++j)
      if (storage_of(in[j]) == s) return false;
    for (const ParamGuard &p : params)
      if (storage_of(p.live) == s) return false;
  }
  return true;
}

// alias_pattern(in, params) == pattern, without allocating (every call checks it).
bool alias_pattern_is(const std::vector<Tensor> &in, const std::vector<ParamGuard> &params,
                      const std::vector<int> &pattern) {
  if (pattern.size() != in.size()) return false;
  for (size_t i = 0; i < in.size(); ++i)
    if (first_alias(in, params, i) != pattern[i]) return false;
  return true;
}

// The value a chain of view ops starts from.
const ir::Value *view_base(const ir::Value *v) {
  while (const ir::Node *p = v->producer()) {
    if (p->kind() != ir::Node::Kind::Op || op_info(p->op()).kind != OpKind::View) break;
    v = p->operand(0);
  }
  return v;
}

// Which results of the traced function are tensors of their own in eager: not
// an input, parameter or constant (or a view of one), and not sharing memory
// with an earlier result. Passes may return such a value as something shared
// (x * 1 -> x, a folded constant, two equal results merged by cse); the caller
// may write to its outputs, so those get copied.
std::vector<bool> fresh_outputs(const ir::Graph &traced) {
  std::vector<bool> fresh;
  const std::vector<ir::Value *> &outs = traced.outputs();
  for (size_t i = 0; i < outs.size(); ++i) {
    const ir::Value *base = view_base(outs[i]);
    bool f = base->producer() != nullptr;
    for (size_t j = 0; j < i && f; ++j) f = view_base(outs[j]) != base;
    fresh.push_back(f);
  }
  return fresh;
}

// ---- Reclaiming evicted specializations
//
// Calls find their specialization through raw pointers (CompiledFunction::Impl::fast)
// without a lock or a reference count: a shared counter would cost a tiny call as
// much as its guards. So an evicted specialization is freed only once no call can
// still be using it. Each thread that calls marks itself "in a call" with the
// epoch it entered at (plain stores); an eviction unpublishes the pointer, starts
// a new epoch and makes every thread's marks visible with membarrier(2) (a fence
// on every thread, paid by the evicting thread alone); a retired specialization
// is freed when no thread is in a call that began before it was retired.
// (Without membarrier, callers pay a fence each.)
struct ReaderSlot {
  std::atomic<uint64_t> epoch{0}; // 0: not in a call; else the epoch the outermost call began in
  uint32_t depth = 0;             // nested calls (a compiled function run from another's eager fallback)
};

struct Readers {
  std::mutex mu;
  std::vector<ReaderSlot *> slots;
  std::atomic<uint64_t> epoch{1};
  std::atomic<bool> membarrier{false}; // registered: readers need no fence of their own
  bool tried_membarrier = false;       // guarded by mu
};
Readers &readers() {
  static Readers *r = new Readers; // never destroyed: threads may exit after static destructors run
  return *r;
}

// Once per process, before any call relies on it: with membarrier registered
// a call's marks need no fence of their own. With r.mu held.
void register_membarrier(Readers &r) {
  if (std::exchange(r.tried_membarrier, true)) return;
  if (syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0)
    r.membarrier.store(true, std::memory_order_relaxed);
}

// Registers the thread's slot on first use; unregisters it at thread exit.
struct SlotOwner {
  ReaderSlot slot;
  SlotOwner() {
    Readers &r = readers();
    std::lock_guard<std::mutex> lock(r.mu);
    register_membarrier(r);
    r.slots.push_back(&slot);
  }
  ~SlotOwner() {
    Readers &r = readers();
    std::lock_guard<std::mutex> lock(r.mu);
    r.slots.erase(std::find(r.slots.begin(), r.slots.end(), &slot));
  }
};
__attribute__((tls_model("initial-exec"))) thread_local ReaderSlot *t_reader = nullptr;
ReaderSlot *register_reader() {
  thread_local SlotOwner owner;
  t_reader = &owner.slot;
  return t_reader;
}

// While alive, the calling thread may hold raw Specialization pointers.
class CallSection {
public:
  CallSection() {
    slot_ = t_reader;
    if (!slot_) [[unlikely]]
      slot_ = register_reader();
    if (slot_->depth++ > 0) return;
    slot_->epoch.store(readers().epoch.load(std::memory_order_acquire), std::memory_order_relaxed);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!readers().membarrier.load(std::memory_order_relaxed)) [[unlikely]]
      std::atomic_thread_fence(std::memory_order_seq_cst);
  }
  ~CallSection() {
    if (--slot_->depth == 0) slot_->epoch.store(0, std::memory_order_release);
  }
  CallSection(const CallSection &) = delete;
  CallSection &operator=(const CallSection &) = delete;

private:
  ReaderSlot *slot_;
};

// Starts a new epoch after pointers were unpublished; returns it. Every call
// that entered before it is visible to can_free once this returns.
uint64_t start_epoch() {
  Readers &r = readers();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    register_membarrier(r);
  }
  uint64_t e = r.epoch.fetch_add(1, std::memory_order_acq_rel) + 1;
  if (!r.membarrier.load(std::memory_order_relaxed) ||
      syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) != 0)
    std::atomic_thread_fence(std::memory_order_seq_cst);
  return e;
}

// No thread is in a call that began before `epoch` (the retirement's).
bool can_free(uint64_t epoch) {
  Readers &r = readers();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const ReaderSlot *s : r.slots) {
    uint64_t e = s->epoch.load(std::memory_order_acquire);
    if (e != 0 && e < epoch) return false;
  }
  return true;
}

// Eager's dim order of a dense layout, outermost first (stable: equal strides
// keep their dims' order), so that a symbolic specialization can rebuild
// eager's strides at another size.
std::vector<int> dim_order(IntArrayRef strides) {
  std::vector<int> order(strides.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = int(d);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return strides[size_t(a)] > strides[size_t(b)]; });
  return order;
}

// Whether t's dims nest in order `order` without overlap (dims of size 1
// aside): each dim steps past everything its inner dims span, densely (a
// transposed batch) or with gaps (a slice of a longer sequence). Eager lays
// its outputs out in that order too, densely.
bool nested_in(const Tensor &t, const std::vector<int> &order) {
  int64_t span = 1; // elements the inner dims reach, plus one
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    const int64_t size = t.size(*d);
    if (size <= 1) continue;
    if (t.stride(*d) < span) return false;
    span = t.stride(*d) * (size - 1) + span;
  }
  return true;
}

Dims dense_strides(IntArrayRef sizes, const std::vector<int> &order) {
  Dims strides;
  strides.resize(sizes.size());
  int64_t next = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    strides[size_t(*d)] = next;
    next *= std::max<int64_t>(sizes[size_t(*d)], 1);
  }
  return strides;
}

// same_strides(sizes, strides, dense_strides(sizes, order)), without making
// the dense strides (a symbolic call checks each output).
bool dense_in(IntArrayRef sizes, IntArrayRef strides, const std::vector<int> &order) {
  if (strides.size() != order.size()) return false;
  int64_t next = 1;
  for (auto d = order.rbegin(); d != order.rend(); ++d) {
    const int64_t size = sizes[size_t(*d)];
    if (size > 1 && strides[size_t(*d)] != next) return false;
    next *= std::max<int64_t>(size, 1);
  }
  return true;
}

// Whether optimized symbolic graph g holds with any of its symbols at 1 and
// the others at their traced sizes: each node's shape rule at those sizes
// gives its type there (the verifier). Tracing checked the function at those
// points (SymbolicTrace::holds_at_one); this checks what the passes made of it.
bool holds_at_one(const ir::Graph &g, const std::string &name) {
  const std::vector<int64_t> &hints = g.symbol_hints();
  for (uint32_t mask = 1; mask < (1u << hints.size()); ++mask) {
    std::vector<int64_t> values = hints;
    for (size_t k = 0; k < hints.size(); ++k)
      if (mask >> k & 1) values[k] = 1;
    try {
      ir::verify(*ir::instantiate(g, values));
    } catch (const Error &e) {
      log()->info("compile @{}: size 1 specializes: {}", name, e.what());
      return false;
    }
  }
  return true;
}

// Symbols a specialization may bind (ir::kMaxFitSymbols per graph).
constexpr size_t kMaxGuardSymbols = 8;

// The symbols' values a symbolic specialization's guard bound for a call, by
// symbol id: handed to the plan, which then need not bind them again.
using BoundSymbols = std::array<int64_t, kMaxGuardSymbols>;

// The random numbers a traced graph draws per call: its random ops' results
// (a mask draws one per element), each at its offset in the call's block.
int64_t random_draws_of(const ir::Graph &g) {
  int64_t draws = 0;
  for (const ir::Node *n : g.nodes())
    if (n->kind() == ir::Node::Kind::Op && is_random(n->op())) draws += n->result()->type().numel();
  return draws;
}

struct Specialization {
  std::vector<InputGuard> inputs;
  // A symbolic specialization (issue 17): per input, per dim, the symbol its
  // size binds, or -1 for a dim guarded by inputs[i].sizes. Empty: static.
  std::vector<std::vector<int>> dim_symbols;
  std::vector<std::vector<int>> output_orders; // symbolic: per output, eager's dim order (dim_order)
  // Symbolic: per input, the dim order its layout must have (nested_in), for
  // an input the graph reads contiguous (traced so) but calls pass laid out
  // otherwise (a transposed batch, a slice of a longer sequence); empty for an
  // input that must be contiguous. Such an input is copied contiguous per call
  // (relaid_inputs).
  std::vector<std::vector<int>> input_orders;
  bool any_input_order = false;
  static inline const std::vector<int> no_order;
  // Symbolic: a symbol may be 1 in a call (holds_at_one); else 1 specializes.
  bool one_ok = false;
  // Symbolic: how many symbols the guard hands the plan (run_bound), all the
  // graph's; 0 where the plan binds them itself (binds_as_guard does not hold).
  size_t handed_symbols = 0;
  // When this was used last, on the function's clock (Impl::clock): the least
  // recently used specialization is evicted past the cache limit.
  mutable std::atomic<uint64_t> last_used{0};
  // The clock moves only when another specialization was used since this one:
  // calls that keep using one specialization write nothing shared. Plain loads
  // and stores (no read-modify-write): a lost tick only blurs the order.
  void touch(std::atomic<uint64_t> &clock) const {
    uint64_t now = clock.load(std::memory_order_relaxed);
    if (last_used.load(std::memory_order_relaxed) == now) return;
    clock.store(now + 1, std::memory_order_relaxed);
    last_used.store(now + 1, std::memory_order_relaxed);
  }
  std::vector<ParamGuard> params;
  std::vector<int> aliases; // alias_pattern(inputs, params) at compile time
  bool aliases_none = false; // aliases is the identity (see no_aliases)
  std::vector<bool> fresh;  // fresh_outputs of the traced graph, false where the plan allocates the output itself
  bool any_fresh = true;    // some entry of fresh is true: own_outputs has work to do
  std::vector<TracedOutput> traced_outputs; // what eager returns for each output (from the trace)
  bool any_input_view = false;               // some output is (a view of) an input in eager

  // Set once the specialization is complete: what the per-call checks read.
  void summarize() {
    aliases_none = true;
    for (size_t i = 0; i < aliases.size(); ++i) aliases_none &= aliases[i] == int(i);
    any_input_view = false;
    for (const TracedOutput &o : traced_outputs) any_input_view |= o.input >= 0;
    any_fresh = std::find(fresh.begin(), fresh.end(), true) != fresh.end();
    any_input_order = std::any_of(input_orders.begin(), input_orders.end(), [](const auto &o) { return !o.empty(); });
  }

  // Copies each result that eager returns as a tensor of its own but the plan
  // returns as (a view of) an input, a captured tensor, a constant or an
  // earlier result.
  void own_outputs(std::vector<Tensor> &out, const std::vector<Tensor> &in) const {
    if (any_input_view) input_views(out, in);
    relayout_outputs(out);
    if (!any_fresh) return;
    for (size_t i = 0; i < out.size() && i < fresh.size(); ++i) {
      if (!fresh[i] || !shares_memory(out[i], out, i, in)) continue;
      out[i] = out[i].clone();
    }
  }

  // An output the plan computed in another layout than eager's (a pass
  // rewrote its producer) is copied into eager's, so that the caller's later
  // view(), contiguous() and in-place ops behave as after an eager call. Only
  // dense layouts are rebuilt; eager's other outputs are views of inputs or
  // parameters, which the plan returns as the same views.
  void relayout_outputs(std::vector<Tensor> &out) const {
    for (size_t i = 0; i < out.size() && i < traced_outputs.size(); ++i) {
      const Tensor &t = out[i];
      if (dim_symbols.empty() ? same_strides(t.sizes(), t.strides(), traced_outputs[i].strides)
                              : dense_in(t.sizes(), t.strides(), output_orders[i]))
        continue;
      const Dims strides = dim_symbols.empty() ? traced_outputs[i].strides : dense_strides(t.sizes(), output_orders[i]);
      Tensor want = detail::make_view(detail::make_tensor({0}, t.dtype(), true), t.sizes(), strides, 0);
      if (!detail::is_non_overlapping_and_dense(want.impl())) continue;
      Tensor r = detail::make_tensor({t.numel()}, t.dtype()).as_strided(t.sizes(), strides, 0);
      copy_(r, t);
      out[i] = r;
    }
  }

  // Eager returns these outputs in the caller's input memory (the input, or a
  // view of it, possibly updated in place): so does a compiled call, after the
  // plan's write-backs, by taking the same views of the input.
  void input_views(std::vector<Tensor> &out, const std::vector<Tensor> &in) const {
    detail::TracingOff off;
    for (size_t i = 0; i < out.size() && i < traced_outputs.size(); ++i) {
      const TracedOutput &o = traced_outputs[i];
      if (o.input < 0) continue;
      Tensor t = in.at(size_t(o.input));
      for (const TracedOutput::View &v : o.views) t = run_op(v.op, {t}, v.attrs).at(v.result);
      out[i] = t;
    }
  }

  static bool same_strides(IntArrayRef sizes, IntArrayRef a, const Dims &b) {
    if (a.size() != b.size()) return false;
    for (size_t d = 0; d < sizes.size(); ++d)
      if (sizes[d] > 1 && a[d] != b[d]) return false;
    return true;
  }

  bool shares_memory(const Tensor &t, const std::vector<Tensor> &out, size_t i, const std::vector<Tensor> &in) const {
    for (const Tensor &x : in)
      if (t.is_alias_of(x)) return true;
    for (const ParamGuard &p : params)
      if (t.is_alias_of(p.live)) return true;
    for (const ir::Value *c : graph->consts())
      if (t.is_alias_of(c->tensor())) return true;
    for (size_t j = 0; j < i; ++j)
      if (t.is_alias_of(out[j])) return true;
    return false;
  }
  std::shared_ptr<const ir::Graph> graph;  // null when this signature runs eagerly
  std::shared_ptr<codegen::Executable> executable; // null when eager
  std::unique_ptr<detail::ParamFold> fold; // values computed from captured tensors alone; may be null

  // Random numbers the traced function drew (training-mode dropout): each
  // call reserves them at once, and each random op draws its own part.
  int64_t random_draws = 0;

  // Runs the plan on inputs that matched; `bound`: what matches() bound, if it ran.
  std::vector<Tensor> run(const std::vector<Tensor> &in, const BoundSymbols *bound = nullptr) const {
    if (random_draws > 0) [[unlikely]] {
      detail::RandomBlock draws(random_draws);
      return run_plan(in, bound);
    }
    return run_plan(in, bound);
  }

  std::vector<Tensor> run_plan(const std::vector<Tensor> &in, const BoundSymbols *bound) const {
    if (fold) fold->refresh();
    std::vector<Tensor> out = any_input_order ? run_executable(relaid_inputs(in), bound) : run_executable(in, bound);
    own_outputs(out, in);
    for (const detail::TracedGrad &g : grads)
      if (!g.leaf->grad.is_same(g.grad)) [[unlikely]]
        g.leaf->grad = g.grad;
    return out;
  }
  std::vector<Tensor> run_executable(const std::vector<Tensor> &in, const BoundSymbols *bound) const {
    if (!bound || handed_symbols == 0) return executable->run_matched(in);
    return executable->run_bound(in, std::span<const int64_t>(bound->data(), handed_symbols));
  }
  // Whether optimized graph g's inputs are sized as the guard binds them
  // (dim_symbols, from the traced graph): then the guard's values serve the plan.
  bool binds_as_guard(const ir::Graph &g) const {
    if (g.inputs().size() != dim_symbols.size()) return false;
    for (size_t i = 0; i < g.inputs().size(); ++i) {
      const ir::TensorType &t = g.inputs()[i]->type();
      if (t.shape.size() != dim_symbols[i].size()) return false;
      for (size_t d = 0; d < dim_symbols[i].size(); ++d) {
        const ir::SymExpr size = t.symbolic() ? t.sym[d] : ir::SymExpr(t.shape[int64_t(d)]);
        const int id = dim_symbols[i][d];
        if (size != (id >= 0 ? ir::SymExpr::symbol(id) : ir::SymExpr(inputs[i].sizes[d]))) return false;
      }
    }
    return true;
  }
  // The inputs as the graph reads them: contiguous where input_orders holds
  // another layout. The graph neither writes such an input nor returns a view
  // of it (trace_for), so the copy is invisible to the caller.
  std::vector<Tensor> relaid_inputs(const std::vector<Tensor> &in) const {
    std::vector<Tensor> dense = in;
    for (size_t i = 0; i < dense.size(); ++i)
      if (!input_orders[i].empty() && !dense[i].is_contiguous()) dense[i] = dense[i].contiguous();
    return dense;
  }


  std::string eager_reason;

  // Whether the traced function ran a backward that accumulated into leaves (a
  // training step): its graph holds the backward, the gradients' and the
  // optimizer's write-backs, and it matches only calls with grad mode on.
  bool trains = false;
  // The leaves whose grad the plan writes back, and the buffers it writes:
  // after each call every such leaf's grad() is its buffer again, as after an
  // eager step (code outside the plan, an eager zero_grad(), may have reset it).
  std::vector<detail::TracedGrad> grads;

  // Whether a captured tensor requires grad while grad mode is on: the call
  // then runs eagerly so its results carry history (compiled code records
  // none). A training step's backward is in its graph instead.
  bool captures_grad() const {
    if (!detail::autograd_active() || trains) [[likely]]
      return false;
    return std::any_of(params.begin(), params.end(), [](const ParamGuard &p) { return p.live.requires_grad(); });
  }

  // The thread count is no part of the key: kernels, parallel loops and scratch
  // read it when they run, so a plan is right at any count.
  bool matches(const std::vector<Tensor> &in, BoundSymbols *bound = nullptr) const {
    if (in.size() != inputs.size()) return false;
    if (trains && !detail::autograd_active()) [[unlikely]]
      return false; // under no_grad eager's backward() fails: retrace, and fail as eager
    if (!dim_symbols.empty()) {
      BoundSymbols scratch;
      if (!bind_symbols(in, bound ? *bound : scratch).empty()) return false;
    } else {
      for (size_t i = 0; i < in.size(); ++i)
        if (!inputs[i].matches(in[i])) return false;
    }
    for (const ParamGuard &p : params)
      if (!p.holds()) return false;
    return aliases_none ? no_aliases(in, params) : alias_pattern_is(in, params, aliases);
  }

  // A symbolic specialization's guard: "" when `in` binds its symbols (every
  // static dim equal, each symbol's dims equal and at least 2, inputs with a
  // symbolic dim contiguous or nested in their input_orders, the others with
  // their strides), else why not.
  std::string bind_symbols(const std::vector<Tensor> &in) const {
    BoundSymbols value;
    return bind_symbols(in, value);
  }
  std::string bind_symbols(const std::vector<Tensor> &in, BoundSymbols &value) const {
    value.fill(-1);
    std::array<size_t, kMaxGuardSymbols> first{};
    for (size_t i = 0; i < in.size(); ++i) {
      const Tensor &t = in[i];
      const InputGuard &g = inputs[i];
      if (!t.defined() || t.dtype() != g.dtype || size_t(t.dim()) != g.sizes.size()) return describe(i, t, g);
      bool symbolic = false;
      const IntArrayRef sizes = t.sizes(); // (the rank was checked)
      for (size_t d = 0; d < g.sizes.size(); ++d) {
        const int s = dim_symbols[i][d];
        const int64_t v = sizes[d];
        if (s < 0) {
          if (v != g.sizes[d]) return describe(i, t, g);
          continue;
        }
        symbolic = true;
        // (The messages are built only on a miss: this runs on every call.)
        if (v < 2 && !(v == 1 && one_ok))
          return detail::concat("input ", i, " dim ", d, " (s", s, ") is ", v,
                                one_ok ? ": size 0 specializes" : ": sizes 0 and 1 specialize here");
        if (value[size_t(s)] < 0) {
          value[size_t(s)] = v;
          first[size_t(s)] = i;
        } else if (value[size_t(s)] != v) {
          return detail::concat("input ", i, " dim ", d, " (s", s, ") is ", v, " but input ", first[size_t(s)],
                                " bound s", s, " to ", value[size_t(s)]);
        }
      }
      const std::vector<int> &order = input_orders.empty() ? no_order : input_orders[i];
      const bool laid_out = !symbolic               ? same_dims(t.strides(), g.strides)
                            : order.empty() ? t.is_contiguous()
                                            : nested_in(t, order);
      if (!laid_out)
        return detail::concat("input ", i, " strides ", shape_str(t.strides()),
                              !symbolic       ? " are not " + shape_str(g.strides)
                              : order.empty() ? std::string(" are not contiguous")
                                              : " do not nest in the dim order of " +
                                                    shape_str(dense_strides(t.sizes(), order)));
    }
    return "";
  }

  // What the guard of input i says, in the signature's words.
  std::string describe(size_t i, const Tensor &t, const InputGuard &g) const {
    if (!t.defined()) return detail::concat("input ", i, " is undefined");
    if (t.dtype() != g.dtype) return detail::concat("input ", i, " dtype ", t.dtype(), " != ", g.dtype);
    std::string want = "[";
    for (size_t d = 0; d < g.sizes.size(); ++d) {
      if (d) want += ", ";
      want += dim_symbols[i][d] < 0 ? std::to_string(g.sizes[d]) : "s" + std::to_string(dim_symbols[i][d]);
    }
    return detail::concat("input ", i, " shape ", shape_str(t.sizes()), " != ", want, "]");
  }
};

// Why `in` does not match `s`: the first difference, in the words users read,
// and how far the check got (a later stage means a closer specialization).
std::pair<std::string, int> mismatch(const Specialization &s, const std::vector<Tensor> &in) {
  std::ostringstream os;
  if (in.size() != s.inputs.size()) {
    os << "number of inputs " << in.size() << " != " << s.inputs.size();
    return {os.str(), 0};
  }
  if (!s.dim_symbols.empty()) {
    if (std::string why = s.bind_symbols(in); !why.empty()) return {why, 2};
  }
  for (int stage = 1; stage <= 3 && s.dim_symbols.empty(); ++stage)
    for (size_t i = 0; i < in.size(); ++i) {
      const InputGuard &g = s.inputs[i];
      const Tensor &t = in[i];
      if (stage == 1 && !t.defined()) os << "input " << i << " is undefined";
      else if (stage == 1 && t.dtype() != g.dtype) os << "input " << i << " dtype " << t.dtype() << " != " << g.dtype;
      else if (stage == 2 && t.sizes() != IntArrayRef(g.sizes))
        os << "input " << i << " shape " << shape_str(t.sizes()) << " != " << shape_str(g.sizes);
      else if (stage == 3 && t.strides() != IntArrayRef(g.strides))
        os << "input " << i << " strides " << shape_str(t.strides()) << " != " << shape_str(g.strides);
      if (os.tellp() > 0) return {os.str(), stage};
    }
  for (const ParamGuard &p : s.params)
    if (!p.holds()) {
      os << "a captured tensor changed from " << p.dtype << shape_str(p.sizes) << " to " << p.live.dtype()
         << shape_str(p.live.sizes());
      return {os.str(), 5};
    }
  std::vector<int> aliases = alias_pattern(in, s.params);
  for (size_t i = 0; i < aliases.size(); ++i)
    if (aliases[i] != s.aliases[i]) {
      os << "input " << i << " shares memory with "
         << (aliases[i] == int(i) ? std::string("nothing") : aliases[i] < int(in.size())
                                                                ? "input " + std::to_string(aliases[i])
                                                                : std::string("a captured tensor"))
         << " now";
      return {os.str(), 6};
    }
  return {"no specialization yet", 0};
}

} // namespace

struct CompiledFunction::Impl {
  ModelFn fn;
  CompileOptions options;
  Fallback fallback;

  mutable std::shared_mutex mu; // guards specs, retired and the stats strings
  std::vector<std::shared_ptr<Specialization>> specs; // at most options.cache_limit
  // Specializations again, for calls to look up without a lock or a reference
  // count. An entry is published once its Specialization is complete; an
  // evicted one is unpublished and freed only when no call can be using it
  // (see CallSection), so a pointer read here stays valid for the call.
  static constexpr size_t kFastSpecs = 8;
  std::array<std::atomic<const Specialization *>, kFastSpecs> fast{};
  // Evicted, waiting until no call that may have seen them runs: (epoch, spec).
  std::vector<std::pair<uint64_t, std::shared_ptr<Specialization>>> retired;
  std::mutex compile_mu; // one compile at a time per function
  // calls: those no plan ran (each plan counts its own, see CompileStats::calls).
  std::atomic<int64_t> calls{0}, compiles{0}, eager_calls{0}, evicted_calls{0};
  // Advanced when a call uses another specialization than the last one; see Specialization::touch.
  mutable std::atomic<uint64_t> clock{1};
  std::string last_fallback_reason, last_recompile_reason;

  // Same answer as find() when the match is published in `fast`; null otherwise.
  // Only inside a CallSection.
  const Specialization *find_fast(const std::vector<Tensor> &in, BoundSymbols &bound) const {
    for (const auto &slot : fast) {
      const Specialization *s = slot.load(std::memory_order_acquire);
      if (!s || !s->matches(in, &bound)) continue;
      s->touch(clock);
      return s;
    }
    return nullptr;
  }

  std::shared_ptr<Specialization> find(const std::vector<Tensor> &in) const {
    std::shared_lock lock(mu);
    for (const auto &s : specs)
      if (s->matches(in)) {
        s->touch(clock);
        return s;
      }
    return nullptr;
  }

  std::vector<Tensor> run_eager(const std::vector<Tensor> &in) {
    eager_calls.fetch_add(1, std::memory_order_relaxed);
    return fn(in);
  }

  // Compiled code records no backward: with grad mode on, a call whose input or
  // captured tensor requires grad runs eagerly, so its results carry history
  // (torch.compile's do too). A whole training step compiles as one graph
  // instead (issue 18); this keeps results equal to eager's meanwhile.
  std::vector<Tensor> run_eager_for_grad(const std::vector<Tensor> &in) {
    note_fallback("a tensor it reads requires grad and grad mode is on (compiled code records no backward)");
    calls.fetch_add(1, std::memory_order_relaxed);
    return run_eager(in);
  }

  void note_fallback(const std::string &reason) {
    std::unique_lock lock(mu);
    if (last_fallback_reason != reason) log()->warn("compile @{}: running eagerly: {}", options.name, reason);
    last_fallback_reason = reason;
  }

  // The traced graph of `spec`: symbolic over `dims` where the graph allows,
  // and where each output eager returns as a view of an input is one whose
  // view ops do not hold sizes; else static.
  std::shared_ptr<ir::Graph> trace_for(Specialization &spec, const std::vector<Tensor> &in,
                                       const std::vector<InputDim> &dims) {
    if (dims.empty()) return trace(fn, in, options.name, &spec.traced_outputs);
    if (std::shared_ptr<ir::Graph> g = trace_relaid(spec, in, dims)) return g;
    SymbolicTrace st = trace_symbolic(fn, in, dims, options.name, &spec.traced_outputs);
    return finish_symbolic(spec, in, st);
  }

  // An input laid out otherwise than row-major without overlap (a transposed
  // batch, a slice of a longer sequence) has no symbolic type: the IR's
  // symbolic types have no strides. Such an input is
  // traced contiguous instead, and each call copies it contiguous, when the
  // copy cannot be seen: the function updates nothing in place and returns
  // no view of it. Eager's output layouts follow the input's, so they come
  // from a trace with the input as given. Null when this does not apply (no
  // such input, or no symbol kept): trace_for traces as usual.
  std::shared_ptr<ir::Graph> trace_relaid(Specialization &spec, const std::vector<Tensor> &in,
                                          const std::vector<InputDim> &dims) {
    std::vector<Tensor> dense = in;
    std::vector<std::vector<int>> orders(in.size());
    for (const InputDim &d : dims) {
      const Tensor &t = in[d.input];
      if (!orders[d.input].empty() || t.is_contiguous() || !nested_in(t, dim_order(t.strides()))) continue;
      orders[d.input] = dim_order(t.strides());
      dense[d.input] = t.contiguous();
    }
    if (std::all_of(orders.begin(), orders.end(), [](const auto &o) { return o.empty(); })) return nullptr;
    std::vector<TracedOutput> outputs;
    SymbolicTrace st;
    std::string why;
    try {
      st = trace_symbolic(fn, dense, dims, options.name, &outputs);
      if (st.graph->symbol_hints().empty()) why = "no size turned symbolic";
      else if (!st.graph->write_backs().empty()) why = "the function updates tensors in place";
    } catch (const Error &e) { // a view only the given layout allows (x.t().view(...) of a transposed x)
      why = detail::concat("the function fails on a contiguous copy: ", e.what());
    }
    for (const TracedOutput &o : outputs)
      if (o.input >= 0 && !orders[size_t(o.input)].empty()) why = "an output is (a view of) the input";
    if (!why.empty()) {
      log()->info("compile @{}: a strided input keeps its strides: {}", options.name, why);
      detail::take_traced_grads(); // the retrace records its own
      return nullptr;
    }
    std::vector<TracedOutput> eager_outputs; // the layouts eager returns for `in` as given
    trace(fn, in, options.name, &eager_outputs);
    KILN_CHECK(eager_outputs.size() == outputs.size(), "internal: compile @", options.name,
               ": the function returns ", eager_outputs.size(), " outputs for a strided input but ", outputs.size(),
               " for a contiguous one");
    for (size_t i = 0; i < outputs.size(); ++i) outputs[i].strides = eager_outputs[i].strides;
    spec.traced_outputs = std::move(outputs);
    spec.input_orders = std::move(orders);
    std::shared_ptr<ir::Graph> g = finish_symbolic(spec, dense, st);
    if (g->symbol_hints().empty()) { // a static graph of the contiguous inputs: trace them as given
      spec.input_orders.clear();
      detail::take_traced_grads();
      return nullptr;
    }
    log()->info("compile @{}: strided inputs are copied contiguous in each call", options.name);
    return g;
  }

  // The graph of a symbolic trace, and what `spec` keeps of it; a static trace
  // of `in` where the symbols cannot hold for the whole function.
  std::shared_ptr<ir::Graph> finish_symbolic(Specialization &spec, const std::vector<Tensor> &in, SymbolicTrace &st) {
    for (const std::string &why : st.static_reasons) log()->info("compile @{}: stays static: {}", options.name, why);
    std::shared_ptr<ir::Graph> g = st.graph;
    if (g->symbol_hints().empty()) return g;
    if (random_draws_of(*g) > 0) {
      log()->info("compile @{}: specializing every size: the function draws random numbers (dropout), and where "
                  "each op's draws start follows the sizes",
                  options.name);
      return trace(fn, in, options.name, &spec.traced_outputs);
    }
    spec.one_ok = st.holds_at_one; // and the optimized graph, checked in build()
    for (const TracedOutput &o : spec.traced_outputs)
      for (const TracedOutput::View &v : o.views)
        if (ir::sizes_in_attrs(v.op)) {
          log()->info("compile @{}: specializing every size: an output is a {} of an input, whose sizes it holds",
                      options.name, op_info(v.op).mnemonic);
          return trace(fn, in, options.name, &spec.traced_outputs);
        }
    KILN_CHECK(g->symbol_hints().size() <= kMaxGuardSymbols, "compile @", options.name, ": more than ",
               kMaxGuardSymbols, " symbols");
    for (const ir::Value *v : g->inputs()) {
      const ir::TensorType &t = v->type();
      std::vector<int> syms(t.shape.size(), -1);
      for (size_t d = 0; t.symbolic() && d < t.sym.size(); ++d) {
        if (t.sym[d].is_constant()) continue;
        const int id = t.sym[d].symbols().front();
        KILN_CHECK(t.sym[d] == ir::SymExpr::symbol(id), "internal: compile @", options.name, ": input dim ", d,
                   " is ", t.sym[d].str(), ", not a symbol");
        syms[d] = id;
      }
      spec.dim_symbols.push_back(std::move(syms));
    }
    for (size_t i = 0; i < spec.traced_outputs.size(); ++i)
      spec.output_orders.push_back(dim_order(spec.traced_outputs[i].strides));
    std::string symbols;
    for (size_t k = 0; k < st.symbols.size(); ++k) {
      symbols += detail::concat(k ? "; " : "", "s", k, " =");
      for (const InputDim &d : st.symbols[k]) symbols += detail::concat(" input ", d.input, " dim ", d.dim);
    }
    log()->info("compile @{}: one specialization for every size of {}", options.name, symbols);
    return g;
  }

  // The dims a new specialization for `in` makes symbolic: dynamic_dims; under
  // On every dim; under Auto those in which `in` differs from a compiled
  // specialization with the same dtypes and ranks (and that one's symbols);
  // never static_dims.
  std::vector<InputDim> dims_to_make_dynamic(const std::vector<Tensor> &in) const {
    std::vector<InputDim> dims = checked_dims(in, options.dynamic_dims);
    const std::vector<InputDim> fixed = checked_dims(in, options.static_dims);
    if (options.dynamic == Dynamic::On) dims = every_input_dim(in);
    if (options.dynamic == Dynamic::Auto)
      for (const InputDim &d : differing_dims(in)) dims.push_back(d);
    std::erase_if(dims, [&](const InputDim &d) {
      return std::any_of(fixed.begin(), fixed.end(), [&](const InputDim &e) { return e.input == d.input && e.dim == d.dim; });
    });
    return checked_dims(in, dims);
  }

  // With compile_mu held: the dims in which `in` differs in sizes alone from
  // a compiled specialization, or which are symbolic in one, over them all (a
  // dim that took two sizes stays dynamic, even where another layout of the
  // inputs specializes anew).
  std::vector<InputDim> differing_dims(const std::vector<Tensor> &in) const {
    std::vector<InputDim> all;
    std::shared_lock lock(mu);
    for (const auto &sp : specs) {
      if (!sp->executable || sp->inputs.size() != in.size()) continue;
      std::vector<InputDim> dims;
      bool comparable = true;
      for (size_t i = 0; i < in.size() && comparable; ++i) {
        const InputGuard &g = sp->inputs[i];
        comparable = in[i].defined() && in[i].dtype() == g.dtype && size_t(in[i].dim()) == g.sizes.size();
        for (size_t d = 0; comparable && d < g.sizes.size(); ++d) {
          const bool symbolic = !sp->dim_symbols.empty() && sp->dim_symbols[i][d] >= 0;
          if (symbolic || in[i].size(int64_t(d)) != g.sizes[d]) dims.push_back({i, int64_t(d)});
        }
      }
      if (comparable) all.insert(all.end(), dims.begin(), dims.end());
    }
    return all; // checked_dims drops the repeats
  }

  // The specialization for `in`, with `dims` symbolic where the graph allows
  // (none: static).
  std::shared_ptr<Specialization> build(const std::vector<Tensor> &in, const std::vector<InputDim> &dims) {
    auto spec = std::make_shared<Specialization>();
    for (const Tensor &t : in) {
      KILN_CHECK(t.defined(), "compile @", options.name, ": an input is an undefined tensor");
      spec->inputs.push_back({t.dtype(), Dims(t.sizes()), Dims(t.strides())});
    }
    try {
      detail::take_traced_grads();
      std::shared_ptr<ir::Graph> g = trace_for(*spec, in, dims);
      spec->grads = detail::take_traced_grads();
      spec->random_draws = random_draws_of(*g); // before dce: every mask eager draws
      spec->trains = !spec->grads.empty();
      spec->fresh = fresh_outputs(*g);
      const bool symbolic = !g->symbol_hints().empty();
      std::string pipeline = options.pipeline.empty() ? passes::default_pipeline() : options.pipeline;
      if (symbolic) pipeline = passes::symbolic_pipeline(pipeline);
      passes::PipelineOptions dumps = passes::PipelineOptions::from_env();
      passes::use_graph_dump_dir(dumps, *g); // KILN_DUMP_DIR: a folder per function and specialization
      passes::run_pipeline(*g, pipeline, dumps);
      if (fold_params_from_env() && !symbolic) spec->fold = detail::ParamFold::extract(*g);
      for (const ir::Value *p : g->params())
        spec->params.push_back({p->tensor(), p->tensor().dtype(), Dims(p->tensor().sizes())});
      spec->aliases = alias_pattern(in, spec->params);
      // Tracing sees each input and captured tensor as its own buffer; with an
      // in-place update, shared memory would make the graph read stale values.
      for (size_t i = 0; i < spec->aliases.size(); ++i)
        if (spec->aliases[i] != int(i) && !g->write_backs().empty())
          throw TraceError(detail::concat("input ", i, " shares memory with ",
                                          spec->aliases[i] < int(in.size()) ? "another input" : "a captured tensor",
                                          " and the function updates tensors in place"));
      spec->executable = symbolic ? codegen::make_symbolic_executable(g) : codegen::make_executable(g, in);
      if (symbolic && spec->binds_as_guard(*g)) spec->handed_symbols = g->symbol_hints().size();
      if (symbolic) spec->one_ok = spec->one_ok && holds_at_one(*g, options.name);
      spec->graph = g;
      // An output the plan allocates in every call is a tensor of its own already.
      std::vector<bool> owned = spec->executable->outputs_allocated_per_call();
      for (size_t i = 0; i < spec->fresh.size() && i < owned.size(); ++i)
        if (owned[i]) spec->fresh[i] = false;
    } catch (const Error &e) {
      if (fallback == Fallback::Off) throw Error(detail::concat("compile @", options.name, ": ", e.what()));
      spec->eager_reason = e.what();
      spec->trains = false;
      spec->grads.clear();
      spec->random_draws = 0;
      spec->dim_symbols.clear();
      spec->handed_symbols = 0;
      spec->graph = nullptr;
      spec->executable = nullptr;
      spec->fold = nullptr;
      spec->params.clear();
      spec->aliases = alias_pattern(in, spec->params);
    }
    spec->summarize();
    compiles.fetch_add(1, std::memory_order_relaxed);
    return spec;
  }

  // Finds or builds the specialization for `in`. A compiled one is cached
  // here; one that runs eagerly is cached by the caller once an eager call
  // with it succeeded (add), so that calls that throw (a wrong feature size
  // fails tracing and eager alike) take no slot.
  std::shared_ptr<Specialization> select(const std::vector<Tensor> &in) {
    if (auto s = find(in)) return s;
    std::lock_guard<std::mutex> one_compile(compile_mu);
    if (auto s = find(in)) return s; // another thread built it meanwhile
    {
      std::unique_lock lock(mu);
      if (!specs.empty()) {
        // Report the difference from the closest specialization.
        std::pair<std::string, int> best{"", -1};
        for (const auto &sp : specs) {
          auto m = mismatch(*sp, in);
          if (m.second >= best.second) best = m;
        }
        last_recompile_reason = best.first;
        log()->info("compile @{}: recompiling: {}", options.name, last_recompile_reason);
      }
    }
    auto spec = build(in, dims_to_make_dynamic(in));
    spec->touch(clock);
    if (!spec->executable) {
      note_fallback(spec->eager_reason);
      return spec;
    }
    add_locked(spec);
    return spec;
  }

  // Caches an eager specialization whose call succeeded (unless another
  // thread cached one for the same signature meanwhile).
  void add(const std::shared_ptr<Specialization> &spec, const std::vector<Tensor> &in) {
    std::lock_guard<std::mutex> one_compile(compile_mu);
    if (find(in)) return;
    add_locked(spec);
  }

  // With compile_mu held: caches `spec`, evicting the least recently used
  // specialization when the cache is full.
  void add_locked(const std::shared_ptr<Specialization> &spec) {
    std::unique_lock lock(mu);
    if (int(specs.size()) >= options.cache_limit) evict_lru();
    specs.push_back(spec);
    for (auto &slot : fast)
      if (!slot.load(std::memory_order_relaxed)) {
        slot.store(spec.get(), std::memory_order_release);
        break;
      }
    free_retired();
  }

  // With mu held exclusively.
  void evict_lru() {
    auto victim = std::min_element(specs.begin(), specs.end(), [](const auto &a, const auto &b) {
      return a->last_used.load(std::memory_order_relaxed) < b->last_used.load(std::memory_order_relaxed);
    });
    std::shared_ptr<Specialization> old = *victim;
    specs.erase(victim);
    for (auto &slot : fast)
      if (slot.load(std::memory_order_relaxed) == old.get()) slot.store(nullptr, std::memory_order_release);
    log()->info("compile @{}: cache limit {} reached; evicting the least recently used specialization ({})",
                options.name, options.cache_limit, signature(*old));
    retired.emplace_back(start_epoch(), std::move(old));
  }

  // With mu held exclusively: frees the retired specializations no call can
  // still be using: none found it without a reference (can_free) and none holds
  // one (a call that built or found it the slow way; its plan has yet to count it).
  void free_retired() {
    for (size_t i = 0; i < retired.size();) {
      if (retired[i].second.use_count() > 1 || !can_free(retired[i].first)) {
        ++i;
        continue;
      }
      if (retired[i].second->executable) evicted_calls.fetch_add(retired[i].second->executable->calls());
      retired.erase(retired.begin() + long(i));
    }
  }

  static std::string signature(const Specialization &s) {
    std::ostringstream os;
    for (size_t i = 0; i < s.inputs.size(); ++i)
      os << (i ? ", " : "") << s.inputs[i].dtype << shape_str(s.inputs[i].sizes);
    return os.str();
  }
};

namespace {
// A default-constructed CompiledFunction has no Impl: calling it is a user
// error, reported rather than dereferenced.
CompiledFunction::Impl &checked(const std::shared_ptr<CompiledFunction::Impl> &impl) {
  KILN_CHECK(impl, "CompiledFunction: called on a default-constructed object; create it with kiln::compile(fn)");
  return *impl;
}
} // namespace

std::vector<Tensor> CompiledFunction::operator()(const std::vector<Tensor> &inputs) const {
  Impl &impl = checked(impl_);
  // Called from a model being traced (a compiled function inside another, or
  // itself): run the model so its ops are recorded into the outer graph. A
  // specialization built here would hold meta inputs, fail ("already
  // tracing"), and a call back into this function would wait on compile_mu
  // forever.
  if (detail::tracing()) return impl.fn(inputs);
  if (detail::autograd_wants(inputs)) [[unlikely]]
    return impl.run_eager_for_grad(inputs);
  if (impl.fallback == Fallback::Force) {
    impl.calls.fetch_add(1, std::memory_order_relaxed);
    return impl.run_eager(inputs);
  }
  {
    CallSection in_call; // keeps a specialization found below alive until the call returns
    BoundSymbols bound; // (filled by a symbolic specialization's guard)
    if (const Specialization *spec = impl.find_fast(inputs, bound)) {
      if (!spec->executable) {
        impl.calls.fetch_add(1, std::memory_order_relaxed);
        return impl.run_eager(inputs);
      }
      if (spec->captures_grad()) [[unlikely]]
        return impl.run_eager_for_grad(inputs);
      // The guards above checked every input against the plan's signature. The
      // plan counts the call: a locked add here would cost as much as the guards.
      return spec->run(inputs, &bound);
    }
  }
  std::shared_ptr<Specialization> spec; // found or built the slow way
  try {
    spec = impl.select(inputs);
  } catch (...) {
    impl.calls.fetch_add(1, std::memory_order_relaxed);
    throw;
  }
  if (!spec->executable) {
    impl.calls.fetch_add(1, std::memory_order_relaxed);
    std::vector<Tensor> out = impl.run_eager(inputs);
    impl.add(spec, inputs); // cached only now: a call that throws takes no slot
    return out;
  }
  if (spec->captures_grad()) [[unlikely]]
    return impl.run_eager_for_grad(inputs);
  return spec->run(inputs);
}

std::shared_ptr<const ir::Graph> CompiledFunction::graph_for(const std::vector<Tensor> &inputs) const {
  if (checked(impl_).fallback == Fallback::Force || detail::tracing()) return nullptr;
  return impl_->select(inputs)->graph;
}

int64_t CompiledFunction::kernels_per_call(const std::vector<Tensor> &inputs) const {
  if (checked(impl_).fallback == Fallback::Force || detail::tracing()) return -1;
  auto spec = impl_->select(inputs);
  return spec->executable ? spec->executable->stats().kernels : -1;
}

CompileStats CompiledFunction::stats() const {
  const Impl &impl = checked(impl_);
  CompileStats s;
  s.calls = impl.calls.load();
  s.compiles = impl.compiles.load();
  s.eager_calls = impl.eager_calls.load();
  std::shared_lock lock(impl.mu);
  s.calls += impl.evicted_calls.load();
  for (const auto &[epoch, spec] : impl.retired)
    if (spec->executable) s.calls += spec->executable->calls();
  s.specializations = int64_t(impl.specs.size());
  for (const auto &spec : impl.specs) {
    if (!spec->executable) continue;
    s.dynamic_specializations += !spec->dim_symbols.empty();
    s.peak_arena_bytes = std::max(s.peak_arena_bytes, spec->executable->stats().arena_bytes);
    s.packed_weight_bytes += spec->executable->stats().packed_weight_bytes;
    s.calls += spec->executable->calls();
  }
  s.last_fallback_reason = impl.last_fallback_reason;
  s.last_recompile_reason = impl.last_recompile_reason;
  return s;
}

CompiledFunction compile(ModelFn fn, CompileOptions options) {
  KILN_CHECK(fn, "compile: the model function is empty");
  KILN_CHECK(options.cache_limit >= 1, "compile: cache_limit must be >= 1, got ", options.cache_limit);
  for (const InputDim &d : options.dynamic_dims)
    for (const InputDim &e : options.static_dims)
      KILN_CHECK(d.input != e.input || d.dim != e.dim, "compile: input ", d.input, " dim ", d.dim,
                 " is in both dynamic_dims and static_dims");
  CompiledFunction f;
  f.impl_ = std::make_shared<CompiledFunction::Impl>();
  f.impl_->fn = std::move(fn);
  f.impl_->fallback = options.fallback.value_or(fallback_from_env());
  f.impl_->options = std::move(options);
  return f;
}

} // namespace kiln
