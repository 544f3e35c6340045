// 2-D pooling: max_pool2d, avg_pool2d, adaptive_avg_pool2d against naive
// window loops written here, over kernel/stride/padding/dilation/ceil_mode/
// count_include_pad combinations, layouts and dtypes.
#include "unit/shape_test_util.h"

#include <limits>
#include <sstream>

using namespace kiln;
using namespace shape_test;

namespace {

struct Params {
  int64_t kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil_mode, count_include_pad;
  std::string str() const {
    std::ostringstream os;
    os << "k" << kh << "x" << kw << " s" << sh << "x" << sw << " p" << ph << "x" << pw << " d" << dh << "x" << dw
       << (ceil_mode ? " ceil" : "") << (count_include_pad ? " incl" : "");
    return os.str();
  }
};

// Output length of one pooled dim, from the definition. Floor mode: every window
// start o*s (o >= 0) whose window fits in the padded input. Ceil mode: windows
// are added until one reaches the end of the padded input, but a window must
// start inside the input or its left padding; there is always at least one.
int64_t ref_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = d * (k - 1) + 1, padded = in + 2 * p;
  int64_t n = 0;
  if (!ceil_mode) {
    while (n * s + span <= padded) ++n;
    return n;
  }
  n = 1;
  while ((n - 1) * s + span < padded && n * s < in + p) ++n;
  return n;
}

// Logical (N?, C, H, W) accessors of a 3-D or 4-D pooling input.
struct Plane {
  const Tensor &x;
  bool batched() const { return x.dim() == 4; }
  int64_t h() const { return x.size(-2); }
  int64_t w() const { return x.size(-1); }
  double at(const Idx &out_idx, int64_t y, int64_t z) const {
    Idx i = out_idx;
    i[i.size() - 2] = y;
    i[i.size() - 1] = z;
    return get(x, i);
  }
};

Idx out_shape(const Tensor &x, int64_t oh, int64_t ow) {
  Idx s = x.sizes().vec();
  s[s.size() - 2] = oh;
  s[s.size() - 1] = ow;
  return s;
}

double ref_max(const Tensor &x, const Params &p, const Idx &o) {
  Plane pl{x};
  const int64_t oy = o[o.size() - 2], oz = o[o.size() - 1];
  double best = -std::numeric_limits<double>::infinity();
  bool nan = false;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      int64_t y = oy * p.sh - p.ph + a * p.dh, z = oz * p.sw - p.pw + b * p.dw;
      if (y < 0 || y >= pl.h() || z < 0 || z >= pl.w()) continue;
      double v = pl.at(o, y, z);
      if (std::isnan(v)) nan = true;
      best = std::max(best, v);
    }
  return nan ? std::numeric_limits<double>::quiet_NaN() : best;
}

double ref_avg(const Tensor &x, const Params &p, const Idx &o, bool integral) {
  Plane pl{x};
  const int64_t oy = o[o.size() - 2], oz = o[o.size() - 1];
  double sum = 0;
  int64_t valid = 0, padded = 0;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      int64_t y = oy * p.sh - p.ph + a, z = oz * p.sw - p.pw + b;
      // Positions past the right/bottom padding (ceil mode) never count.
      if (y >= pl.h() + p.ph || z >= pl.w() + p.pw) continue;
      ++padded;
      if (y < 0 || y >= pl.h() || z < 0 || z >= pl.w()) continue;
      ++valid;
      sum += pl.at(o, y, z);
    }
  if (valid == 0) return 0;
  const double r = sum / double(p.count_include_pad ? padded : valid);
  return integral ? std::trunc(r) : r;
}

// Inputs of a logical shape in several layouts.
std::vector<std::pair<std::string, Tensor>> pool_inputs(const Idx &shape, DType dt) {
  std::vector<std::pair<std::string, Tensor>> out;
  out.emplace_back("contiguous", filled(shape, dt, 1));
  out.emplace_back("transposed", transposed(shape, dt, 2)); // H and W swapped in storage
  Idx wide = shape;
  wide[wide.size() - 3] *= 2;
  out.emplace_back("sliced", filled(wide, dt, 3).slice(-3, 1, std::nullopt, 2));
  Idx one = shape;
  one[0] = 1;
  out.emplace_back("expanded", filled(one, dt, 4).expand(shape));
  // channels-last storage for 4-D
  if (shape.size() == 4) {
    Tensor cl = filled({shape[0], shape[2], shape[3], shape[1]}, dt, 5).permute({0, 3, 1, 2});
    out.emplace_back("channels_last", cl);
  }
  return out;
}

