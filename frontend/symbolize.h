// Tracing with symbolic dims (issue 17, item 2).
//
// A C++ model reads sizes as plain integers (x.size(0)), so one trace cannot
// tell which sizes in the graph came from an input dim. Tracing runs on META
// tensors and costs well under a millisecond, so the function is traced again
// at moved sizes instead: each graph value's dims are fitted over the symbols
// (ir/sym_infer.h's fit, with "trace the function there" as the rule), and a
// view, reshape or expand whose sizes follow the input is recognised by its
// result type changing with it. Where the graph changes with a size (another
// op or attribute, a constant computed from it, a slice end read off it) that
// dim stays static, with the reason.
//
// Symbols follow torch's duck sizing: requested dims of equal size share a
// symbol (so that x + y over two batch dims needs no relation between
// symbols). Sizes 0 and 1 stay static (broadcasting depends on them), as do
// the dims of an input that is not contiguous (a symbolic type has no strides
// yet).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "frontend/compile.h"
#include "frontend/trace.h"
#include "ir/graph.h"

namespace kiln {

struct SymbolicTrace {
  std::shared_ptr<ir::Graph> graph; // symbolic where any requested dim stayed symbolic
  // Per symbol s<k>: the input dims it stands for.
  std::vector<std::vector<InputDim>> symbols;
  // Why each requested dim that stayed static did ("input 0 dim 1 (size 1): ...").
  std::vector<std::string> static_reasons;
  int traces = 0; // how many times the function was traced
  // Traced with any of the symbols at 1 (the others at their traced sizes), the
  // function gives the same graph with the types the symbols give: a call
  // with a symbolic size of 1 may run it. Torch specializes 1 always.
  bool holds_at_one = false;
};

// Traces fn at `examples` with the requested dims symbolic where the graph
// allows. kiln::Error for a dim that does not exist (naming it), or when the
// function cannot be traced at the examples.
// `outputs`, when given, receives what eager returns for each output (trace()).
SymbolicTrace trace_symbolic(const TracedFunction &fn, const std::vector<Tensor> &examples,
                             const std::vector<InputDim> &dims, std::string name = "main",
                             std::vector<TracedOutput> *outputs = nullptr);

// `dims` with negative dims counted from the end and repeats dropped;
// kiln::Error naming a dim the examples do not have.
std::vector<InputDim> checked_dims(const std::vector<Tensor> &examples, const std::vector<InputDim> &dims);

// Every dim of every input (dynamic = On).
std::vector<InputDim> every_input_dim(const std::vector<Tensor> &examples);

} // namespace kiln
