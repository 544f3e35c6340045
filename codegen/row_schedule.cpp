#include "codegen/row_schedule.h"

#include <algorithm>

#include "codegen/kernel.h"
#include "runtime/error.h"

namespace kiln::codegen {

std::vector<int> node_levels(const KernelDesc &k) {
  std::vector<int> level(k.nodes.size(), 0);
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node &n = k.nodes[i];
    for (int a = 0; a < op_arity(n.op); ++a) level[i] = std::max(level[i], level[n.args[a]]);
    if (n.op == KOp::Reduce) ++level[i];
  }
  return level;
}

namespace {

bool stored_per_row(const KernelDesc &k, const RowSchedule &sched, size_t o) {
  const OutputSpec &out = k.outputs[o];
  return k.constant_along_row(out.buffer.strides) && sched.per_row[out.value];
}

// The element-wise values pass p evaluates at each j: operands of its reductions
// and values of its outputs.
std::vector<int32_t> pass_roots(const KernelDesc &k, const RowSchedule &sched, int p) {
  std::vector<int32_t> roots;
  for (size_t i = 0; i < k.nodes.size(); ++i)
    if (k.nodes[i].op == KOp::Reduce && sched.level[k.nodes[i].args[0]] == p)
      roots.push_back(k.nodes[i].args[0]);
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (sched.output_pass[o] == p) roots.push_back(k.outputs[o].value);
  return roots;
}

// uses[n] = number of passes that evaluate node n (a materialized node counts
// in the passes that read it back too, but its operands do not).
std::vector<int> count_uses(const KernelDesc &k, const RowSchedule &sched) {
  std::vector<int> uses(k.nodes.size(), 0);
  for (int p = 0; p < sched.passes; ++p) {
    std::vector<uint8_t> seen(k.nodes.size(), 0);
    std::vector<int32_t> stack = pass_roots(k, sched, p);
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (sched.per_row[n] || seen[n]) continue; // per-row values come from the stage, once
      seen[n] = 1;
      ++uses[n];
      bool read_back = sched.scratch_pass[n] >= 0 && sched.scratch_pass[n] < p;
      if (read_back) continue;
      for (int a = 0; a < op_arity(k.nodes[n].op); ++a) stack.push_back(k.nodes[n].args[a]);
    }
  }
  return uses;
}

int first_pass_using(const KernelDesc &k, const RowSchedule &sched, int32_t node) {
  for (int p = 0; p < sched.passes; ++p) {
    std::vector<int32_t> stack = pass_roots(k, sched, p);
    std::vector<uint8_t> seen(k.nodes.size(), 0);
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (n == node) return p;
      if (sched.per_row[n] || seen[n]) continue;
      seen[n] = 1;
      for (int a = 0; a < op_arity(k.nodes[n].op); ++a) stack.push_back(k.nodes[n].args[a]);
    }
  }
  KILN_FAIL("internal: node ", node, " is used by no pass");
}

// Greedy, outermost first: materializing exp(u) makes the passes that read it
// back stop evaluating u, so inner candidates are re-counted after each choice.
void choose_scratch(const KernelDesc &k, RowSchedule &sched, int64_t max_scratch_bytes) {
  int64_t row = k.row_length();
  for (;;) {
    std::vector<int> uses = count_uses(k, sched);
    int32_t pick = -1;
    for (size_t i = k.nodes.size(); i-- > 0;) {
      bool candidate = uses[i] >= 2 && !sched.materialized(int32_t(i)) && is_transcendental(k.nodes[i].op);
      int64_t bytes = row * int64_t(itemsize(k.nodes[i].dtype));
      if (candidate && sched.scratch_bytes + bytes <= max_scratch_bytes) {
        pick = int32_t(i);
        break;
      }
    }
    if (pick < 0) return;
    sched.scratch_pass[pick] = first_pass_using(k, sched, pick);
    sched.scratch_bytes += row * int64_t(itemsize(k.nodes[pick].dtype));
  }
}

} // namespace

