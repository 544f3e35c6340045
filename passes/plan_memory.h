// The plan-memory pass as a function (also registered as the pass
// "plan-memory"), and per-call statistics of an optimized graph that tests and
// tools read.
#pragma once

#include <cstdint>

#include "ir/graph.h"

namespace kiln::passes {

// The arena plan for g's intermediates (see ir/memory_plan.h); g is unchanged.
// `in_place`: a fusion group's result may take the buffer of an operand it
// reads for the last time at the index it writes (passes "plan-memory" and
// "plan-memory-inplace"; "plan-memory-no-inplace" does not).
ir::MemoryPlan plan_memory(const ir::Graph &g, bool in_place = true);

struct GraphStats {
  int64_t fusion_groups = 0;  // kernels per call when codegen lowers every group
  int64_t other_nodes = 0;    // nodes run eagerly (views included)
  int64_t view_nodes = 0;     // of which views (no data moved)
  int64_t bytes_read = 0;     // per call: every non-view node reads each operand once
  int64_t bytes_written = 0;  // per call: every non-view node writes each result once
  int64_t peak_arena_bytes = -1; // the memory plan's arena; -1 without a plan
  int64_t planned_values = 0;    // intermediates placed in the arena
};

GraphStats graph_stats(const ir::Graph &g);

} // namespace kiln::passes
