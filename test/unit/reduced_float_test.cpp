// float16 and bfloat16 (runtime/half.h, runtime/dtype.h): conversions against a
// reference built here from the formats' definitions (every value decoded with
// ldexp, rounding by nearest with ties to even); torch's promotion; ops computing
// in float32 and rounding once (against loops over doubles, or the float32 op on
// the widened values); factories, printing, the IR, safetensors; and compiled
// functions (the upcast pass) equal to eager bit for bit, NaN and inf included.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "elementwise_test_util.h"
#include "frontend/trace.h"
#include "graph_test_util.h"
#include "ir/graph.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/pass_manager.h"

using namespace kiln;
using namespace ewt;

namespace {

const DType kReduced[] = {kFloat16, kBFloat16};

// The formats by definition: exponent and mantissa widths, bias.
struct Format {
  int exp_bits, man_bits;
  int bias() const { return (1 << (exp_bits - 1)) - 1; }
};
Format format_of(DType t) { return t == kFloat16 ? Format{5, 10} : Format{8, 7}; }

// The value of 16-bit pattern `b` in format f (NaN for NaN patterns).
double decode(Format f, uint16_t b) {
  const int e = (b >> f.man_bits) & ((1 << f.exp_bits) - 1);
  const int m = b & ((1 << f.man_bits) - 1);
  const double sign = (b & 0x8000) ? -1 : 1;
  if (e == (1 << f.exp_bits) - 1) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * std::ldexp(double(m), 1 - f.bias() - f.man_bits);
  return sign * std::ldexp(double(m + (1 << f.man_bits)), e - f.bias() - f.man_bits);
}

// Round-to-nearest-even of x into format f, by search over every non-negative finite
// value (inf sits one step past the largest, so that ties there go to inf as IEEE's).
uint16_t reference_round(Format f, float x) {
  static std::vector<std::pair<double, uint16_t>> table[2];
  std::vector<std::pair<double, uint16_t>> &vals = table[f.exp_bits == 5 ? 0 : 1];
  if (vals.empty()) {
    for (uint32_t b = 0; b < 0x8000; ++b) {
      double v = decode(f, uint16_t(b));
      if (std::isfinite(v)) vals.push_back({v, uint16_t(b)});
    }
    std::sort(vals.begin(), vals.end());
    const double step = vals.back().first - vals[vals.size() - 2].first;
    vals.push_back({vals.back().first + step, uint16_t(((1 << f.exp_bits) - 1) << f.man_bits)}); // inf
  }
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  const double a = std::fabs(double(x));
  if (std::isinf(a) || a >= vals.back().first) return sign | vals.back().second;
  auto hi = std::lower_bound(vals.begin(), vals.end(), std::make_pair(a, uint16_t(0)));
  if (hi->first == a) return sign | hi->second;
  auto lo = hi - 1;
  const double dl = a - lo->first, dh = hi->first - a;
  if (dl < dh) return sign | lo->second;
  if (dh < dl) return sign | hi->second;
  return sign | ((lo->second & 1) ? hi->second : lo->second);
}

uint16_t bits_of(DType t, float x) { return t == kFloat16 ? Half(x).x : BFloat16(x).x; }
float value_of(DType t, uint16_t b) { return t == kFloat16 ? float(Half::from_bits(b)) : float(BFloat16::from_bits(b)); }
float round_to(DType t, double x) { return value_of(t, bits_of(t, float(x))); }

// Whole tensors convert as single values do (runtime/half.h, checked against the
// formats above): float32 <-> float16 between dense tensors takes the CPU's
// conversion instructions where it has them (cast_into), strided ones the scalar
// loop. Every float16 pattern up, and random float32 patterns (NaN included) down,
// at lengths that leave every tail of an 8-wide block.
TEST(ReducedFloat, BulkHalfConversionsMatchTheScalarOnes) {
  Tensor h = kiln::detail::make_tensor({65536 + 5}, kFloat16);
  for (int64_t i = 0; i < h.numel(); ++i) static_cast<uint16_t *>(h.raw_data())[i] = uint16_t(i);
  for (const Tensor &src : {h, h.slice(0, 1, std::nullopt, 2), h.narrow(0, 0, 13)}) {
    const Tensor up = src.to(kFloat32).contiguous(), bits = src.contiguous();
    for (int64_t i = 0; i < up.numel(); ++i) {
      const float want = float(Half::from_bits(static_cast<const uint16_t *>(bits.raw_data())[i]));
      const float got = up.data_ptr<float>()[i];
      if (std::isnan(want)) ASSERT_TRUE(std::isnan(got)) << i;
      else ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << i << " of " << up.numel();
    }
  }
  std::mt19937 g(3);
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(15), int64_t(100003)}) {
    Tensor x = kiln::detail::make_tensor({n}, kFloat32);
    for (int64_t i = 0; i < n; ++i) x.data_ptr<float>()[i] = std::bit_cast<float>(uint32_t(g()));
    const Tensor down = x.to(kFloat16);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(static_cast<const uint16_t *>(down.raw_data())[i], Half(x.data_ptr<float>()[i]).x)
          << "x = " << x.data_ptr<float>()[i] << " (element " << i << " of " << n << ")";
  }
}

