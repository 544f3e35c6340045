// Checks shared by the tests of epilogues fused into kiln's contraction kernels
// (gemm_epilogue_test, conv_epilogue_test): the register path against the tile
// path bit for bit, and either against eager within a K-scaled tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "codegen/epilogue.h"
#include "runtime/ops.h"
#include "graph_test_util.h"

namespace kiln::testing {

struct RegisterGuard {
  bool saved = codegen::register_epilogues();
  explicit RegisterGuard(bool on) { codegen::set_register_epilogues(on); }
  ~RegisterGuard() { codegen::set_register_epilogues(saved); }
};

// Same bits, NaN matching NaN.
::testing::AssertionResult bits_equal(const Tensor &got, const Tensor &want) {
  if (got.sizes() != want.sizes() || got.dtype() != want.dtype())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes()) << " vs " << shape_str(want.sizes());
  std::vector<double> g = kiln::testing::vals(got), w = kiln::testing::vals(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) && std::isnan(w[i])) continue;
    if (std::memcmp(&g[i], &w[i], sizeof(double)) != 0)
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i] << " (tile path)";
  }
  return ::testing::AssertionSuccess();
}

// NaN where eager has NaN, the same inf, finite values within the stated tolerance.
::testing::AssertionResult close_to_eager(const Tensor &got, const Tensor &want, int64_t K) {
  if (got.sizes() != want.sizes()) return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes());
  std::vector<double> g = kiln::testing::vals(got), w = kiln::testing::vals(want);
  const double eps = got.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                             : double(std::numeric_limits<float>::epsilon());
  double scale = 1;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, 1 + std::abs(v));
  const double tol = 8.0 * double(K + 2) * eps * scale;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) != std::isnan(g[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs eager " << w[i];
    if (std::isnan(w[i])) continue;
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs eager " << w[i];
      continue;
    }
    if (!(std::abs(g[i] - w[i]) <= tol))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs eager " << w[i] << " (tol "
                                           << tol << ")";
  }
  return ::testing::AssertionSuccess();
}

} // namespace kiln::testing
