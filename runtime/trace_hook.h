// How eager ops hand themselves to the tracer. The runtime knows nothing about
// graphs: frontend/ installs the function that records a node while tracing.
#pragma once

#include <array>
#include <functional>
#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <vector>

#include "runtime/autograd.h"
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

// While tracing: records the op. Otherwise (an op given float16/bfloat16 operands):
// computes it in float32, as torch's CPU kernels do (opmath), and rounds each result
// to the dtype the op's rule gives for the original operands.
TraceOutputs trace_op(OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);
Tensor &trace_inplace(Tensor &self, OpId id, const std::vector<Tensor> &inputs, const Attrs &attrs);

// The ops that compute float16/bfloat16 in float32: all but the views and the
// conversions, which move values as they are (passes/upcast.cpp mirrors this).
constexpr bool computes_in_float32(OpId id) {
  return op_kind(id) != OpKind::View && id != OpId::Cast && id != OpId::Copy && id != OpId::Contiguous &&
         id != OpId::Clone;
}

inline bool reduced_float_operand(const Tensor &t) {
  return t.defined() && is_reduced_float(t.dtype()) && !t.is_meta();
}
inline const Tensor &operand_ref(const Tensor &t) { return t; }
inline const Tensor &operand_ref(const Tensor *t) { return *t; }
template <class Range> bool any_reduced_float_in(const Range &operands) {
  for (const auto &t : operands)
    if (reduced_float_operand(operand_ref(t))) [[unlikely]]
      return true;
  return false;
}

// An op's tensor operands by reference: nothing is allocated unless the op is recorded.
template <size_t N> struct OpInputs {
  std::array<const Tensor *, N> p;
  operator std::vector<Tensor>() const {
    std::vector<Tensor> v;
    v.reserve(N);
    for (const Tensor *t : p) v.push_back(*t);
    return v;
  }
};
template <class... Ts> OpInputs<sizeof...(Ts)> op_inputs(const Ts &...ts) {
  static_assert((std::is_same_v<Ts, Tensor> && ...), "op inputs are Tensors");
  return {{&ts...}};
}

// Whether an eager op got a float16/bfloat16 operand: KILN_TRACE's INPUTS in each form.
inline bool any_reduced_float(std::initializer_list<std::reference_wrapper<const Tensor>> ts) {
  return any_reduced_float_in(ts);
}
inline bool any_reduced_float(const std::vector<Tensor> &ts) { return any_reduced_float_in(ts); }
template <size_t N> bool any_reduced_float(const OpInputs<N> &in) { return any_reduced_float_in(in.p); }

// Whether an op with these inputs must be recorded for backward: KILN_TRACE's
// INPUTS in each form. One relaxed load until some tensor first requires grad.
template <class Range> bool autograd_wants_in(const Range &operands) {
  if (!autograd_active()) [[likely]]
    return false;
  for (const auto &t : operands)
    if (requires_grad_impl(operand_ref(t))) return true;
  return false;
}
inline bool autograd_wants(std::initializer_list<std::reference_wrapper<const Tensor>> ts) {
  return autograd_wants_in(ts);
}
inline bool autograd_wants(const std::vector<Tensor> &ts) { return autograd_wants_in(ts); }
template <size_t N> bool autograd_wants(const OpInputs<N> &in) { return autograd_wants_in(in.p); }
// The in-place form (KILN_TRACE_INPLACE) also asks about self: fill_ and zero_ have no other inputs.
inline bool autograd_wants_inplace(const Tensor &self, const std::vector<Tensor> &in) {
  return autograd_active() && (requires_grad_impl(self) || autograd_wants(in));
}

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
#define KILN_INPUTS(...) (::kiln::detail::op_inputs(__VA_ARGS__))

// First statement of an out-of-place op: while tracing, record and return; with
// autograd on and an input that requires grad, record for backward and return. The
// attributes are named, in ops.def's order (attrs::AddArgs, runtime/op_attrs.h):
//   KILN_TRACE(Add, KILN_INPUTS(a, b), .alpha = alpha);   KILN_TRACE(Relu, {x});
#define KILN_TRACE(OPID, INPUTS, ...)                                          \
  if (::kiln::detail::tracing() || (::kiln::detail::computes_in_float32(::kiln::OpId::OPID) && \
                                    ::kiln::detail::any_reduced_float(INPUTS)) || \
      ::kiln::detail::autograd_wants(INPUTS)) [[unlikely]]                    \
  return ::kiln::detail::trace_op(::kiln::OpId::OPID, INPUTS,                  \
                                  ::kiln::attrs::OPID##Args{__VA_ARGS__}.to_attrs())

// First statement of an in-place op: while tracing, functionalize and return self.
//   KILN_TRACE_INPLACE(self, Add, KILN_INPUTS(self, other), .alpha = alpha);
#define KILN_TRACE_INPLACE(SELF, OPID, INPUTS, ...)                            \
  if (::kiln::detail::tracing() || (::kiln::detail::computes_in_float32(::kiln::OpId::OPID) && \
                                    ::kiln::detail::any_reduced_float(INPUTS)) || \
      (::kiln::detail::autograd_active() &&                                    \
       (::kiln::detail::requires_grad_impl(SELF) || ::kiln::detail::autograd_wants(INPUTS)))) [[unlikely]] \
  return ::kiln::detail::trace_inplace(SELF, ::kiln::OpId::OPID, INPUTS,       \
                                       ::kiln::attrs::OPID##Args{__VA_ARGS__}.to_attrs())
