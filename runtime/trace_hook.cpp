#include "runtime/trace_hook.h"

#include "runtime/ops.h"

namespace kiln::detail {

__attribute__((tls_model("initial-exec"))) thread_local bool t_tracing = false;

namespace {
TraceHooks g_hooks;
}

void set_trace_hooks(const TraceHooks &hooks) { g_hooks = hooks; }
const TraceHooks &trace_hooks() { return g_hooks; }

namespace {

// A meta tensor with t's metadata (the op's shape and dtype rule runs on it).
Tensor meta_like(const Tensor &t) {
  if (!t.defined() || t.is_meta()) return t;
  Tensor m = make_view(t, t.sizes(), t.strides(), t.storage_offset());
  m.impl().is_meta = true;
  m.impl().wrapped_number = t.impl().wrapped_number;
  return m;
}

// op(inputs) with float16/bfloat16 operands read as float32; each result rounded
// to the dtype the op gives for the original operands (bf16 + bf16 is bf16, bf16
// + float16 is float32, argmax is int64).
std::vector<Tensor> compute_in_float32(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  std::vector<Tensor> metas, wide;
  metas.reserve(inputs.size());
  wide.reserve(inputs.size());
  for (const Tensor &t : inputs) {
    metas.push_back(meta_like(t));
    wide.push_back(reduced_float_operand(t) ? to(t, kFloat32) : t);
  }
  const std::vector<Tensor> want = run_op(id, metas, attrs);
  std::vector<Tensor> out = run_op(id, wide, attrs);
  KILN_CHECK(out.size() == want.size(), op_info(id).mnemonic, ": internal: ", out.size(), " results in float32, ",
             want.size(), " by the op's rule");
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].defined() && out[i].dtype() != want[i].dtype()) out[i] = to(out[i], want[i].dtype());
  return out;
}

} // namespace

TraceOutputs trace_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  const bool grad = autograd_wants(inputs);
  std::vector<Tensor> out;
  {
    // The op itself runs without autograd; its results get one node below.
    AutoGradMode off(!grad && GradMode::is_enabled());
    if (tracing()) {
      KILN_CHECK(g_hooks.record, "internal: tracing is on but no tracer is installed");
      out = g_hooks.record(id, inputs, attrs);
    } else if (computes_in_float32(id) && any_reduced_float(inputs)) {
      out = compute_in_float32(id, inputs, attrs);
    } else {
      out = run_op(id, inputs, attrs);
    }
  }
  if (grad) record_op(id, inputs, attrs, out);
  return TraceOutputs{std::move(out)};
}

namespace {
// self op= inputs with autograd: the out-of-place op recorded for backward, its
// values copied into self without autograd, self's history rebased onto it.
Tensor &inplace_with_autograd(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  check_inplace(self, id);
  std::vector<Tensor> out;
  {
    NoGradGuard off;
    if (tracing()) {
      KILN_CHECK(g_hooks.record, "internal: tracing is on but no tracer is installed");
      out = g_hooks.record(id, inputs, attrs);
    } else {
      out = computes_in_float32(id) && any_reduced_float(inputs) ? compute_in_float32(id, inputs, attrs)
                                                                : run_op(id, inputs, attrs);
    }
  }
  record_op(id, inputs, attrs, out, &self);
  {
    NoGradGuard off;
    copy_(self, out.at(0));
  }
  rebase_history(self, out.at(0));
  copy_slices(self, out.at(0));
  return self;
}
} // namespace

Tensor &trace_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  if (autograd_wants_inplace(self, inputs)) return inplace_with_autograd(self, id, inputs, attrs);
  if (!tracing()) {
    // The out-of-place op in float32, then one rounding into self.
    copy_(self, compute_in_float32(id, inputs, attrs).at(0));
    return self;
  }
  KILN_CHECK(g_hooks.record_inplace, "internal: tracing is on but no tracer is installed");
  g_hooks.record_inplace(self, id, inputs, attrs);
  return self;
}

} // namespace kiln::detail
