// The tracer: installs the TraceHooks, turns example inputs into meta tensors
// and records every op as a graph node. See trace.h for what is captured and
// which aliasing cases functionalization handles.
#include "frontend/trace.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

#include "passes/rewrite.h"
#include "runtime/op_attrs.h"
#include "runtime/random_stream.h"
#include "runtime/step_phase.h"
#include "runtime/trace_hook.h"

namespace kiln {

namespace {

// One base of memory the traced function can see: a graph input, a parameter,
// or the result of an op that is not a view. `value` is what the whole base
// holds now; in-place ops on it or on its views replace it and bump `version`.
struct AliasRoot {
  ir::Value *value = nullptr;
  uint64_t version = 0;
  // The graph input or parameter this base is (it gets a write-back), or null.
  ir::Value *origin = nullptr;
  // The real tensor behind `origin`, to detect inputs/params sharing memory.
  Tensor real;
  // The base's memory layout (sizes, strides) as eager has it for the whole
  // trace: an in-place op changes the values, never the strides, so every new
  // `value` gets a meta tensor with these strides (keep_layout).
  Tensor layout;
};

// One view op applied to a base (operand 0); `result` picks split's outputs.
struct ViewStep {
  OpId op;
  Attrs attrs;
  unsigned result;
};

// What a traced tensor carries: its base and the view chain from it. `value`
// is valid while `version` matches the base's; otherwise the chain is replayed.
struct Traced : TraceInfo {
  uint64_t trace_id = 0;
  std::shared_ptr<AliasRoot> root;
  std::vector<ViewStep> chain;
  ir::Value *value = nullptr;
  uint64_t version = 0;
};

[[noreturn]] void trace_fail(const std::string &msg) { throw TraceError(msg); }

// A meta tensor with t's metadata, backed by `storage` (a dummy: no data) so
// that the eager kernels' own view logic tells us which results alias which input.
Tensor meta_twin(const Tensor &t, Ref<Storage> storage) {
  Tensor m = detail::make_view(t, t.sizes(), t.strides(), t.storage_offset());
  m.impl().is_meta = true;
  m.impl().wrapped_number = t.impl().wrapped_number;
  m.impl().storage = std::move(storage);
  return m;
}

// "x0", "w1", ...: appended rather than concatenated (GCC 12 -Wrestrict false positive).
std::string numbered(const char *prefix, size_t i) {
  std::string s(prefix);
  s += std::to_string(i);
  return s;
}

Ref<Storage> dummy_storage() { return Storage::borrow(nullptr, 0); }

// The same strides along every dim of size > 1 (the others address nothing).
bool same_layout(IntArrayRef sizes, IntArrayRef a, IntArrayRef b) {
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] > 1 && a[d] != b[d]) return false;
  return true;
}

// Whether two elements of t may share an address: false only when, with its
// dims of size > 1 sorted by stride, each stride steps over all of the dims
// inside it (a dense or gapped layout, never an expanded or overlapping one).
bool may_overlap(const Tensor &t) {
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.sizes()[d] > 1) dims.emplace_back(t.strides()[d], t.sizes()[d]);
  std::sort(dims.begin(), dims.end());
  int64_t span = 1; // elements an inner block covers
  for (auto [stride, size] : dims) {
    if (stride < span) return true;
    span = stride * size;
  }
  return false;
}

class Tracer {
public:
  Tracer(uint64_t id, std::string name) : id_(id), graph_(std::make_unique<ir::Graph>(std::move(name))) {}

  std::vector<Tensor> make_inputs(const std::vector<Tensor> &examples);
  std::vector<Tensor> record(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);
  void record_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);
  std::unique_ptr<ir::Graph> finish(const std::vector<Tensor> &outputs);
  std::vector<TracedOutput> describe_outputs(const std::vector<Tensor> &outputs);

