// A compiled program over a symbolic graph (issue 17, codegen/executable.h's
// make_symbolic_executable): built once, it serves every call whose sizes bind
// the graph's symbols. Each call binds them (ir::bind_symbols' rule); a fusion group
// runs as one kernel that reads its outer extent per call, the product of the
// symbols that size its outer dims (KernelDesc::runtime_dim0, RuntimeExtents),
// and the length of its row when symbols size that too (KernelDesc::runtime_row),
// or, for an element-wise group whose buffers do not fold (a per-channel
// operand), every extent and stride (KernelDesc::runtime_layout), or, when it
// has no symbol, as its static kernel; a group codegen cannot
// lower for every size runs its body eagerly, and every other node runs its
// eager op with the sizes of the call (ir::attrs_at).
//
// A matmul or mm whose symbols size only its rows, alone or with its fused
// epilogue, runs on kiln's GEMM reading M per call; a lone matmul, mm or bmm
// whose N, K or batches are symbolic (attention over a symbolic sequence)
// reads all of them per call (codegen/product_step.h); and a conv2d reads its
// batch and image size per call (EpilogueStep::build_rows_per_call); a
// contraction without symbols runs as in the static executor.
//
// The graph's symbolic memory plan (passes/plan_memory.cpp) places the results
// of kernels and of contractions that read M per call in one arena: each call
// evaluates the plan's offsets and peak at its sizes and takes an arena of at
// least that size from the executor's pool, so a steady-state call allocates
// only its outputs and the results of the steps it runs eagerly (those keep
// fresh memory; their slots go unused).
//
// Not yet here, unlike the static executor: depthwise convs over symbolic
// image sizes (they run eagerly), and in-place kernels.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>

#include "codegen/epilogue.h"
#include "codegen/op_lowering.h"
#include "codegen/program.h"
#include "ir/interpreter.h"
#include "ir/memory_plan.h"
#include "ir/sym_infer.h"
#include "runtime/allocator.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::codegen {

