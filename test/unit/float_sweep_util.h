// Exhaustive float32 sweeps against double-precision references for accuracy
// tests (eager_vecmath_test): the same method and error definitions as the JIT's
// vecmath_test, so the two tables compare directly.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <mutex>
#include <vector>

#include "runtime/parallel.h"

namespace float_sweep {

inline constexpr int64_t kChunk = int64_t(1) << 22;
inline constexpr float kDenseFrom = 0x1p-12f; // every float with |x| >= this is tested
inline constexpr int64_t kSparseStep = 61;    // below it, every 61st float

// KILN_FLOAT_SWEEP_STEP=k tests every k-th float only (default 1: all of them).
// The sanitizer stage (scripts/sanitize.sh) sets it: there the sweeps check
// memory safety of the same code paths, and a full sweep under ASan takes minutes.
inline int64_t sweep_step() {
  static const int64_t step = [] {
    const char *v = std::getenv("KILN_FLOAT_SWEEP_STEP");
    long long k = v ? std::atoll(v) : 1;
    return int64_t(k >= 1 ? k : 1);
  }();
  return step;
}

// Floats in increasing order <-> consecutive integers.
inline int64_t ordered(float f) {
  int32_t b = std::bit_cast<int32_t>(f);
  return b >= 0 ? int64_t(b) : -int64_t(b & 0x7fffffff);
}
inline float from_ordered(int64_t o) {
  return o >= 0 ? std::bit_cast<float>(int32_t(o)) : std::bit_cast<float>(int32_t(-o) | INT32_MIN);
}

using Ref = double (*)(double);

struct Errors {
  double max_abs = 0, max_rel = 0;
  float worst_abs_x = 0, worst_rel_x = 0;
  int64_t count = 0, mismatched_specials = 0;
  float special_x = 0;
  // Relative error is |y - ref| / |ref| where |ref| >= FLT_MIN, or, with
  // rel_to_x, |y - ref| / |x| where |x| >= FLT_MIN (for gelu, whose negative
  // tail 0.5 x (1 + tanh(..)) cancels: its float error scales with x, not the result).
  bool rel_to_x = false;

  void merge(const Errors &o) {
    if (o.max_abs > max_abs) max_abs = o.max_abs, worst_abs_x = o.worst_abs_x;
    if (o.max_rel > max_rel) max_rel = o.max_rel, worst_rel_x = o.worst_rel_x;
    if (o.mismatched_specials && !mismatched_specials) special_x = o.special_x;
    count += o.count;
    mismatched_specials += o.mismatched_specials;
  }
  void add(float x, float y, double ref) {
    ++count;
    bool finite_ref = std::isfinite(ref) && std::abs(ref) <= double(FLT_MAX);
    if (!finite_ref || !std::isfinite(y)) {
      // inf/nan must match exactly (as float: a double beyond FLT_MAX is inf)
      float rf = float(ref);
      bool same = (std::isnan(rf) && std::isnan(y)) || rf == y;
      if (!same && !mismatched_specials++) special_x = x;
      return;
    }
    double abs_err = std::abs(double(y) - ref);
    if (abs_err > max_abs) max_abs = abs_err, worst_abs_x = x;
    double denom = rel_to_x ? std::abs(double(x)) : std::abs(ref);
    if (denom >= double(FLT_MIN)) {
      double rel = abs_err / denom;
      if (rel > max_rel) max_rel = rel, worst_rel_x = x;
    }
  }
};

// Runs `eval(x, y, n)` (y[i] = f(x[i]) for i < n, n <= kChunk) over every float in
// [lo, hi] (sparsely below kDenseFrom) and compares with ref in double.
inline Errors sweep(const std::function<void(const float *, float *, int64_t)> &eval, Ref ref, float lo, float hi,
                    bool rel_to_x = false) {
  std::vector<float> x(kChunk), y(kChunk);
  Errors total;
  total.rel_to_x = rel_to_x;
  int64_t o = ordered(lo), end = ordered(hi);
  while (o <= end) {
    int64_t n = 0;
    for (; n < kChunk && o <= end; ++n) {
      float v = from_ordered(o);
      x[n] = v;
      o += (std::abs(v) >= kDenseFrom ? 1 : kSparseStep) * sweep_step();
    }
    std::fill(x.begin() + n, x.end(), x[n - 1]);
    eval(x.data(), y.data(), kChunk);
    std::mutex mu;
    kiln::parallel_for(0, n, 1 << 16, [&](int64_t b, int64_t e) {
      Errors part;
      part.rel_to_x = rel_to_x;
      for (int64_t i = b; i < e; ++i) part.add(x[i], y[i], ref(double(x[i])));
      std::lock_guard<std::mutex> lock(mu);
      total.merge(part);
    });
  }
  return total;
}

// Bounds asserted by a sweep: measured maxima rounded up with a little headroom.
struct Bound {
  double max_abs; // <= 0: not checked (unbounded outputs)
  double max_rel;
};

inline void expect_within(const char *name, float lo, float hi, const Errors &e, Bound bound) {
  std::printf("%-9s [%g, %g]: %lld floats, max abs %.3g (x=%.9g), max rel%s %.3g (x=%.9g)\n", name, double(lo),
              double(hi), static_cast<long long>(e.count), e.max_abs, double(e.worst_abs_x),
              e.rel_to_x ? " (to |x|)" : "", e.max_rel, double(e.worst_rel_x));
  EXPECT_GT(e.count, 1000000);
  EXPECT_EQ(e.mismatched_specials, 0) << name << ": inf/nan mismatch, first at x=" << e.special_x;
  if (bound.max_abs > 0) {
    EXPECT_LE(e.max_abs, bound.max_abs) << name << ": worst x=" << e.worst_abs_x;
  }
  EXPECT_LE(e.max_rel, bound.max_rel) << name << ": worst x=" << e.worst_rel_x;
}

} // namespace float_sweep
