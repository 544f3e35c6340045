// Helpers for the elementwise tests: tensors built and read by hand through
// sizes/strides (never through a kernel under test), and naive double-precision
// references with numpy broadcasting.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

namespace ewt {

using kiln::DType;
using kiln::IntArrayRef;
using kiln::Tensor;
using Shape = std::vector<int64_t>;
using Gen = std::function<double(int64_t)>; // logical (row-major) index -> value

inline int64_t numel_of(const Shape &s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// Calls fn(idx, flat) for every index of `shape` in row-major order.
inline void for_each_index(const Shape &shape, const std::function<void(const Shape &, int64_t)> &fn) {
  int64_t n = numel_of(shape);
  Shape idx(shape.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    fn(idx, flat);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

inline char *elem_ptr(const Tensor &t, const Shape &idx) {
  char *base = static_cast<char *>(t.impl().storage->data());
  int64_t off = t.storage_offset();
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  return base + off * int64_t(t.element_size());
}

inline double read_at(const Tensor &t, const Shape &idx) {
  char *p = elem_ptr(t, idx);
  switch (t.dtype()) {
  case kiln::kBool: return *reinterpret_cast<bool *>(p) ? 1.0 : 0.0;
  case kiln::kInt32: return *reinterpret_cast<int32_t *>(p);
  case kiln::kInt64: return double(*reinterpret_cast<int64_t *>(p));
  case kiln::kFloat32: return *reinterpret_cast<float *>(p);
  case kiln::kFloat64: return *reinterpret_cast<double *>(p);
  case kiln::kUInt8: return *reinterpret_cast<uint8_t *>(p);
  case kiln::kInt8: return *reinterpret_cast<int8_t *>(p);
  case kiln::kInt16: return *reinterpret_cast<int16_t *>(p);
  case kiln::kFloat16: return float(*reinterpret_cast<kiln::Half *>(p));
  case kiln::kBFloat16: return float(*reinterpret_cast<kiln::BFloat16 *>(p));
  }
  return 0;
}

inline void write_at(const Tensor &t, const Shape &idx, double v) {
  char *p = elem_ptr(t, idx);
  switch (t.dtype()) {
  case kiln::kBool: *reinterpret_cast<bool *>(p) = v != 0; break;
  case kiln::kInt32: *reinterpret_cast<int32_t *>(p) = int32_t(v); break;
  case kiln::kInt64: *reinterpret_cast<int64_t *>(p) = int64_t(v); break;
  case kiln::kFloat32: *reinterpret_cast<float *>(p) = float(v); break;
  case kiln::kFloat64: *reinterpret_cast<double *>(p) = v; break;
  // Through int64, so that a value outside the type wraps as a conversion in torch does.
  case kiln::kUInt8: *reinterpret_cast<uint8_t *>(p) = uint8_t(int64_t(v)); break;
  case kiln::kInt8: *reinterpret_cast<int8_t *>(p) = int8_t(int64_t(v)); break;
  case kiln::kInt16: *reinterpret_cast<int16_t *>(p) = int16_t(int64_t(v)); break;
  case kiln::kFloat16: *reinterpret_cast<kiln::Half *>(p) = kiln::Half(float(v)); break;
  case kiln::kBFloat16: *reinterpret_cast<kiln::BFloat16 *>(p) = kiln::BFloat16(float(v)); break;
  }
}

// Writes gen(logical index) into every element of a (possibly strided) view.
inline void fill_logical(const Tensor &t, const Gen &gen) {
  for_each_index(t.sizes().vec(), [&](const Shape &idx, int64_t flat) { write_at(t, idx, gen(flat)); });
}

inline std::vector<double> values(const Tensor &t) {
  std::vector<double> out;
  for_each_index(t.sizes().vec(), [&](const Shape &idx, int64_t) { out.push_back(read_at(t, idx)); });
  return out;
}

inline Tensor make(const Shape &shape, DType dt, const Gen &gen) {
  Tensor t = kiln::detail::make_tensor(shape, dt);
  fill_logical(t, gen);
  return t;
}

// The same logical tensor laid out three ways: contiguous, as a transposed view
// (when it has >= 2 dims) and as a step-2 slice of a wider tensor.
enum class Layout { Contiguous, Transposed, Sliced };
inline const char *layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : (l == Layout::Transposed ? "transposed" : "sliced");
}
inline std::vector<Layout> layouts_for(const Shape &shape) {
  std::vector<Layout> out{Layout::Contiguous};
  if (shape.size() >= 2) out.push_back(Layout::Transposed);
  if (!shape.empty()) out.push_back(Layout::Sliced);
  return out;
}
inline Tensor make_layout(const Shape &shape, DType dt, const Gen &gen, Layout layout) {
  Tensor view;
  if (layout == Layout::Contiguous) return make(shape, dt, gen);
  if (layout == Layout::Transposed) {
    Shape base = shape;
    std::swap(base[base.size() - 1], base[base.size() - 2]);
    view = kiln::detail::make_tensor(base, dt).transpose(-1, -2);
  } else {
    Shape base = shape;
    base.back() = base.back() * 2;
    view = kiln::detail::make_tensor(base, dt).slice(-1, 0, std::nullopt, 2);
  }
  fill_logical(view, gen);
  return view;
}

inline Shape broadcast(const Shape &a, const Shape &b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    out[i] = x == 1 ? y : x;
  }
  return out;
}

// Element of `t` at output index `idx` under broadcasting (right-aligned, size-1 dims repeat).
inline double read_bcast(const Tensor &t, const Shape &idx) {
  Shape sub(t.dim());
  size_t lead = idx.size() - sub.size();
  for (size_t d = 0; d < sub.size(); ++d) sub[d] = t.sizes()[d] == 1 ? 0 : idx[lead + d];
  return read_at(t, sub);
}

inline std::vector<double> ref_unary(const Tensor &x, const std::function<double(double)> &f) {
  std::vector<double> out;
  for (double v : values(x)) out.push_back(f(v));
  return out;
}

inline std::vector<double> ref_nary(const std::vector<Tensor> &in, const std::function<double(const std::vector<double> &)> &f,
                                    Shape *shape_out = nullptr) {
  Shape shape;
  for (const Tensor &t : in) shape = broadcast(shape, t.sizes().vec());
  if (shape_out) *shape_out = shape;
  std::vector<double> out;
  for_each_index(shape, [&](const Shape &idx, int64_t) {
    std::vector<double> args;
    for (const Tensor &t : in) args.push_back(read_bcast(t, idx));
    out.push_back(f(args));
  });
  return out;
}

inline std::vector<double> ref_binary(const Tensor &a, const Tensor &b, const std::function<double(double, double)> &f,
                                      Shape *shape_out = nullptr) {
  return ref_nary({a, b}, [&](const std::vector<double> &v) { return f(v[0], v[1]); }, shape_out);
}

// Values equal within atol + rtol * |expected|; NaN matches NaN.
inline void expect_values(const Tensor &got, const std::vector<double> &want, double rtol = 0, double atol = 0,
                          const std::string &what = "") {
  std::vector<double> g = values(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    if (std::isnan(want[i]) && std::isnan(g[i])) continue;
    if (std::isinf(want[i]) && g[i] == want[i]) continue;
    if (std::fabs(g[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    ++bad;
    ADD_FAILURE() << what << ": element " << i << " is " << g[i] << ", expected " << want[i];
  }
}

// The tolerance for a result of dtype dt computed in that dtype.
inline double rtol_for(DType dt) { return dt == kiln::kFloat32 ? 2e-6 : (dt == kiln::kFloat64 ? 1e-13 : 0); }

// Within `ulps` units in the last place of a's float format (NaN where NaN,
// infinities equal; other dtypes: equal): for results that pass through float sums,
// whose compiled and eager orders may differ in the last bits.
inline bool within_ulps(const Tensor &a, const Tensor &b, double ulps) {
  if (a.dtype() != b.dtype() || a.sizes().vec() != b.sizes().vec()) return false;
  const DType t = a.dtype();
  const int man_bits = t == kiln::kFloat16 ? 10 : t == kiln::kBFloat16 ? 7 : t == kiln::kFloat32 ? 23 : 52;
  const double rel = kiln::is_floating(t) ? ulps * std::ldexp(1.0, -man_bits) : 0;
  std::vector<double> u = values(a), v = values(b);
  for (size_t i = 0; i < u.size(); ++i) {
    if (std::isnan(u[i]) || std::isnan(v[i]) || std::isinf(u[i]) || std::isinf(v[i])) {
      if (!(std::isnan(u[i]) ? std::isnan(v[i]) : u[i] == v[i])) return false;
      continue;
    }
    if (std::fabs(u[i] - v[i]) > rel * std::max(std::fabs(u[i]), std::fabs(v[i])) + 1e-30) return false;
  }
  return true;
}

template <class F> void expect_error(F &&f, const std::string &substr) {
  try {
    f();
    ADD_FAILURE() << "expected kiln::Error containing \"" << substr << "\"";
  } catch (const kiln::Error &e) {
    EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << "message: " << e.what();
  }
}

} // namespace ewt
