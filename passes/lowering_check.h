// What passes ask codegen. The fuse pass: can it lower this node as a member
// of a fusion group? passes/ must not include codegen/, so codegen registers its
// answer (codegen/op_lowering.cpp, while libkiln loads: kiln::compile,
// kiln-opt and every program linking the library get the same answer). With
// nothing registered, no node is lowerable, and fuse forms no group.
#pragma once

#include <string>

#include "ir/graph.h"

namespace kiln::passes {

// Why `n` (an elementwise or reduction op node, its operands as they stand in
// the graph: a scalar constant operand is known to the kernel) cannot be
// lowered inside a fusion group, or "" when it can.
using LoweringMisfit = std::string (*)(const ir::Node &n);

// Installs codegen's answer (replacing any earlier one). Thread-safe.
void register_lowering_misfit(LoweringMisfit check);

// The registered answer for `n`.
std::string lowering_misfit(const ir::Node &n);

// What the layout pass asks codegen before running a conv chain channels-last:
// why `conv` (a 4-D conv2d node) should stay NCHW, because codegen's compiled
// conv takes it in NCHW but not channels-last (it would then run eager's conv
// kernel), or "" when the layout does not decide which conv runs it (the
// layout pass's cost model then decides). Registered by codegen/epilogue.cpp;
// with nothing registered, "".
using ConvLayoutMisfit = std::string (*)(const ir::Node &conv);

// Installs codegen's answer (replacing any earlier one). Thread-safe.
void register_conv_layout_misfit(ConvLayoutMisfit check);

// The registered answer for `conv`.
std::string conv_layout_misfit(const ir::Node &conv);

// What the fuse pass asks codegen before grouping a contraction over symbolic
// sizes with its epilogue: why codegen cannot run that group reading its
// sizes per call (it then runs alone, eagerly), or "". Registered by
// codegen/epilogue.cpp; with nothing registered, a reason.
using SymbolicContractionMisfit = std::string (*)(const ir::Node &contraction);

// Installs codegen's answer (replacing any earlier one). Thread-safe.
void register_symbolic_contraction_misfit(SymbolicContractionMisfit check);

// The registered answer for `contraction`.
std::string symbolic_contraction_misfit(const ir::Node &contraction);

} // namespace kiln::passes