private:
  struct Emitted {
    std::vector<ir::Value *> values;
    std::vector<Tensor> metas;
    std::vector<int> alias_of; // operand index each result aliases, or -1
  };
  Emitted emit(OpId id, const std::vector<ir::Value *> &operands, const Attrs &attrs);
  ir::Value *emit1(OpId id, std::vector<ir::Value *> operands, Attrs attrs);
  // Attributes by name (runtime/op_attrs.h): emit1<OpId::Cat>(parts, {.dim = d}).
  template <OpId Id> ir::Value *emit1(std::vector<ir::Value *> operands, attrs::Args<Id> args) {
    return emit1(Id, std::move(operands), args.to_attrs());
  }
  ir::Value *value_of(const Tensor &t, const char *op);
  std::shared_ptr<Traced> info_of(const Tensor &t, const char *op);
  std::shared_ptr<Traced> capture(const Tensor &real);
  ir::Value *current(Traced &t);
  std::vector<ir::Value *> replay(const Traced &t, size_t n);
  ir::Value *scatter_back(const Traced &self, ir::Value *updated, const char *op);
  ir::Value *invert_step(const ViewStep &step, ir::Value *base, ir::Value *updated, const char *op);
  void check_mutable(const AliasRoot &root, const char *op);
  ir::Value *keep_layout(const AliasRoot &root, ir::Value *old_value, ir::Value *updated);
  std::shared_ptr<Traced> new_root(ir::Value *v, ir::Value *origin, Tensor real);
  Tensor user_tensor(const Tensor &meta, std::shared_ptr<Traced> info);

  uint64_t id_;
  std::unique_ptr<ir::Graph> graph_;
  // The meta tensor of every value (shape/dtype/strides, dummy storage).
  std::unordered_map<const ir::Value *, Tensor> meta_of_;
  // Captured real tensors (params and consts), by impl; `kept_` keeps the impls alive.
  std::unordered_map<const TensorImpl *, std::shared_ptr<Traced>> captured_;
  std::vector<Tensor> kept_;
  std::vector<std::shared_ptr<AliasRoot>> roots_;
};

thread_local Tracer *t_tracer = nullptr;

std::shared_ptr<Traced> Tracer::new_root(ir::Value *v, ir::Value *origin, Tensor real) {
  auto root = std::make_shared<AliasRoot>();
  root->value = v;
  root->origin = origin;
  root->real = std::move(real);
  root->layout = meta_of_.at(v);
  roots_.push_back(root);
  auto info = std::make_shared<Traced>();
  info->trace_id = id_;
  info->root = std::move(root);
  info->value = v;
  return info;
}

// A fresh user-visible tensor with meta's metadata, following `info`.
Tensor Tracer::user_tensor(const Tensor &meta, std::shared_ptr<Traced> info) {
  Tensor t = detail::make_view(meta, meta.sizes(), meta.strides(), meta.storage_offset());
  t.impl().trace = std::move(info);
  return t;
}

std::vector<Tensor> Tracer::make_inputs(const std::vector<Tensor> &examples) {
  std::vector<Tensor> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor &ex = examples[i];
    KILN_CHECK(ex.defined(), "trace: example input ", i, " is an undefined tensor");
    std::string name = examples.size() == 1 ? "x" : numbered("x", i);
    ir::Value *v = graph_->add_input(passes::layout_type(ex), name);
    // The input's own strides (the compiled function's guard keys on them):
    // whether contiguous() copies, reshape() views or view() is allowed depends
    // on them, exactly as in eager. The offset stays 0: it is not guarded.
    Tensor meta = meta_twin(ex, dummy_storage());
    meta.impl().storage_offset = 0;
    meta.impl().wrapped_number = false;
    meta_of_[v] = meta;
    // Meta example inputs have no memory to alias; only real ones are checked.
    out.push_back(user_tensor(meta, new_root(v, v, ex.is_meta() ? Tensor() : ex)));
  }
  return out;
}

