#include "codegen/row_plan.h"

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

bool is_expensive(KOp op) {
  switch (op) {
  case KOp::Exp: case KOp::Expm1: case KOp::Log: case KOp::Log1p: case KOp::Tanh: case KOp::Erf:
  case KOp::Sigmoid:
    return true;
  default:
    return false;
  }
}

bool stored_per_row(const KernelDesc &k, const RowPlan &plan, size_t o) {
  const OutputSpec &out = k.outputs[o];
  return k.constant_along_row(out.buffer.strides) && plan.per_row[out.value];
}

// The element-wise values pass p evaluates at each j: operands of its reductions
// and values of its outputs.
std::vector<int32_t> pass_roots(const KernelDesc &k, const RowPlan &plan, int p) {
  std::vector<int32_t> roots;
  for (size_t i = 0; i < k.nodes.size(); ++i)
    if (k.nodes[i].op == KOp::Reduce && plan.level[k.nodes[i].args[0]] == p)
      roots.push_back(k.nodes[i].args[0]);
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (plan.output_pass[o] == p) roots.push_back(k.outputs[o].value);
  return roots;
}

// uses[n] = number of passes that evaluate node n (a materialized node counts
// in the passes that read it back too, but its operands do not).
std::vector<int> count_uses(const KernelDesc &k, const RowPlan &plan) {
  std::vector<int> uses(k.nodes.size(), 0);
  for (int p = 0; p < plan.passes; ++p) {
    std::vector<uint8_t> seen(k.nodes.size(), 0);
    std::vector<int32_t> stack = pass_roots(k, plan, p);
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (plan.per_row[n] || seen[n]) continue; // per-row values come from the stage, once
      seen[n] = 1;
      ++uses[n];
      bool read_back = plan.scratch_pass[n] >= 0 && plan.scratch_pass[n] < p;
      if (read_back) continue;
      for (int a = 0; a < op_arity(k.nodes[n].op); ++a) stack.push_back(k.nodes[n].args[a]);
    }
  }
  return uses;
}

int first_pass_using(const KernelDesc &k, const RowPlan &plan, int32_t node) {
  for (int p = 0; p < plan.passes; ++p) {
    std::vector<int32_t> stack = pass_roots(k, plan, p);
    std::vector<uint8_t> seen(k.nodes.size(), 0);
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (n == node) return p;
      if (plan.per_row[n] || seen[n]) continue;
      seen[n] = 1;
      for (int a = 0; a < op_arity(k.nodes[n].op); ++a) stack.push_back(k.nodes[n].args[a]);
    }
  }
  KILN_FAIL("internal: node ", node, " is used by no pass");
}

// Greedy, outermost first: materializing exp(u) makes the passes that read it
// back stop evaluating u, so inner candidates are re-counted after each choice.
void choose_scratch(const KernelDesc &k, RowPlan &plan, int64_t max_scratch_bytes) {
  int64_t row = k.row_length();
  for (;;) {
    std::vector<int> uses = count_uses(k, plan);
    int32_t pick = -1;
    for (size_t i = k.nodes.size(); i-- > 0;) {
      bool candidate = uses[i] >= 2 && !plan.materialized(int32_t(i)) && is_expensive(k.nodes[i].op);
      int64_t bytes = row * int64_t(itemsize(k.nodes[i].dtype));
      if (candidate && plan.scratch_bytes + bytes <= max_scratch_bytes) {
        pick = int32_t(i);
        break;
      }
    }
    if (pick < 0) return;
    plan.scratch_pass[pick] = first_pass_using(k, plan, pick);
    plan.scratch_bytes += row * int64_t(itemsize(k.nodes[pick].dtype));
  }
}

} // namespace

RowPlan plan_rows(const KernelDesc &k, int64_t max_scratch_bytes) {
  KILN_CHECK(!k.shape.empty() && k.has_reductions(), "internal: plan_rows without row reductions");
  RowPlan plan;
  plan.per_row = k.per_row_nodes();
  plan.level = node_levels(k);
  plan.scratch_pass.assign(k.nodes.size(), -1);
  plan.output_pass.assign(k.outputs.size(), -1);
  for (size_t i = 0; i < k.nodes.size(); ++i)
    if (k.nodes[i].op == KOp::Reduce) plan.passes = std::max(plan.passes, plan.level[i]);
  for (size_t o = 0; o < k.outputs.size(); ++o) {
    if (stored_per_row(k, plan, o)) continue;
    plan.output_pass[o] = plan.level[k.outputs[o].value];
    plan.passes = std::max(plan.passes, plan.output_pass[o] + 1);
  }
  for (const Node &n : k.nodes) plan.transcendental |= is_expensive(n.op);
  choose_scratch(k, plan, max_scratch_bytes);
  return plan;
}

} // namespace kiln::codegen
