#include "runtime/autograd.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "runtime/derivatives.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/step_phase.h"
#include "runtime/trace_hook.h"
#include "runtime/autograd_trace.h"

namespace kiln {
namespace detail {
__attribute__((tls_model("initial-exec"))) thread_local bool t_grad_enabled = true;
thread_local int t_inference_depth = 0;
std::atomic<bool> g_autograd_used{false};
thread_local std::vector<TracedGrad> t_traced_grads;
std::vector<TracedGrad> take_traced_grads() { return std::exchange(t_traced_grads, {}); }
} // namespace detail

namespace autograd {
namespace {

using detail::Derivative;
using detail::GradCtx;
using detail::GradKind;

// t's values and metadata without its autograd history.
Tensor alias_without_history(const Tensor &t) {
  if (!t.defined()) return t;
  Tensor a = kiln::detail::make_view(t, t.sizes(), t.strides(), t.storage_offset());
  a.impl().wrapped_number = t.impl().wrapped_number;
  a.impl().trace = t.impl().trace; // while tracing, the alias is the same traced value
  return a;
}

AutogradMeta &meta_of(const Tensor &t) {
  auto &m = t.impl().autograd_meta;
  if (!m) m = std::make_shared<AutogradMeta>();
  return *m;
}

// torch's node names: "mul" -> "MulBackward0", "log_softmax" -> "LogSoftmaxBackward0".
std::string backward_name(OpId id) {
  std::string out;
  bool upper = true;
  for (char c : op_info(id).mnemonic) {
    if (c == '_') {
      upper = true;
      continue;
    }
    out += upper ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    upper = false;
  }
  return out + "Backward0";
}

std::string describe(const Tensor &t) {
  return kiln::detail::concat(t.dtype(), shape_str(t.sizes()));
}

} // namespace

// ---- saved variables

SavedVariable::SavedVariable(const Tensor &t, bool is_output) : is_output_(is_output) {
  if (!t.defined()) return;
  // A result saves an alias without its history: the result's meta points at
  // the node that saves it, and that would be a cycle. An input keeps its
  // history (a backward with create_graph differentiates through it).
  data_ = is_output ? alias_without_history(t) : t;
  if (is_output && t.impl().autograd_meta) output_nr_ = t.impl().autograd_meta->output_nr;
  if (!t.is_meta()) {
    version_ = kiln::detail::watch_version(t);
    if (version_) saved_version_ = version_->load(std::memory_order_acquire);
  }
}

Tensor SavedVariable::unpack(const Node &owner) const {
  KILN_CHECK(!released_, owner.name(),
             ": Trying to backward through the graph a second time (or directly access saved tensors after they "
             "have already been freed). Saved intermediate values of the graph are freed when you call "
             ".backward() or autograd::grad(). Specify retain_graph=true if you need to backward through the "
             "graph a second time or if you need to access saved tensors after calling backward.");
  if (!data_.defined()) return data_;
  if (version_) {
    const uint64_t now = version_->load(std::memory_order_acquire);
    KILN_CHECK(now == saved_version_,
               "one of the variables needed for gradient computation has been modified by an inplace operation: [",
               describe(data_), "], which is ", is_output_ ? "output " : "an input of ",
               is_output_ ? std::to_string(output_nr_) + " of " : std::string(), owner.name(), ", is at version ",
               now, "; expected version ", saved_version_, " instead.");
  }
  if (!is_output_ || !GradMode::is_enabled()) return data_;
  // create_graph: the result again with its history, so formulas that read it
  // are differentiated too.
  Tensor r = alias_without_history(data_);
  AutogradMeta &m = meta_of(r);
  m.grad_fn = std::const_pointer_cast<Node>(owner.shared_from_this());
  m.output_nr = output_nr_;
  return r;
}

namespace {

// ---- nodes

// The node of one recorded op.
class OpNode final : public Node {
public:
  OpNode(OpId id, Attrs attrs) : id_(id), attrs_(std::move(attrs)) {}
  std::string name() const override { return backward_name(id_); }
  size_t num_inputs() const override { return out_sizes_.size(); }