// A real tensor used by the traced function: a constant for wrapped numbers
// (copied), a parameter bound by reference otherwise.
std::shared_ptr<Traced> Tracer::capture(const Tensor &real) {
  auto it = captured_.find(real.unsafeGetTensorImpl());
  if (it != captured_.end()) return it->second;
  ir::Value *v = nullptr;
  std::shared_ptr<Traced> info;
  if (real.impl().wrapped_number) {
    v = graph_->add_const(passes::contiguous_copy(real), numbered("c", graph_->consts().size()));
    meta_of_[v] = meta_twin(real, dummy_storage());
    info = new_root(v, nullptr, Tensor());
  } else {
    v = graph_->add_param(real, numbered("w", graph_->params().size()));
    meta_of_[v] = meta_twin(real, dummy_storage());
    info = new_root(v, v, real);
  }
  kept_.push_back(real);
  captured_.emplace(real.unsafeGetTensorImpl(), info);
  return info;
}

std::shared_ptr<Traced> Tracer::info_of(const Tensor &t, const char *op) {
  if (!t.is_meta()) return capture(t);
  auto info = std::dynamic_pointer_cast<Traced>(t.impl().trace);
  if (!info) trace_fail(detail::concat(op, ": a meta tensor that is not an input of this trace was passed to it"));
  if (info->trace_id != id_) trace_fail(detail::concat(op, ": a tensor from another trace was used in this one"));
  return info;
}

ir::Value *Tracer::value_of(const Tensor &t, const char *op) { return current(*info_of(t, op)); }

// The value a traced tensor holds now: its base's value, or its view chain
// replayed on the base when the base was mutated since the view was taken.
ir::Value *Tracer::current(Traced &t) {
  if (t.chain.empty()) return t.root->value;
  if (t.version == t.root->version) return t.value;
  t.value = replay(t, t.chain.size()).back();
  t.version = t.root->version;
  return t.value;
}

// Values of the base and of the first n views of t's chain, from the base's current value.
std::vector<ir::Value *> Tracer::replay(const Traced &t, size_t n) {
  std::vector<ir::Value *> vals{t.root->value};
  for (size_t i = 0; i < n; ++i) {
    const ViewStep &s = t.chain[i];
    vals.push_back(emit(s.op, {vals.back()}, s.attrs).values.at(s.result));
  }
  return vals;
}

Tracer::Emitted Tracer::emit(OpId id, const std::vector<ir::Value *> &operands, const Attrs &attrs) {
  std::vector<Tensor> metas;
  for (ir::Value *v : operands) metas.push_back(v ? meta_of_.at(v) : Tensor());
  std::vector<Tensor> results;
  {
    detail::TracingOff off;
    results = run_op(id, metas, attrs);
  }
  Emitted e;
  std::vector<ir::TensorType> types;
  for (const Tensor &r : results) {
    // Factories have no tensor operand to make their result meta: they ran for real (small, by design).
    KILN_CHECK(r.defined(), op_info(id).mnemonic, ": internal: the shape rule returned an undefined result");
    int alias = -1;
    for (size_t j = 0; j < metas.size() && alias < 0; ++j)
      if (metas[j].defined() && r.impl().storage && r.impl().storage == metas[j].impl().storage) alias = int(j);
    e.alias_of.push_back(alias);
    // A result in memory of its own records its layout when eager's is not
    // contiguous (x + 1 of a transposed x): executors allocate it that way.
    types.push_back(alias < 0 ? passes::layout_type(r) : ir::TensorType::of(r));
  }
  graph_->set_append_phase(detail::current_step_phase());
  ir::Node *node = graph_->create(id, operands, attrs, types);
  for (size_t i = 0; i < results.size(); ++i) {
    const Tensor &r = results[i];
    // Own impl (an op may return its input itself) and, for a new base, own storage.
    Tensor meta = meta_twin(r, e.alias_of[i] >= 0 ? r.impl().storage : dummy_storage());
    meta.impl().wrapped_number = false;
    meta_of_[node->result(i)] = meta;
    e.values.push_back(node->result(i));
    e.metas.push_back(meta);
  }
  return e;
}

ir::Value *Tracer::emit1(OpId id, std::vector<ir::Value *> operands, Attrs attrs) {
  return emit(id, operands, attrs).values.at(0);
}

