// The compiled executor: builds a plan from an optimized graph and runs it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "codegen/epilogue.h"
#include "codegen/executable.h"
#include "codegen/jit.h"
#include "codegen/lowering.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/memory_plan.h"
#include "runtime/allocator.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::codegen {

namespace {
// initial-exec: read on every call, and the general TLS model of a shared
// library would make that a __tls_get_addr call.
__attribute__((tls_model("initial-exec"))) thread_local const StepObserver *t_step_observer = nullptr;

double steady_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
} // namespace

ScopedStepObserver::ScopedStepObserver(StepObserver observer)
    : observer_(std::move(observer)), saved_(t_step_observer) {
  t_step_observer = &observer_;
}
ScopedStepObserver::~ScopedStepObserver() { t_step_observer = saved_; }
const StepObserver *current_step_observer() { return t_step_observer; }

namespace {

struct Step {
  // Skip: a view that only kernels read; they address its base directly.
  // Epilogue: a contraction with its fused epilogue (codegen/epilogue.h).
  enum class Kind { Eager, Kernel, EagerGroup, Skip, Epilogue } kind;
  const ir::Node *node = nullptr;
  std::vector<int> in;  // env slots; -1 = absent optional operand
  std::vector<int> out; // env slots
  std::shared_ptr<const CompiledKernel> kernel;
  std::shared_ptr<const EpilogueStep> epilogue; // Epilogue
  std::vector<size_t> buffer_operands; // Kernel: which of `in` are input buffers
  // Kernel: per buffer (inputs, then outputs), the env slot it lies in and the
  // byte offset from that slot's element 0 (a view resolved to its base).
  std::vector<std::pair<int, int64_t>> buffer_refs;
  // Kernel: each result's shape, contiguous strides and element count, checked
  // once here so that a call allocates its outputs without deriving them.
  // The few fields a call reads come first, next to each other.
  struct OutShape {
    bool allocate; // no arena slot: a fresh tensor per call (set by use_memory_plan)
    int slot;
    int64_t numel;
    DType dtype;
    Dims sizes, strides;
  };
  std::vector<OutShape> out_shapes;
  CompiledKernel::Fn fn = nullptr; // Kernel: kernel->fn(), one indirection less per call
  bool stream_stores = false;             // Kernel: compiled with KernelDesc::stream_stores
  // Eager: the arena slots its results are placed in (those that have one).
  struct Place {
    int64_t offset, bytes;
    DType dtype;
  };
  std::vector<Place> places;
  // Epilogue: bytes of per-call scratch, at scratch_offset_ in the arena.
  int64_t scratch_bytes = 0;
  // Its name in a trace (StepEvent::name): the IR value it computes, as the
  // dump prints it, then the kernel symbol or what runs ("%86 kiln_k_...").
  std::string label;
};

// The mutable state of one running call: the arena and the value table. A plan
// keeps a pool of them so that concurrent calls never share one and a
// steady-state call allocates nothing for them.
struct CallState {
  void *arena = nullptr;
  size_t arena_bytes = 0;
  std::vector<Tensor> env;  // per slot: the value (arena slots hold fixed views)
  std::vector<void *> ptr;  // per slot: address of element 0
  std::vector<Tensor> ins;  // scratch operands of an eager step
  bool primary = false;     // the plan's first state (see Plan::acquire)
  // Calls run with this state. Only the call holding the state writes it, so
  // a load and a store count (no locked read-modify-write); Plan::calls() reads.
  std::atomic<int64_t> calls{0};
  void count_call() { calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  ~CallState() {
    env.clear();
    if (arena) cached_free(arena, arena_bytes);
  }
};

class Plan final : public Executable {
public:
  Plan(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &example) : g_(std::move(g)) {
    auto t0 = std::chrono::steady_clock::now();
    const ir::Graph &graph = *g_;
    KILN_CHECK(example.size() == graph.inputs().size(), "compile @", graph.name(), ": expected ",
               graph.inputs().size(), " inputs, got ", example.size());
    // Metadata of every value at build time: meta tensors carry the strides that
    // views produce, so kernels can be specialised to them.
    std::vector<Tensor> meta;
    auto define = [&](const ir::Value *v, Tensor m) {
      slot_[v] = int(meta.size());
      meta.push_back(std::move(m));
    };
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      const Tensor &t = example[i];
      KILN_CHECK(t.defined(), "compile @", graph.name(), ": input ", i, " is an undefined tensor");
      expected_.push_back({t.dtype(), Dims(t.sizes()), Dims(t.strides())});
      define(graph.inputs()[i], kiln::detail::make_view(kiln::detail::make_tensor({0}, t.dtype(), true), t.sizes(), t.strides(), 0));
    }
    for (const ir::Value *p : graph.params()) define(p, p->tensor());
    for (const ir::Value *c : graph.consts()) define(c, c->tensor());
    num_fixed_ = meta.size();