std::vector<Params> combos(bool with_dilation) {
  std::vector<Params> out;
  for (int64_t kh : {1, 2, 3})
    for (int64_t kw : {2, 3})
      for (int64_t s : {0, 1, 2, 3}) // 0: stride omitted (= kernel)
        for (int64_t ph = 0; ph <= kh / 2; ++ph)
          for (int64_t pw = 0; pw <= kw / 2; ++pw)
            for (int64_t d : with_dilation ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1})
              for (bool ceil_mode : {false, true})
                for (bool incl : with_dilation ? std::vector<bool>{false} : std::vector<bool>{false, true})
                  out.push_back({kh, kw, s ? s : kh, s ? (s == 3 ? 2 : s) : kw, ph, pw, d, d,
                                 ceil_mode, incl});
  // A few non-square dilations.
  out.push_back({3, 2, 1, 2, 1, 1, 2, 3, false, false});
  out.push_back({2, 3, 2, 1, 1, 0, 3, 2, true, false});
  return out;
}

// Calls the typed op with the stride omitted when it equals the kernel (to cover the default).
Tensor run_max(const Tensor &x, const Params &p) {
  if (p.sh == p.kh && p.sw == p.kw) return max_pool2d(x, {p.kh, p.kw}, {}, {p.ph, p.pw}, {p.dh, p.dw}, p.ceil_mode);
  return max_pool2d(x, {p.kh, p.kw}, {p.sh, p.sw}, {p.ph, p.pw}, {p.dh, p.dw}, p.ceil_mode);
}
Tensor run_avg(const Tensor &x, const Params &p) {
  if (p.sh == p.kh && p.sw == p.kw)
    return avg_pool2d(x, {p.kh, p.kw}, {}, {p.ph, p.pw}, p.ceil_mode, p.count_include_pad);
  return avg_pool2d(x, {p.kh, p.kw}, {p.sh, p.sw}, {p.ph, p.pw}, p.ceil_mode, p.count_include_pad);
}


// torch's index of a max-pool window, from its definition: the row-major-first position of
// the largest value, or in a window holding NaNs the last NaN's; an index into H * W.
double ref_argmax(const Tensor &x, const Params &p, const Idx &o) {
  Plane pl{x};
  const int64_t oy = o[o.size() - 2], oz = o[o.size() - 1];
  double best = 0;
  int64_t at = -1, last_nan = -1;
  for (int64_t a = 0; a < p.kh; ++a)
    for (int64_t b = 0; b < p.kw; ++b) {
      int64_t y = oy * p.sh - p.ph + a * p.dh, z = oz * p.sw - p.pw + b * p.dw;
      if (y < 0 || y >= pl.h() || z < 0 || z >= pl.w()) continue;
      const double v = pl.at(o, y, z);
      if (std::isnan(v)) last_nan = y * pl.w() + z;
      else if (at < 0 || v > best) best = v, at = y * pl.w() + z;
    }
  return double(last_nan >= 0 ? last_nan : at);
}

std::tuple<Tensor, Tensor> run_max_indices(const Tensor &x, const Params &p) {
  if (p.sh == p.kh && p.sw == p.kw)
    return max_pool2d_with_indices(x, {p.kh, p.kw}, {}, {p.ph, p.pw}, {p.dh, p.dw}, p.ceil_mode);
  return max_pool2d_with_indices(x, {p.kh, p.kw}, {p.sh, p.sw}, {p.ph, p.pw}, {p.dh, p.dw}, p.ceil_mode);
}
} // namespace