std::vector<Tensor> Tracer::record(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  const char *op = op_info(id).mnemonic.data();
  std::vector<ir::Value *> operands;
  std::vector<std::shared_ptr<Traced>> infos;
  for (const Tensor &t : inputs) {
    infos.push_back(t.defined() ? info_of(t, op) : nullptr);
    operands.push_back(t.defined() ? current(*infos.back()) : nullptr);
  }
  Emitted e = emit(id, operands, attrs);
  std::vector<Tensor> out;
  for (size_t i = 0; i < e.values.size(); ++i) {
    int a = e.alias_of[i];
    if (a < 0) {
      out.push_back(user_tensor(e.metas[i], new_root(e.values[i], nullptr, Tensor())));
      continue;
    }
    // A view: same base as the operand it aliases, one more step in the chain.
    auto info = std::make_shared<Traced>();
    const Traced &from = *infos[a];
    info->trace_id = id_;
    info->root = from.root;
    info->chain = from.chain;
    info->chain.push_back(ViewStep{id, attrs, unsigned(i)});
    info->value = e.values[i];
    info->version = from.root->version;
    // Only single-operand views (operand 0) can be replayed and inverted.
    if (a != 0 || std::count_if(operands.begin(), operands.end(), [](ir::Value *v) { return v; }) != 1)
      trace_fail(detail::concat(op, ": a result that aliases operand ", a, " of a multi-operand op cannot be traced"));
    out.push_back(user_tensor(e.metas[i], std::move(info)));
    // As eager's view ops (detail::make_view_of): autograd's CopySlices finds
    // the tensor an in-place update of this view changes.
    const TensorImpl &base = inputs[size_t(a)].impl();
    out.back().impl().view_base = base.view_base ? base.view_base : inputs[size_t(a)].impl_ref();
  }
  return out;
}

// Inputs and parameters that share memory with another one cannot be mutated:
// the graph has one value per input and would miss the update of the other.
void Tracer::check_mutable(const AliasRoot &root, const char *op) {
  if (!root.real.defined() || !root.origin) return;
  for (const auto &other : roots_) {
    if (other.get() == &root || !other->real.defined()) continue;
    if (root.real.is_alias_of(other->real) || root.real.is_same(other->real))
      trace_fail(detail::concat(op, "_: in-place update of %", root.origin->name(), ", which shares memory with %",
                                other->origin->name(), ": aliasing between graph inputs/parameters cannot be traced"));
  }
}

void Tracer::record_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  const char *op = op_info(id).mnemonic.data();
  std::shared_ptr<Traced> info = info_of(self, op);
  check_mutable(*info->root, op);
  std::vector<ir::Value *> operands;
  for (const Tensor &t : inputs) operands.push_back(t.defined() ? value_of(t, op) : nullptr);
  AliasRoot &root = *info->root;
  // Eager writes through self into the base's memory; where two elements of
  // the base share an address (an expanded input), one write updates several
  // elements, which no functional graph expresses.
  if (!info->chain.empty() && may_overlap(root.layout))
    trace_fail(detail::concat(op, "_: an in-place update through a view of a tensor whose elements share memory ",
                              "(shape ", shape_str(root.layout.sizes()), ", strides ",
                              shape_str(root.layout.strides()), ") cannot be traced"));
  ir::Value *r = emit(id, operands, attrs).values.at(0);
  if (r->type().dtype != self.dtype()) r = emit1<OpId::Cast>({r}, {.dtype = self.dtype()});
  if (IntArrayRef(r->type().shape) != self.sizes())
    trace_fail(detail::concat(op, "_: the result shape ", shape_str(r->type().shape), " differs from self's shape ",
                              shape_str(self.sizes())));
  ir::Value *old_value = root.value;
  root.value = keep_layout(root, old_value, info->chain.empty() ? r : scatter_back(*info, r, op));
  ++root.version;
  // A view keeps its strides in eager: r stands for it only with the same
  // strides; otherwise the view is replayed from the updated base when read.
  if (same_layout(self.sizes(), meta_of_.at(r).strides(), self.strides())) {
    info->value = r;
    info->version = root.version;
  }
}