    kiln::detail::TracingOff no_trace;
    for (const ir::Node *n : graph.nodes()) {
      Step s;
      s.node = n;
      std::vector<Tensor> ins;
      for (const ir::Value *v : n->operands()) {
        s.in.push_back(v ? slot_.at(v) : -1);
        ins.push_back(v ? as_meta(meta[size_t(slot_.at(v))]) : Tensor());
      }
      std::vector<Tensor> outs;
      if (n->kind() == ir::Node::Kind::FusionGroup) {
        outs = plan_group(*n, ins, s);
      } else {
        s.kind = Step::Kind::Eager;
        outs = run_op(n->op(), ins, n->attrs());
        ++stats_.eager_steps;
      }
      count_bytes(*n);
      for (size_t i = 0; i < n->results().size(); ++i) {
        s.out.push_back(int(meta.size()));
        define(n->results()[i], outs.at(i));
      }
      resolve_view(s, ins, meta);
      s.label = label_of(s);
      if (s.kind == Step::Kind::Kernel)
        kiln::log()->debug("codegen: %{} runs as kernel {}", n->result()->name(), s.kernel->symbol());
      steps_.push_back(std::move(s));
    }
    num_slots_ = meta.size();
    skip_unneeded_views();
    for (const ir::Value *o : graph.outputs()) outputs_.push_back(slot_.at(o));
    for (const ir::WriteBack &w : graph.write_backs()) write_backs_.push_back({slot_.at(w.target), slot_.at(w.value)});
    use_memory_plan(graph);
    stats_.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  std::vector<Tensor> run(const std::vector<Tensor> &inputs) const override {
    check_inputs(inputs);
    return run_matched(inputs);
  }

  std::vector<Tensor> run_matched(const std::vector<Tensor> &inputs) const override {
    CallState &st = *acquire();
    st.count_call();
    std::vector<Tensor> out;
    try {
      out = run_with(st, inputs);
    } catch (...) {
      clear(st);
      release(&st);
      throw;
    }
    clear(st);
    release(&st);
    return out;
  }

  PlanStats stats() const override { return stats_; }

  int64_t calls() const override {
    std::lock_guard<std::mutex> lock(pool_mu_);
    int64_t n = retired_calls_;
    for (const CallState *st : states_) n += st->calls.load(std::memory_order_relaxed);
    return n;
  }

  std::vector<bool> outputs_allocated_per_call() const override {
    return std::vector<bool>(output_owned_.begin(), output_owned_.end());
  }

private:
  struct Expected {
    DType dtype;
    Dims sizes, strides;
  };

  // Kernels index buffers with the shapes and strides the plan was built for:
  // anything else would read out of bounds, so it is an error here.
  void check_inputs(const std::vector<Tensor> &inputs) const {
    const std::string &name = g_->name();
    KILN_CHECK(inputs.size() == expected_.size(), "compile @", name, ": expected ", expected_.size(),
               " inputs, got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const Tensor &t = inputs[i];
      const Expected &e = expected_[i];
      KILN_CHECK(t.defined(), "compile @", name, ": input ", i, " is an undefined tensor");
      if (t.dtype() == e.dtype && t.sizes() == IntArrayRef(e.sizes) && t.strides() == IntArrayRef(e.strides))
        continue;
      KILN_FAIL("compile @", name, ": input ", i, " is ", t.dtype(), shape_str(t.sizes()), " with strides ",
                shape_str(t.strides()), " but the plan was built for ", e.dtype, shape_str(e.sizes), " with strides ",
                shape_str(e.strides));
    }
  }

  // Constants belong to the plan and are shared by every call; an output the
  // caller may write to (eager's results are its own) must not be one.
  bool is_constant(const Tensor &t) const {
    for (const ir::Value *c : g_->consts())
      if (t.is_alias_of(c->tensor())) return true;
    return false;
  }