// Values with NaN, infinities, signed zeros, subnormals of both formats and large ones.
Tensor specials(DType t, int64_t n, uint64_t seed, bool with_nan = true) {
  static const double edge[] = {0.0, -0.0, 1.0, -1.5, 65504, 7e4, 1e-6, -3e-8, 1e-40, 3e38, INFINITY, -INFINITY};
  std::mt19937_64 g(seed);
  std::uniform_real_distribution<double> d(-4, 4);
  return make({n}, t, [&](int64_t i) {
    if (with_nan && i % 17 == 5) return double(NAN);
    if (i % 7 == 3) return edge[size_t(i / 7) % 12];
    return d(g);
  });
}

bool same_values(const Tensor &a, const Tensor &b) {
  if (a.dtype() != b.dtype() || a.sizes().vec() != b.sizes().vec()) return false;
  std::vector<double> u = values(a), v = values(b);
  for (size_t i = 0; i < u.size(); ++i)
    if (!(std::isnan(u[i]) ? std::isnan(v[i]) : (u[i] == v[i] && std::signbit(u[i]) == std::signbit(v[i]))))
      return false;
  return true;
}

} // namespace

TEST(ReducedFloat, ConversionsRoundToNearestEven) {
  for (DType t : kReduced) {
    const Format f = format_of(t);
    // Every pattern decodes as the format says, and float -> 16 bits gives it back.
    for (uint32_t b = 0; b < 0x10000; ++b) {
      const double want = decode(f, uint16_t(b));
      const float got = value_of(t, uint16_t(b));
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(got)) << name(t) << " bits " << b;
        ASSERT_TRUE(std::isnan(value_of(t, bits_of(t, got)))) << name(t) << " NaN stays NaN";
        continue;
      }
      ASSERT_EQ(double(got), want) << name(t) << " bits " << b;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << name(t) << " bits " << b;
      ASSERT_EQ(bits_of(t, got), uint16_t(b)) << name(t) << " round trip of bits " << b;
    }
    // Random float32 bit patterns (every exponent), and the exact midpoints between neighbours.
    std::mt19937 g(7);
    for (int i = 0; i < 400000; ++i) {
      const float x = std::bit_cast<float>(uint32_t(g()));
      if (std::isnan(x)) continue;
      ASSERT_EQ(bits_of(t, x), reference_round(f, x)) << name(t) << " x = " << x;
    }
    for (uint32_t b = 0; b < 0x7C00u; b += 3) {
      const double lo = decode(f, uint16_t(b)), hi = decode(f, uint16_t(b + 1));
      if (!std::isfinite(hi)) break;
      const float mid = float((lo + hi) / 2);
      if (double(mid) != (lo + hi) / 2) continue; // not representable in float32
      ASSERT_EQ(bits_of(t, mid), uint16_t((b & 1) ? b + 1 : b)) << name(t) << " tie between " << lo << " and " << hi;
    }
  }
  EXPECT_EQ(Half(65519.0f).x, 0x7BFF);    // rounds down to the largest, 65504
  EXPECT_EQ(Half(65520.0f).x, 0x7C00);    // the tie past it goes to inf
  EXPECT_EQ(Half(-1e-8f).x, 0x8000);      // underflow keeps the sign
  EXPECT_EQ(BFloat16(3.0e38f * 1.2f).x, 0x7F80 | 0); // float32 inf
}