namespace {

class SymbolicExecutor final : public Executable {
public:
  explicit SymbolicExecutor(std::shared_ptr<const ir::Graph> g) : g_(std::move(g)) {
    const auto t0 = std::chrono::steady_clock::now();
    const ir::Graph &graph = *g_;
    // (bind checks every input's sizes.)
    auto define = [&](const ir::Value *v) {
      slot_[v] = int(types_.size());
      types_.push_back(v->type());
      sized_by_type_.push_back(v->kind() == ir::Value::Kind::Input);
    };
    for (const ir::Value *v : graph.inputs()) define(v);
    build_binding(graph);
    for (const ir::Value *v : graph.params()) define(v);
    for (const ir::Value *v : graph.consts()) define(v);
    size_t index = 0; // of n in the graph
    for (const ir::Node *n : graph.nodes()) {
      Step s;
      s.node = n;
      for (const ir::Value *v : n->operands()) s.in.push_back(v ? slot_.at(v) : -1);
      for (const ir::Value *r : n->results()) {
        s.out.push_back(int(types_.size()));
        define(r);
      }
      if (n->kind() == ir::Node::Kind::FusionGroup && is_epilogue_group(*n)) build_contraction(*n, index, s);
      else if (n->kind() == ir::Node::Kind::FusionGroup) build_group(*n, s);
      else if (op_info(n->op()).kind == OpKind::Contraction) build_contraction(*n, index, s);
      else ++stats_.eager_steps;
      // Results the step sizes from their types (result_tensor) need no check where they are read.
      const bool sized = s.kind == Step::Kind::Kernel || (s.kind == Step::Kind::Contraction && s.rows_per_call);
      for (int o : s.out) sized_by_type_.at(size_t(o)) = sized;
      steps_.push_back(std::move(s));
      ++index;
    }
    if (const ir::MemoryPlan *plan = graph.memory_plan() ? &*graph.memory_plan() : nullptr) {
      KILN_CHECK(plan->symbolic, "compile @", graph.name(), ": a symbolic graph needs a symbolic memory plan");
      peak_ = plan->sym_peak;
      for (const auto &[v, a] : plan->entries) planned_.push_back({slot_.at(v), a.sym_offset});
      planned_at_hints_ = plan->peak_bytes;
    }
    for (const ir::Value *o : graph.outputs()) outputs_.push_back(slot_.at(o));
    for (size_t i = 0; i < outputs_.size(); ++i)
      output_last_.push_back(std::find(outputs_.begin() + long(i) + 1, outputs_.end(), outputs_[i]) == outputs_.end());
    // A kernel's result outside the arena is made per call (result_tensor);
    // returned once, it shares memory with nothing the caller holds.
    std::vector<bool> kernel_result(types_.size(), false);
    for (const Step &s : steps_)
      if (s.kind == Step::Kind::Kernel)
        for (int o : s.out) kernel_result[size_t(o)] = true;
    for (const auto &[slot, offset] : planned_) kernel_result[size_t(slot)] = false;
    for (size_t i = 0; i < outputs_.size(); ++i)
      output_owned_.push_back(kernel_result[size_t(outputs_[i])] &&
                              std::count(outputs_.begin(), outputs_.end(), outputs_[i]) == 1);
    // Each write-back runs where the memory plan ends its value's life (after
    // that step): later steps may reuse the value's arena bytes.
    const std::vector<int64_t> points = ir::write_back_points(graph);
    for (size_t k = 0; k < graph.write_backs().size(); ++k) {
      const ir::WriteBack &w = graph.write_backs()[k];
      write_backs_.push_back({size_t(points[k]), slot_.at(w.target), slot_.at(w.value)});
    }
    std::stable_sort(write_backs_.begin(), write_backs_.end(),
                     [](const WriteBackAt &a, const WriteBackAt &b) { return a.after_step < b.after_step; });
    stats_.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  std::vector<Tensor> run(const std::vector<Tensor> &inputs) const override {
    const std::string &name = g_->name();
    KILN_CHECK(inputs.size() == g_->inputs().size(), "compile @", name, ": expected ", g_->inputs().size(),
               " inputs, got ", inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const ir::TensorType &t = g_->inputs()[i]->type();
      KILN_CHECK(inputs[i].defined(), "compile @", name, ": input ", i, " is an undefined tensor");
      KILN_CHECK(inputs[i].dtype() == t.dtype, "compile @", name, ": input ", i, " is ", inputs[i].dtype(),
                 " but it was compiled for ", t.str());
    }
    return run_matched(inputs); // bind_symbols checks every size
  }

  std::vector<Tensor> run_matched(const std::vector<Tensor> &inputs) const override {
    // The symbols' values: on the stack for up to kInlineSymbols of them.
    std::array<int64_t, kInlineSymbols> inline_values;
    std::vector<int64_t> more_values(num_symbols_ > kInlineSymbols ? num_symbols_ : 0);
    const std::span<int64_t> values = more_values.empty() ? std::span<int64_t>(inline_values.data(), num_symbols_)
                                                          : std::span<int64_t>(more_values);
    bind(inputs, values);
    return run_with(inputs, values);
  }

  // The caller's values stand for bind()'s where every input dim is a constant
  // or a bare symbol: the caller checked the constants and bound the symbols.
  std::vector<Tensor> run_bound(const std::vector<Tensor> &inputs, std::span<const int64_t> symbols) const override {
    if (!bound_by_bare_dims_ || symbols.size() != num_symbols_) return run_matched(inputs);
    return run_with(inputs, symbols);
  }

  std::vector<Tensor> run_with(const std::vector<Tensor> &inputs, std::span<const int64_t> values) const {
    calls_.fetch_add(1, std::memory_order_relaxed);
    Arena arena = take_arena(values);
    Env env(types_.size());
    for (size_t i = 0; i < inputs.size(); ++i) env.borrow(i, inputs[i]);
    size_t k = inputs.size();
    for (const ir::Value *p : g_->params()) env.borrow(k++, p->tensor());
    for (const ir::Value *c : g_->consts()) env.borrow(k++, c->tensor());
    kiln::detail::TracingOff no_trace;
    NoGradGuard no_grad; // a plan records no backward; write-backs may update parameters that require grad
    const StepObserver *observer = current_step_observer();
    size_t next_write_back = 0;
    auto write_backs_after = [&](size_t step) {
      for (; next_write_back < write_backs_.size() && write_backs_[next_write_back].after_step <= step; ++next_write_back) {
        Tensor t = env[size_t(write_backs_[next_write_back].target)];
        copy_(t, env[size_t(write_backs_[next_write_back].value)]);
      }
    };
    for (size_t i = 0; i < steps_.size(); ++i) {
      const Step &s = steps_[i];
      const auto t0 = observer ? std::chrono::steady_clock::now() : std::chrono::steady_clock::time_point();
      run_step(s, values, arena, env);
      if (observer) report(*observer, s, t0);
      write_backs_after(i);
    }
    write_backs_after(steps_.size());
    std::vector<Tensor> out;
    out.reserve(outputs_.size());
    // The plan keeps outputs out of the arena; should an eager op have returned
    // a view of an arena value anyway, the caller gets a copy.
    for (size_t i = 0; i < outputs_.size(); ++i) {
      const size_t o = size_t(outputs_[i]);
      const Tensor &t = env[o];
      if (is_constant(t) || arena.holds(t)) out.push_back(t.clone());
      else out.push_back(output_last_[i] ? env.take(o) : t);
    }
    return out;
  }

  ExecutableStats stats() const override { return stats_; }
  std::vector<std::string> describe() const {
    std::vector<std::string> lines;
    for (const Step &s : steps_)
      if (!s.how.empty()) lines.push_back(s.how);
    if (!g_->memory_plan()) lines.push_back("arena: none (no memory plan: each intermediate is allocated per call)");
    else if (planned_.empty()) lines.push_back("arena: none (no intermediate to plan: each value is an input, a view or an output)");
    else
      lines.push_back(kiln::detail::concat("arena: ", planned_.size(), " planned intermediates in [", peak_.str(),
                                           "] bytes (", planned_at_hints_, " at the traced sizes), taken per call"));
    return lines;
  }
  int64_t calls() const override { return calls_.load(std::memory_order_relaxed); }
  // A kernel's result returned once is fresh per call; another output (a view,
  // an eager result) is left to the caller's ownership checks.
  std::vector<bool> outputs_allocated_per_call() const override { return output_owned_; }

  ~SymbolicExecutor() override {
    for (auto [p, n] : pool_) cached_free(p, n);
  }

private:
  // A call's values by slot. Inputs, captured tensors and constants outlive the
  // call, so their slots point at them (binding one counts no reference); a
  // slot a step fills, or lays out again, owns its tensor.
  class Env {
  public:
    explicit Env(size_t n)
        : n_(n), slots_(n > kInline ? static_cast<Slot *>(::operator new(n * sizeof(Slot)))
                                    : reinterpret_cast<Slot *>(inline_)) {
      std::uninitialized_default_construct_n(slots_, n);
    }
    ~Env() {
      // (A slot that owns nothing has nothing to release: most are borrowed.)
      for (size_t i = 0; i < n_; ++i)
        if (slots_[i].own.defined()) std::destroy_at(&slots_[i]);
      if (n_ > kInline) ::operator delete(slots_);
    }
    Env(const Env &) = delete;
    Env &operator=(const Env &) = delete;
    const Tensor &operator[](size_t i) const { return slots_[i].at ? *slots_[i].at : none(); }
    void borrow(size_t i, const Tensor &t) { slots_[i].at = &t; }
    const Tensor &set(size_t i, Tensor t) {
      slots_[i].own = std::move(t);
      return *(slots_[i].at = &slots_[i].own);
    }
    // The slot's tensor, moved out where the slot owns it: only at the call's end.
    Tensor take(size_t i) { return slots_[i].at == &slots_[i].own ? std::move(slots_[i].own) : (*this)[i]; }

  private:
    struct Slot {
      const Tensor *at = nullptr;
      Tensor own;
    };
    static const Tensor &none() {
      static const Tensor undefined;
      return undefined;
    }
    // A small graph's slots live on the stack: a call allocates only its
    // outputs. (Raw bytes: only the n slots in use are made and destroyed.)
    static constexpr size_t kInline = 16;
    alignas(Slot) unsigned char inline_[kInline * sizeof(Slot)];
    size_t n_;
    Slot *slots_;
  };
  static constexpr size_t kInlineSymbols = 8;

  // ir::bind_symbols' rule, laid out once: each input dim that is a bare
  // symbol binds it (or, bound already, must equal it), and every other dim
  // must equal its size or expression. A call that misses any of them runs
  // ir::bind_symbols for its error. (It runs on every call: it allocates
  // only the values it returns.)
  struct DimRule {
    size_t input, dim;
    int symbol;       // >= 0: the dim is s<symbol> alone
    ir::SymExpr size; // else: what it must equal
  };
  void build_binding(const ir::Graph &graph) {
    num_symbols_ = graph.symbol_hints().size();
    std::vector<bool> bound(num_symbols_, false);
    for (size_t i = 0; i < graph.inputs().size(); ++i) {
      const ir::TensorType &t = graph.inputs()[i]->type();
      ranks_.push_back(t.shape.size());
      for (size_t d = 0; d < t.shape.size(); ++d) {
        const std::optional<int> id = t.symbolic() ? t.sym[d].as_symbol() : std::nullopt;
        if (id) bound.at(size_t(*id)) = true;
        dim_rules_.push_back({i, d, id.value_or(-1), t.symbolic() ? t.sym[d] : ir::SymExpr(t.shape[int64_t(d)])});
      }
    }
    binds_every_symbol_ = std::all_of(bound.begin(), bound.end(), [](bool b) { return b; });
    bound_by_bare_dims_ = binds_every_symbol_ && std::all_of(dim_rules_.begin(), dim_rules_.end(), [](const DimRule &r) {
                            return r.symbol >= 0 || r.size.is_constant();
                          });
    // Binding rules first, so that every symbol has its value before the checks.
    std::stable_partition(dim_rules_.begin(), dim_rules_.end(), [](const DimRule &r) { return r.symbol >= 0; });
  }
  void bind(const std::vector<Tensor> &inputs, std::span<int64_t> values) const {
    std::fill(values.begin(), values.end(), -1);
    bool ok = binds_every_symbol_ && inputs.size() == ranks_.size();
    for (size_t i = 0; ok && i < inputs.size(); ++i) ok = size_t(inputs[i].dim()) == ranks_[i];
    for (size_t k = 0; ok && k < dim_rules_.size(); ++k) {
      const DimRule &r = dim_rules_[k];
      const int64_t v = inputs[r.input].sizes()[r.dim]; // (the rank was checked)
      if (r.symbol < 0) ok = r.size.evaluate(values) == v;
      else if (values[size_t(r.symbol)] < 0) values[size_t(r.symbol)] = v;
      else ok = values[size_t(r.symbol)] == v;
    }
    if (ok) return;
    std::vector<IntArrayRef> sizes;
    for (const Tensor &t : inputs) sizes.push_back(t.sizes());
    const std::vector<int64_t> bound = ir::bind_symbols(*g_, sizes); // throws what does not hold
    KILN_CHECK(bound.size() == values.size(), "internal: @", g_->name(), " binds ", bound.size(), " symbols, not ",
               values.size());
    std::copy(bound.begin(), bound.end(), values.begin());
  }

  static Dims sizes_at(const ir::TensorType &type, std::span<const int64_t> values) {
    if (!type.symbolic()) return type.shape;
    std::array<int64_t, kMaxDims> sizes; // (a type has at most kMaxDims dims)
    for (size_t d = 0; d < type.sym.size(); ++d) sizes[d] = type.sym[d].evaluate(values);
    return Dims(IntArrayRef(sizes.data(), type.sym.size()));
  }

  // One call's arena (from the pool, returned when the call ends) and the
  // addresses of the planned values at the call's sizes, per slot.
  class Arena {
  public:
    Arena(const SymbolicExecutor *owner, void *p, size_t bytes) : owner_(owner), p_(p), bytes_(bytes) {}
    Arena(Arena &&o) noexcept : owner_(o.owner_), p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_), where_(std::move(o.where_)) {}
    Arena(const Arena &) = delete;
    Arena &operator=(const Arena &) = delete;
    ~Arena() {
      if (p_) owner_->give_back(p_, bytes_);
    }
    void *at(int slot) const { return slot < int(where_.size()) ? where_[size_t(slot)] : nullptr; }
    bool holds(const Tensor &t) const {
      if (!p_ || !t.defined() || t.is_meta() || t.numel() == 0) return false;
      auto *q = static_cast<const char *>(t.raw_data()), *a = static_cast<const char *>(p_);
      return q >= a && q < a + bytes_;
    }

  private:
    friend class SymbolicExecutor;
    const SymbolicExecutor *owner_;
    void *p_;
    size_t bytes_;
    std::vector<void *> where_; // per slot; nullptr: not planned
  };