  std::vector<Tensor> run_with(CallState &st, const std::vector<Tensor> &inputs) const {
    const ir::Graph &graph = *g_;
    // Values only kernels read need just their address (no reference count traffic).
    auto bind_fixed = [&](size_t slot, const Tensor &t) {
      if (tensor_needed_[slot]) bind(st, slot, t);
      else st.ptr[slot] = t.defined() && !t.is_meta() ? t.raw_data() : nullptr;
    };
    for (size_t i = 0; i < inputs.size(); ++i) bind_fixed(i, inputs[i]);
    size_t k = inputs.size();
    // Captured tensors are read live (their data may move between calls);
    // constants are the plan's own and were bound with the call state.
    for (const ir::Value *p : graph.params()) bind_fixed(k++, p->tensor());
    void *buffers[64];
    const StepObserver *observer = t_step_observer;
    for (const Step &s : steps_) {
      if (s.kind == Step::Kind::Skip) continue;
      const double t0 = observer ? steady_us() : 0;
      run_step(s, st, buffers);
      if (observer) (*observer)(StepEvent{category(s), step_name(s), t0, steady_us() - t0});
    }
    for (auto [target, value] : write_backs_) {
      Tensor t = st.env[size_t(target)];
      copy_(t, st.env[size_t(value)]);
    }
    std::vector<Tensor> out;
    out.reserve(outputs_.size());
    for (size_t i = 0; i < outputs_.size(); ++i) {
      Tensor &t = st.env[size_t(outputs_[i])];
      if (output_owned_[i]) { // the call's own allocation, returned once: hand it over
        out.push_back(std::move(t));
        continue;
      }
      // The memory plan keeps outputs out of the arena; should an eager op have
      // returned a view of an arena value anyway, the caller gets a copy.
      out.push_back(in_arena(st, t) || is_constant(t) ? t.clone() : t);
    }
    return out;
  }

  // By value: a fresh result moves in without touching its reference count.
  static void bind(CallState &st, size_t slot, Tensor t) {
    st.ptr[slot] = t.defined() && !t.is_meta() ? t.raw_data() : nullptr;
    st.env[slot] = std::move(t);
  }

  bool in_arena(const CallState &st, const Tensor &t) const {
    if (!st.arena || !t.defined() || t.is_meta() || t.numel() == 0) return false;
    auto *p = static_cast<const char *>(t.raw_data()), *a = static_cast<const char *>(st.arena);
    return p >= a && p < a + st.arena_bytes;
  }

  // Drops the references a call took (inputs, eager results), keeping the
  // arena's fixed views.
  void clear(CallState &st) const {
    for (int s : transient_slots_) st.env[size_t(s)] = Tensor();
    for (Tensor &t : st.ins) t = Tensor();
  }

  // A call at a time runs on the primary state: claimed with one exchange and
  // handed back with a plain store (no lock, no second read-modify-write).
  // Concurrent calls take the others from the pool.
  CallState *acquire() const {
    if (!primary_busy_.exchange(true, std::memory_order_acquire)) {
      if (primary_) [[likely]]
        return primary_.get();
      try {
        primary_ = make_state(true);
      } catch (...) {
        primary_busy_.store(false, std::memory_order_release);
        throw;
      }
      return primary_.get();
    }
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      if (!pool_.empty()) {
        CallState *st = pool_.back().release();
        pool_.pop_back();
        return st;
      }
    }
    return make_state(false).release();
  }

  void release(CallState *st) const {
    if (st->primary) {
      primary_busy_.store(false, std::memory_order_release);
      return;
    }
    std::unique_ptr<CallState> owned(st);
    std::lock_guard<std::mutex> lock(pool_mu_);
    // Keep as many states as calls ever ran at once; with reserve() a steady
    // state pushes back without allocating.
    if (pool_.size() < kMaxPooledStates) {
      pool_.push_back(std::move(owned));
      return;
    }
    retired_calls_ += st->calls.load(std::memory_order_relaxed);
    states_.erase(std::find(states_.begin(), states_.end(), st));
  }

  std::unique_ptr<CallState> make_state(bool primary) const {
    auto st = std::make_unique<CallState>();
    st->primary = primary;
    st->env.resize(num_slots_);
    st->ptr.assign(num_slots_, nullptr);
    st->ins.reserve(max_operands_);
    size_t k = first_const_slot_;
    for (const ir::Value *c : g_->consts()) {
      const Tensor &t = c->tensor();
      if (tensor_needed_[k]) bind(*st, k, t);
      else st->ptr[k] = t.defined() && !t.is_meta() ? t.raw_data() : nullptr;
      ++k;
    }
    if (arena_bytes_ > 0) {
      st->arena_bytes = size_t(arena_bytes_);
      st->arena = cached_alloc(st->arena_bytes);
      for (const auto &[slot, offset] : arena_slots_) {
        const ir::TensorType &t = slot_types_[size_t(slot)];
        void *p = static_cast<char *>(st->arena) + offset;
        st->env[size_t(slot)] = from_blob(p, IntArrayRef(t.shape), TensorOptions(t.dtype));
        if (t.strides) st->env[size_t(slot)] = st->env[size_t(slot)].as_strided(t.shape, *t.strides, 0); // layout pass
        st->ptr[size_t(slot)] = p;
      }
    }
    std::lock_guard<std::mutex> lock(pool_mu_);
    states_.push_back(st.get());
    return st;
  }