TEST(ReducedFloat, NamesAndPromotion) {
  EXPECT_EQ(name(kFloat16), "float16");
  EXPECT_EQ(name(kBFloat16), "bfloat16");
  EXPECT_EQ(short_name(kBFloat16), "bf16");
  EXPECT_EQ(kHalf, kFloat16);
  EXPECT_EQ(itemsize(kBFloat16), 2u);
  EXPECT_TRUE(is_floating(kFloat16));
  // torch.promote_types
  const DType table[][3] = {{kFloat16, kBFloat16, kFloat32}, {kFloat16, kFloat32, kFloat32},
                            {kBFloat16, kFloat64, kFloat64}, {kInt64, kBFloat16, kBFloat16},
                            {kBool, kFloat16, kFloat16},     {kUInt8, kBFloat16, kBFloat16},
                            {kFloat16, kFloat16, kFloat16}};
  for (const auto &r : table) {
    EXPECT_EQ(promote_types(r[0], r[1]), r[2]) << r[0] << " " << r[1];
    EXPECT_EQ(promote_types(r[1], r[0]), r[2]) << r[1] << " " << r[0];
  }
  Tensor b = ones({3}, kBFloat16), h = ones({3}, kHalf);
  EXPECT_EQ((b + 1.5).dtype(), kBFloat16); // a Scalar does not widen a tensor of its category
  EXPECT_EQ((b + h).dtype(), kFloat32);
  EXPECT_EQ((b + ones({3})).dtype(), kFloat32);
  EXPECT_EQ((ones({3}, kInt64) + full({}, 2.0, kBFloat16)).dtype(), kBFloat16); // a 0-dim float beats int
  EXPECT_EQ((ones({3}) + full({}, 2.0, kBFloat16)).dtype(), kFloat32);
  EXPECT_EQ((b > 0.5).dtype(), kBool);
  EXPECT_EQ(argmax(b).dtype(), kInt64);
  EXPECT_EQ((ones({3}, kInt32) / 2).dtype(), kFloat32);
}