  // Evaluates the plan at the call's sizes (once per call) and takes an arena
  // that holds it: a pooled one when one is large enough, else a new one with
  // a quarter to spare, so that sizes growing call by call reallocate rarely.
  Arena take_arena(std::span<const int64_t> values) const {
    if (planned_.empty()) return Arena(this, nullptr, 0);
    const int64_t peak = peak_.evaluate(values);
    KILN_CHECK(peak >= 0, "internal: @", g_->name(), ": the memory plan's peak is negative at these sizes");
    void *p = nullptr;
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      for (size_t i = 0; i < pool_.size(); ++i) {
        if (pool_[i].second < size_t(peak)) continue;
        std::tie(p, bytes) = pool_[i];
        pool_.erase(pool_.begin() + std::ptrdiff_t(i));
        break;
      }
    }
    if (!p) {
      bytes = ir::align_arena(std::max<int64_t>(peak + peak / 4, ir::kArenaAlignment));
      p = cached_alloc(bytes);
    }
    Arena a(this, p, bytes);
    a.where_.assign(types_.size(), nullptr);
    for (const auto &[slot, offset] : planned_) a.where_[size_t(slot)] = static_cast<char *>(p) + offset.evaluate(values);
    return a;
  }

  // Keeps the larger arenas (as many as calls ran at once); frees a smaller one.
  void give_back(void *p, size_t bytes) const {
    std::lock_guard<std::mutex> lock(pool_mu_);
    pool_.emplace_back(p, bytes);
    if (pool_.size() <= kMaxPooledArenas) return;
    auto smallest = std::min_element(pool_.begin(), pool_.end(),
                                     [](const auto &a, const auto &b) { return a.second < b.second; });
    cached_free(smallest->first, smallest->second);
    pool_.erase(smallest);
  }