  static std::string_view category(const Step &s) {
    switch (s.kind) {
    case Step::Kind::Kernel: return "kernel";
    case Step::Kind::EagerGroup: return "eager-group";
    case Step::Kind::Epilogue: return "blas"; // its epilogue kernel runs inside, per tile
    case Step::Kind::Skip:
    case Step::Kind::Eager: break;
    }
    return op_info(s.node->op()).kind == OpKind::Contraction ? "blas" : "eager";
  }
  static std::string_view step_name(const Step &s) { return s.label; }
  static std::string label_of(const Step &s) {
    std::string what;
    switch (s.kind) {
    case Step::Kind::Kernel: what = s.kernel->symbol(); break;
    case Step::Kind::EagerGroup: what = "fusion_group (eager)"; break;
    case Step::Kind::Epilogue: what = "contraction+epilogue"; break;
    case Step::Kind::Skip:
    case Step::Kind::Eager: what = std::string(op_info(s.node->op()).mnemonic); break;
    }
    if (s.node->results().empty()) return what;
    return std::string("%").append(s.node->result()->name()).append(" ").append(what);
  }

  void run_step(const Step &s, CallState &st, void **buffers) const {
    if (s.kind == Step::Kind::Kernel) {
      size_t b = 0;
      for (auto [slot, off] : s.buffer_refs) buffers[b++] = static_cast<char *>(st.ptr[size_t(slot)]) + off;
      // Outputs without an arena slot (graph outputs) are the call's only allocations.
      for (size_t i = 0; i < s.out_shapes.size(); ++i) {
        const Step::OutShape &o = s.out_shapes[i];
        if (!o.allocate) continue;
        bind(st, size_t(o.slot), kiln::detail::make_checked_tensor(o.sizes, o.strides, o.numel, o.dtype));
        buffers[s.buffer_operands.size() + i] = st.ptr[size_t(o.slot)];
      }
      if (s.stream_stores) check_stream_alignment(s, buffers);
      s.fn(buffers);
      return;
    }
    st.ins.resize(s.in.size());
    for (size_t i = 0; i < s.in.size(); ++i) st.ins[i] = s.in[i] < 0 ? Tensor() : st.env[size_t(s.in[i])];
    std::vector<Tensor> outs;
    if (s.kind == Step::Kind::EagerGroup) {
      outs = ir::interpret(*s.node->body(), st.ins);
      conform_layouts(s, outs);
    } else if (s.kind == Step::Kind::Epilogue) {
      run_epilogue(s, st);
      return;
    } else if (!s.places.empty() && st.arena) {
      outs = run_placed(s, st);
    } else {
      outs = run_op(s.node->op(), st.ins, s.node->attrs());
    }
    for (size_t i = 0; i < s.out.size(); ++i) bind(st, size_t(s.out[i]), std::move(outs[i]));
  }

  // A group run eagerly gives its results eager's layouts; the steps after it
  // were built for the layouts of its result types (what its kernel would have
  // written), which a pass may have chosen otherwise: such a result is copied.
  void conform_layouts(const Step &s, std::vector<Tensor> &outs) const {
    for (size_t i = 0; i < outs.size() && i < s.out.size(); ++i) {
      const ir::TensorType &t = slot_types_[size_t(s.out[i])];
      const Tensor &o = outs[i];
      const Dims want = t.strides ? *t.strides : kiln::detail::contiguous_strides(t.shape);
      if (t.strides && !kiln::detail::is_non_overlapping_and_dense(meta_like(t).impl())) continue; // never written so
      bool same = true;
      for (int64_t d = 0; d < o.dim(); ++d) same &= o.size(d) <= 1 || o.stride(d) == want[size_t(d)];
      if (same) continue;
      Tensor r = allocate_like(size_t(s.out[i]));
      copy_(r, o);
      outs[i] = r;
    }
  }

  // A streaming kernel's aligned vector stores would fault on a misaligned
  // output: should a future placement break the promise, say so instead.
  static void check_stream_alignment(const Step &s, void *const *buffers) {
    for (size_t i = 0; i < s.out.size(); ++i) {
      const auto addr = reinterpret_cast<uintptr_t>(buffers[s.buffer_operands.size() + i]);
      KILN_CHECK(addr % 64 == 0, "internal: kernel ", s.kernel->symbol(), " streams output ", i,
                 " but its buffer is not 64-byte aligned");
    }
  }