// One rounding per op, after computing in float32: x + y of two bf16 values is their
// float32 sum rounded, whatever the layout; unary ops are the float32 op rounded.
TEST(ReducedFloat, ElementwiseOpsComputeInFloat32AndRoundOnce) {
  for (DType t : kReduced) {
    for (Layout l : layouts_for({6, 10})) {
      Tensor x = make_layout({6, 10}, t, [](int64_t i) { return std::sin(double(i)) * 3; }, l);
      Tensor y = make({10}, t, [](int64_t i) { return 0.37 * double(i) - 1; });
      const std::string at = std::string(name(t)) + " " + layout_name(l);
      Tensor s = x + y, p = x * y, q = x / y;
      EXPECT_EQ(s.dtype(), t);
      expect_values(s, ref_binary(x, y, [&](double a, double b) { return double(round_to(t, float(a) + float(b))); }),
                    0, 0, at + " add");
      expect_values(p, ref_binary(x, y, [&](double a, double b) { return double(round_to(t, float(a) * float(b))); }),
                    0, 0, at + " mul");
      expect_values(q, ref_binary(x, y, [&](double a, double b) { return double(round_to(t, float(a) / float(b))); }),
                    0, 0, at + " div");
      expect_values(x.add(y, 2), ref_binary(x, y, [&](double a, double b) {
                      return double(round_to(t, float(a) + 2.0f * float(b)));
                    }), 0, 0, at + " add alpha");
      const std::vector<std::function<Tensor(const Tensor &)>> unary = {
          [](const Tensor &v) { return exp(v); },     [](const Tensor &v) { return tanh(v); },
          [](const Tensor &v) { return sigmoid(v); }, [](const Tensor &v) { return relu(v); },
          [](const Tensor &v) { return sqrt(v); },    [](const Tensor &v) { return neg(v); }};
      for (size_t k = 0; k < unary.size(); ++k) {
        Tensor got = unary[k](x);
        EXPECT_EQ(got.dtype(), t);
        EXPECT_TRUE(same_values(got, unary[k](x.to(kFloat32)).to(t))) << at << " unary op " << k;
      }
      EXPECT_TRUE(same_values(gelu(x, "tanh"), gelu(x.to(kFloat32), "tanh").to(t))) << at << " gelu";
      EXPECT_TRUE(same_values(clamp(x, -1, 1), clamp(x.to(kFloat32), -1, 1).to(t))) << at << " clamp";
      EXPECT_TRUE(same_values(where(x > 0, x, y), where(x > 0, x.to(kFloat32), y.to(kFloat32)).to(t))) << at;
    }
    // NaN and inf pass through as in float32.
    Tensor z = specials(t, 64, 3);
    EXPECT_TRUE(same_values(z * 2, (z.to(kFloat32) * 2).to(t))) << name(t);
    EXPECT_TRUE(same_values(exp(z), exp(z.to(kFloat32)).to(t))) << name(t);
  }
}

TEST(ReducedFloat, InPlaceOpsRoundIntoSelf) {
  for (DType t : kReduced) {
    Tensor x = make({8}, t, [](int64_t i) { return 0.3 * double(i); });
    Tensor y = make({8}, t, [](int64_t i) { return 1.0 / (1.0 + double(i)); });
    std::vector<double> want = ref_binary(x, y, [&](double a, double b) { return double(round_to(t, float(a) + float(b))); });
    Tensor alias = x.view({2, 4});
    x.add_(y);
    EXPECT_EQ(x.dtype(), t);
    expect_values(x, want, 0, 0, "add_");
    expect_values(alias.flatten(), want, 0, 0, "add_ writes through to views");
    x.mul_(2.5).sigmoid_();
    std::vector<double> w2;
    for (double v : want) w2.push_back(round_to(t, 1.0f / (1.0f + std::exp(-round_to(t, float(v) * 2.5f)))));
    expect_values(x, w2, 2e-3, 0, "mul_ then sigmoid_");
    Tensor f = zeros({8});
    f.add_(y); // float32 self, 16-bit other
    expect_values(f, values(y), 0, 0, "float32 add_");
    x.fill_(1.1);
    expect_values(x, std::vector<double>(8, round_to(t, 1.1f)));
    x.zero_();
    expect_values(x, std::vector<double>(8, 0.0));
    x.masked_fill_(arange(8) > 5, 3.3);
    expect_values(x, {0, 0, 0, 0, 0, 0, round_to(t, 3.3f), round_to(t, 3.3f)});
    Tensor c = zeros({8}, t);
    c.copy_(arange(8).to(kFloat64) / 3.0);
    expect_values(c, [&] {
      std::vector<double> v;
      for (int i = 0; i < 8; ++i) v.push_back(round_to(t, float(double(i) / 3.0)));
      return v;
    }());
  }
}