  std::vector<Tensor> apply(std::vector<Tensor> &&grads) override {
    const Derivative &d = detail::derivative(id_);
    KILN_CHECK(d.kind == GradKind::Formula, name(), ": the derivative of ", op_info(id_).mnemonic,
               " is not implemented yet");
    std::vector<Tensor> inputs, outputs;
    inputs.reserve(saved_in_.size());
    for (const SavedVariable &s : saved_in_) inputs.push_back(s.unpack(*this));
    outputs.reserve(saved_out_.size());
    for (const SavedVariable &s : saved_out_) outputs.push_back(s.unpack(*this));
    for (size_t j = 0; j < grads.size(); ++j)
      if (!grads[j].defined() && is_floating(out_dtypes_[j])) grads[j] = zeros(out_sizes_[j], out_dtypes_[j]);
    const GradCtx ctx{id_, attrs_, inputs, outputs, grads, in_sizes_, in_dtypes_, needs_};
    std::vector<Tensor> result = d.formula(ctx);
    KILN_CHECK(result.size() <= in_sizes_.size(), name(), ": internal: ", result.size(), " gradients for ",
               in_sizes_.size(), " inputs");
    result.resize(in_sizes_.size());
    for (size_t i = 0; i < result.size(); ++i) {
      Tensor &g = result[i];
      if (!needs_[i] || !g.defined()) {
        g = Tensor();
        continue;
      }
      if (g.sizes() != IntArrayRef(in_sizes_[i])) g = detail::sum_to(g, in_sizes_[i]);
      KILN_CHECK(g.sizes() == IntArrayRef(in_sizes_[i]), name(), ": internal: the gradient of input ", i,
                 " has shape ", shape_str(g.sizes()), ", the input ", shape_str(in_sizes_[i]));
      if (g.dtype() != in_dtypes_[i]) g = to(g, in_dtypes_[i]);
    }
    return result;
  }

  void release_variables() override {
    for (SavedVariable &s : saved_in_) s.release();
    for (SavedVariable &s : saved_out_) s.release();
  }

  OpId id_;
  Attrs attrs_;
  std::vector<SavedVariable> saved_in_, saved_out_;
  std::vector<Dims> in_sizes_, out_sizes_;
  std::vector<DType> in_dtypes_, out_dtypes_;
  std::vector<bool> needs_;
  // The results whose grad() a backward through this node fills (retain_grad).
  std::vector<std::weak_ptr<AutogradMeta>> retained_;
};

// A leaf shared by graphs on several threads (one model's weights): creating its
// accumulator and adding into its grad are serialized per leaf, as torch's are,
// with a lock striped over the leaves' metadata (none in AutogradMeta itself).
std::mutex &leaf_mutex(const AutogradMeta *m) {
  static std::mutex stripes[64];
  return stripes[(reinterpret_cast<uintptr_t>(m) >> 6) % 64];
}

// A leaf's gradient sink (torch's AccumulateGrad).
class AccumulateGrad final : public Node {
public:
  explicit AccumulateGrad(std::shared_ptr<AutogradMeta> meta) : meta_(std::move(meta)) {}
  std::string name() const override { return "AccumulateGrad"; }
  size_t num_inputs() const override { return 1; }
  std::vector<Tensor> apply(std::vector<Tensor> &&grads) override {
    std::lock_guard lock(leaf_mutex(meta_.get()));
    accumulate(*meta_, grads.at(0));
    if (kiln::detail::tracing() && meta_->grad.defined()) [[unlikely]]
      kiln::detail::t_traced_grads.push_back({meta_, meta_->grad});
    return {};
  }

  // grad() += g: in place when grad mode is off (the tensor a caller holds as
  // p.grad() sees it, as in torch); a new tensor under create_graph.
  static void accumulate(AutogradMeta &m, const Tensor &g) {
    if (!g.defined()) return;
    const bool graph = GradMode::is_enabled();
    if (kiln::detail::tracing()) [[unlikely]]
      return accumulate_traced(m, g, graph);
    if (!m.grad.defined()) {
      // A copy: g may be a view of another gradient or of a value the caller holds.
      if (graph) m.grad = g;
      else m.grad = g.clone();
      return;
    }
    if (graph || m.grad.impl().autograd_meta) {
      m.grad = m.grad + g;
      return;
    }
    add_(m.grad, g);
  }

