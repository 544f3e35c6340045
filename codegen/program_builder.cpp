// Builds a compiled specialization's program (codegen/program.h) from an
// optimized graph: each fusion group becomes a JIT kernel (or an epilogue, or
// runs eagerly when codegen cannot lower it), each other node an eager step;
// views only kernels read are resolved to their base, and the memory plan's
// values are placed in the arena.
#include <algorithm>
#include <chrono>
#include <optional>

#include <spdlog/spdlog.h>

#include "codegen/gemm/path.h"
#include "codegen/op_lowering.h"
#include "codegen/program.h"
#include "ir/flops.h"
#include "ir/interpreter.h"
#include "ir/memory_plan.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::codegen {

namespace {

class ProgramBuilder : Program {
public:
  ProgramBuilder(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &example) {
    g_ = std::move(g);
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
    const std::vector<bool> in_place = ir::write_backs_in_place(graph);
    for (size_t k = 0; k < in_place.size(); ++k)
      if (in_place[k]) into_target_[graph.write_backs()[k].value] = graph.write_backs()[k].target;

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
        outs = build_group_step(*n, ins, s);
      } else if (auto lone = build_lone_gemm(*n, ins, s)) {
        outs = std::move(*lone);
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
    place_write_backs(graph);
    use_memory_plan(graph);
    choose_serial();
    stats_.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  Program take() && { return std::move(static_cast<Program &>(*this)); }

private:
  // A step this small runs no faster split over two cores than on one once
  // its operands come from the other core: a 128^3 GEMM (4.2 MFLOP) whose A
  // the last step computed took 32.6 us on two threads and 22.8 us on one in
  // train-mlp, while 256^3 (34 MFLOP) runs 1.75x faster on two.
  static constexpr int64_t kSerialStepFlops = int64_t(1) << 23;
  // Elements of the largest result a step of such a program may write (256
  // KiB of float32; a kernel splits from 2 x kDefaultGrain, 32K elements).
  static constexpr int64_t kSerialResultElements = int64_t(1) << 16;

  // Program::serial_: every call runs all its steps on the calling thread when
  // they form a chain of small steps, a contraction reading what an earlier
  // step computed. Split, each step leaves half its output in the other
  // core's cache for the next to fetch: train-mlp's step (five GEMMs of at
  // most 128^3 and ~20 small kernels) took 145-165 us on two threads and
  // 111-117 us on one. A lone small contraction reads the caller's data and
  // still splits (a 128^3 linear: 16 us on two threads, 20 on one).
  void choose_serial() {
    bool chain = false;
    // Per slot: a step computed it (a view of such a value too; a view of a
    // parameter, such as linear's transposed weight, is not).
    std::vector<uint8_t> computed(num_slots_, 0);
    for (const Step &s : steps_) {
      bool reads_computed = false;
      for (int slot : s.in) reads_computed |= slot >= 0 && computed[size_t(slot)];
      const bool view = s.kind == Step::Kind::Skip ||
                        (s.node->kind() == ir::Node::Kind::Op && s.node->info().kind == OpKind::View);
      for (int slot : s.out) computed[size_t(slot)] = view ? reads_computed : 1;
      if (view) continue;
      const int64_t flops = ir::contraction_flops(*s.node);
      int64_t elements = 0;
      for (const ir::Value *r : s.node->results()) elements = std::max(elements, r->type().numel());
      if (flops > kSerialStepFlops || elements > kSerialResultElements) {
        kiln::log()->debug("codegen: @{} splits its steps over the threads: %{} is large ({} flops, {} elements)",
                           g_->name(), s.node->result()->name(), flops, elements);
        return;
      }
      chain |= flops > 0 && reads_computed;
    }
    if (!chain) return;
    serial_ = stats_.serial = true;
    kiln::log()->debug("codegen: @{} runs on the calling thread: a chain of small steps", g_->name());
  }

  static std::string label_of(const Step &s) {
    std::string what;
    switch (s.kind) {
    case Step::Kind::Kernel: what = s.kernel->symbol(); break;
    case Step::Kind::EagerGroup: what = "fusion_group (eager)"; break;
    case Step::Kind::Epilogue:
      what = s.node->kind() == ir::Node::Kind::FusionGroup ? "contraction+epilogue" : "contraction";
      if (s.epilogue->on_kilns_kernels()) what += " (" + std::string(s.epilogue->contraction_kind()) + ")";
      break;
    case Step::Kind::Skip:
    case Step::Kind::Eager: what = std::string(op_info(s.node->op()).mnemonic); break;
    }
    if (s.node->results().empty()) return what;
    return std::string("%").append(s.node->result()->name()).append(" ").append(what);
  }

  static Tensor as_meta(const Tensor &t) {
    if (!t.defined() || t.is_meta()) return t;
    return kiln::detail::make_view(kiln::detail::make_tensor({0}, t.dtype(), true), t.sizes(), t.strides(), 0);
  }


  // Lowers the group to one kernel; on failure the group runs eagerly.
  std::vector<Tensor> build_group_step(const ir::Node &n, const std::vector<Tensor> &ins, Step &s) {
    std::vector<Tensor> outs;
    for (const ir::Value *r : n.results()) outs.push_back(meta_like(r->type()));
    if (is_epilogue_group(n)) return build_epilogue_step(n, ins, s, outs);
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
  // operands is computed in place over it (the memory plan's verifier allows no other
  // overlap): when the operand really lives in that slot, the kernel is told,
  // so that it writes through the operand's pointer and still vectorizes. If
  // the kernel cannot honour it (different strides, a row pass reading the
  // operand after the store), compiling throws and the group runs eagerly
  // into fresh memory. An operand elsewhere (a reshape that stayed a view of a
  // parameter, an eager result) is only read: the kernel writes the slot.
  void alias_in_place_outputs(const ir::Node &n, const std::vector<size_t> &buffer_operands, KernelDesc &desc) const {
    alias_outputs_into_targets(n, buffer_operands, desc);
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

  // A result computed into its write-back target that the group also reads
  // (a weight's update reads the weight) writes through that operand's pointer.
  void alias_outputs_into_targets(const ir::Node &n, const std::vector<size_t> &buffer_operands,
                                  KernelDesc &desc) const {
    for (size_t o = 0; o < n.results().size() && o < desc.outputs.size(); ++o) {
      auto it = into_target_.find(n.result(o));
      if (it == into_target_.end()) continue;
      for (size_t b = 0; b < buffer_operands.size(); ++b) {
        if (n.operand(buffer_operands[b]) != it->second) continue;
        desc.output_aliases_input.resize(desc.outputs.size(), -1);
        desc.output_aliases_input[o] = int32_t(b);
        kiln::log()->debug("codegen: %{} is computed into %{}", n.result(o)->name(), it->second->name());
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

  std::vector<Tensor> build_epilogue_step(const ir::Node &n, const std::vector<Tensor> &ins, Step &s, std::vector<Tensor> outs) {
    try {
      s.epilogue = EpilogueStep::build(n, ins);
      s.kind = Step::Kind::Epilogue;
      ++stats_.epilogue_steps;
      count_gemm(*s.epilogue);
      return s.epilogue->result_metas();
    } catch (const Error &e) {
      fall_back(n, e.what(), s);
      return outs;
    }
  }

  void count_gemm(const EpilogueStep &e) {
    if (!e.on_kilns_kernels()) return;
    ++stats_.gemm_jit_steps;
    stats_.packed_weight_bytes += e.packed_weight_bytes();
  }

  // Under KILN_GEMM=jit a lone matmul, mm, bmm or conv2d runs on kiln's GEMM
  // or conv kernels (packed weights) as an epilogue step without epilogue;
  // nothing (an eager step) otherwise: a conv2d kiln's conv does not cover
  // (depthwise, channels-last) keeps eager's kernels.
  std::optional<std::vector<Tensor>> build_lone_gemm(const ir::Node &n, const std::vector<Tensor> &ins, Step &s) {
    if (gemm::path() != gemm::Path::Jit || n.kind() != ir::Node::Kind::Op) return std::nullopt;
    const OpId op = n.op();
    const bool conv = op == OpId::Conv2d;
    if (op != OpId::Matmul && op != OpId::Mm && op != OpId::Bmm && !conv) {
      if (op == OpId::Addmm)
        kiln::log()->debug("codegen: %{} (addmm) runs on BLAS: alpha 0 or an integral dtype (others are "
                           "decomposed into a matmul and its epilogue)", n.result()->name());
      return std::nullopt;
    }
    const DType t = n.result()->type().dtype;
    std::string why;
    if (t != kFloat32 && t != kFloat64) why = "not f32 or f64";
    for (const ir::Value *v : n.operands())
      if (why.empty() && !conv && (!v || v->type().shape.size() < 2)) why = "an operand has fewer than 2 dims";
    for (int64_t d : n.result()->type().shape)
      if (why.empty() && d == 0) why = "an empty result";
    if (!why.empty()) {
      kiln::log()->debug("codegen: %{} ({}) runs on BLAS: {}", n.result()->name(), n.mnemonic(), why);
      return std::nullopt;
    }
    try {
      std::shared_ptr<const EpilogueStep> e = EpilogueStep::build_lone(n, ins);
      if (!e->on_kilns_kernels()) return std::nullopt; // it logged why
      s.epilogue = std::move(e);
      s.kind = Step::Kind::Epilogue;
      count_gemm(*s.epilogue);
      return s.epilogue->result_metas();
    } catch (const Error &err) {
      kiln::log()->debug("codegen: %{} ({}) runs on BLAS: {}", n.result()->name(), n.mnemonic(), err.what());
      return std::nullopt;
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

  // Each write-back runs right after the step at its point (the memory plan
  // reuses its value's bytes after that), the rest after the last step.
  void place_write_backs(const ir::Graph &graph) {
    const std::vector<int64_t> points = ir::write_back_points(graph);
    for (size_t k = 0; k < points.size(); ++k) {
      const ir::WriteBack &w = graph.write_backs()[k];
      const std::pair<int, int> copy{slot_.at(w.target), slot_.at(w.value)};
      if (points[k] >= int64_t(steps_.size())) {
        write_backs_.push_back(copy);
        continue;
      }
      Step &s = steps_[size_t(points[k])];
      s.write_backs.push_back(copy);
      const bool compiled = s.kind == Step::Kind::Kernel || s.kind == Step::Kind::Epilogue;
      if (compiled && into_target_.count(w.value)) s.into_targets.emplace_back(copy.second, copy.first);
    }
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
          if (into_target_of(s, o) >= 0) s.out_shapes[r].allocate = false; // bound to the target per call
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
  }

  // Outputs a kernel step allocates in every call (no arena slot) and that no
  // other output or write-back names: nothing else holds their memory.
  void find_owned_outputs() {
    std::vector<uint8_t> fresh(num_slots_, 0);
    for (const Step &s : steps_)
      if (s.kind == Step::Kind::Kernel)
        for (int o : s.out) fresh[size_t(o)] = !arena_slot_[size_t(o)];
    for (const ir::WriteBack &w : g_->write_backs()) fresh[size_t(slot_.at(w.target))] = fresh[size_t(slot_.at(w.value))] = 0;
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

  // A step's scratch goes in the arena's first gap of its size among the
  // planned values live while it runs (read, written or kept for later), else
  // after them: each call's arena carries it, a steady-state call allocates
  // none (concurrent calls have their own arenas), and a conv epilogue's raw
  // output takes bytes that a training step's im2col uses at another time.
  void reserve_step_scratch() {
    std::optional<ir::Liveness> live;
    const int64_t after_values = (arena_bytes_ + 63) / 64 * 64;
    int64_t end = arena_bytes_;
    for (size_t i = 0; i < steps_.size(); ++i) {
      Step &s = steps_[i];
      if (s.kind != Step::Kind::Epilogue) continue;
      s.scratch_bytes = int64_t(s.epilogue->scratch_bytes());
      if (s.scratch_bytes == 0) continue;
      if (!live && g_->memory_plan()) live.emplace(*g_);
      s.scratch_offset = live ? free_gap(*live, int64_t(i), s.scratch_bytes) : after_values;
      end = std::max(end, s.scratch_offset + s.scratch_bytes);
    }
    arena_bytes_ = end;
  }

  // The lowest 64-aligned offset of `bytes` free of every planned value live at node i.
  int64_t free_gap(const ir::Liveness &live, int64_t i, int64_t bytes) const {
    std::vector<std::pair<int64_t, int64_t>> taken;
    for (const auto &[v, a] : g_->memory_plan()->entries) {
      const ir::LiveRange *r = live.range(v);
      if (r && r->def <= i && i <= r->last) taken.emplace_back(a.offset, a.offset + a.size);
    }
    std::sort(taken.begin(), taken.end());
    int64_t at = 0;
    for (const auto &[lo, hi] : taken) {
      if (at + bytes <= lo) break;
      at = std::max(at, (hi + 63) / 64 * 64);
    }
    return at;
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

  static int into_target_of(const Step &s, int slot) {
    for (auto [result, target] : s.into_targets)
      if (result == slot) return target;
    return -1;
  }

  std::unordered_map<const ir::Value *, const ir::Value *> into_target_; // ir::write_backs_in_place

  const ir::Value *value_of(int slot) const {
    for (const auto &[value, s] : slot_)
      if (s == slot) return value;
    return nullptr;
  }

  static const ir::Value *producer_alias(const ir::Value *v) {
    if (v->kind() != ir::Value::Kind::Result) return nullptr;
    return ir::alias_source(*v->producer(), v->result_index());
  }
};

} // namespace

// A meta tensor of type t, with its strides when it has them.
Tensor meta_like(const ir::TensorType &t) {
  Tensor m = kiln::detail::make_tensor(t.shape, t.dtype, true);
  if (!t.strides) return m;
  return kiln::detail::make_view(m, t.shape, *t.strides, 0);
}

Program build_program(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &example) {
  return ProgramBuilder(std::move(g), example).take();
}

} // namespace kiln::codegen
