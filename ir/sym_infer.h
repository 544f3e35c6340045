// Symbolic result dims of an op (issue 17), from its concrete shape rule: the
// eager kernel run on META tensors, which stays the one shape rule per op.
//
// In kiln's ops a result dim is a polynomial of degree at most one in each
// operand dim (broadcasting, reductions, contractions, cat, select, slices with
// step 1, embedding, index...), except where a floor division enters (pooling
// and convolution over spatial dims, slices with a step). So the symbolic dims
// are interpolated: the rule runs at the traced sizes and with every subset of
// the symbols moved up by one (2^m runs for m symbols), which fixes a
// multilinear polynomial exactly, and the polynomial is then checked against
// the rule at two points away from those. A dim that fails there is tried as
// a floor division of one symbol, (a * s + b) // den for den <= 32 (a strided
// conv or pool over a symbolic height), fitted along that symbol alone and
// checked at the same two points. A dim that fits neither, or a
// rule that refuses the moved sizes (add of [s0] and [s1] holds only where
// s0 == s1), is a kiln::Error saying so: such a node needs a guard or a static
// size, the caller's choice. The verifier checks every symbolic node once more,
// at a third point.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "ir/graph.h"
#include "ir/sym.h"
#include "runtime/op_registry.h"
#include "runtime/tensor.h"

namespace kiln::ir {

// The sizes of each result with the symbols at `values`; throws kiln::Error
// where the op refuses those sizes.
using SizesAt = std::function<std::vector<Dims>(std::span<const int64_t> values)>;

// At most this many symbols per node (2^m rule runs).
inline constexpr int kMaxFitSymbols = 4;

// One expression per dim of each result: `rule`'s sizes as a multilinear
// polynomial in `symbols` (the others held at their hints).
std::vector<std::vector<SymExpr>> fit_symbolic_dims(const SizesAt &rule, std::span<const int64_t> hints,
                                                    std::span<const int> symbols);

// Ops whose attributes hold their result's sizes (ops.def's SizesInAttrs: view,
// reshape and expand's `shape`, full's `size`). In a symbolic graph that attribute keeps the traced sizes and the
// result type's dims are the truth: attrs_with_sizes gives the attributes for
// the result sizes at some value of the symbols.
bool sizes_in_attrs(OpId op);
Attrs attrs_with_sizes(OpId op, const Attrs &attrs, IntArrayRef sizes);
// Node n's attributes with the symbols at `values`: its own, except for a
// view, reshape, expand or full with a symbolic result (what the verifier and the
// interpreter run).
Attrs attrs_at(const Node &n, std::span<const int64_t> values);

// Each dim's size with the symbols at `values`.
std::vector<int64_t> evaluate_dims(std::span<const SymExpr> dims, std::span<const int64_t> values);

// The values of g's symbols in a call with inputs of `sizes` (one per graph
// input): an input dim that is a bare symbol binds it, and then every dim of
// every input must equal its expression. kiln::Error naming the input, the
// dim, its size and what the graph needs otherwise (a relation between sizes,
// such as two inputs' equal dims, or a symbol no input dim binds). Empty for a
// graph without symbols.
std::vector<int64_t> bind_symbols(const Graph &g, const std::vector<IntArrayRef> &sizes);

// g with its symbols at `values` (one per symbol): the same values and nodes
// under the same names, each type at those sizes and each view's sizes in its
// attributes (attrs_at), fusion bodies too. A static graph: what a
// specialization of the symbolic graph to one call's sizes compiles.
std::unique_ptr<Graph> instantiate(const Graph &g, std::span<const int64_t> values);

} // namespace kiln::ir
