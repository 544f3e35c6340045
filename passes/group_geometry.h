// The geometry of a fusion group, one definition for the fuse pass (which
// forms groups) and codegen (which lowers them, codegen/op_lowering.cpp, and
// tiles contraction epilogues, codegen/epilogue.cpp): which dims a reduction
// folds, which shapes are the group's rows, how an operand broadcasts.
//
// A group has a domain D, the shape of its widest value. Every reduction of
// the group folds the same dims R of D; a member's result has shape D or, in
// a row-wise group, D with R reduced (kept as 1 or dropped): a per-row value.
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"

namespace kiln::passes {

// The dims reduction node `n` folds, normalized and ascending (no dims, or an
// empty list, = all of them).
std::vector<int64_t> reduced_dims(const ir::Node &n);

// Whether `s` is a row shape of domain `d` with reduced dims `red`: `d` with
// `red` kept as 1, or dropped. Never for an empty `d` or `red`.
bool is_row_shape(IntArrayRef s, IntArrayRef d, const std::vector<int64_t> &red);

// A full-shape node reading a row value whose reduced dims were dropped: numpy
// aligns that value with D's trailing dims, the kernel indexes it by the kept
// dims; the two agree only when the kept dims (of size > 1) are the trailing
// ones. True when they do not.
bool dropped_row_misaligned(IntArrayRef d, const std::vector<int64_t> &red);

// Iteration-space strides (elements) of an operand of sizes `s` and strides
// `st` broadcast to `domain`: dims aligned right; broadcast dims read stride 0.
std::vector<int64_t> broadcast_strides(IntArrayRef s, IntArrayRef st, IntArrayRef domain);

} // namespace kiln::passes
