// Checks SSA and use-def integrity, operand and result types against each op's
// shape/dtype rule (the op run on meta tensors), closed fusion bodies and no
// dangling values. Throws kiln::Error naming the graph, the node and the problem.
#pragma once

#include "ir/graph.h"

namespace kiln::ir {

void verify(const Graph &g);

} // namespace kiln::ir
