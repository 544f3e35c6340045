// Lowers a fusion group (elementwise body) to a kernel description using the
// lowering-rule table in op_lowering.cpp.
#pragma once

#include <vector>

#include "codegen/kernel.h"
#include "runtime/op_registry.h"

namespace kiln::ir {
class Node;
}

namespace kiln::codegen {

// Whether the rule table has an entry for `id`.
bool has_lowering(OpId id);
// The dtypes kernels (and the GEMM micro-kernels' epilogues) load, store and compute
// in: bool, int32, int64, float32 and float64.
bool lowered_dtype(DType t);

// `operands` carries the dtype, sizes and strides of each group operand at
// specialisation time. Known scalar constants are folded into the kernel, so
// `buffer_operands` receives the indices of the operands that are kernel input
// buffers, in buffer order. Throws kiln::Error when the group cannot be lowered.
KernelDesc lower_group(const ir::Node &group, const std::vector<Tensor> &operands,
                       std::vector<size_t> &buffer_operands);

} // namespace kiln::codegen
