// Lowers a fusion group (elementwise body) to a kernel description using the
// lowering-rule table in op_lowering.cpp.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "codegen/kernel.h"
#include "ir/sym.h"
#include "runtime/op_registry.h"

namespace kiln::ir {
class Graph;
class Node;
} // namespace kiln::ir

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

// The operands of node `index` of graph `at` (static, or symbolic at its
// traced sizes) as the symbolic executor passes them: inputs and fusion
// groups' results contiguous, params and consts as they are, eager ops'
// results with the layouts eager gives them (a permute's result is strided).
// Every op runs on META tensors.
std::vector<Tensor> operand_metas(const ir::Graph &at, size_t index);

// Dim 0's extent of a kernel over runtime sizes (KernelDesc::runtime_dim0):
// `factor` times the product of `dims` at a call's symbol values.
struct RuntimeExtent {
  std::vector<ir::SymExpr> dims;
  int64_t factor = 1;
  int64_t at(std::span<const int64_t> values) const;
};

// What a kernel over runtime sizes reads per call (buffers[num_buffers()]):
// dim 0's extent, and a runtime row's length (KernelDesc::runtime_row).
// Or, for a kernel with a runtime layout (KernelDesc::runtime_layout), its
// extents and strides (layout, in KernelDesc::layout_words order).
struct RuntimeExtents {
  RuntimeExtent dim0;
  std::optional<RuntimeExtent> row;
  std::vector<ir::SymExpr> layout;
  // The words the kernel reads (words() of them) at a call's symbol values.
  size_t words() const { return layout.empty() ? 2 : layout.size(); }
  void fill(std::span<const int64_t> values, int64_t *out) const;
};

// A fusion group of symbolic graph g (issue 17) as one kernel for every value
// of the symbols its types mention. The symbols may size the kernel's outer
// dims (the batch and sequence of a [s0, s1, 768] layer norm): every buffer
// must walk the leading dims up to the last such dim as one, as row-major
// ones do, and those dims become one dim 0 whose extent (a product of the
// symbols) the kernel reads per call (KernelDesc::runtime_dim0). They may also
// size the row of a row reduction whose row is one dim (W2's [s0, s1] softmax
// under dynamic = On): then every outer dim folds into dim 0 and the kernel
// reads the row's length per call too (KernelDesc::runtime_row). `extents`
// gives both as formulas of the symbols. Lowered with the symbols at `values` and again
// with each symbol moved by one, with its operands as the symbolic executor
// passes them: graph inputs and fusion groups' results contiguous, params and
// consts as they are, eager ops' results with eager's layouts (a permute's
// result strided; returned in `operands`, at `values`, when given). The
// descriptions must differ only in dim 0, which holds at every value since
// sizes are multilinear in the symbols (the verifier checks each); a strided
// operand must keep its strides. Otherwise a kiln::Error says why: a symbol in
// a row of several dims, a buffer that does not walk the outer dims as one, a
// stride or a constant (a mean's 1 / length) that changes with a symbol.
// An element-wise group whose buffers do not walk the symbolic dims as one (a
// per-channel operand over [s0, C, s1, s1]) gets a runtime layout instead
// (KernelDesc::runtime_layout): every extent and stride a formula of the
// symbols, its dims merged where they merge at every size.
KernelDesc lower_symbolic_group(const ir::Graph &g, const ir::Node &group, std::span<const int64_t> values,
                                std::vector<size_t> &buffer_operands, std::vector<Tensor> *operands = nullptr,
                                RuntimeExtents *extents = nullptr);

// A kernel for `group` of symbolic graph g that serves every call: the static
// kernel of a group whose types mention no symbol (`extents` empty), else
// lower_symbolic_group's (`extents`: what it reads per call).
// Operands as lower_symbolic_group takes them (returned in `operands`).
KernelDesc lower_group_for_every_size(const ir::Graph &g, const ir::Node &group, std::span<const int64_t> values,
                                      std::vector<size_t> &buffer_operands, std::optional<RuntimeExtents> &extents,
                                      std::vector<Tensor> &operands);

} // namespace kiln::codegen