  // A planned slot's value over the call's arena; else a fresh tensor.
  Tensor result_tensor(const Arena &arena, int slot, std::span<const int64_t> values) const {
    const ir::TensorType &type = types_[size_t(slot)];
    const Dims sizes = sizes_at(type, values);
    if (void *p = arena.at(slot)) return from_blob(p, IntArrayRef(sizes), TensorOptions(type.dtype));
    return kiln::detail::make_tensor(IntArrayRef(sizes), type.dtype);
  }

  // An element-wise kernel over a runtime dim 0 whose buffers fold into one
  // dim, compiled again with streaming stores (KernelDesc::stream_stores) the
  // first time a call touches more than `above` bytes (streaming_threshold_bytes:
  // beyond the last-level cache), and run for such calls. At the traced sizes
  // a static kernel decides this once; here the size is the call's.
  struct StreamedTwin {
    KernelDesc desc;
    int64_t above = 0;
    std::once_flag once;
    std::shared_ptr<const CompiledKernel> kernel; // null until the first such call, or if it failed to compile

    const CompiledKernel *get() {
      std::call_once(once, [&] {
        try {
          kernel = Jit::current().compile(desc);
          kiln::log()->debug("codegen: {} streams its stores on calls above {} bytes", kernel->symbol(), above);
        } catch (const Error &e) {
          kiln::log()->warn("codegen: the streaming twin of a kernel over runtime sizes failed to compile, so "
                            "calls keep the kernel without it: {}", e.what());
        }
      });
      return kernel.get();
    }
  };