  // While tracing (a compiled training step), g is a traced value and the
  // leaf's grad must stay a real tensor the compiled code keeps writing: the
  // first gradient goes into a real buffer allocated now (zeros, should the
  // trace fail), and every gradient is added in place, which the tracer turns
  // into a write-back.
  static void accumulate_traced(AutogradMeta &m, const Tensor &g, bool graph) {
    if (graph || (m.grad.defined() && m.grad.impl().autograd_meta))
      throw TraceError("backward: create_graph (a gradient with history) cannot be compiled yet");
    if (!m.grad.defined()) {
      {
        kiln::detail::TracingOff off;
        m.grad = zeros(g.sizes(), TensorOptions().dtype(g.dtype()));
      }
      copy_(m.grad, g);
      return;
    }
    add_(m.grad, g);
  }

  std::shared_ptr<AutogradMeta> meta_;
};

// The edge a gradient of t flows along: its grad_fn's, or its leaf accumulator.
Edge gradient_edge(const Tensor &t) {
  const auto &mp = t.impl().autograd_meta;
  if (mp->grad_fn) return {mp->grad_fn, mp->output_nr};
  std::lock_guard lock(leaf_mutex(mp.get()));
  std::shared_ptr<Node> acc = mp->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(mp);
    mp->grad_accumulator = acc;
  }
  return {acc, 0};
}

// The history an in-place update of a view gives the tensor it views (torch's
// CopySlices): the base's new values are its old ones outside the view's
// elements and the update's result inside. Its gradient g goes to the old base
// with the view's elements zeroed, and, those elements of g, to the result.
// The view's elements are fixed when it is made: `region` marks them in the
// base's shape, `positions` lists, in the view's order, each one's place in
// the base's memory order (the base is dense; `order` permutes the base into
// that order). Written in kiln ops, so a traced backward records it.
class CopySlices final : public Node {
public:
  CopySlices(Dims view_sizes, Dims order, Tensor region, Tensor positions)
      : view_sizes_(std::move(view_sizes)), order_(std::move(order)), region_(std::move(region)),
        positions_(std::move(positions)) {}
  std::string name() const override { return "CopySlices"; }
  size_t num_inputs() const override { return 1; }

  std::vector<Tensor> apply(std::vector<Tensor> &&grads) override {
    const Tensor &g = grads.at(0);
    if (!g.defined()) return {Tensor(), Tensor()};
    Tensor in_memory_order = reshape(contiguous(permute(g, order_)), {-1});
    Tensor to_result = reshape(index_select(in_memory_order, 0, positions_), view_sizes_);
    return {masked_fill(g, region_, 0.0), to_result};
  }

private:
  Dims view_sizes_, order_;
  Tensor region_, positions_;
};

// ---- the engine

struct Task {
  std::vector<Edge> roots;
  std::vector<Tensor> root_grads;
  bool keep_graph = false;
  bool create_graph = false;
  // grad(): the edges whose incoming gradients are returned instead of accumulated.
  std::vector<Edge> captures;
  bool capture_mode = false;
  // backward(inputs=...): only these accumulators run.
  std::unordered_set<const Node *> only;
};

// Nodes reachable from the roots, parents before children (reverse DFS postorder,
// iterative: a long chain of ops must not overflow the stack).
std::vector<Node *> topological_order(const std::vector<Edge> &roots) {
  std::vector<Node *> post;
  std::unordered_set<Node *> seen;
  std::vector<std::pair<Node *, size_t>> stack;
  for (const Edge &r : roots) {
    if (!r.function || !seen.insert(r.function.get()).second) continue;
    stack.push_back({r.function.get(), 0});
    while (!stack.empty()) {
      auto &[n, next] = stack.back();
      if (next < n->next_.size()) {
        Node *c = n->next_[next++].function.get();
        if (c && seen.insert(c).second) stack.push_back({c, 0});
        continue;
      }
      post.push_back(n);
      stack.pop_back();
    }
  }
  std::reverse(post.begin(), post.end());
  return post;
}

std::vector<Tensor> run_engine(Task &task) {
  const std::vector<Node *> order = topological_order(task.roots);
  // Which nodes lead to a gradient someone wants; the others do not run.
  std::unordered_set<const Node *> capture_nodes;
  for (const Edge &e : task.captures) capture_nodes.insert(e.function.get());
  std::unordered_map<const Node *, bool> needed;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    Node *n = *it;
    bool need = capture_nodes.count(n) > 0;
    if (!task.capture_mode && dynamic_cast<AccumulateGrad *>(n))
      need = task.only.empty() || task.only.count(n) > 0;
    for (const Edge &e : n->next_)
      if (e.function && needed[e.function.get()]) need = true;
    needed[n] = need;
  }