TEST(MaxPool2d, CombosLayoutsDtypes) {
  int checked = 0;
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64})
    for (const Idx &shape : {Idx{2, 3, 7, 8}, Idx{3, 6, 5}})
      for (auto &[name, x] : pool_inputs(shape, dt))
        for (const Params &p : combos(true)) {
          const int64_t oh = ref_out(x.size(-2), p.kh, p.sh, p.ph, p.dh, p.ceil_mode);
          const int64_t ow = ref_out(x.size(-1), p.kw, p.sw, p.pw, p.dw, p.ceil_mode);
          if (oh < 1 || ow < 1) continue;
          SCOPED_TRACE(name + " " + idx_str(shape) + " " + p.str() + " " + std::string(kiln::name(dt)));
          Tensor out = run_max(x, p);
          EXPECT_EQ(out.dtype(), dt);
          EXPECT_TRUE(out.is_contiguous());
          expect_values(out, out_shape(x, oh, ow), [&](const Idx &o) { return ref_max(x, p, o); });
          auto [v, i] = run_max_indices(x, p); // the same values, and torch's positions
          EXPECT_EQ(i.dtype(), kInt64);
          expect_same(v, out);
          expect_values(i, out_shape(x, oh, ow), [&](const Idx &o) { return ref_argmax(x, p, o); });
          ++checked;
        }
  EXPECT_GT(checked, 1000);
}

TEST(MaxPool2d, NanPropagatesAndSizeOne) {
  Tensor x = filled({1, 4, 4}, kFloat32);
  static_cast<float *>(x.raw_data())[5] = std::numeric_limits<float>::quiet_NaN(); // (1, 1)
  Tensor out = max_pool2d(x, {2});
  expect_values(out, {1, 2, 2}, [&](const Idx &o) { return ref_max(x, {2, 2, 2, 2, 0, 0, 1, 1, false, false}, o); });
  EXPECT_TRUE(std::isnan(get(out, {0, 0, 0})));
  Tensor one = filled({1, 1, 1, 1}, kFloat64, 3);
  expect_values(max_pool2d(one, {1}), {1, 1, 1, 1}, [&](const Idx &) { return get(one, {0, 0, 0, 0}); });
  EXPECT_EQ(max_pool2d(filled({0, 3, 4, 4}, kFloat32), {2}).sizes().vec(), (Idx{0, 3, 2, 2}));
}

TEST(AvgPool2d, CombosLayoutsDtypes) {
  int checked = 0;
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (const Idx &shape : {Idx{2, 3, 7, 8}, Idx{3, 6, 5}})
      for (auto &[name, x] : pool_inputs(shape, dt))
        for (const Params &p : combos(false)) {
          const int64_t oh = ref_out(x.size(-2), p.kh, p.sh, p.ph, 1, p.ceil_mode);
          const int64_t ow = ref_out(x.size(-1), p.kw, p.sw, p.pw, 1, p.ceil_mode);
          if (oh < 1 || ow < 1) continue;
          SCOPED_TRACE(name + " " + idx_str(shape) + " " + p.str() + " " + std::string(kiln::name(dt)));
          Tensor out = run_avg(x, p);
          EXPECT_EQ(out.dtype(), dt);
          const bool integral = dt == kInt64;
          expect_values(out, out_shape(x, oh, ow), [&](const Idx &o) { return as_dtype(ref_avg(x, p, o, integral), dt); },
                        dt == kFloat32 ? 1e-6 : 1e-12);
          ++checked;
        }
  EXPECT_GT(checked, 500);
}

TEST(AvgPool2d, EmptyBatchAndSizeOne) {
  EXPECT_EQ(avg_pool2d(filled({0, 2, 5, 5}, kFloat32), {2}).sizes().vec(), (Idx{0, 2, 2, 2}));
  Tensor x = filled({1, 1, 1}, kFloat32, 2);
  expect_values(avg_pool2d(x, {1}), {1, 1, 1}, [&](const Idx &) { return get(x, {0, 0, 0}); });
}

namespace {
double ref_adaptive(const Tensor &x, int64_t oh, int64_t ow, const Idx &o, bool integral) {
  Plane pl{x};
  const int64_t i = o[o.size() - 2], j = o[o.size() - 1];
  const int64_t h0 = int64_t(std::floor(double(i) * double(pl.h()) / double(oh)));
  const int64_t h1 = int64_t(std::ceil(double(i + 1) * double(pl.h()) / double(oh)));
  const int64_t w0 = int64_t(std::floor(double(j) * double(pl.w()) / double(ow)));
  const int64_t w1 = int64_t(std::ceil(double(j + 1) * double(pl.w()) / double(ow)));
  double sum = 0;
  for (int64_t y = h0; y < h1; ++y)
    for (int64_t z = w0; z < w1; ++z) sum += pl.at(o, y, z);
  const double r = sum / double((h1 - h0) * (w1 - w0));
  return integral ? std::trunc(r) : r;
}
} // namespace