  // Whether every buffer of desc walks its iteration space row-major (so that
  // its dims fold into one and the lowering can stream it in blocks).
  static bool folds_into_one(const KernelDesc &desc) {
    const auto dense = contiguous_strides(desc.shape);
    for (size_t b = 0; b < desc.num_buffers(); ++b) {
      const std::vector<int64_t> &st = desc.buffer(b).strides;
      for (size_t d = 0; d < st.size(); ++d)
        if (desc.shape[d] > 1 && st[d] != dense[d]) return false;
    }
    return true;
  }
  static std::shared_ptr<StreamedTwin> streamed_twin(const KernelDesc &desc) {
    if (!desc.runtime_dim0 || desc.runtime_row || desc.runtime_layout || desc.has_reductions() ||
        !desc.output_aliases_input.empty() || !folds_into_one(desc))
      return nullptr;
    const int64_t above = streaming_threshold_bytes(desc);
    if (above < 0) return nullptr;
    auto twin = std::make_shared<StreamedTwin>();
    twin->desc = desc;
    twin->desc.stream_stores = true;
    twin->above = above;
    return twin;
  }

  struct Step {
    enum class Kind { Eager, Kernel, EagerGroup, Contraction } kind = Kind::Eager;
    const ir::Node *node = nullptr;
    std::vector<int> in, out; // value slots; -1 = absent optional operand
    std::shared_ptr<const CompiledKernel> kernel;
    std::vector<size_t> buffer_operands; // Kernel: which of `in` are input buffers
    std::vector<Dims> buffer_strides;    // Kernel: per input buffer, the strides it was lowered for
    std::vector<bool> contiguous_at_every_size; // Kernel: per input buffer, lowered contiguous (else strided)
    std::optional<RuntimeExtents> extents;      // Kernel: its runtime sizes per call; empty: a static kernel
    std::shared_ptr<StreamedTwin> streamed;     // Kernel: its twin with streaming stores, for calls above a size
    std::shared_ptr<const EpilogueStep> contraction; // Contraction: (buffer_* for its operands too)
    bool rows_per_call = false;                      // Contraction: M read per call
    bool any_layout = false; // Contraction: reads its operands' strides per call (no copy)
    std::vector<bool> contiguous;                    // Contraction: per buffer operand, symbolic: made contiguous
    std::string how; // groups and contractions: how the step runs (describe_symbolic_executable)
  };

