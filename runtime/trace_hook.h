// How eager ops hand themselves to the tracer. The runtime knows nothing about
// graphs: frontend/ installs the function that records a node while tracing.
#pragma once

#include <tuple>
#include <vector>

#include "runtime/op_attrs.h"
#include "runtime/op_registry.h"

namespace kiln::detail {

// True on a thread that is currently tracing; one thread_local load per op.
// initial-exec: every op reads it; see allocator.cpp.
extern __attribute__((tls_model("initial-exec"))) thread_local bool t_tracing;
inline bool tracing() { return t_tracing; }

// The results of a recorded op, convertible to what the op returns.
struct TraceOutputs {
  std::vector<Tensor> values;
  operator Tensor() const { return values.at(0); }
  operator std::tuple<Tensor, Tensor>() const { return {values.at(0), values.at(1)}; }
  operator std::vector<Tensor>() const { return values; }
};

// Installed by the tracer (frontend/trace.cpp).
struct TraceHooks {
  // Records `id` applied to `inputs` and returns meta results that follow the new values.
  std::vector<Tensor> (*record)(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) = nullptr;
  // Functionalizes an in-place op: records the out-of-place op `id` on `inputs`
  // (usually self first), casts the result to self's dtype if needed, and makes
  // `self` (and what it aliases) follow the result. fill_(v) records Full.
  void (*record_inplace)(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs) = nullptr;
  // Called when traced code reads data (item, data_ptr, printing): throws TraceError.
  // (Not declared [[noreturn]]: on a function pointer that is a GCC extension clang rejects.)
  void (*data_read)(const char *what) = nullptr;
};
void set_trace_hooks(const TraceHooks &hooks);
const TraceHooks &trace_hooks();

TraceOutputs trace_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);
Tensor &trace_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);

// RAII: tracing off on this thread (used while the tracer runs kernels on meta tensors).
class TracingOff {
public:
  TracingOff() : saved_(t_tracing) { t_tracing = false; }
  ~TracingOff() { t_tracing = saved_; }

private:
  bool saved_;
};

} // namespace kiln::detail

// The tensor inputs of KILN_TRACE as one macro argument (a braced list would be
// split at its commas): KILN_TRACE(Add, KILN_INPUTS(a, b), .alpha = alpha).
#define KILN_INPUTS(...) (std::vector<::kiln::Tensor>{__VA_ARGS__})

// First statement of an out-of-place op: while tracing, record and return. The
// attributes are named, in ops.def's order (attrs::AddArgs, runtime/op_attrs.h):
//   KILN_TRACE(Add, KILN_INPUTS(a, b), .alpha = alpha);   KILN_TRACE(Relu, {x});
#define KILN_TRACE(OPID, INPUTS, ...)                                          \
  if (::kiln::detail::tracing()) [[unlikely]]                                  \
  return ::kiln::detail::trace_op(::kiln::OpId::OPID, INPUTS,                  \
                                  ::kiln::attrs::OPID##Args{__VA_ARGS__}.to_attrs())

// First statement of an in-place op: while tracing, functionalize and return self.
//   KILN_TRACE_INPLACE(self, Add, KILN_INPUTS(self, other), .alpha = alpha);
#define KILN_TRACE_INPLACE(SELF, OPID, INPUTS, ...)                            \
  if (::kiln::detail::tracing()) [[unlikely]]                                  \
  return ::kiln::detail::trace_inplace(SELF, ::kiln::OpId::OPID, INPUTS,       \
                                       ::kiln::attrs::OPID##Args{__VA_ARGS__}.to_attrs())
