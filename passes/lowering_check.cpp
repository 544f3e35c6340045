#include "passes/lowering_check.h"

#include <atomic>

namespace kiln::passes {
namespace {

std::atomic<LoweringMisfit> g_check{nullptr};

} // namespace

void register_lowering_misfit(LoweringMisfit check) { g_check.store(check, std::memory_order_release); }

std::string lowering_misfit(const ir::Node &n) {
  LoweringMisfit check = g_check.load(std::memory_order_acquire);
  if (!check) return "no code generator registered a lowering check";
  return check(n);
}

} // namespace kiln::passes