  // A contraction (an epilogue group or a lone product) on kiln's kernels;
  // where they do not take it, an eager step (a group: its body).
  void build_contraction(const ir::Node &n, size_t index, Step &s) {
    const bool group = n.kind() == ir::Node::Kind::FusionGroup;
    const std::string name = n.result()->name();
    try {
      // Eager's layouts (a transposed weight is read in place and packed once),
      // but contiguous where the sizes are symbolic.
      const std::vector<Tensor> metas = operand_metas(*g_, index);
      std::vector<Tensor> operands;
      bool symbolic = false;
      for (size_t i = 0; i < n.operands().size(); ++i) {
        const ir::Value *v = n.operand(i);
        if (!v) continue;
        symbolic |= v->type().symbolic();
        operands.push_back(v->type().symbolic() ? kiln::detail::make_tensor(v->type().shape, v->type().dtype, true)
                                                : metas.at(i));
        if (v->kind() == ir::Value::Kind::Param || v->kind() == ir::Value::Kind::Const) continue;
        s.buffer_operands.push_back(i);
        s.buffer_strides.emplace_back(operands.back().strides());
        s.contiguous.push_back(v->type().symbolic());
      }
      for (const ir::Value *r : n.results()) symbolic |= r->type().symbolic();
      s.rows_per_call = symbolic;
      s.contraction = symbolic ? EpilogueStep::build_rows_per_call(n, operands)
                      : group  ? EpilogueStep::build(n, operands)
                               : EpilogueStep::build_lone(n, operands);
      s.any_layout = s.contraction->reads_every_size_per_call();
      KILN_CHECK(group || s.contraction->on_kilns_kernels(), "not on kiln's kernels (",
                 s.contraction->contraction_kind(), ")");
      s.kind = Step::Kind::Contraction;
      if (group) ++stats_.epilogue_steps;
      if (s.contraction->on_kilns_kernels()) {
        ++stats_.gemm_jit_steps;
        stats_.packed_weight_bytes += s.contraction->packed_weight_bytes();
      }
      const std::string_view kind = s.contraction->contraction_kind();
      s.how = std::string(kind) + ": " + what(n) +
              (!symbolic                                      ? " has static sizes"
               : s.contraction->reads_image_size_per_call()   ? " reads its batch and image size per call"
               : s.contraction->reads_every_size_per_call()   ? " reads its batches, M, N and K per call"
               : kind.substr(0, 4) == "conv"                  ? " reads its batch per call"
                                                              : " reads its M per call");
      kiln::log()->debug("codegen: {}", s.how);
    } catch (const Error &e) {
      s.how = "eager: " + what(n) + ": " + e.what();
      kiln::log()->debug("codegen: {}", s.how);
      s.kind = group ? Step::Kind::EagerGroup : Step::Kind::Eager;
      s.buffer_operands.clear();
      s.buffer_strides.clear();
      s.contiguous.clear();
      s.contraction.reset();
      s.any_layout = false;
      if (group) ++stats_.groups_fallen_back;
      stats_.eager_steps += group ? int64_t(n.body()->num_nodes()) : 1;
    }
  }

  static std::string what(const ir::Node &n) {
    const std::string name = "%" + n.result()->name();
    if (n.kind() != ir::Node::Kind::FusionGroup) return name + " (" + std::string(n.mnemonic()) + ")";
    return "fusion group " + name + " (a contraction and its epilogue)";
  }

  // Lowers the group for every size; on failure its body runs eagerly.
  void build_group(const ir::Node &n, Step &s) {
    const std::string name = n.result()->name();
    try {
      KILN_CHECK(!is_epilogue_group(n), "a contraction with its epilogue, whose M is not read per call yet");
      KILN_CHECK(n.operands().size() + n.results().size() <= 64, "more than 64 buffers");
      std::vector<Tensor> operands;
      KernelDesc desc = lower_group_for_every_size(*g_, n, g_->symbol_hints(), s.buffer_operands, s.extents, operands);
      // Lowering checked that a strided operand's strides do not change with the symbols.
      for (size_t i : s.buffer_operands) {
        s.buffer_strides.emplace_back(operands[i].strides());
        s.contiguous_at_every_size.push_back(s.extents && operands[i].is_contiguous());
      }
      s.kernel = Jit::current().compile(desc);
      if (s.extents) s.streamed = streamed_twin(desc);
      s.kind = Step::Kind::Kernel;
      ++stats_.kernels;
      s.how = "kernel: fusion group %" + name + (!s.extents                  ? " has static sizes"
                                                 : !s.extents->layout.empty() ? " reads its extents and strides per call"
                                                 : s.extents->row             ? " reads its dim 0 and row length per call"
                                                                              : " reads its dim 0 per call");
      kiln::log()->debug("codegen: {} ({})", s.how, s.kernel->symbol());
    } catch (const Error &e) {
      s.how = "no kernel over runtime sizes: " + std::string(e.what());
      kiln::log()->debug("codegen: fusion group %{} runs eagerly: {}", name, e.what());
      s.kind = Step::Kind::EagerGroup;
      s.buffer_operands.clear();
      s.buffer_strides.clear();
      s.contiguous_at_every_size.clear();
      s.extents.reset();
      ++stats_.groups_fallen_back;
      stats_.eager_steps += int64_t(n.body()->num_nodes());
    }
  }

