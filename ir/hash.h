// Structural hash and equality: the same ops, attributes, types and wiring give
// the same hash whatever the value names. Keys for kernel caches and CSE.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace kiln::ir {

uint64_t structural_hash(const Graph &g);
bool structurally_equal(const Graph &a, const Graph &b);
// Hash of one node's op, attributes, operand types and result types (not its operands' identity).
uint64_t node_hash(const Node &n);

} // namespace kiln::ir