  std::unordered_map<const Node *, std::vector<Tensor>> buffers;
  auto add_to = [&](const Edge &e, const Tensor &g) {
    std::vector<Tensor> &buf = buffers[e.function.get()];
    if (buf.empty()) buf.resize(e.function->num_inputs());
    Tensor &slot = buf.at(e.input_nr);
    slot = slot.defined() ? slot + g : g;
  };
  AutoGradMode mode(task.create_graph);
  for (size_t i = 0; i < task.roots.size(); ++i)
    if (task.roots[i].function) add_to(task.roots[i], task.root_grads[i]);

  std::vector<Tensor> captured(task.captures.size());
  for (Node *n : order) {
    auto bit = buffers.find(n);
    std::vector<Tensor> grads = bit == buffers.end() ? std::vector<Tensor>(n->num_inputs()) : std::move(bit->second);
    if (bit != buffers.end()) buffers.erase(bit);
    for (size_t c = 0; c < task.captures.size(); ++c)
      if (task.captures[c].function.get() == n) captured[c] = grads.at(task.captures[c].input_nr);
    if (auto *op = dynamic_cast<OpNode *>(n)) {
      for (size_t j = 0; j < op->retained_.size(); ++j)
        if (auto m = op->retained_[j].lock(); m && j < grads.size()) AccumulateGrad::accumulate(*m, grads[j]);
    }
    if (!needed[n] || (task.capture_mode && dynamic_cast<AccumulateGrad *>(n))) continue;
    if (std::none_of(grads.begin(), grads.end(), [](const Tensor &g) { return g.defined(); })) continue;
    std::vector<Tensor> out = n->apply(std::move(grads));
    if (!task.keep_graph) n->release_variables();
    for (size_t k = 0; k < out.size() && k < n->next_.size(); ++k)
      if (out[k].defined() && n->next_[k].function && needed[n->next_[k].function.get()]) add_to(n->next_[k], out[k]);
  }
  return captured;
}

// Checks each root and its gradient (ones for a scalar), as torch's _make_grads.
void prepare_roots(const std::vector<Tensor> &tensors, const std::vector<Tensor> &grad_tensors, Task &task,
                   const char *api) {
  KILN_CHECK(grad_tensors.empty() || grad_tensors.size() == tensors.size(), api, ": got ", grad_tensors.size(),
             " gradients for ", tensors.size(), " tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor &t = tensors[i];
    kiln::detail::check_defined(t, api, "tensors");
    KILN_CHECK(kiln::detail::requires_grad_impl(t), api, ": element ", i,
               " of tensors does not require grad and does not have a grad_fn");
    Tensor g = i < grad_tensors.size() ? grad_tensors[i] : Tensor();
    if (!g.defined()) {
      KILN_CHECK(t.numel() == 1, api, ": grad can be implicitly created only for scalar outputs (element ", i,
                 " has shape ", shape_str(t.sizes()), ")");
      g = ones_like(t);
    } else {
      KILN_CHECK(g.sizes() == t.sizes(), api, ": Mismatch in shape: grad_output[", i, "] has a shape of ",
                 shape_str(g.sizes()), " and output[", i, "] has a shape of ", shape_str(t.sizes()), ".");
      KILN_CHECK(is_floating(g.dtype()), api, ": grad_output[", i, "] has dtype ", g.dtype(),
                 "; gradients are floating point");
    }
    task.roots.push_back(gradient_edge(t));
    task.root_grads.push_back(g);
  }
}

} // namespace