  // The op's results go straight into their arena slots (no out= variants
  // needed). Placed results differ in dtype or size, so each make_result finds
  // its own slot whatever order the op makes them in.
  std::vector<Tensor> run_placed(const Step &s, CallState &st) const {
    std::optional<kiln::detail::ResultPlacement> place[kMaxPlaced];
    for (size_t i = 0; i < s.places.size(); ++i) {
      const Step::Place &p = s.places[i];
      place[i].emplace(static_cast<char *>(st.arena) + p.offset, size_t(p.bytes), p.dtype);
    }
    return run_op(s.node->op(), st.ins, s.node->attrs());
  }

  // Results in their arena slots when the memory plan gave them one, else fresh.
  void run_epilogue(const Step &s, CallState &st) const {
    std::vector<Tensor> outs(s.out.size());
    for (size_t i = 0; i < s.out.size(); ++i) {
      const size_t slot = size_t(s.out[i]);
      if (!arena_slot_[slot]) bind(st, slot, allocate_like(slot));
      outs[i] = st.env[slot];
    }
    void *scratch = s.scratch_bytes > 0 ? static_cast<char *>(st.arena) + scratch_offset_ : nullptr;
    s.epilogue->run_into(st.ins, outs, scratch);
  }

  Tensor allocate_like(size_t slot) const {
    const ir::TensorType &t = slot_types_[slot];
    if (!t.strides) return kiln::detail::make_tensor(t.shape, t.dtype);
    return kiln::detail::make_tensor({t.numel()}, t.dtype).as_strided(t.shape, *t.strides, 0); // a dense permutation
  }

  // A meta tensor of type t, with its strides when it has them.
  static Tensor meta_like(const ir::TensorType &t) {
    Tensor m = kiln::detail::make_tensor(t.shape, t.dtype, true);
    if (!t.strides) return m;
    return kiln::detail::make_view(m, t.shape, *t.strides, 0);
  }

  static Tensor as_meta(const Tensor &t) {
    if (!t.defined() || t.is_meta()) return t;
    return kiln::detail::make_view(kiln::detail::make_tensor({0}, t.dtype(), true), t.sizes(), t.strides(), 0);
  }

  // Lowers the group to one kernel; on failure the group runs eagerly.
  std::vector<Tensor> plan_group(const ir::Node &n, const std::vector<Tensor> &ins, Step &s) {
    std::vector<Tensor> outs;
    for (const ir::Value *r : n.results()) outs.push_back(meta_like(r->type()));
    if (is_epilogue_group(n)) return plan_epilogue(n, ins, s, outs);
    if (ins.size() + outs.size() > 64) {
      fall_back(n, "more than 64 buffers", s);
      return outs;
    }
    try {
      KernelDesc desc = lower_group(n, ins, s.buffer_operands);
      alias_in_place_outputs(n, s.buffer_operands, desc);
      // Every output of a kernel step starts 64-byte aligned: a fresh tensor
      // (kiln's allocator) or an arena slot (kArenaAlignment).
      desc.stream_stores = streaming_stores_pay_off(desc);
      s.stream_stores = desc.stream_stores;
      s.kernel = Jit::current().compile(desc);
      s.fn = s.kernel->fn();
      s.kind = Step::Kind::Kernel;
      for (const ir::Value *r : n.results()) {
        // The layout lower_group stores the result in: its type's (eager's), else contiguous.
        const ir::TensorType &t = r->type();
        IntArrayRef shape(t.shape);
        s.out_shapes.push_back({true, -1, kiln::detail::checked_numel(shape, "empty"), t.dtype, Dims(shape),
                                t.strides ? *t.strides : kiln::detail::contiguous_strides(shape)});
      }
      ++stats_.kernels;
    } catch (const Error &e) {
      fall_back(n, e.what(), s);
    }
    return outs;
  }

  // A result the memory plan puts at the arena offset of one of the group's
  // operands is computed in place over it (the plan's verifier allows no other
  // overlap): when the operand really lives in that slot, the kernel is told,
  // so that it writes through the operand's pointer and still vectorizes. If
  // the kernel cannot honour it (different strides, a row pass reading the
  // operand after the store), compiling throws and the group runs eagerly
  // into fresh memory. An operand elsewhere (a reshape that stayed a view of a
  // parameter, an eager result) is only read: the kernel writes the slot.
  void alias_in_place_outputs(const ir::Node &n, const std::vector<size_t> &buffer_operands, KernelDesc &desc) const {
    if (!g_->memory_plan()) return;
    const ir::MemoryPlan &plan = *g_->memory_plan();
    for (size_t o = 0; o < n.results().size() && o < desc.outputs.size(); ++o) {
      const ir::BufferAssignment *out = plan.find(n.result(o));
      for (size_t b = 0; out && b < buffer_operands.size(); ++b) {
        const ir::Value *operand = n.operand(buffer_operands[b]);
        const ir::BufferAssignment *in = plan.find(operand);
        if (!in || in->offset != out->offset || !lives_in_its_slot(operand, plan)) continue;
        desc.output_aliases_input.resize(desc.outputs.size(), -1);
        desc.output_aliases_input[o] = int32_t(b);
        kiln::log()->debug("codegen: %{} is computed in place over %{}", n.result(o)->name(),
                           n.operand(buffer_operands[b])->name());
        break;
      }
    }
  }

