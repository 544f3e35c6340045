// The reference executor: runs a graph node by node with the eager kernels
// (through each op's uniform adapter). It is the eager fallback of compiled
// functions and the oracle every pass is tested against.
#pragma once

#include <vector>

#include "ir/graph.h"
#include "runtime/tensor.h"

namespace kiln::ir {

// Runs g on `inputs` (one per graph input, with the input's shape and dtype;
// kiln::Error naming the input otherwise). A graph with symbols runs at any
// sizes its input types allow (ir::bind_symbols reads the symbols' values). Parameters read their live tensors,
// constants their values, fusion groups run their body. After the nodes, the
// write-backs are copied into the input and parameter tensors (functionalized
// in-place ops), so callers see the same mutations as eager.
std::vector<Tensor> interpret(const Graph &g, const std::vector<Tensor> &inputs);

// Runs a fusion group's body of a symbolic graph with the symbols at `values`
// (the call's, ir::bind_symbols of the enclosing graph): a body has no
// symbol hints of its own to bind them from.
std::vector<Tensor> interpret_body(const Graph &body, const std::vector<Tensor> &inputs,
                                   const std::vector<int64_t> &values);

} // namespace kiln::ir