TEST(ReducedFloat, ReductionsAccumulateInFloat32) {
  for (DType t : kReduced) {
    Tensor x = make({4, 300}, t, [](int64_t i) { return std::cos(double(i) * 0.1); });
    std::vector<double> v = values(x);
    std::vector<double> rows(4, 0), maxes(4, -INFINITY);
    for (size_t k = 0; k < v.size(); ++k) rows[k / 300] += v[k], maxes[k / 300] = std::max(maxes[k / 300], v[k]);
    Tensor s = sum(x, {1});
    EXPECT_EQ(s.dtype(), t);
    // A float32 sum rounded once is within half an ulp of 16 bits of the exact sum
    // (a 16-bit accumulator would drift by whole units over 300 terms).
    std::vector<double> sv = values(s);
    for (size_t r = 0; r < 4; ++r)
      EXPECT_NEAR(sv[r], rows[r], std::fabs(rows[r]) * (t == kFloat16 ? 1e-3 : 8e-3) + 1e-2) << name(t) << " row " << r;
    expect_values(amax(x, {1}), maxes, 0, 0, "amax");
    EXPECT_EQ(mean(x).dtype(), t);
    EXPECT_EQ(sum(x, kFloat32).dtype(), kFloat32);
    EXPECT_NEAR(values(sum(x, kFloat32))[0], rows[0] + rows[1] + rows[2] + rows[3], 1e-3);
    Tensor sm = softmax(x, 1);
    EXPECT_EQ(sm.dtype(), t);
    EXPECT_TRUE(same_values(softmax(x.to(kFloat32), 1, t), sm)) << "softmax(dtype=" << name(t) << ") converts first";
    EXPECT_TRUE(same_values(sm, softmax(x.to(kFloat32), 1).to(t)));
    Tensor ln = layer_norm(x, {300});
    EXPECT_TRUE(same_values(ln, layer_norm(x.to(kFloat32), {300}).to(t)));
    EXPECT_EQ(values(argmax(x, 1)), values(argmax(x.to(kFloat32), 1)));
    // A 16-bit dtype argument converts the input first, as torch's: float32 values
    // rounded to t, summed in float32, rounded.
    Tensor xf = x.to(kFloat32) * 1.001;
    std::vector<double> xr = values(xf.to(t)), rrows(4, 0);
    for (size_t k = 0; k < xr.size(); ++k) rrows[k / 300] += xr[k];
    Tensor sd = sum(xf, {1}, false, t);
    EXPECT_EQ(sd.dtype(), t);
    for (size_t r = 0; r < 4; ++r)
      EXPECT_NEAR(values(sd)[r], rrows[r], std::fabs(rrows[r]) * (t == kFloat16 ? 1e-3 : 8e-3) + 1e-2) << name(t);
    Tensor cs = cumsum(xf, 1, t);
    EXPECT_EQ(cs.dtype(), t);
    EXPECT_EQ(values(cs)[0], xr[0]);
    EXPECT_EQ(values(mean(arange(4), t))[0], 1.5);
    EXPECT_EQ(values(prod(full({3}, 2.0), t))[0], 8);
  }
}

// Contractions: a bf16 matmul is the float32 product of the widened operands, rounded.
TEST(ReducedFloat, ContractionsAgainstLoops) {
  for (DType t : kReduced) {
    Tensor a = make({5, 7}, t, [](int64_t i) { return std::sin(double(i)); });
    Tensor b = make({7, 3}, t, [](int64_t i) { return std::cos(double(i) * 0.7); });
    Tensor bias = make({3}, t, [](int64_t i) { return double(i) - 1; });
    std::vector<double> av = values(a), bv = values(b), biasv = values(bias);
    std::vector<double> want(15), want_lin(15);
    for (int i = 0; i < 5; ++i)
      for (int j = 0; j < 3; ++j) {
        double acc = 0;
        for (int k = 0; k < 7; ++k) acc += av[size_t(i * 7 + k)] * bv[size_t(k * 3 + j)];
        want[size_t(i * 3 + j)] = acc;
        want_lin[size_t(i * 3 + j)] = acc + biasv[size_t(j)];
      }
    Tensor m = matmul(a, b);
    EXPECT_EQ(m.dtype(), t);
    const double tol = t == kFloat16 ? 1e-3 : 8e-3;
    expect_values(m, want, tol, 1e-3, std::string(name(t)) + " matmul");
    expect_values(linear(a, b.t(), bias), want_lin, tol, 1e-2, std::string(name(t)) + " linear");
    Tensor img = make({1, 2, 5, 5}, t, [](int64_t i) { return std::sin(double(i) * 0.3); });
    Tensor w = make({3, 2, 3, 3}, t, [](int64_t i) { return std::cos(double(i)); });
    Tensor c = conv2d(img, w);
    EXPECT_EQ(c.dtype(), t);
    EXPECT_TRUE(same_values(c, conv2d(img.to(kFloat32), w.to(kFloat32)).to(t)));
  }
}

