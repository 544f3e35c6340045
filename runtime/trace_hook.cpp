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
  if (!tracing()) return TraceOutputs{compute_in_float32(id, inputs, attrs)};
  KILN_CHECK(g_hooks.record, "internal: tracing is on but no tracer is installed");
  return TraceOutputs{g_hooks.record(id, inputs, attrs)};
}

Tensor &trace_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
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