// `updated`, the base's new value, laid out as the base's memory is: eager
// updates a tensor in place and keeps its strides, while the ops recorded for
// the update (transpose back, cat of slices) may have produced another layout.
// A copy into the base's layout (OpId::Copy keeps self's strides) when the
// layout differs; then the value's meta tensor takes the base's exact strides,
// so that later views and contiguous() behave as on the eager tensor.
ir::Value *Tracer::keep_layout(const AliasRoot &root, ir::Value *old_value, ir::Value *updated) {
  const Tensor &layout = root.layout;
  Dims dense = detail::contiguous_strides(layout.sizes());
  detail::elementwise_strides(layout.sizes(), {&layout}, dense); // what copy(base, .) allocates
  if (!same_layout(meta_of_.at(updated).sizes(), meta_of_.at(updated).strides(), dense))
    updated = emit1<OpId::Copy>({old_value, updated}, {});
  Tensor m = meta_twin(layout, meta_of_.at(updated).impl().storage);
  m.impl().wrapped_number = false;
  meta_of_[updated] = m;
  return updated;
}

// The base's new value after its view `self` was replaced by `updated`:
// invert self's view chain step by step, last step first.
ir::Value *Tracer::scatter_back(const Traced &self, ir::Value *updated, const char *op) {
  std::vector<ir::Value *> vals = replay(self, self.chain.size() - 1);
  ir::Value *cur = updated;
  for (size_t i = self.chain.size(); i-- > 0;) cur = invert_step(self.chain[i], vals[i], cur, op);
  return cur;
}

// Writes `updated` (the new value of step(base)) back into base; returns the new base.
ir::Value *Tracer::invert_step(const ViewStep &step, ir::Value *base, ir::Value *updated, const char *op) {
  const Dims &shape = base->type().shape;
  switch (step.op) {
  case OpId::View:
  case OpId::Reshape:
  case OpId::Squeeze:
  case OpId::Unsqueeze: return emit1<OpId::Reshape>({updated}, {.shape = shape.vec()});
  case OpId::Transpose: return emit1(OpId::Transpose, {updated}, step.attrs);
  case OpId::Permute: {
    const auto &p = attrs::Permute{step.attrs}.dims();
    std::vector<int64_t> inv(p.size());
    for (size_t i = 0; i < p.size(); ++i) inv[size_t(p[i])] = int64_t(i);
    return emit1<OpId::Permute>({updated}, {.dims = inv});
  }
  // An op that returned its own input (contiguous of a contiguous tensor, to() of the same dtype).
  case OpId::Contiguous:
  case OpId::Cast: return updated;
  case OpId::Slice:
  case OpId::Select:
  case OpId::Split: {
    int64_t dim = 0, start = 0, end = 0;
    if (step.op == OpId::Split) {
      // Result i of split(sizes, dim) is slice(dim, sum(sizes[:i]), sum(sizes[:i+1])).
      attrs::Split a{step.attrs};
      const auto &sizes = a.split_sizes();
      dim = a.dim();
      for (unsigned i = 0; i < step.result; ++i) start += sizes.at(i);
      end = start + sizes.at(step.result);
    } else if (step.op == OpId::Slice) {
      // slice() records its start and end resolved (never none).
      attrs::Slice a{step.attrs};
      dim = a.dim();
      start = a.start().value();
      end = a.end().value();
      if (a.step() != 1) break;
    } else {
      dim = attrs::Select{step.attrs}.dim();
      start = attrs::Select{step.attrs}.index();
      end = start + 1;
      updated = emit1<OpId::Unsqueeze>({updated}, {.dim = dim});
    }
    // base[:start] ++ updated ++ base[end:] along dim.
    std::vector<ir::Value *> parts;
    if (start > 0) parts.push_back(emit1<OpId::Slice>({base}, {.dim = dim, .start = 0, .end = start, .step = 1}));
    parts.push_back(updated);
    if (end < shape[dim]) parts.push_back(emit1<OpId::Slice>({base}, {.dim = dim, .start = end, .end = shape[dim], .step = 1}));
    if (parts.size() == 1) return updated;
    return emit1<OpId::Cat>(parts, {.dim = dim});
  }
  default: break;
  }
  trace_fail(detail::concat(op, "_: an in-place op through a ", op_info(step.op).mnemonic,
                            " view cannot be traced (its update of the base tensor is not expressible)"));
}