  // Whether v's memory in every call is its arena slot: a JIT kernel's result,
  // or an epilogue's result whose slot overlaps none of the step's operands
  // (place_epilogue); not an eager result, which the op may have made a view
  // of its operand (reshape) or allocated.
  bool lives_in_its_slot(const ir::Value *v, const ir::MemoryPlan &plan) const {
    const ir::BufferAssignment *a = plan.find(v);
    if (!a || v->kind() != ir::Value::Kind::Result) return false;
    const Step *producer = nullptr;
    for (const Step &s : steps_)
      if (s.node == v->producer()) producer = &s;
    if (!producer || producer->kind == Step::Kind::Kernel) return producer != nullptr;
    if (producer->kind != Step::Kind::Epilogue) return false;
    for (const ir::Value *op : producer->node->operands())
      for (const ir::Value *u = op; u; u = producer_alias(u)) {
        const ir::BufferAssignment *b = plan.find(u);
        if (b && a->offset < b->offset + b->size && b->offset < a->offset + a->size) return false;
      }
    return true;
  }

  std::vector<Tensor> plan_epilogue(const ir::Node &n, const std::vector<Tensor> &ins, Step &s, std::vector<Tensor> outs) {
    try {
      s.epilogue = EpilogueStep::build(n, ins);
      s.kind = Step::Kind::Epilogue;
      ++stats_.epilogue_steps;
      return s.epilogue->result_metas();
    } catch (const Error &e) {
      fall_back(n, e.what(), s);
      return outs;
    }
  }

  void fall_back(const ir::Node &n, const std::string &why, Step &s) {
    kiln::log()->debug("codegen: fusion group %{} runs eagerly: {}", n.result()->name(), why);
    s.kind = Step::Kind::EagerGroup;
    ++stats_.groups_fallen_back;
    stats_.eager_steps += int64_t(n.body()->num_nodes());
  }

  // A view that never copies (unlike reshape of strided data) and keeps the
  // dtype lies at a fixed byte offset from its base's element 0 in every call
  // of this specialization: kernels can read the base at that offset.
  void resolve_view(const Step &s, const std::vector<Tensor> &ins, const std::vector<Tensor> &meta) {
    const ir::Node &n = *s.node;
    if (s.kind != Step::Kind::Eager || n.info().kind != OpKind::View || s.out.size() != 1 || s.in.empty() ||
        s.in[0] < 0)
      return;
    const OpId id = n.op();
    const bool never_copies = id == OpId::Unsqueeze || id == OpId::Squeeze || id == OpId::Transpose ||
                              id == OpId::Permute || id == OpId::Slice || id == OpId::Select ||
                              id == OpId::Expand || id == OpId::View ||
                              (id == OpId::Reshape && ins[0].is_contiguous());
    const Tensor &in = meta[size_t(s.in[0])], &out = meta[size_t(s.out[0])];
    if (!never_copies || in.dtype() != out.dtype()) return;
    auto [base, base_off] = view_ref(s.in[0]);
    view_of_[s.out[0]] = {base, base_off + (out.storage_offset() - in.storage_offset()) * int64_t(out.element_size())};
  }

  std::pair<int, int64_t> view_ref(int slot) const {
    auto it = view_of_.find(slot);
    return it == view_of_.end() ? std::pair<int, int64_t>{slot, 0} : it->second;
  }

  // Views whose Tensor nothing but kernels reads are not run at all.
  void skip_unneeded_views() {
    std::vector<uint8_t> &needed = tensor_needed_;
    needed.assign(num_slots_, 0);
    for (const ir::Value *o : g_->outputs()) needed[size_t(slot_.at(o))] = 1;
    for (const ir::WriteBack &w : g_->write_backs()) {
      needed[size_t(slot_.at(w.value))] = 1;
      needed[size_t(slot_.at(w.target))] = 1;
    }
    for (auto s = steps_.rbegin(); s != steps_.rend(); ++s) {
      if (s->kind == Step::Kind::Kernel) continue;
      bool resolved = s->out.size() == 1 && view_of_.count(s->out[0]);
      if (resolved && !needed[size_t(s->out[0])]) {
        s->kind = Step::Kind::Skip;
        --stats_.eager_steps;
        continue;
      }
      for (int i : s->in)
        if (i >= 0) needed[size_t(i)] = 1;
    }
  }

