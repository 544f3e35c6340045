// The derivative formula of each op (torch's derivatives.yaml), keyed by OpId.
// runtime/derivatives.cpp holds one exhaustive switch over the op table (no
// default:, so a new op without a decision fails the build under -Werror=switch):
// each op has a formula, or is NoGrad (ops.def), or is marked not differentiable
// yet, which raises at backward naming the op.
//
// The formulas are written in kiln ops: a backward that runs while tracing is
// recorded like the forward, and fuses like it.
#pragma once

#include <vector>

#include "runtime/op_registry.h"
#include "runtime/tensor.h"

namespace kiln::autograd::detail {

// What a formula reads. inputs / outputs hold what the op saved (undefined where
// the derivative does not save it, see Derivative::saves_*); the sizes and
// dtypes of every input are always there.
struct GradCtx {
  OpId id;
  const Attrs &attrs;
  const std::vector<Tensor> &inputs;
  const std::vector<Tensor> &outputs;
  // d(loss)/d(result j): zeros where no gradient flowed into a floating result,
  // undefined for an integer result.
  const std::vector<Tensor> &grads;
  const std::vector<Dims> &input_sizes;
  const std::vector<DType> &input_dtypes;
  // needs[i]: whether input i wants a gradient (a formula may skip the others).
  const std::vector<bool> &needs;

  const Tensor &in(size_t i) const { return inputs.at(i); }
  const Tensor &out(size_t j = 0) const { return outputs.at(j); }
  const Tensor &grad(size_t j = 0) const { return grads.at(j); }
  bool need(size_t i) const { return i < needs.size() && needs[i]; }
};

// The gradient of each input, in the input's shape or one it broadcasts to (the
// engine sums it back, as torch's sum_to) and any floating dtype (the engine
// casts it to the input's); undefined where the input gets none.
using Formula = std::vector<Tensor> (*)(const GradCtx &);

enum class GradKind {
  Formula,          // differentiable: `formula` below
  NotDifferentiable, // NoGrad in ops.def: results never require grad
  NotImplemented,   // differentiable, formula still to write: backward raises
};

struct Derivative {
  GradKind kind = GradKind::NotImplemented;
  Formula formula = nullptr;
  // Bit i: input i is saved for the formula. kAllInputs saves them all.
  unsigned saves_inputs = 0;
  bool saves_outputs = false;
};
inline constexpr unsigned kAllInputs = ~0u;

const Derivative &derivative(OpId id);

// grad summed over the dims it broadcast to reach sizes (torch's sum_to_size).
Tensor sum_to(const Tensor &grad, IntArrayRef sizes);

} // namespace kiln::autograd::detail