// Each output's eager strides and, for one that is (a view of) a graph input,
// that input and the views: eager returns the caller's own memory there.
std::vector<TracedOutput> Tracer::describe_outputs(const std::vector<Tensor> &outputs) {
  std::vector<TracedOutput> described;
  const std::vector<ir::Value *> &inputs = graph_->inputs();
  for (const Tensor &o : outputs) {
    TracedOutput d;
    if (o.defined()) d.strides = Dims(o.strides());
    std::shared_ptr<Traced> info = o.defined() && o.is_meta() ? std::dynamic_pointer_cast<Traced>(o.impl().trace) : nullptr;
    if (info && info->trace_id == id_ && info->root->origin) {
      auto it = std::find(inputs.begin(), inputs.end(), info->root->origin);
      if (it != inputs.end()) {
        d.input = int(it - inputs.begin());
        for (const ViewStep &s : info->chain) d.views.push_back({s.op, s.attrs, s.result});
      }
    }
    described.push_back(std::move(d));
  }
  return described;
}

std::unique_ptr<ir::Graph> Tracer::finish(const std::vector<Tensor> &outputs) {
  std::vector<ir::Value *> outs;
  for (size_t i = 0; i < outputs.size(); ++i) {
    KILN_CHECK(outputs[i].defined(), "trace: output ", i, " of the traced function is an undefined tensor");
    outs.push_back(value_of(outputs[i], "trace"));
  }
  graph_->set_outputs(std::move(outs));
  for (const auto &root : roots_)
    if (root->origin && root->value != root->origin) graph_->add_write_back(root->origin, root->value);
  return std::move(graph_);
}

// ---- hooks: the runtime calls these on a tracing thread.
std::vector<Tensor> hook_record(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  KILN_CHECK(t_tracer, "internal: tracing is on but this thread has no tracer");
  return t_tracer->record(id, inputs, attrs);
}

void hook_record_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  KILN_CHECK(t_tracer, "internal: tracing is on but this thread has no tracer");
  t_tracer->record_inplace(self, id, inputs, attrs);
}

[[noreturn]] void hook_data_read(const char *what) {
  trace_fail(detail::concat(what, ": cannot read tensor data while tracing; data-dependent control flow (item, "
                                  "data_ptr, printing, bool conversion) cannot be traced"));
}

// (Re)installs the hooks unless they are ours already (a test may have put its own).
void install_hooks() {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (detail::trace_hooks().record == &hook_record) return;
  detail::set_trace_hooks({&hook_record, &hook_record_inplace, &hook_data_read});
}

// Restores the thread's tracing state however fn exits.
class TracingScope {
public:
  explicit TracingScope(Tracer *t) : saved_(detail::t_tracing) {
    t_tracer = t;
    detail::t_tracing = true;
  }
  ~TracingScope() {
    detail::t_tracing = saved_;
    t_tracer = nullptr;
  }

private:
  bool saved_;
};

} // namespace

std::unique_ptr<ir::Graph> trace(const TracedFunction &fn, const std::vector<Tensor> &example_inputs,
                                 std::string name, std::vector<TracedOutput> *traced_outputs) {
  KILN_CHECK(fn, "trace: the function is empty");
  KILN_CHECK(!t_tracer, "trace: already tracing on this thread (nested trace() calls are not supported)");
  install_hooks();
  detail::take_traced_random_draws(); // offsets count from this trace's first random op
  static std::atomic<uint64_t> next_id{1};
  Tracer tracer(next_id++, std::move(name));
  std::vector<Tensor> inputs = tracer.make_inputs(example_inputs);
  std::vector<Tensor> outputs;
  {
    TracingScope scope(&tracer);
    outputs = fn(inputs);
    // Outputs that are real tensors are captured too; still inside the scope.
    if (traced_outputs) *traced_outputs = tracer.describe_outputs(outputs);
    return tracer.finish(outputs);
  }
}

std::unique_ptr<ir::Graph> trace(const TracedFunction &fn, const std::vector<Tensor> &example_inputs,
                                 std::string name) {
  return trace(fn, example_inputs, std::move(name), nullptr);
}

} // namespace kiln