  void count_bytes(const ir::Node &n) {
    bool view = n.kind() == ir::Node::Kind::Op && !n.results().empty() && ir::alias_source(n, 0);
    if (view) return;
    for (const ir::Value *v : n.operands())
      if (v) stats_.bytes_read += ir::value_bytes(v);
    for (const ir::Value *r : n.results()) stats_.bytes_written += ir::value_bytes(r);
  }

  // Resolves the graph's memory plan (if any) into arena slots: kernel and
  // epilogue outputs are written there and eager ops' results placed there
  // (place_eager, place_epilogue). Everything else a step produces allocates
  // per call.
  void use_memory_plan(const ir::Graph &graph) {
    num_inputs_ = graph.inputs().size();
    slot_types_.resize(num_slots_);
    for (const auto &[v, slot] : slot_) slot_types_[size_t(slot)] = v->type();
    arena_slot_.assign(num_slots_, 0);
    std::vector<int64_t> offset(num_slots_, -1), bytes(num_slots_, 0);
    if (graph.memory_plan()) {
      ir::verify_memory_plan(graph);
      arena_bytes_ = graph.memory_plan()->peak_bytes;
      for (const auto &[v, a] : graph.memory_plan()->entries) {
        int slot = slot_.at(v);
        offset[size_t(slot)] = a.offset;
        bytes[size_t(slot)] = a.size;
      }
    }
    for (Step &s : steps_) {
      max_operands_ = std::max(max_operands_, s.in.size());
      if (s.kind == Step::Kind::Epilogue) {
        place_epilogue(s, offset, bytes);
        continue;
      }
      if (s.kind == Step::Kind::Kernel) {
        for (size_t i : s.buffer_operands) s.buffer_refs.push_back(view_ref(s.in[i]));
        for (size_t r = 0; r < s.out.size(); ++r) {
          const int o = s.out[r];
          s.buffer_refs.push_back({o, 0});
          s.out_shapes[r].slot = o;
          if (offset[size_t(o)] < 0) {
            transient_slots_.push_back(o);
            continue;
          }
          s.out_shapes[r].allocate = false;
          arena_slot_[size_t(o)] = 1;
          arena_slots_.emplace_back(o, offset[size_t(o)]);
        }
        continue;
      }
      for (int o : s.out) transient_slots_.push_back(o);
      if (s.kind == Step::Kind::Eager) place_eager(s, offset, bytes);
    }
    // Inputs and captured tensors a call bound as Tensors (the others only by
    // address); constants stay bound in the state.
    first_const_slot_ = num_inputs_ + graph.params().size();
    for (size_t i = 0; i < first_const_slot_; ++i)
      if (tensor_needed_[i]) transient_slots_.push_back(int(i));
    find_owned_outputs();
    reserve_step_scratch();
    stats_.arena_values = int64_t(arena_slots_.size());
    stats_.arena_bytes = arena_bytes_;
    pool_.reserve(kMaxPooledStates);
  }

  // Outputs a kernel step allocates in every call (no arena slot) and that no
  // other output or write-back names: nothing else holds their memory.
  void find_owned_outputs() {
    std::vector<uint8_t> fresh(num_slots_, 0);
    for (const Step &s : steps_)
      if (s.kind == Step::Kind::Kernel)
        for (int o : s.out) fresh[size_t(o)] = !arena_slot_[size_t(o)];
    for (auto [target, value] : write_backs_) fresh[size_t(target)] = fresh[size_t(value)] = 0;
    for (int o : outputs_) {
      bool once = std::count(outputs_.begin(), outputs_.end(), o) == 1;
      output_owned_.push_back(fresh[size_t(o)] && once);
    }
  }

  // An eager op's result is placed in its arena slot unless that overlaps an
  // arena operand (an in-place slot: the op might write a temporary there
  // before reading that operand), or another result has the same dtype and
  // size (make_result could not tell which slot is whose).
  void place_eager(Step &s, const std::vector<int64_t> &offset, const std::vector<int64_t> &bytes) {
    const ir::Node &n = *s.node;
    for (size_t r = 0; r < s.out.size() && s.places.size() < kMaxPlaced; ++r) {
      const int64_t off = offset[size_t(s.out[r])], end = off + bytes[size_t(s.out[r])];
      if (off < 0) continue;
      const ir::TensorType &t = n.results()[r]->type();
      const int64_t nbytes = ir::value_bytes(n.results()[r]);
      bool ambiguous = false;
      for (size_t q = 0; q < s.out.size(); ++q)
        ambiguous |= q != r && n.results()[q]->type().dtype == t.dtype && ir::value_bytes(n.results()[q]) == nbytes;
      if (ambiguous || overlaps_operand(s, off, end, offset, bytes)) continue;
      s.places.push_back({off, nbytes, t.dtype});
    }
  }

