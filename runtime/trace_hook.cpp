#include "runtime/trace_hook.h"

namespace kiln::detail {

__attribute__((tls_model("initial-exec"))) thread_local bool t_tracing = false;

namespace {
TraceHooks g_hooks;
}

void set_trace_hooks(const TraceHooks &hooks) { g_hooks = hooks; }
const TraceHooks &trace_hooks() { return g_hooks; }

TraceOutputs trace_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  KILN_CHECK(g_hooks.record, "internal: tracing is on but no tracer is installed");
  return TraceOutputs{g_hooks.record(id, inputs, attrs)};
}

Tensor &trace_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) {
  KILN_CHECK(g_hooks.record_inplace, "internal: tracing is on but no tracer is installed");
  g_hooks.record_inplace(self, id, inputs, attrs);
  return self;
}

} // namespace kiln::detail