void backward(const std::vector<Tensor> &tensors, const std::vector<Tensor> &grad_tensors,
              std::optional<bool> retain_graph, bool create_graph, const std::vector<Tensor> &inputs) {
  kiln::detail::StepPhaseScope phase(StepPhase::Backward);
  Task task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  prepare_roots(tensors, grad_tensors, task, "backward");
  for (size_t i = 0; i < inputs.size(); ++i) {
    kiln::detail::check_defined(inputs[i], "backward", "inputs");
    KILN_CHECK(kiln::detail::requires_grad_impl(inputs[i]), "backward: input ", i, " does not require grad");
    KILN_CHECK(!inputs[i].impl().autograd_meta->grad_fn, "backward: input ", i,
               " is not a leaf; kiln's backward(inputs=...) takes leaves only");
    task.only.insert(gradient_edge(inputs[i]).function.get());
  }
  run_engine(task);
}

std::vector<Tensor> grad(const std::vector<Tensor> &outputs, const std::vector<Tensor> &inputs,
                         const std::vector<Tensor> &grad_outputs, std::optional<bool> retain_graph, bool create_graph,
                         bool allow_unused) {
  Task task;
  task.keep_graph = retain_graph.value_or(create_graph);
  task.create_graph = create_graph;
  task.capture_mode = true;
  prepare_roots(outputs, grad_outputs, task, "grad");
  for (size_t i = 0; i < inputs.size(); ++i) {
    kiln::detail::check_defined(inputs[i], "grad", "inputs");
    KILN_CHECK(kiln::detail::requires_grad_impl(inputs[i]), "grad: One of the differentiated Tensors (input ", i,
               ") does not require grad");
    task.captures.push_back(gradient_edge(inputs[i]));
  }
  std::vector<Tensor> result = run_engine(task);
  for (size_t i = 0; i < result.size(); ++i) {
    KILN_CHECK(result[i].defined() || allow_unused, "grad: One of the differentiated Tensors (input ", i,
               ") appears to not have been used in the graph. Set allow_unused=true if this is the desired "
               "behavior.");
    if (result[i].defined() && !create_graph) {
      NoGradGuard off;
      result[i] = alias_without_history(result[i]);
    }
  }
  return result;
}

} // namespace autograd

// ---- recording

namespace detail {

void record_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs, std::vector<Tensor> &outputs,
               const Tensor *inplace_self) {
  using autograd::detail::derivative;
  using autograd::detail::GradKind;
  const autograd::detail::Derivative &d = derivative(id);
  if (d.kind == GradKind::NotDifferentiable) return;
  auto node = std::make_shared<autograd::OpNode>(id, attrs);
  bool any = false;
  node->next_.resize(inputs.size());
  node->needs_.assign(inputs.size(), false);
  node->in_sizes_.resize(inputs.size());
  node->in_dtypes_.assign(inputs.size(), kFloat32);
  node->saved_in_.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor &t = inputs[i];
    if (!t.defined()) continue;
    node->in_sizes_[i] = Dims(t.sizes());
    node->in_dtypes_[i] = t.dtype();
    if (requires_grad_impl(t) && is_floating(t.dtype())) {
      node->next_[i] = autograd::gradient_edge(t);
      node->needs_[i] = any = true;
    }
    if (i < 32 && (d.saves_inputs >> i & 1u)) {
      // An input an in-place op overwrites is saved as a copy of its values now.
      const bool overwritten = inplace_self && t.is_alias_of(*inplace_self) && !t.is_meta();
      NoGradGuard off;
      node->saved_in_[i] = autograd::SavedVariable(overwritten ? t.clone() : t, false);
    }
  }
  if (!any) return;
  node->out_sizes_.resize(outputs.size());
  node->out_dtypes_.assign(outputs.size(), kFloat32);
  node->retained_.resize(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    Tensor &o = outputs[j];
    if (!o.defined()) continue;
    node->out_sizes_[j] = Dims(o.sizes());
    node->out_dtypes_[j] = o.dtype();
    if (!is_floating(o.dtype())) continue;
    // An op that returned an input itself (contiguous() of a contiguous tensor):
    // a fresh alias takes the new history, the input keeps its own.
    for (const Tensor &t : inputs)
      if (o.is_same(t)) {
        o = autograd::alias_without_history(o);
        break;
      }
    auto m = std::make_shared<AutogradMeta>();
    m->grad_fn = node;
    m->output_nr = uint32_t(j);
    m->is_view = op_kind(id) == OpKind::View;
    o.impl().autograd_meta = std::move(m);
  }
  if (d.saves_outputs) {
    node->saved_out_.resize(outputs.size());
    for (size_t j = 0; j < outputs.size(); ++j) node->saved_out_[j] = autograd::SavedVariable(outputs[j], true);
  }
}