  void run_step(const Step &s, std::span<const int64_t> values, const Arena &arena, Env &env) const {
    if (s.kind == Step::Kind::Kernel) {
      run_kernel(s, values, arena, env);
      return;
    }
    if (s.kind == Step::Kind::Contraction) {
      run_contraction(s, values, arena, env);
      return;
    }
    std::vector<Tensor> ins;
    ins.reserve(s.in.size());
    for (int i : s.in) ins.push_back(i < 0 ? Tensor() : env[size_t(i)]);
    std::vector<Tensor> outs = s.kind == Step::Kind::EagerGroup ? ir::interpret_body(*s.node->body(), ins, {values.begin(), values.end()})
                                                                : run_op(s.node->op(), ins, ir::attrs_at(*s.node, values));
    for (size_t i = 0; i < s.out.size(); ++i) env.set(size_t(s.out[i]), std::move(outs.at(i)));
  }

  // The kernel was lowered for its operands' layouts in the traced call
  // (lower_group_for_every_size), which hold at every size; an operand in
  // another layout (an input with a static dim and other strides, an eager
  // group's result) is copied into that one first.
  void run_kernel(const Step &s, std::span<const int64_t> values, const Arena &arena, Env &env) const {
    void *buffers[65];
    size_t b = 0;
    int64_t bytes = 0; // the call's footprint
    for (size_t k = 0; k < s.buffer_operands.size(); ++k) {
      const int slot = s.in[s.buffer_operands[k]];
      const Tensor *t = &env[size_t(slot)];
      check_sizes(s, slot, *t, values);
      // A contiguous operand's strides change with the sizes: contiguous at each.
      if (s.contiguous_at_every_size[k]) {
        if (!t->is_contiguous()) t = &env.set(size_t(slot), t->contiguous());
      } else if (!same_layout(*t, s.buffer_strides[k])) {
        t = &env.set(size_t(slot), relaid(*t, s.buffer_strides[k]));
      }
      buffers[b++] = t->raw_data();
      bytes += int64_t(t->nbytes());
    }
    bool aligned = true; // (streamed blocks start 64-byte aligned in every output)
    for (int o : s.out) {
      Tensor r = result_tensor(arena, o, values);
      buffers[b++] = r.raw_data();
      bytes += int64_t(r.nbytes());
      aligned &= reinterpret_cast<uintptr_t>(r.raw_data()) % 64 == 0;
      env.set(size_t(o), std::move(r));
    }
    // Extents (and row length), or a runtime layout's extents and strides:
    // at most rank 4 times (1 + 64 buffers).
    std::array<int64_t, kMaxKernelRank * 65> words; // (filled as far as the kernel reads)
    if (s.extents) s.extents->fill(values, words.data());
    buffers[b] = words.data();
    const CompiledKernel *streamed = s.streamed && aligned && bytes > s.streamed->above ? s.streamed->get() : nullptr;
    (streamed ? streamed : s.kernel.get())->fn()(buffers);
  }

  // Operands in the layouts the step was built for; results contiguous at the
  // call's sizes (M read per call) or as the step gives them.
  void run_contraction(const Step &s, std::span<const int64_t> values, const Arena &arena,
                       Env &env) const {
    std::vector<Tensor> ins;
    ins.reserve(s.in.size());
    for (int i : s.in)
      if (i >= 0) ins.push_back(env[size_t(i)]);
    for (size_t k = 0; k < s.buffer_operands.size(); ++k) {
      const size_t i = s.buffer_operands[k];
      Tensor &t = ins[i];
      check_sizes(s, s.in[i], t, values);
      // A symbolic operand's strides change with its sizes: contiguous at each
      // (its traced META was contiguous, and the step's row strides hold at any M).
      if (s.any_layout) continue;
      if (s.contiguous[k]) {
        if (!t.is_contiguous()) t = t.contiguous();
      } else if (!same_layout(t, s.buffer_strides[k])) {
        t = relaid(t, s.buffer_strides[k]);
      }
    }
    std::vector<Tensor> outs;
    if (!s.rows_per_call) {
      outs = s.contraction->run(ins);
    } else {
      for (int o : s.out) outs.push_back(result_tensor(arena, o, values));
      s.contraction->run_into(ins, outs);
    }
    for (size_t i = 0; i < s.out.size(); ++i) env.set(size_t(s.out[i]), std::move(outs[i]));
  }

