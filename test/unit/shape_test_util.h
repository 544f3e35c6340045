// Helpers of the shape/pool/view tests: inputs filled by hand, elements read
// through sizes/strides by hand, multi-index loops. Nothing here calls an op
// under test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "expect_error.h"
#include "runtime/op_registry.h"
#include "runtime/trace_hook.h"

namespace shape_test {

using namespace kiln;
using Idx = std::vector<int64_t>;

inline const DType kAllDTypes[] = {kBool, kInt32, kInt64, kFloat32, kFloat64};

// A contiguous tensor of `shape` whose element i holds a value derived from i and
// `seed` (distinct, non-trivial, exactly representable in every dtype but bool).
inline Tensor filled(IntArrayRef shape, DType dt, int seed = 0) {
  Tensor t = detail::make_tensor(shape, dt);
  dispatch_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      int64_t v = ((i + seed) * 37 + 11) % 101 - 50;
      if constexpr (std::is_same_v<T, bool>) p[i] = (v % 3) != 0;
      else if constexpr (std::is_floating_point_v<T>) p[i] = T(v) + T(0.25) * T((i + seed) % 4);
      else p[i] = T(v);
    }
  });
  return t;
}

// An int tensor holding `values` with `shape` (contiguous).
inline Tensor ints(const std::vector<int64_t> &values, IntArrayRef shape, DType dt = kInt64) {
  Tensor t = detail::make_tensor(shape, dt);
  EXPECT_EQ(size_t(t.numel()), values.size());
  dispatch_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (size_t i = 0; i < values.size(); ++i) p[i] = T(values[i]);
  });
  return t;
}

// The element at multi-index `idx`, read through sizes and strides, as a double.
inline double get(const Tensor &t, const Idx &idx) {
  EXPECT_EQ(int64_t(idx.size()), t.dim());
  int64_t off = t.storage_offset();
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return dispatch_dtype(t.dtype(), [&]<class T>() {
    const T *base = static_cast<const T *>(t.impl().storage->data());
    return double(base[off]);
  });
}

// Calls f(idx) for every multi-index of `sizes` in row-major order.
inline void for_each_index(const Idx &sizes, const std::function<void(const Idx &)> &f) {
  for (int64_t s : sizes)
    if (s == 0) return;
  Idx idx(sizes.size(), 0);
  for (;;) {
    f(idx);
    int64_t d = int64_t(sizes.size()) - 1;
    for (; d >= 0; --d) {
      if (++idx[size_t(d)] < sizes[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
    if (d < 0) return;
  }
}

inline std::string idx_str(const Idx &idx) { return shape_str(IntArrayRef(idx)); }

// Checks out's shape and that out[idx] == expected(idx) for every idx (exact or within tol).
inline void expect_values(const Tensor &out, const Idx &shape, const std::function<double(const Idx &)> &expected,
                          double tol = 0) {
  ASSERT_EQ(out.sizes().vec(), shape);
  int failures = 0;
  for_each_index(shape, [&](const Idx &idx) {
    double want = expected(idx), got = get(out, idx);
    bool ok = std::isnan(want) ? std::isnan(got)
                               : got == want || std::abs(got - want) <= tol * std::max(1.0, std::abs(want)); // inf == inf
    if (!ok && failures++ < 5) ADD_FAILURE() << "at " << idx_str(idx) << ": got " << got << ", want " << want;
  });
}

// Converts a double to what a value of dtype `dt` holds (bool: nonzero).
inline double as_dtype(double v, DType dt) {
  if (dt == kBool) return v != 0;
  if (dt == kFloat32) return double(float(v));
  return v;
}

// Runs `fn` and checks it throws kiln::Error whose message contains every part.
using kiln::testing::expect_error;

// The same tensor values (same shape, dtype) in two tensors.
inline void expect_same(const Tensor &a, const Tensor &b) {
  ASSERT_EQ(a.sizes().vec(), b.sizes().vec());
  ASSERT_EQ(a.dtype(), b.dtype());
  expect_values(a, a.sizes().vec(), [&](const Idx &i) { return get(b, i); });
}

// A non-contiguous tensor with the given logical shape: a transposed view of a
// contiguous buffer (the last two dims swapped in storage).
inline Tensor transposed(IntArrayRef shape, DType dt, int seed = 0) {
  Idx s = shape.vec();
  std::swap(s[s.size() - 1], s[s.size() - 2]);
  return filled(s, dt, seed).transpose(-1, -2);
}

} // namespace shape_test

namespace shape_test {

// What the test tracer saw: the op recorded last and how many ops were recorded.
struct Recorded {
  OpId id{};
  Attrs attrs;
  int calls = 0;
};
inline Recorded &recorded() {
  static Recorded r;
  return r;
}

// Runs fn() with tracing on. The installed hook stores the recorded op and its
// attributes, then replays them through the op's uniform adapter (tracing off)
// on the same inputs: the result of fn() is therefore what the adapter computes
// from exactly what KILN_TRACE recorded.
class TraceReplay {
public:
  TraceReplay() : saved_(detail::trace_hooks()) {
    recorded() = {};
    detail::TraceHooks h;
    h.record = [](OpId id, const std::vector<Tensor> &in, const Attrs &a) {
      recorded().id = id;
      recorded().attrs = a;
      ++recorded().calls;
      detail::TracingOff off;
      return run_op(id, in, a);
    };
    detail::set_trace_hooks(h);
    detail::t_tracing = true;
  }
  ~TraceReplay() {
    detail::t_tracing = false;
    detail::set_trace_hooks(saved_);
  }

private:
  detail::TraceHooks saved_;
};

template <class F> auto traced(F &&fn) {
  TraceReplay on;
  return fn();
}

// A meta tensor with the given shape (no storage).
inline Tensor meta(IntArrayRef shape, DType dt = kFloat32) { return detail::make_tensor(shape, dt, true); }

} // namespace shape_test