  bool overlaps_operand(const Step &s, int64_t off, int64_t end, const std::vector<int64_t> &offset,
                        const std::vector<int64_t> &bytes) const {
    for (int i : s.in) {
      // The operand and every value it may share memory with (through views).
      for (const ir::Value *v = i < 0 ? nullptr : value_of(i); v; v = producer_alias(v)) {
        const int slot = slot_.at(v);
        if (offset[size_t(slot)] < 0) continue;
        const int64_t o2 = offset[size_t(slot)], e2 = o2 + bytes[size_t(slot)];
        if (off < e2 && o2 < end) return true;
      }
    }
    return false;
  }

  // Steps run one after another, so their scratch shares one region after the
  // memory plan's values: each call's arena carries it, and a steady-state call
  // allocates none (concurrent calls have their own arenas).
  void reserve_step_scratch() {
    int64_t need = 0;
    for (Step &s : steps_) {
      if (s.kind != Step::Kind::Epilogue) continue;
      s.scratch_bytes = int64_t(s.epilogue->scratch_bytes());
      need = std::max(need, s.scratch_bytes);
    }
    if (need == 0) return;
    scratch_offset_ = (arena_bytes_ + 63) / 64 * 64;
    arena_bytes_ = scratch_offset_ + need;
  }

  // An epilogue writes its results tile by tile while still reading its
  // operands (the contraction's inputs for every tile): a result goes to its
  // arena slot only when that overlaps no operand's slot.
  void place_epilogue(const Step &s, const std::vector<int64_t> &offset, const std::vector<int64_t> &bytes) {
    for (int o : s.out) {
      const int64_t off = offset[size_t(o)], end = off + bytes[size_t(o)];
      bool overlaps = off < 0;
      for (int i : s.in)
        for (const ir::Value *v = i < 0 ? nullptr : value_of(i); v && !overlaps; v = producer_alias(v)) {
          const int slot = slot_.at(v);
          if (offset[size_t(slot)] < 0) continue;
          overlaps |= off < offset[size_t(slot)] + bytes[size_t(slot)] && offset[size_t(slot)] < end;
        }
      if (overlaps) {
        transient_slots_.push_back(o);
        continue;
      }
      arena_slot_[size_t(o)] = 1;
      arena_slots_.emplace_back(o, off);
    }
  }

  const ir::Value *value_of(int slot) const {
    for (const auto &[value, s] : slot_)
      if (s == slot) return value;
    return nullptr;
  }

  static const ir::Value *producer_alias(const ir::Value *v) {
    if (v->kind() != ir::Value::Kind::Result) return nullptr;
    return ir::alias_source(*v->producer(), v->result_index());
  }

  static constexpr size_t kMaxPooledStates = 64;
  static constexpr size_t kMaxPlaced = 4; // results of one eager op placed in the arena

  std::shared_ptr<const ir::Graph> g_;
  std::vector<Expected> expected_;
  std::unordered_map<const ir::Value *, int> slot_;
  std::unordered_map<int, std::pair<int, int64_t>> view_of_; // view slot -> (base slot, byte offset)
  std::vector<Step> steps_;
  std::vector<int> outputs_;
  std::vector<std::pair<int, int>> write_backs_;
  size_t num_fixed_ = 0, num_slots_ = 0, num_inputs_ = 0, max_operands_ = 0;
  size_t first_const_slot_ = 0; // slots [num_inputs_, first_const_slot_) are params, then constants
  int64_t arena_bytes_ = 0, scratch_offset_ = 0;
  std::vector<ir::TensorType> slot_types_;
  std::vector<uint8_t> arena_slot_;                    // per slot: a kernel writes it in the arena
  std::vector<std::pair<int, int64_t>> arena_slots_;   // (slot, offset) of those
  std::vector<int> transient_slots_;                   // slots a call binds and clear() drops
  std::vector<uint8_t> output_owned_;                  // per output: see find_owned_outputs
  PlanStats stats_;
  std::vector<uint8_t> tensor_needed_; // per slot: some eager step, output or write-back reads its Tensor
  mutable std::atomic<bool> primary_busy_{false};
  mutable std::unique_ptr<CallState> primary_; // made by the first call; touched only while primary_busy_
  mutable std::mutex pool_mu_;                  // guards the three below
  mutable std::vector<std::unique_ptr<CallState>> pool_;
  mutable std::vector<const CallState *> states_; // every state alive (their call counts)
  mutable int64_t retired_calls_ = 0;             // calls of the states freed so far
};

} // namespace

std::shared_ptr<Executable> make_executable(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &inputs) {
  return std::make_shared<Plan>(std::move(g), inputs);
}

} // namespace kiln::codegen
