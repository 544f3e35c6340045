// The compiled executor: builds a plan from an optimized graph and runs it.
#include <chrono>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "codegen/executable.h"
#include "codegen/jit.h"
#include "codegen/lowering.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::codegen {

namespace {
thread_local const StepObserver *t_step_observer = nullptr;

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
  enum class Kind { Eager, Kernel, EagerGroup } kind;
  const ir::Node *node = nullptr;
  std::vector<int> in;  // env slots; -1 = absent optional operand
  std::vector<int> out; // env slots
  std::shared_ptr<const CompiledKernel> kernel;
  std::vector<size_t> buffer_operands; // Kernel: which of `in` are input buffers
  std::vector<ir::TensorType> out_types; // Kernel: result types (contiguous)
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
      for (size_t i = 0; i < n->results().size(); ++i) {
        s.out.push_back(int(meta.size()));
        define(n->results()[i], outs.at(i));
      }
      steps_.push_back(std::move(s));
    }
    num_slots_ = meta.size();
    for (const ir::Value *o : graph.outputs()) outputs_.push_back(slot_.at(o));
    for (const ir::WriteBack &w : graph.write_backs()) write_backs_.push_back({slot_.at(w.target), slot_.at(w.value)});
    stats_.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  std::vector<Tensor> run(const std::vector<Tensor> &inputs) const override {
    const ir::Graph &graph = *g_;
    std::vector<Tensor> env(num_slots_);
    for (size_t i = 0; i < inputs.size(); ++i) env[i] = inputs[i];
    size_t k = inputs.size();
    for (const ir::Value *p : graph.params()) env[k++] = p->tensor();
    for (const ir::Value *c : graph.consts()) env[k++] = c->tensor();
    std::vector<Tensor> ins;
    void *buffers[64];
    const StepObserver *observer = t_step_observer;
    for (const Step &s : steps_) {
      const double t0 = observer ? steady_us() : 0;
      run_step(s, env, ins, buffers);
      if (observer) (*observer)(StepEvent{category(s), step_name(s), t0, steady_us() - t0});
    }
    for (auto [target, value] : write_backs_) {
      Tensor t = env[size_t(target)];
      copy_(t, env[size_t(value)]);
    }
    std::vector<Tensor> out;
    out.reserve(outputs_.size());
    for (int o : outputs_) out.push_back(env[size_t(o)]);
    return out;
  }

  PlanStats stats() const override { return stats_; }

private:
  static std::string_view category(const Step &s) {
    switch (s.kind) {
    case Step::Kind::Kernel: return "kernel";
    case Step::Kind::EagerGroup: return "eager-group";
    case Step::Kind::Eager: break;
    }
    return op_info(s.node->op()).kind == OpKind::Contraction ? "blas" : "eager";
  }
  static std::string_view step_name(const Step &s) {
    if (s.kind == Step::Kind::Kernel) return s.kernel->symbol();
    if (s.kind == Step::Kind::EagerGroup) return "fusion_group";
    return op_info(s.node->op()).mnemonic;
  }

  static void run_step(const Step &s, std::vector<Tensor> &env, std::vector<Tensor> &ins, void **buffers) {
    ins.clear();
    for (int i : s.in) ins.push_back(i < 0 ? Tensor() : env[size_t(i)]);
    switch (s.kind) {
    case Step::Kind::Eager: {
      std::vector<Tensor> outs = run_op(s.node->op(), ins, s.node->attrs());
      for (size_t i = 0; i < s.out.size(); ++i) env[size_t(s.out[i])] = std::move(outs[i]);
      break;
    }
    case Step::Kind::EagerGroup: {
      std::vector<Tensor> outs = ir::interpret(*s.node->body(), ins);
      for (size_t i = 0; i < s.out.size(); ++i) env[size_t(s.out[i])] = std::move(outs[i]);
      break;
    }
    case Step::Kind::Kernel: {
      size_t b = 0;
      for (size_t i : s.buffer_operands) buffers[b++] = ins[i].raw_data();
      for (size_t i = 0; i < s.out.size(); ++i) {
        Tensor o = kiln::detail::make_tensor(s.out_types[i].shape, s.out_types[i].dtype);
        buffers[b++] = o.raw_data();
        env[size_t(s.out[i])] = std::move(o);
      }
      s.kernel->run(buffers);
      break;
    }
    }
  }

  static Tensor as_meta(const Tensor &t) {
    if (!t.defined() || t.is_meta()) return t;
    return kiln::detail::make_view(kiln::detail::make_tensor({0}, t.dtype(), true), t.sizes(), t.strides(), 0);
  }

  // Lowers the group to one kernel; on failure the group runs eagerly.
  std::vector<Tensor> plan_group(const ir::Node &n, const std::vector<Tensor> &ins, Step &s) {
    std::vector<Tensor> outs;
    for (const ir::Value *r : n.results()) outs.push_back(kiln::detail::make_tensor(r->type().shape, r->type().dtype, true));
    if (ins.size() + outs.size() > 64) {
      fall_back(n, "more than 64 buffers", s);
      return outs;
    }
    try {
      KernelDesc desc = lower_group(n, ins, s.buffer_operands);
      s.kernel = Jit::current().compile(desc);
      s.kind = Step::Kind::Kernel;
      for (const ir::Value *r : n.results()) s.out_types.push_back(r->type());
      ++stats_.kernels;
    } catch (const Error &e) {
      fall_back(n, e.what(), s);
    }
    return outs;
  }

  void fall_back(const ir::Node &n, const std::string &why, Step &s) {
    kiln::log()->debug("codegen: fusion group %{} runs eagerly: {}", n.result()->name(), why);
    s.kind = Step::Kind::EagerGroup;
    ++stats_.groups_fallen_back;
    stats_.eager_steps += int64_t(n.body()->num_nodes());
  }

  std::shared_ptr<const ir::Graph> g_;
  std::unordered_map<const ir::Value *, int> slot_;
  std::vector<Step> steps_;
  std::vector<int> outputs_;
  std::vector<std::pair<int, int>> write_backs_;
  size_t num_fixed_ = 0, num_slots_ = 0;
  PlanStats stats_;
};

} // namespace

std::shared_ptr<Executable> make_executable(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &inputs) {
  return std::make_shared<Plan>(std::move(g), inputs);
}

} // namespace kiln::codegen
