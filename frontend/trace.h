// Tracing: runs a function on meta tensors and records every op it calls into
// an ir::Graph (torch.fx / TorchScript tracing with functionalization).
//
// - Each example input becomes a graph input (%x, or %x0, %x1, ...) and a meta
//   tensor (shape, dtype, the example's strides, no data) passed to `fn`, so
//   that views, reshape and contiguous() alias or copy exactly as in eager.
//   Results of ops follow eager's layout rules (an elementwise result takes its
//   inputs' dim order); a value in memory of its own whose layout is not
//   contiguous records its strides in its type.
// - Real tensors the function uses are captured: wrapped numbers (C++ scalars
//   passed to ops) become constants (copied); every other real tensor becomes a
//   parameter (%w0, ...) bound by reference to its live storage, so later
//   changes to a weight are seen by every executor. One tensor captured twice
//   is one parameter. Factories called inside `fn` (zeros, full, arange, ...)
//   are recorded as nodes; tensors made by untraced factories (randn, tensor())
//   inside `fn` are captured as parameters like any other real tensor.
// - Views are recorded as view ops; in-place ops are functionalized: the
//   out-of-place op is recorded and the mutated tensor follows the new value.
//   Graph inputs and parameters that were mutated get a write-back. Handled
//   aliasing: mutating a tensor updates every view of it taken earlier or later
//   (views are replayed from the updated base), and mutating through a chain of
//   view / reshape / squeeze / unsqueeze / transpose / permute / slice (step 1)
//   / select / split updates the base. Anything else (an in-place op through an
//   expand or as_strided view, inputs or parameters that share memory with
//   each other and are mutated) throws kiln::TraceError rather than record a
//   wrong graph.
// - Reading data (item, data_ptr, printing, bool conversion) throws
//   kiln::TraceError: data-dependent control flow cannot be traced.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln {

using TracedFunction = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

std::unique_ptr<ir::Graph> trace(const TracedFunction &fn, const std::vector<Tensor> &example_inputs,
                                 std::string name = "main");
// What eager returns for one output of `fn`, besides its values.
struct TracedOutput {
  Dims strides; // eager's strides
  // Eager returns graph input `input` itself (no `views`) or a view of it made
  // by `views`, in order (each op applied to the previous result; `result`
  // picks split's); -1 when the output is memory of its own or a parameter's.
  int input = -1;
  struct View {
    OpId op;
    Attrs attrs;
    unsigned result;
  };
  std::vector<View> views;
};

// As above, and what eager returns for each output of `fn` (one per output).
std::unique_ptr<ir::Graph> trace(const TracedFunction &fn, const std::vector<Tensor> &example_inputs,
                                 std::string name, std::vector<TracedOutput> *outputs);

} // namespace kiln