  // Kernels index their buffers by the sizes the types give; an operand of
  // other sizes (a shape rule the fit got wrong) would be read out of bounds.
  void check_sizes(const Step &s, int slot, const Tensor &t, std::span<const int64_t> values) const {
    if (!sized_by_type_[size_t(slot)]) [[unlikely]]
      check_sizes_of(s, slot, t, values);
  }
  void check_sizes_of(const Step &s, int slot, const Tensor &t, std::span<const int64_t> values) const {
    const ir::TensorType &type = types_[size_t(slot)];
    const Dims want = sizes_at(type, values);
    KILN_CHECK(t.sizes() == IntArrayRef(want), "internal: %", s.node->result()->name(), " expects an operand of ",
               shape_str(want), " but it is ", shape_str(t.sizes()));
  }

  static bool same_layout(const Tensor &t, const Dims &strides) {
    if (size_t(t.dim()) != strides.size()) return false;
    for (int64_t d = 0; d < t.dim(); ++d)
      if (t.size(d) > 1 && t.stride(d) != strides[size_t(d)]) return false;
    return true;
  }

  // A copy of t with `strides` (non-negative: what eager's views give).
  static Tensor relaid(const Tensor &t, const Dims &strides) {
    int64_t span = 1;
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.size(d) == 0) return kiln::detail::make_tensor(t.sizes(), t.dtype());
      span += (t.size(d) - 1) * strides[size_t(d)];
    }
    Tensor r = kiln::detail::make_tensor({span}, t.dtype()).as_strided(t.sizes(), strides, 0);
    copy_(r, t);
    return r;
  }

  bool is_constant(const Tensor &t) const {
    for (const ir::Value *c : g_->consts())
      if (t.is_alias_of(c->tensor())) return true;
    return false;
  }

  void report(const StepObserver &observer, const Step &s, std::chrono::steady_clock::time_point t0) const {
    using us = std::chrono::duration<double, std::micro>;
    const auto t1 = std::chrono::steady_clock::now();
    std::string name = s.node->results().empty() ? std::string() : "%" + s.node->result()->name();
    observer(StepEvent{category(s), name, us(t0.time_since_epoch()).count(), us(t1 - t0).count()});
  }

  // The static executor's categories (profiles compare them).
  static std::string_view category(const Step &s) {
    switch (s.kind) {
    case Step::Kind::Kernel: return "kernel";
    case Step::Kind::EagerGroup: return "eager-group";
    case Step::Kind::Contraction: return s.contraction->on_kilns_kernels() ? "gemm-jit" : "blas";
    case Step::Kind::Eager: break;
    }
    return op_info(s.node->op()).kind == OpKind::Contraction ? "blas" : "eager";
  }

  std::shared_ptr<const ir::Graph> g_;
  std::unordered_map<const ir::Value *, int> slot_;
  std::vector<ir::TensorType> types_; // per slot
  std::vector<bool> output_last_;      // per output: no later output is the same slot (the call moves it out)
  std::vector<bool> output_owned_;     // per output: outputs_allocated_per_call
  std::vector<bool> sized_by_type_;    // per slot: its sizes are its type's at every call (check_sizes skips it)
  size_t num_symbols_ = 0;
  std::vector<size_t> ranks_; // per input
  std::vector<DimRule> dim_rules_;
  bool binds_every_symbol_ = false;
  bool bound_by_bare_dims_ = false; // and every other input dim is a constant (run_bound trusts its caller)
  std::vector<Step> steps_;
  std::vector<int> outputs_;
  struct WriteBackAt {
    size_t after_step; // steps_.size(): after the last
    int target, value; // slots
  };
  std::vector<WriteBackAt> write_backs_; // in the order they run
  std::vector<std::pair<int, ir::SymMax>> planned_; // slot, offset in the arena
  ir::SymMax peak_;                                 // the arena's bytes
  int64_t planned_at_hints_ = 0;                    // peak_ at the traced sizes
  static constexpr size_t kMaxPooledArenas = 8;
  mutable std::mutex pool_mu_;
  mutable std::vector<std::pair<void *, size_t>> pool_; // arenas no call holds, with their bytes
  ExecutableStats stats_;
  mutable std::atomic<int64_t> calls_{0};
};

} // namespace

std::shared_ptr<Executable> make_symbolic_executable(std::shared_ptr<const ir::Graph> g) {
  KILN_CHECK(g, "make_symbolic_executable: no graph");
  return std::make_shared<SymbolicExecutor>(std::move(g));
}

std::vector<std::string> describe_symbolic_executable(std::shared_ptr<const ir::Graph> g) {
  KILN_CHECK(g, "describe_symbolic_executable: no graph");
  return SymbolicExecutor(std::move(g)).describe();
}

} // namespace kiln::codegen