TEST(ReducedFloat, FactoriesPrintingItemAndErrors) {
  for (DType t : kReduced) {
    EXPECT_EQ(zeros({2}, t).dtype(), t);
    expect_values(ones({2}, t), {1, 1});
    expect_values(full({2}, 0.1, t), {round_to(t, 0.1f), round_to(t, 0.1f)});
    expect_values(arange(0, 3, 1, t), {0, 1, 2});
    expect_values(linspace(0, 1, 3, t), {0, 0.5, 1});
    expect_values(eye(2, t), {1, 0, 0, 1});
    Tensor r = randn({2000}, t);
    EXPECT_EQ(r.dtype(), t);
    EXPECT_NEAR(values(mean(r.to(kFloat32)))[0], 0, 0.1);
    EXPECT_NEAR(full({}, 2.5, t).item().toDouble(), 2.5, 0);
    EXPECT_EQ(full({}, 0.1, t).item<float>(), round_to(t, 0.1f));
    // The eager-only ops with value-dependent shapes read 16-bit values too.
    Tensor v = make({5}, t, [](int64_t i) { return i % 2 ? 0.0 : (i == 4 ? double(NAN) : 0.5 * double(i)); });
    expect_values(nonzero(v), {2, 4}); // NaN is nonzero, as in torch
    Tensor sel = masked_select(v, arange(5) >= 2);
    EXPECT_EQ(sel.dtype(), t);
    EXPECT_EQ(values(sel)[0], 1.0);
    EXPECT_TRUE(std::isnan(values(sel)[2]));
  }
  expect_error([&] { full({2}, 70000, kHalf); }, "full: value 70000 cannot be converted to type float16 without overflow");
  EXPECT_EQ(values(full({1}, 70000, kBFloat16))[0], round_to(kBFloat16, 70000.0f));
  std::ostringstream os;
  os << make({3}, kBFloat16, [](int64_t i) { return double(i) + 0.5; }) << full({1}, 2, kHalf);
  EXPECT_NE(os.str().find("CPUBFloat16Type{3}"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("2.5000"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("CPUHalfType{1}"), std::string::npos) << os.str();
  // Bad input names the op and the dtypes, as with float32.
  expect_error([&] { matmul(ones({2, 3}, kBFloat16), ones({4, 2}, kBFloat16)); }, "matmul");
  expect_error([&] { ones({2, 3}, kHalf) + ones({4}, kHalf); }, "add");
  expect_error([&] { ones({2}, kInt64).add_(ones({2}, kBFloat16)); }, "can't be cast to the desired output type int64");
}

TEST(ReducedFloat, IrAndSafetensorsRoundTrip) {
  auto g = trace(
      [](const std::vector<Tensor> &in) {
        return std::vector<Tensor>{in[0] * full({2}, 0.1, kBFloat16), in[1] + full({2}, -3.5, kHalf)};
      },
      {zeros({2}, kBFloat16), zeros({2}, kHalf)});
  const std::string text = ir::print(*g);
  EXPECT_NE(text.find("bf16[2]"), std::string::npos) << text;
  EXPECT_NE(text.find("f16[2]"), std::string::npos) << text;
  EXPECT_EQ(ir::print(*ir::parse(text)), text);
  auto c = ir::parse("graph @g(%x: bf16[1]) consts(%c: bf16[1] = [0.1]) {\n  %y = mul(%x, %c) : bf16[1]\n  return %y\n}\n");
  EXPECT_NE(ir::print(*c).find("0.100097656"), std::string::npos) << ir::print(*c); // 0.1 rounded to bf16

  const std::string path = ::testing::TempDir() + "reduced.safetensors";
  Tensor a = specials(kHalf, 40, 1), b = specials(kBFloat16, 30, 2);
  save_safetensors(path, {{"a", a}, {"b", b}});
  auto back = load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.size(), 2u);
  EXPECT_TRUE(same_values(back["a"], a));
  EXPECT_TRUE(same_values(back["b"], b));
}

// Compiled: the upcast pass turns each 16-bit op into casts around the float32 op,
// so compiled results equal eager's: pointwise ones bit for bit, those through
// float32 sums (matmul, layer_norm, softmax) within an ulp or two (within_ulps).
TEST(ReducedFloat, CompiledEqualsEager) {
  for (DType t : kReduced) {
    Tensor w = kiln::testing::rnd({16, 32}, 1).to(t), bias = kiln::testing::rnd({16}, 2).to(t);
    Tensor gamma = kiln::testing::rnd({16}, 3, kFloat32, 0.5, 1.5).to(t);
    TracedFunction fn = [=](const std::vector<Tensor> &in) {
      Tensor h = gelu(linear(in[0], w, bias), "tanh");
      Tensor n = layer_norm(h + in[0].narrow(1, 0, 16), {16}, gamma, Tensor());
      Tensor att = softmax(matmul(n, n.transpose(0, 1)) * 0.25, -1);
      Tensor mixed = n.to(kFloat32) * 2 + in[1]; // 16-bit meets float32
      return std::vector<Tensor>{att, sum(n * n, {1}), mixed, exp(in[2]) + in[2].abs() * 3};
    };
    const std::vector<Tensor> in = {kiln::testing::rnd({8, 32}, 4).to(t), kiln::testing::rnd({8, 16}, 5),
                                    specials(t, 50, 6)};
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    const std::vector<Tensor> want = fn(kiln::testing::copies(in));
    for (int call = 0; call < 2; ++call) {
      std::vector<Tensor> got = f(kiln::testing::copies(in));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(ewt::within_ulps(got[i], want[i], 4)) << name(t) << " output " << i;
      EXPECT_TRUE(same_values(got[3], want[3])) << name(t) << " pointwise output";
    }
    EXPECT_EQ(want[0].dtype(), t);
    EXPECT_EQ(want[2].dtype(), kFloat32);
  }
}

// The pass by itself: a bf16 op becomes casts around the float32 op; views and
// conversions keep their dtype.
TEST(ReducedFloat, UpcastPassRewritesOpsNotViews) {
  auto g = trace(
      [](const std::vector<Tensor> &in) {
        return std::vector<Tensor>{exp(in[0].transpose(0, 1)), in[0].to(kFloat32)};
      },
      {zeros({2, 3}, kBFloat16)});
  passes::run_pipeline(*g, "upcast,dce");
  const std::string text = ir::print(*g);
  EXPECT_NE(text.find("transpose(%x)"), std::string::npos) << "the view stays on bf16\n" << text;
    EXPECT_NE(text.find("{dtype = f32} : f32[3, 2]"), std::string::npos) << "exp reads a float32 copy\n" << text;
  EXPECT_NE(text.find("{dtype = bf16} : bf16[3, 2]"), std::string::npos) << "and its result is rounded back\n" << text;
}

// A captured 16-bit weight of a large linear is converted to float32 once per
// specialization (the conversion reads only the weight: frontend/param_fold.h) and
// that float32 copy is packed once for kiln's GEMM, as a float32 weight is; an
// in-place update of the weight converts and packs again before the next call.
TEST(ReducedFloat, CapturedWeightsConvertOnceAndRefreshAfterAnUpdate) {
  auto model = [](DType t) {
    Tensor w1 = (kiln::testing::rnd({1376, 512}, 11) * 0.05).to(t);
    Tensor w2 = (kiln::testing::rnd({512, 1376}, 12) * 0.05).to(t);
    TracedFunction fn = [=](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{linear(gelu(linear(in[0], w1)), w2)};
    };
    return std::make_pair(fn, w1);
  };
  auto [f32_fn, f32_w] = model(kFloat32);
  CompiledFunction f32 = compile(f32_fn);
  const Tensor x32 = kiln::testing::rnd({64, 512}, 13);
  f32({x32});
  const int64_t f32_packed = f32.stats().packed_weight_bytes, f32_kernels = f32.kernels_per_call({x32});
  for (DType t : kReduced) {
    auto [fn, w1] = model(t);
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    const Tensor x = x32.to(t);
    for (int step = 0; step < 2; ++step) {
      const std::vector<Tensor> want = fn({x}), got = f({x});
      // float32's GEMM sums in another order when compiled, which moves a 16-bit
      // result by an ulp of the largest result where its sum nearly cancels.
      const double ulp = t == kFloat16 ? 0x1p-10 : 0x1p-7, largest = want[0].abs().max().to(kFloat64).item<double>();
      ewt::expect_values(got[0], values(want[0]), 2 * ulp, 2 * ulp * largest, std::string(name(t)) + " step " + std::to_string(step));
      w1.mul_(-2); // the converted and packed copies are stale now
    }
    // Per call: the input's conversion, as many other kernels as float32 runs, and
    // the weights packed as float32's (4 bytes per element, whatever t's size).
    EXPECT_EQ(f.kernels_per_call({x}), f32_kernels + 1) << name(t);
    EXPECT_EQ(f.stats().packed_weight_bytes, f32_packed) << name(t);
    EXPECT_GT(f32_packed, 0) << "the float32 model packs its weights";
  }
}

// The casts fuse: a 16-bit elementwise chain, and a reduction over one, each become
// one JIT kernel that reads and writes the 16-bit values itself (no eager step, no
// float32 copy), with eager's bits (the reductions: within an ulp, see within_ulps).
TEST(ReducedFloat, KernelsReadAndWrite16BitValues) {
  for (DType t : kReduced) {
    Tensor w = kiln::testing::rnd({64}, 7).to(t);
    TracedFunction chain = [=](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{gelu(in[0] * w + 0.5, "tanh") - in[0].narrow(1, 0, 1) * 0.25};
    };
    TracedFunction reduce = [](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{sum(in[0] * in[0], {1}), softmax(in[0], -1)};
    };
    for (int which = 0; which < 2; ++which) {
      const TracedFunction &fn = which == 0 ? chain : reduce;
      const bool pointwise = which == 0;
      const std::vector<Tensor> in = {specials(t, 48 * 64, 9).view({48, 64})};
      CompileOptions o;
      o.fallback = Fallback::Off;
      CompiledFunction f = compile(fn, o);
      std::shared_ptr<const ir::Graph> g = f.graph_for(in);
      ASSERT_TRUE(g);
      const std::string text = ir::print(*g);
      std::vector<Tensor> want = fn(kiln::testing::copies(in)), got = f(kiln::testing::copies(in));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].dtype(), t);
        EXPECT_TRUE(pointwise ? same_values(got[i], want[i]) : ewt::within_ulps(got[i], want[i], 1))
            << name(t) << " output " << i << "\n" << text;
      }
      // Every op is inside a fusion group: no `to` (or other op) runs as a step of its own.
      for (const ir::Node *n : g->nodes())
        EXPECT_TRUE(n->kind() != ir::Node::Kind::Op || op_kind(n->op()) == OpKind::View)
            << name(t) << ": " << n->mnemonic() << " is a step of its own\n" << text;
    }
  }
}