TEST(AdaptiveAvgPool2d, NonDivisibleSizesLayoutsDtypes) {
  for (DType dt : {kFloat32, kFloat64, kInt64})
    for (const Idx &shape : {Idx{2, 3, 7, 10}, Idx{3, 5, 6}})
      for (auto &[name, x] : pool_inputs(shape, dt))
        for (const Idx &os : {Idx{1, 1}, Idx{3, 4}, Idx{5, 7}, Idx{7, 10}, Idx{9, 13}, Idx{2, 1}}) {
          SCOPED_TRACE(name + " " + idx_str(shape) + " -> " + idx_str(os) + " " + std::string(kiln::name(dt)));
          Tensor out = adaptive_avg_pool2d(x, os);
          expect_values(out, out_shape(x, os[0], os[1]),
                        [&](const Idx &o) { return as_dtype(ref_adaptive(x, os[0], os[1], o, dt == kInt64), dt); },
                        dt == kFloat32 ? 1e-6 : 1e-12);
        }
  // One int means both dims; output 0 gives an empty result.
  Tensor x = filled({2, 5, 5}, kFloat32);
  EXPECT_EQ(adaptive_avg_pool2d(x, {3}).sizes().vec(), (Idx{2, 3, 3}));
  EXPECT_EQ(adaptive_avg_pool2d(x, {0, 2}).sizes().vec(), (Idx{2, 0, 2}));
  EXPECT_EQ(adaptive_avg_pool2d(filled({0, 2, 4, 4}, kFloat64), {2, 2}).sizes().vec(), (Idx{0, 2, 2, 2}));
}

TEST(Pool2d, Errors) {
  Tensor x = filled({1, 2, 4, 4}, kFloat32);
  expect_error([&] { max_pool2d(filled({4, 4}, kFloat32), {2}); }, {"max_pool2d", "3-D", "4-D", "[4, 4]"});
  expect_error([&] { avg_pool2d(filled({1, 1, 1, 4, 4}, kFloat32), {2}); }, {"avg_pool2d", "[1, 1, 1, 4, 4]"});
  expect_error([&] { max_pool2d(filled({1, 0, 4, 4}, kFloat32), {2}); }, {"max_pool2d", "non-zero", "[1, 0, 4, 4]"});
  expect_error([&] { adaptive_avg_pool2d(filled({2, 0, 4}, kFloat32), {2}); },
               {"adaptive_avg_pool2d", "non-zero", "[2, 0, 4]"});
  expect_error([&] { max_pool2d(x, {0, 2}); }, {"max_pool2d", "kernel_size", "[0, 2]"});
  expect_error([&] { max_pool2d(x, {2}, {0}); }, {"max_pool2d", "stride", "[0, 0]"});
  expect_error([&] { max_pool2d(x, {2}, {}, {0}, {0}); }, {"max_pool2d", "dilation", "[0, 0]"});
  expect_error([&] { max_pool2d(x, {3}, {}, {2}); }, {"max_pool2d", "half of the kernel", "[2, 2]", "[3, 3]"});
  expect_error([&] { avg_pool2d(x, {2}, {}, {-1}); }, {"avg_pool2d", "padding", "[-1, -1]"});
  expect_error([&] { max_pool2d(x, {5}); }, {"max_pool2d", "[1, 2, 4, 4]", "too small"});
  expect_error([&] { max_pool2d(x, {2, 2, 2}); }, {"max_pool2d", "kernel_size", "[2, 2, 2]"});
  expect_error([&] { avg_pool2d(x, {2}, {1, 1, 1}); }, {"avg_pool2d", "stride", "[1, 1, 1]"});
  expect_error([&] { max_pool2d(filled({1, 2, 4, 4}, kBool), {2}); }, {"max_pool2d", "bool"});
  expect_error([&] { avg_pool2d(filled({1, 2, 4, 4}, kInt32), {2}); }, {"avg_pool2d", "int32"});
  expect_error([&] { adaptive_avg_pool2d(x, {1, 2, 3}); }, {"adaptive_avg_pool2d", "output_size", "[1, 2, 3]"});
  expect_error([&] { adaptive_avg_pool2d(x, {-1, 2}); }, {"adaptive_avg_pool2d", "non-negative", "[-1, 2]"});
  expect_error([&] { max_pool2d(Tensor(), {2}); }, {"max_pool2d", "undefined"});
}

