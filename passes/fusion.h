// The fuse pass as a function (also registered as the pass "fuse").
#pragma once

#include "ir/graph.h"

namespace kiln::passes {

// Groups elementwise chains and reductions (all of a group over the same dims)
// with their prologue and epilogue into FusionGroup nodes. Returns whether the
// graph changed.
bool fuse(ir::Graph &g);

} // namespace kiln::passes
