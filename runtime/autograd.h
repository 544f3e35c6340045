// Eager autograd with libtorch's API: requires_grad_, backward, grad, detach,
// retain_grad, grad_fn, NoGradGuard, InferenceMode (issue 18).
//
// How it hangs together: every op of the op table starts with KILN_TRACE
// (runtime/trace_hook.h). When grad mode is on and an input requires grad, that
// statement hands the op to trace_op (runtime/trace_hook.cpp), which runs it with
// grad mode off, then to record_op() below, which gives its results a Node: the
// op, its attributes, the inputs and results its formula saves, and one edge per
// input to the node that made it (or to the leaf that accumulates its gradient).
// backward() walks the nodes parents first and asks each op's derivative formula
// (runtime/derivatives.cpp, one per op, keyed by OpId) for its inputs' gradients.
// The formulas are written in kiln ops, so a backward run while tracing is
// recorded like any other code.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/op_registry.h"
#include "runtime/tensor.h"
#include "runtime/version.h"

namespace kiln {

// ---- grad mode (torch's GradMode / NoGradGuard / AutoGradMode / InferenceMode)
namespace detail {
// initial-exec: every op reads it once autograd is in use (see allocator.cpp).
extern __attribute__((tls_model("initial-exec"))) thread_local bool t_grad_enabled;
extern thread_local int t_inference_depth;
} // namespace detail

struct GradMode {
  static bool is_enabled() { return detail::t_grad_enabled; }
  static void set_enabled(bool enabled) { detail::t_grad_enabled = enabled; }
};

// RAII: sets grad mode for this thread, restores the previous one on exit.
class AutoGradMode {
public:
  explicit AutoGradMode(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~AutoGradMode() { GradMode::set_enabled(prev_); }
  AutoGradMode(const AutoGradMode &) = delete;
  AutoGradMode &operator=(const AutoGradMode &) = delete;

private:
  bool prev_;
};

// Ops inside record nothing for backward (torch::NoGradGuard).
class NoGradGuard : public AutoGradMode {
public:
  NoGradGuard() : AutoGradMode(false) {}
};

// torch's c10::InferenceMode: grad mode off while enabled. (kiln keeps no
// separate "inference tensor" flag: tensors made inside may later be used with
// autograd, as normal tensors made under NoGradGuard can.)
class InferenceMode {
public:
  explicit InferenceMode(bool enabled = true) : grad_(enabled ? false : GradMode::is_enabled()), on_(enabled) {
    if (on_) ++detail::t_inference_depth;
  }
  ~InferenceMode() {
    if (on_) --detail::t_inference_depth;
  }
  InferenceMode(const InferenceMode &) = delete;
  InferenceMode &operator=(const InferenceMode &) = delete;
  static bool is_enabled() { return detail::t_inference_depth > 0; }

private:
  AutoGradMode grad_;
  bool on_;
};

namespace autograd {

class Node;

// Where a gradient goes: input `input_nr` of `function` (a Node's inputs are the
// results of the op it records; a leaf's accumulator has one).
struct Edge {
  std::shared_ptr<Node> function;
  uint32_t input_nr = 0;
  bool is_valid() const { return bool(function); }
};

// A value an op saved for its backward: the tensor (without its autograd
// history, so a result saving itself makes no cycle) and its version then.
class SavedVariable {
public:
  SavedVariable() = default;
  SavedVariable(const Tensor &t, bool is_output);
  // The saved value; throws torch's "modified by an inplace operation" error when
  // its memory was written since, and the "backward through the graph a second
  // time" one after release().
  Tensor unpack(const Node &owner) const;
  void release() {
    data_ = Tensor();
    released_ = true;
  }

private:
  Tensor data_;
  ::kiln::detail::VersionCounter version_;
  uint64_t saved_version_ = 0;
  bool released_ = false;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
};

// A node of the backward graph (torch's grad_fn).
class Node : public std::enable_shared_from_this<Node> {
public:
  virtual ~Node() = default;
  // torch's names: "MulBackward0", "AccumulateGrad".
  virtual std::string name() const = 0;
  const std::vector<Edge> &next_functions() const { return next_; }
  // Number of gradients this node takes (its op's results).
  virtual size_t num_inputs() const = 0;

  // Internal (the engine).
  virtual std::vector<Tensor> apply(std::vector<Tensor> &&grads) = 0;
  virtual void release_variables() {}
  std::vector<Edge> next_;
};

// torch::autograd::backward: accumulates d(tensors)/d(leaf) into each leaf's grad().
// grad_tensors may be empty only for scalar tensors (ones). retain_graph defaults
// to create_graph. inputs, when given, limits accumulation to those tensors.
void backward(const std::vector<Tensor> &tensors, const std::vector<Tensor> &grad_tensors = {},
              std::optional<bool> retain_graph = std::nullopt, bool create_graph = false,
              const std::vector<Tensor> &inputs = {});

// torch::autograd::grad: returns d(outputs)/d(inputs) without touching grad().
// allow_unused: an input that outputs do not depend on gives an undefined tensor
// instead of an error.
std::vector<Tensor> grad(const std::vector<Tensor> &outputs, const std::vector<Tensor> &inputs,
                         const std::vector<Tensor> &grad_outputs = {}, std::optional<bool> retain_graph = std::nullopt,
                         bool create_graph = false, bool allow_unused = false);

} // namespace autograd

// What a tensor that takes part in autograd carries (TensorImpl::autograd_meta).
struct AutogradMeta {
  bool requires_grad = false;    // a leaf that requires grad (set by requires_grad_)
  bool retains_grad = false;     // a non-leaf whose grad() backward fills
  Tensor grad;                   // accumulated gradient
  std::shared_ptr<autograd::Node> grad_fn; // null for a leaf
  uint32_t output_nr = 0;        // which result of grad_fn this is
  std::weak_ptr<autograd::Node> grad_accumulator; // a leaf's AccumulateGrad
  bool is_view = false;          // a view made with grad mode on of a tensor that requires grad
};

namespace detail {

// Set once by the first requires_grad_(true): until then no op looks further.
extern std::atomic<bool> g_autograd_used;

inline bool requires_grad_impl(const Tensor &t) {
  if (!t.defined()) return false;
  const AutogradMeta *m = t.impl().autograd_meta.get();
  return m && (m->requires_grad || m->grad_fn);
}

// Whether autograd can want anything on this thread now: one relaxed load until
// the first requires_grad_(true).
inline bool autograd_active() {
  return g_autograd_used.load(std::memory_order_relaxed) && GradMode::is_enabled();
}

// Gives `outputs`, the results of `id` on `inputs` (computed with grad mode off),
// a Node recording the op for backward. Results of integer or bool dtype never
// require grad. `inplace_self`, when given, is the tensor an in-place op is about
// to overwrite: inputs that alias it are saved as copies.
void record_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs, std::vector<Tensor> &outputs,
               const Tensor *inplace_self = nullptr);

// torch's checks before an in-place op with autograd: a leaf that requires grad
// cannot be written in place, nor a view of one.
void check_inplace(const Tensor &self, OpId id);
// After `self` was overwritten in place with `result`'s values: self's history
// becomes result's (torch's rebase_history).
void rebase_history(Tensor &self, const Tensor &result);
// After `view` (a view op's result) was overwritten in place with `result`'s
// values: the tensor it views (TensorImpl::view_base) takes the history
// "its old values with the view's elements replaced by result" (torch's
// CopySlices), when it or result requires grad.
void copy_slices(const Tensor &view, const Tensor &result);

} // namespace detail
} // namespace kiln