TEST(Pool2d, AdaptersAndTraceNormalizeAttrs) {
  Tensor x = transposed({2, 3, 9, 8}, kFloat32);
  // max_pool2d: lists normalized to two elements, stride defaulted to the kernel.
  Tensor m = traced([&] { return max_pool2d(x, {3}, {}, {1}, {2}, true); });
  EXPECT_EQ(recorded().id, OpId::MaxPool2d);
  EXPECT_EQ(recorded().calls, 1);
  EXPECT_EQ(recorded().attrs, (Attrs{Idx{3, 3}, Idx{3, 3}, Idx{1, 1}, Idx{2, 2}, true}));
  expect_same(m, max_pool2d(x, {3, 3}, {3, 3}, {1, 1}, {2, 2}, true));
  Attrs ma{Idx{2, 3}, Idx{1, 2}, Idx{1, 0}, Idx{1, 2}, false};
  expect_same(run_op(OpId::MaxPool2d, {x}, ma).at(0), max_pool2d(x, {2, 3}, {1, 2}, {1, 0}, {1, 2}, false));

  Tensor a = traced([&] { return avg_pool2d(x, {2, 3}, {}, {1}, true, false); });
  EXPECT_EQ(recorded().id, OpId::AvgPool2d);
  EXPECT_EQ(recorded().attrs, (Attrs{Idx{2, 3}, Idx{2, 3}, Idx{1, 1}, true, false}));
  expect_same(a, avg_pool2d(x, {2, 3}, {2, 3}, {1, 1}, true, false));
  Attrs aa{Idx{3, 3}, Idx{2, 2}, Idx{1, 1}, false, true};
  expect_same(run_op(OpId::AvgPool2d, {x}, aa).at(0), avg_pool2d(x, {3}, {2}, {1}, false, true));

  Tensor g = traced([&] { return adaptive_avg_pool2d(x, {4}); });
  EXPECT_EQ(recorded().id, OpId::AdaptiveAvgPool2d);
  EXPECT_EQ(recorded().attrs, (Attrs{Idx{4, 4}}));
  expect_same(g, adaptive_avg_pool2d(x, {4, 4}));
  expect_same(run_op(OpId::AdaptiveAvgPool2d, {x}, {Idx{5, 3}}).at(0), adaptive_avg_pool2d(x, {5, 3}));

  // Meta in, meta out: the shape rule.
  Tensor mm = max_pool2d(meta({2, 3, 9, 8}), {3}, {2}, {1}, {1}, true);
  EXPECT_TRUE(mm.is_meta());
  EXPECT_EQ(mm.sizes().vec(), (Idx{2, 3, ref_out(9, 3, 2, 1, 1, true), ref_out(8, 3, 2, 1, 1, true)}));
  EXPECT_EQ(avg_pool2d(meta({3, 9, 8}), {2}).sizes().vec(), (Idx{3, 4, 4}));
  EXPECT_EQ(adaptive_avg_pool2d(meta({3, 9, 8}), {5, 6}).sizes().vec(), (Idx{3, 5, 6}));
}

// Large enough to split planes over the thread pool.
TEST(Pool2d, LargeInputParallel) {
  Tensor x = pool_inputs({4, 16, 40, 36}, kFloat32)[4].second; // channels-last layout
  Params p{3, 3, 2, 2, 1, 1, 1, 1, false, true};
  Tensor m = run_max(x, p), a = run_avg(x, p);
  expect_values(m, {4, 16, 20, 18}, [&](const Idx &o) { return ref_max(x, p, o); });
  expect_values(a, {4, 16, 20, 18}, [&](const Idx &o) { return ref_avg(x, p, o, false); }, 1e-6);
  Tensor g = adaptive_avg_pool2d(x, {7, 7});
  expect_values(g, {4, 16, 7, 7}, [&](const Idx &o) { return ref_adaptive(x, 7, 7, o, false); }, 1e-6);
}

