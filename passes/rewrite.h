// Helpers shared by the rewriting passes: a node builder that infers result
// types by running the op's shape rule (its eager kernel on meta tensors),
// scalar constants, and reading small constants.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "ir/graph.h"
#include "passes/pass_manager.h"
#include "runtime/op_attrs.h"

namespace kiln::passes {

// A meta tensor standing for v, with v's strides when its type has them
// (wrapped-number constants stay wrapped so that type promotion matches the
// traced program).
Tensor meta_of(const ir::Value *v);
// The type of a value whose metadata is t's: dtype, shape and, when t is not
// contiguous, its strides (the layout executors give it: eager's).
ir::TensorType layout_type(const Tensor &t);
// Result types of `op` applied to `operands` (null = absent) with `attrs`.
// With a symbolic operand, the result dims are fitted over the symbols
// (ir/sym_infer.h), whose traced values are `hints`; an op whose attributes
// hold its result's sizes (reshape, view, expand) then needs `target`, the
// result's symbolic dims. kiln::Error when the op has no symbolic shape there.
std::vector<ir::TensorType> infer_types(OpId op, const std::vector<ir::Value *> &operands, const Attrs &attrs,
                                        std::span<const int64_t> hints = {},
                                        const std::vector<ir::SymExpr> *target = nullptr);
// A contiguous deep copy of a real tensor (constants own their data).
Tensor contiguous_copy(const Tensor &t);
// The value of a one-element constant, or nullopt.
std::optional<double> const_scalar(const ir::Value *v);

// Creates nodes just before `anchor` (or at the end when null).
class Builder {
public:
  Builder(ir::Graph &g, ir::Node *anchor) : g_(g), anchor_(anchor) {}
  // Attributes as a whole (copied from another node, or none).
  ir::Value *op(OpId id, std::vector<ir::Value *> operands, Attrs attrs);
  // Attributes by name, in ops.def's order (runtime/op_attrs.h):
  //   b.op<OpId::Sum>({x}, {.dims = d, .keepdim = true, .dtype = std::nullopt})
  template <OpId Id> ir::Value *op(std::vector<ir::Value *> operands, attrs::Args<Id> args) {
    return op(Id, std::move(operands), args.to_attrs());
  }
  std::vector<ir::Value *> op_n(OpId id, std::vector<ir::Value *> operands, Attrs attrs);
  // reshape(x) to `to`'s dims, symbolic ones included.
  ir::Value *reshape(ir::Value *x, const ir::TensorType &to);
  // A 0-dim wrapped-number constant (promotes like a C++ scalar passed to an op).
  ir::Value *scalar(double v);
  ir::Graph &graph() { return g_; }

private:
  ir::Graph &g_;
  ir::Node *anchor_;
};

} // namespace kiln::passes

// Registers pass class `Class` under `name` when the library loads.
#define KILN_REGISTER_PASS(Class, name)                                                                     \
  [[maybe_unused]] static const bool kiln_registered_##Class =                                             \
      (::kiln::passes::register_pass(name, [] { return std::make_unique<Class>(); }), true)
