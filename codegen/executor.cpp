// The executor of a compiled specialization (codegen/executable.h): runs the
// program codegen/program_builder.cpp built, call after call, each call on a
// call state (arena and value table) taken from a pool.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>
#include <unordered_map>

#include "codegen/program.h"
#include "ir/interpreter.h"
#include "runtime/allocator.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/version.h"
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

// The mutable state of one running call: the arena and the value table. An executor
// keeps a pool of them so that concurrent calls never share one and a
// steady-state call allocates nothing for them.
struct CallState {
  void *arena = nullptr;
  size_t arena_bytes = 0;
  std::vector<Tensor> env;  // per slot: the value (arena slots hold fixed views)
  std::vector<void *> ptr;  // per slot: address of element 0
  std::vector<Tensor> ins;  // scratch operands of an eager step
  bool primary = false;     // the executor's first state (see Executor::acquire)
  // Calls run with this state. Only the call holding the state writes it, so
  // a load and a store count (no locked read-modify-write); Executor::calls() reads.
  std::atomic<int64_t> calls{0};
  void count_call() { calls.store(calls.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  ~CallState() {
    env.clear();
    if (arena) cached_free(arena, arena_bytes);
  }
};

class Executor final : public Executable, private Program {
public:
  explicit Executor(Program p) : Program(std::move(p)) { pool_.reserve(kMaxPooledStates); }

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

  ExecutableStats stats() const override { return stats_; }

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
  // Kernels index buffers with the shapes and strides the program was built for:
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
                shape_str(t.strides()), " but it was compiled for ", e.dtype, shape_str(e.sizes), " with strides ",
                shape_str(e.strides));
    }
  }

  // Constants belong to the program and are shared by every call; an output the
  // caller may write to (eager's results are its own) must not be one.
  bool is_constant(const Tensor &t) const {
    for (const ir::Value *c : g_->consts())
      if (t.is_alias_of(c->tensor())) return true;
    return false;
  }

  std::vector<Tensor> run_with(CallState &st, const std::vector<Tensor> &inputs) const {
    NoGradGuard no_grad; // a plan records no backward; write-backs may update parameters that require grad
    std::optional<SerialRegion> serial;
    if (serial_) serial.emplace();
    const ir::Graph &graph = *g_;
    // Values only kernels read need just their address (no reference count traffic).
    auto bind_fixed = [&](size_t slot, const Tensor &t) {
      if (tensor_needed_[slot]) bind(st, slot, t);
      else st.ptr[slot] = t.defined() && !t.is_meta() ? t.raw_data() : nullptr;
    };
    for (size_t i = 0; i < inputs.size(); ++i) bind_fixed(i, inputs[i]);
    size_t k = inputs.size();
    // Captured tensors are read live (their data may move between calls);
    // constants are the program's own and were bound with the call state.
    for (const ir::Value *p : graph.params()) bind_fixed(k++, p->tensor());
    void *buffers[64];
    const StepObserver *observer = t_step_observer;
    for (const Step &s : steps_) {
      if (s.kind != Step::Kind::Skip) {
        const double t0 = observer ? steady_us() : 0;
        run_step(s, st, buffers);
        if (observer) (*observer)(StepEvent{category(s), step_name(s), t0, steady_us() - t0});
      }
      for (auto [target, value] : s.write_backs) {
        if (st.ptr[size_t(target)] == st.ptr[size_t(value)]) { // computed into its target
          kiln::detail::bump_version(st.env[size_t(target)]);  // as copy_ would: packed weights are redone
          continue;
        }
        Tensor t = st.env[size_t(target)];
        copy_(t, st.env[size_t(value)]);
      }
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
    case Step::Kind::Epilogue: // its epilogue kernel runs inside, per tile
      // kiln's micro-kernels (GEMM or conv) or BLAS
      return s.epilogue->on_kilns_kernels() ? "gemm-jit" : "blas";
    case Step::Kind::Skip:
    case Step::Kind::Eager: break;
    }
    return op_info(s.node->op()).kind == OpKind::Contraction ? "blas" : "eager";
  }
  static std::string_view step_name(const Step &s) { return s.label; }

  void run_step(const Step &s, CallState &st, void **buffers) const {
    for (auto [result, target] : s.into_targets) bind(st, size_t(result), st.env[size_t(target)]);
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
      const bool into_target = std::any_of(s.into_targets.begin(), s.into_targets.end(),
                                           [&](auto p) { return size_t(p.first) == slot; });
      if (!arena_slot_[slot] && !into_target) bind(st, slot, allocate_like(slot));
      outs[i] = st.env[slot];
    }
    void *scratch = s.scratch_bytes > 0 ? static_cast<char *>(st.arena) + s.scratch_offset : nullptr;
    s.epilogue->run_into(st.ins, outs, scratch);
  }

  Tensor allocate_like(size_t slot) const {
    const ir::TensorType &t = slot_types_[slot];
    if (!t.strides) return kiln::detail::make_tensor(t.shape, t.dtype);
    return kiln::detail::make_tensor({t.numel()}, t.dtype).as_strided(t.shape, *t.strides, 0); // a dense permutation
  }

  static constexpr size_t kMaxPooledStates = 64;

  mutable std::atomic<bool> primary_busy_{false};
  mutable std::unique_ptr<CallState> primary_; // made by the first call; touched only while primary_busy_
  mutable std::mutex pool_mu_;                  // guards the three below
  mutable std::vector<std::unique_ptr<CallState>> pool_;
  mutable std::vector<const CallState *> states_; // every state alive (their call counts)
  mutable int64_t retired_calls_ = 0;             // calls of the states freed so far
};

} // namespace

std::shared_ptr<Executable> make_executable(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &inputs) {
  return std::make_shared<Executor>(build_program(std::move(g), inputs));
}

} // namespace kiln::codegen