// ---- max_pool2d_with_indices / max_pool1d_with_indices (the combos: MaxPool2d.CombosLayoutsDtypes)


// Equal values keep the first position; NaNs give NaN and the last NaN's position; -inf
// everywhere gives -inf and the window's first position.
TEST(MaxPool2dWithIndices, TiesNanAndInf) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  // One [1, 3, 4] plane per case, pooled by a 3x4 window (its whole plane), and by 2x2 windows.
  const std::vector<std::vector<double>> planes = {
      {1, 5, 2, 5, 0, 5, 3, 1, 5, 2, 2, 4},               // max 5 four times: first at 1
      {1, nan, 5, 2, nan, 0, 7, 1, 2, nan, 3, 1},         // NaNs at 1, 4, 9: last at 9
      {-inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf, -inf},
  };
  for (DType dt : {kFloat32, kFloat64})
    for (const auto &vals : planes) {
      Tensor x = detail::make_tensor({1, 3, 4}, dt);
      dispatch_dtype(dt, [&]<class T>() {
        for (size_t k = 0; k < vals.size(); ++k) static_cast<T *>(x.raw_data())[k] = T(vals[k]);
      });
      for (const Params &p : {Params{3, 4, 3, 4, 0, 0, 1, 1, false, false}, Params{2, 2, 1, 2, 1, 0, 1, 1, true, false}}) {
        const int64_t oh = ref_out(3, p.kh, p.sh, p.ph, p.dh, p.ceil_mode), ow = ref_out(4, p.kw, p.sw, p.pw, p.dw, p.ceil_mode);
        SCOPED_TRACE(p.str());
        auto [v, i] = run_max_indices(x, p);
        expect_values(v, {1, oh, ow}, [&](const Idx &o) { return ref_max(x, p, o); });
        expect_values(i, {1, oh, ow}, [&](const Idx &o) { return ref_argmax(x, p, o); });
        expect_same(v, run_max(x, p)); // the values are max_pool2d's
      }
    }
  // The whole-plane window, by hand: the first 5, the last NaN, the first -inf.
  Tensor x = detail::make_tensor({3, 3, 4}, kFloat32);
  for (size_t c = 0; c < 3; ++c)
    for (size_t k = 0; k < 12; ++k) static_cast<float *>(x.raw_data())[c * 12 + k] = float(planes[c][k]);
  auto [v, i] = max_pool2d_with_indices(x, {3, 4});
  expect_values(i, {3, 1, 1}, [](const Idx &o) { return std::vector<double>{1, 9, 0}[size_t(o[0])]; });
  EXPECT_TRUE(std::isnan(get(v, {1, 0, 0})));
  EXPECT_EQ(get(v, {2, 0, 0}), -inf);
}

