// The fuse pass as a function (also registered as the pass "fuse").
#pragma once

#include "ir/graph.h"

namespace kiln::passes {

// Groups elementwise chains and last-dim reductions with their prologue and
// epilogue into FusionGroup nodes. Returns whether the graph changed.
// `duplicate`: copy cheap elementwise producers into their readers' groups when
// that saves a buffer (the pass "fuse" does; false is for comparisons in tests).
bool fuse(ir::Graph &g, bool duplicate = true);

} // namespace kiln::passes