RowSchedule schedule_rows(const KernelDesc &k, int64_t max_scratch_bytes) {
  KILN_CHECK(!k.shape.empty() && k.has_reductions(), "internal: schedule_rows without row reductions");
  RowSchedule sched;
  sched.per_row = k.per_row_nodes();
  sched.level = node_levels(k);
  sched.scratch_pass.assign(k.nodes.size(), -1);
  sched.output_pass.assign(k.outputs.size(), -1);
  for (size_t i = 0; i < k.nodes.size(); ++i)
    if (k.nodes[i].op == KOp::Reduce) sched.passes = std::max(sched.passes, sched.level[i]);
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    if (stored_per_row(k, sched, o)) continue;
    sched.output_pass[o] = sched.level[k.outputs[o].value];
    sched.passes = std::max(sched.passes, sched.output_pass[o] + 1);
  }
  for (const Node &n : k.nodes) sched.transcendental |= is_transcendental(n.op);
  choose_scratch(k, sched, max_scratch_bytes);
  return sched;
}

// Conservative on purpose; everything else is lowered row by row:
// - one row dim, one (collapsed) outer dim with at least `lanes` rows, rows of
//   1..kMaxBlockRowLength elements (a tail of length % lanes is masked);
// - one pass (sched.passes == 1): reductions of element values only, no
//   element-wise outputs (every output is per-row), hence no scratch and no
//   streamed stores; no in-place outputs;
// - one or two float32 Add/Max/Min reductions (their accumulators, `lanes` of
//   them each, stay in registers);
// - the element values (not per-row) are float32 lane ops (is_lane_op, codegen/kernel.h) of
//   loads that are contiguous along the row (stride 1); per-row values they
//   use are computed per row as scalars and broadcast.
int64_t choose_row_block(const KernelDesc &k, const RowSchedule &sched, int64_t lanes) {
  if (k.shape.size() != 2 || k.row_rank != 1 || lanes < 2 || (lanes & (lanes - 1)) != 0) return 0;
  int64_t rows = k.shape[0], length = k.shape[1];
  if (rows < lanes || length < 1 || length > kMaxBlockRowLength) return 0;
  if (sched.passes != 1 || sched.scratch_bytes != 0) return 0;
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (sched.output_pass[o] >= 0 || k.aliased_input(o) >= 0) return 0;
  int reductions = 0;
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node &n = k.nodes[i];
    if (n.op == KOp::Reduce) {
      bool combine = n.combine == KOp::Add || n.combine == KOp::Max || n.combine == KOp::Min;
      if (!combine || n.dtype != DType::Float32) return 0;
      ++reductions;
      continue;
    }
    if (sched.per_row[i]) continue;
    if (n.dtype != DType::Float32) return 0;
    if (n.op == KOp::Load ? k.inputs[size_t(n.input)].strides[1] != 1 : !is_lane_op(n.op)) return 0;
  }
  return reductions >= 1 && reductions <= 2 ? lanes : 0;
}

// Per-row loads must be contiguous across rows (outer stride 1) or the same
// for all of them (0), and per-row outputs contiguous across rows.
bool row_block_stage_is_vector(const KernelDesc &k, const RowSchedule &sched) {
  for (size_t i = 0; i < k.nodes.size(); ++i) {
    const Node &n = k.nodes[i];
    if (!sched.per_row[i] || n.op == KOp::Reduce) continue;
    if (n.dtype != DType::Float32) return false;
    if (n.op == KOp::Load) {
      int64_t s = k.inputs[size_t(n.input)].strides[0];
      if (s != 0 && s != 1) return false;
      continue;
    }
    if (n.op != KOp::Const && !is_lane_op(n.op)) return false;
  }
  for (const OutputSpec &out : k.outputs)
    if (out.buffer.dtype != DType::Float32 || out.buffer.strides[0] != 1) return false;
  return true;
}

} // namespace kiln::codegen
