// INTERNAL to codegen: how a kernel with row reductions (KernelBuilder::reduce)
// is evaluated row by row, in passes over the row. No LLVM here; lower_row_reduce.cpp
// turns the schedule into loops, tests check its decisions.
//
// Levels: a node's level is the deepest nesting of reductions below it (a
// Reduce counts itself). Pass p (0-based) walks the row once and folds every
// reduction whose operand has level p, and stores every element-wise output
// whose value has level p. Per-row values of level s (reductions finished by
// pass s-1, and expressions of them) are computed once, at "stage" s, just
// before pass s. softmax: pass 0 folds max(x); pass 1 folds sum(exp(x - max))
// and keeps exp(...) in scratch; pass 2 stores exp(...) / sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::codegen {

struct KernelDesc;

struct RowSchedule {
  std::vector<uint8_t> per_row; // per node: same value for the whole row
  std::vector<int> level;       // per node, see above
  std::vector<int> scratch_pass; // per node: pass that writes it to per-row scratch; -1 = recomputed
  std::vector<int> output_pass; // per output: pass storing it; -1 = once per row, at stage level(value)
  int passes = 0;
  int64_t scratch_bytes = 0;    // per-row scratch of all materialized nodes (row_length() elements each)
  bool transcendental = false;  // some node is exp, tanh...: rows are compute-bound

  bool materialized(int32_t node) const { return scratch_pass[size_t(node)] >= 0; }
};

// Element-wise nodes that feed several passes are recomputed in each, except
// expensive ones (transcendentals), which the first pass stores in a scratch
// row that later passes read, as long as the scratch stays within
// `max_scratch_bytes` for the whole kernel. `desc` must have reductions and rank >= 1.
RowSchedule schedule_rows(const KernelDesc &desc, int64_t max_scratch_bytes);

// Per node: its level (see above), the deepest nesting of reductions below it.
std::vector<int> node_levels(const KernelDesc &desc);

// Longest row (elements) the row-block lowering takes. Measured on a [64, L]
// float32 mat-vec, AVX-512 (Zen 4), noisy machine: about 2x faster than row
// by row at L = 64, 1.5-2x at 128, 1.1-1.5x at 256, even at 512, and
// 1.1-2.2x SLOWER at 1024, where the block's 16 rows, 4 KiB apart, map to
// the same L1 sets and evict each other.
inline constexpr int64_t kMaxBlockRowLength = 256;

// Row blocks (lower_row_block.cpp): how many neighbouring rows are
// reduced side by side, each in its own vector accumulator, then combined by a
// transposing shuffle tree so that lane r holds row r's result; 0 = row by row.
// `desc` is the kernel as lowered: outer dims collapsed into one ([rows, L]).
// `lanes`: float32 lanes of the target's widest vector (the block size).
int64_t choose_row_block(const KernelDesc &desc, const RowSchedule &sched, int64_t lanes);

// For a kernel choose_row_block accepted: whether the per-row values after the
// pass (bias, relu...) and the per-row outputs can be evaluated as vectors
// across the block's rows (lane r = row r) instead of row by row.
bool row_block_stage_is_vector(const KernelDesc &desc, const RowSchedule &sched);

} // namespace kiln::codegen