TEST(MaxPool2dWithIndices, OneDimFunctionalAndErrors) {
  namespace F = kiln::nn::functional;
  Tensor x = transposed({2, 3, 9}, kFloat32, 4); // [N, C, L], L strided
  auto [v, i] = max_pool1d_with_indices(x, {3}, {2}, {1}, {2}, true);
  // As the 2-D op over [N, C, 1, L].
  const Params p{1, 3, 1, 2, 0, 1, 1, 2, true, false};
  Tensor x4 = x.unsqueeze(2);
  const int64_t ol = ref_out(9, 3, 2, 1, 2, true);
  expect_values(v, {2, 3, ol}, [&](const Idx &o) { return ref_max(x4, p, {o[0], o[1], 0, o[2]}); });
  expect_values(i, {2, 3, ol}, [&](const Idx &o) { return ref_argmax(x4, p, {o[0], o[1], 0, o[2]}); });
  expect_same(v, max_pool1d(x, {3}, {2}, {1}, {2}, true));
  auto [fv, fi] = F::max_pool1d_with_indices(x, F::MaxPool1dFuncOptions(3).stride(2).padding(1).dilation(2).ceil_mode(true));
  expect_same(fv, v);
  expect_same(fi, i);
  Tensor x2 = filled({2, 3, 7, 8}, kFloat64, 6);
  auto [v2, i2] = max_pool2d_with_indices(x2, {3, 2}, {2, 1}, {1, 0});
  auto [fv2, fi2] = F::max_pool2d_with_indices(x2, F::MaxPool2dFuncOptions({3, 2}).stride({2, 1}).padding({1, 0}));
  expect_same(fv2, v2);
  expect_same(fi2, i2);
  auto [av, ai] = F::adaptive_max_pool2d_with_indices(x2, F::AdaptiveMaxPool2dFuncOptions({3, 5}));
  auto [wv, wi] = adaptive_max_pool2d(x2, {3, 5});
  expect_same(av, wv);
  expect_same(ai, wi);
  auto [bv, bi] = F::adaptive_max_pool1d_with_indices(x, F::AdaptiveMaxPool1dFuncOptions(4));
  auto [cv, ci] = adaptive_max_pool1d(x, {4});
  expect_same(bv, cv);
  expect_same(bi, ci);
  // Empty batch, meta shapes.
  auto [ev, ei] = max_pool2d_with_indices(filled({0, 3, 4, 4}, kFloat32), {2});
  EXPECT_EQ(ei.sizes().vec(), (Idx{0, 3, 2, 2}));
  auto [mv, mi] = max_pool2d_with_indices(meta({2, 3, 9, 8}), {3}, {2}, {1}, {1}, true);
  EXPECT_TRUE(mi.is_meta());
  EXPECT_EQ(mi.dtype(), kInt64);
  EXPECT_EQ(mv.sizes().vec(), (Idx{2, 3, ref_out(9, 3, 2, 1, 1, true), ref_out(8, 3, 2, 1, 1, true)}));

  Tensor y = filled({1, 2, 4, 4}, kFloat32);
  expect_error([&] { max_pool2d_with_indices(filled({4, 4}, kFloat32), {2}); },
               {"max_pool2d_with_indices", "3-D", "[4, 4]"});
  expect_error([&] { max_pool2d_with_indices(y, {3}, {}, {2}); }, {"max_pool2d_with_indices", "half of the kernel"});
  expect_error([&] { max_pool2d_with_indices(y, {5}); }, {"max_pool2d_with_indices", "[1, 2, 4, 4]", "too small"});
  expect_error([&] { max_pool2d_with_indices(filled({1, 2, 4, 4}, kBool), {2}); }, {"max_pool2d_with_indices", "bool"});
  expect_error([&] { max_pool2d_with_indices(Tensor(), {2}); }, {"max_pool2d_with_indices", "undefined"});
  expect_error([&] { max_pool1d_with_indices(filled({2, 3, 4, 4}, kFloat32), {2}); },
               {"max_pool1d_with_indices", "[2, 3, 4, 4]"});
  expect_error([&] { max_pool1d_with_indices(filled({2, 3, 8}, kFloat32), {2, 2}); },
               {"max_pool1d_with_indices", "kernel_size", "[2, 2]"});
}

TEST(MaxPool2dWithIndices, AdapterAndTrace) {
  Tensor x = transposed({2, 3, 9, 8}, kFloat32);
  Tensor i = traced([&] { return std::get<1>(max_pool2d_with_indices(x, {3}, {}, {1}, {2}, true)); });
  EXPECT_EQ(recorded().id, OpId::MaxPool2dWithIndices);
  EXPECT_EQ(recorded().attrs, (Attrs{Idx{3, 3}, Idx{3, 3}, Idx{1, 1}, Idx{2, 2}, true}));
  expect_same(i, std::get<1>(max_pool2d_with_indices(x, {3, 3}, {3, 3}, {1, 1}, {2, 2}, true)));
  Attrs ma{Idx{2, 3}, Idx{1, 2}, Idx{1, 0}, Idx{1, 2}, false};
  auto out = run_op(OpId::MaxPool2dWithIndices, {x}, ma);
  ASSERT_EQ(out.size(), 2u);
  auto [v, want_i] = max_pool2d_with_indices(x, {2, 3}, {1, 2}, {1, 0}, {1, 2}, false);
  expect_same(out[0], v);
  expect_same(out[1], want_i);
}