void check_inplace(const Tensor &self, OpId id) {
  if (const TensorImpl *base = self.impl().view_base.get()) {
    const AutogradMeta *bm = base->autograd_meta.get();
    KILN_CHECK(!(bm && bm->requires_grad && !bm->grad_fn), op_info(id).mnemonic,
               "_: a view of a leaf Variable that requires grad is being used in an in-place operation (the view ",
               autograd::describe(self), "); wrap the update in kiln::NoGradGuard");
  }
  const AutogradMeta *m = self.impl().autograd_meta.get();
  if (!m) return;
  KILN_CHECK(!(m->requires_grad && !m->grad_fn), op_info(id).mnemonic,
             "_: a leaf Variable that requires grad is being used in an in-place operation (",
             autograd::describe(self), "); wrap the update in kiln::NoGradGuard");
}

void rebase_history(Tensor &self, const Tensor &result) {
  const auto &rm = result.impl().autograd_meta;
  if (!rm || !rm->grad_fn) {
    // The new values depend on nothing that requires grad (fill_, zero_).
    if (self.impl().autograd_meta && self.impl().autograd_meta->grad_fn) self.impl().autograd_meta.reset();
    return;
  }
  auto m = std::make_shared<AutogradMeta>();
  m->grad_fn = rm->grad_fn;
  m->output_nr = rm->output_nr;
  const auto &old = self.impl().autograd_meta;
  m->is_view = old && old->is_view;
  self.impl().autograd_meta = std::move(m);
}

namespace {

// The base's dims ordered by decreasing stride: its memory order when it is
// dense (every element at one place, no gaps), else nullopt.
std::optional<Dims> dense_order(const Tensor &base) {
  Dims order;
  for (int64_t d = 0; d < base.dim(); ++d) order.push_back(d);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return base.strides()[size_t(a)] > base.strides()[size_t(b)]; });
  int64_t expect = 1;
  for (size_t i = order.size(); i-- > 0;) {
    const int64_t d = order[i], n = base.sizes()[size_t(d)];
    if (n == 1) continue;
    if (base.strides()[size_t(d)] != expect) return std::nullopt;
    expect *= n;
  }
  return order;
}

} // namespace

void copy_slices(const Tensor &view, const Tensor &result) {
  const Ref<TensorImpl> &base_ref = view.impl().view_base;
  if (!base_ref) return;
  Tensor base(base_ref);
  if (!requires_grad_impl(base) && !requires_grad_impl(result)) return;
  std::optional<Dims> order = dense_order(base);
  KILN_CHECK(order, "in-place update of a view (", autograd::describe(view), ") of a tensor with strides ",
             shape_str(base.strides()), " and shape ", shape_str(base.sizes()),
             ": autograd needs the viewed tensor dense (no gaps between its elements)");
  // Fixed now, without autograd or tracing: the view's elements in the base.
  NoGradGuard no_grad;
  TracingOff no_trace;
  Dims memory_sizes;
  for (int64_t d : *order) memory_sizes.push_back(base.sizes()[size_t(d)]);
  Tensor in_memory_order = zeros(memory_sizes, kBool);
  Tensor positions = empty({view.numel()}, kInt64);
  bool *marks = in_memory_order.data_ptr<bool>();
  int64_t *pos = positions.data_ptr<int64_t>();
  const int64_t rank = view.dim(), n = view.numel();
  std::vector<int64_t> index(size_t(rank), 0);
  for (int64_t e = 0; e < n; ++e) {
    int64_t at = view.storage_offset() - base.storage_offset();
    for (int64_t d = 0; d < rank; ++d) at += index[size_t(d)] * view.strides()[size_t(d)];
    KILN_CHECK(at >= 0 && at < base.numel(), "internal: in-place update of a view (", autograd::describe(view),
               ") reaches outside the tensor it views");
    pos[e] = at;
    marks[at] = true;
    for (int64_t d = rank; d-- > 0;) {
      if (++index[size_t(d)] < view.sizes()[size_t(d)]) break;
      index[size_t(d)] = 0;
    }
  }
  Dims inverse;
  for (size_t i = 0; i < order->size(); ++i) inverse.push_back(0);
  for (size_t i = 0; i < order->size(); ++i) inverse[size_t((*order)[i])] = int64_t(i);
  Tensor region = permute(in_memory_order, inverse);
  auto node = std::make_shared<autograd::CopySlices>(Dims(view.sizes()), *order, region, positions);
  node->next_.resize(2);
  if (requires_grad_impl(base)) node->next_[0] = autograd::gradient_edge(base);
  if (requires_grad_impl(result)) node->next_[1] = autograd::gradient_edge(result);
  auto m = std::make_shared<AutogradMeta>();
  m->grad_fn = std::move(node);
  base.impl().autograd_meta = std::move(m);
}

} // namespace detail

