// Arithmetic of contractions, counted from the graph (for kiln bench's GFLOP/s
// and codegen's choice of where a small program runs).
#pragma once

#include <cstdint>

namespace kiln::ir {

class Graph;
class Node;

// Multiply-adds x 2 of one node: 2 * M * N * K for matmul, mm, bmm, addmm and
// linear (2 x output elements x the reduced dim), 2 * N * Ho * Wo * Cout *
// (Cin / groups) * kh * kw for conv2d, 2 * L * S * (E + Ev) per batch for
// scaled_dot_product_attention; a fusion group's body summed. Everything else
// counts 0.
int64_t contraction_flops(const Node &n);
// The same summed over every node of `g`.
int64_t contraction_flops(const Graph &g);

} // namespace kiln::ir
