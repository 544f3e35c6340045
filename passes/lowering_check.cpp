#include "passes/lowering_check.h"

#include <atomic>

namespace kiln::passes {
namespace {

std::atomic<LoweringMisfit> g_check{nullptr};
std::atomic<ConvLayoutMisfit> g_conv_layout{nullptr};
std::atomic<SymbolicContractionMisfit> g_symbolic_contraction{nullptr};

} // namespace

void register_lowering_misfit(LoweringMisfit check) { g_check.store(check, std::memory_order_release); }

std::string lowering_misfit(const ir::Node &n) {
  LoweringMisfit check = g_check.load(std::memory_order_acquire);
  if (!check) return "no code generator registered a lowering check";
  return check(n);
}

void register_conv_layout_misfit(ConvLayoutMisfit check) { g_conv_layout.store(check, std::memory_order_release); }

std::string conv_layout_misfit(const ir::Node &conv) {
  ConvLayoutMisfit check = g_conv_layout.load(std::memory_order_acquire);
  return check ? check(conv) : std::string();
}

void register_symbolic_contraction_misfit(SymbolicContractionMisfit check) {
  g_symbolic_contraction.store(check, std::memory_order_release);
}

std::string symbolic_contraction_misfit(const ir::Node &contraction) {
  SymbolicContractionMisfit check = g_symbolic_contraction.load(std::memory_order_acquire);
  return check ? check(contraction) : "no code generator reads a contraction's sizes per call";
}

} // namespace kiln::passes