// ---- Tensor's autograd methods

namespace {
AutogradMeta *meta_ptr(const Tensor &t) { return t.impl().autograd_meta.get(); }
} // namespace

Tensor &Tensor::requires_grad_(bool requires_grad) {
  set_requires_grad(requires_grad);
  return *this;
}

void Tensor::set_requires_grad(bool requires_grad) {
  AutogradMeta *m = meta_ptr(*this);
  KILN_CHECK(!(m && m->grad_fn) || requires_grad,
             "requires_grad_: you can only change requires_grad flags of leaf variables. If you want to use a "
             "computed variable in a subgraph that doesn't require differentiation use var_no_grad = var.detach().");
  if (!requires_grad && !m) return;
  KILN_CHECK(!requires_grad || is_floating(dtype()),
             "requires_grad_: only Tensors of floating point dtype can require gradients (got ", dtype(), ")");
  if (requires_grad) detail::g_autograd_used.store(true, std::memory_order_relaxed);
  if (m && m->grad_fn) return; // a non-leaf already requires grad
  autograd::meta_of(*this).requires_grad = requires_grad;
}

bool Tensor::requires_grad() const { return detail::requires_grad_impl(*this); }

bool Tensor::is_leaf() const {
  const AutogradMeta *m = meta_ptr(*this);
  return !m || !m->grad_fn;
}

const Tensor &Tensor::grad() const {
  static const Tensor kUndefined;
  const AutogradMeta *m = meta_ptr(*this);
  return m ? m->grad : kUndefined;
}

Tensor &Tensor::mutable_grad() const { return autograd::meta_of(*this).grad; }

void Tensor::backward(const Tensor &gradient, std::optional<bool> retain_graph, bool create_graph,
                      const std::vector<Tensor> &inputs) const {
  autograd::backward({*this}, gradient.defined() ? std::vector<Tensor>{gradient} : std::vector<Tensor>{},
                     retain_graph, create_graph, inputs);
}

Tensor Tensor::detach() const { return autograd::alias_without_history(*this); }

Tensor &Tensor::detach_() {
  AutogradMeta *m = meta_ptr(*this);
  KILN_CHECK(!(m && m->is_view), "detach_: Can't detach views in-place. Use detach() instead.");
  impl().autograd_meta.reset();
  return *this;
}

void Tensor::retain_grad() const {
  AutogradMeta *m = meta_ptr(*this);
  KILN_CHECK(m && (m->requires_grad || m->grad_fn),
             "retain_grad: can't retain_grad on Tensor that has requires_grad=False");
  if (!m->grad_fn || m->retains_grad) return; // a leaf keeps its grad anyway
  m->retains_grad = true;
  auto *op = static_cast<autograd::OpNode *>(m->grad_fn.get());
  if (op->retained_.size() <= m->output_nr) op->retained_.resize(m->output_nr + 1);
  op->retained_[m->output_nr] = impl().autograd_meta;
}

bool Tensor::retains_grad() const {
  const AutogradMeta *m = meta_ptr(*this);
  return m && m->retains_grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta *m = meta_ptr(*this);
  return m ? m->grad_fn : nullptr;
}

uint32_t Tensor::output_nr() const {
  const AutogradMeta *m = meta_ptr(*this);
  return m ? m->output_nr : 0;
}

int64_t Tensor::_version() const { return tensor_version(*this); }

} // namespace kiln
