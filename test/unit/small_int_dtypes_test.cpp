// The dtypes uint8, int8 and int16 (runtime/dtype.h): names, torch's promotion lattice,
// conversions (floats through int64, as torch's), arithmetic that wraps, reductions that
// widen to int64, factories and their range checks, printing, the IR's printer and
// parser, safetensors, and compiled functions (codegen runs their ops eagerly; a uint8
// image converted to float32 meets the fused kernels at the group boundary). Expected
// values come from loops over int64 written here, wrapped to the type by hand.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
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

using namespace kiln;
using namespace ewt;

namespace {

const DType kSmall[] = {kUInt8, kInt8, kInt16};

// v wrapped into dt's range (two's complement), as the hardware and torch do.
double wrap(int64_t v, DType dt) {
  const uint64_t u = uint64_t(v);
  if (dt == kUInt8) return double(u & 0xff);
  if (dt == kInt8) return double(int64_t(u & 0xff) - ((u & 0x80) ? 256 : 0));
  if (dt == kInt16) return double(int64_t(u & 0xffff) - ((u & 0x8000) ? 65536 : 0));
  ADD_FAILURE() << "wrap: not a small integer dtype";
  return 0;
}

// Integers spread over (and past) each type's range.
double gen(int64_t i) { return double((i * 73 + 11) % 401) - 200.0; }

} // namespace

TEST(SmallIntDTypes, NamesSizesAndTorchPromotion) {
  EXPECT_EQ(name(kUInt8), "uint8");
  EXPECT_EQ(name(kInt8), "int8");
  EXPECT_EQ(name(kInt16), "int16");
  EXPECT_EQ(itemsize(kUInt8), 1u);
  EXPECT_EQ(itemsize(kInt8), 1u);
  EXPECT_EQ(itemsize(kInt16), 2u);
  EXPECT_EQ(kByte, kUInt8);
  EXPECT_EQ(kChar, kInt8);
  EXPECT_EQ(kShort, kInt16);
  for (DType t : kSmall) {
    EXPECT_TRUE(is_integral(t));
    EXPECT_FALSE(is_floating(t));
  }
  // torch.promote_types, from torch's documented table.
  struct P {
    DType a, b, want;
  };
  const P table[] = {
      {kUInt8, kInt8, kInt16},    {kUInt8, kInt16, kInt16},   {kUInt8, kInt32, kInt32},   {kUInt8, kInt64, kInt64},
      {kInt8, kInt16, kInt16},    {kInt8, kInt32, kInt32},    {kInt16, kInt64, kInt64},   {kBool, kUInt8, kUInt8},
      {kBool, kInt8, kInt8},      {kUInt8, kFloat32, kFloat32}, {kInt16, kFloat64, kFloat64}, {kInt8, kInt8, kInt8},
      {kUInt8, kUInt8, kUInt8},   {kInt16, kInt32, kInt32},
  };
  for (const P &p : table) {
    EXPECT_EQ(promote_types(p.a, p.b), p.want) << p.a << " " << p.b;
    EXPECT_EQ(promote_types(p.b, p.a), p.want) << p.b << " " << p.a;
  }
  // result_type: a Scalar or 0-dim tensor of the same category does not widen a tensor.
  Tensor u = zeros({3}, kUInt8), c = zeros({3}, kInt8);
  EXPECT_EQ((u + 1).dtype(), kUInt8);
  EXPECT_EQ((u + 1.5).dtype(), kFloat32);
  EXPECT_EQ((u + full({}, 7, kInt64)).dtype(), kUInt8);
  EXPECT_EQ((u + c).dtype(), kInt16);
  EXPECT_EQ((u + zeros({3}, kInt32)).dtype(), kInt32);
  EXPECT_EQ((c * zeros({3}, kBool)).dtype(), kInt8);
  EXPECT_EQ(div(u, u + 1).dtype(), kFloat32); // true division
  EXPECT_EQ(sqrt(c).dtype(), kFloat32);
}

TEST(SmallIntDTypes, ConversionsAsTorch) {
  // Floats go through int64 and wrap: -1.0 -> 255, 300.7 -> 44 (uint8), 200.0 -> -56 (int8).
  Tensor f = make({6}, kFloat32, [](int64_t i) { return std::vector<double>{-1.0, 300.7, 3.9, -3.9, 200.0, 65537.0}[size_t(i)]; });
  for (DType t : kSmall) {
    std::vector<double> want;
    for (double v : values(f)) want.push_back(wrap(int64_t(v), t)); // C's truncation, then the wrap
    expect_values(f.to(t), want, 0, 0, std::string("float32 -> ") + std::string(name(t)));
  }
  // Integers wrap; bool gives 0/1; back to int64 and float keeps the values.
  Tensor i = make({5, 4}, kInt64, gen);
  for (DType t : kSmall) {
    Tensor s = i.to(t);
    EXPECT_EQ(s.dtype(), t);
    std::vector<double> want;
    for (double v : values(i)) want.push_back(wrap(int64_t(v), t));
    expect_values(s, want, 0, 0, name(t).data());
    expect_values(s.to(kInt64), want, 0, 0, "back to int64");
    expect_values(s.to(kFloat64), want, 0, 0, "to float64");
    expect_values(s.t().to(kInt32), values(s.t()), 0, 0, "strided to int32");
    expect_values(gt(s, 0).to(t), [&] {
      std::vector<double> b;
      for (double v : want) b.push_back(v > 0);
      return b;
    }(), 0, 0, "bool -> small");
  }
}

TEST(SmallIntDTypes, ArithmeticWrapsAgainstInt64Loops) {
  for (DType t : kSmall)
    for (Layout l : {Layout::Contiguous, Layout::Transposed}) {
      Tensor a = make_layout({6, 5}, t, gen, l);
      Tensor b = make_layout({6, 5}, t, [](int64_t i) { return gen(i * 7 + 3); }, l);
      const std::vector<double> va = values(a), vb = values(b);
      auto ref = [&](auto f) {
        std::vector<double> w;
        for (size_t k = 0; k < va.size(); ++k) w.push_back(wrap(f(int64_t(va[k]), int64_t(vb[k])), t));
        return w;
      };
      const std::string what = std::string(name(t)) + " " + layout_name(l);
      expect_values(a + b, ref([](int64_t x, int64_t y) { return x + y; }), 0, 0, what + " add");
      expect_values(a - b, ref([](int64_t x, int64_t y) { return x - y; }), 0, 0, what + " sub");
      expect_values(a * b, ref([](int64_t x, int64_t y) { return x * y; }), 0, 0, what + " mul");
      expect_values(a * 300, ref([](int64_t x, int64_t) { return x * 300; }), 0, 0, what + " mul scalar");
      expect_values(neg(a), ref([](int64_t x, int64_t) { return -x; }), 0, 0, what + " neg");
      expect_values(square(a), ref([](int64_t x, int64_t) { return x * x; }), 0, 0, what + " square");
      expect_values(maximum(a, b), ref([](int64_t x, int64_t y) { return std::max(x, y); }), 0, 0, what + " maximum");
      // Comparisons give bool; true division gives float32 of the exact quotient.
      std::vector<double> lt_want, div_want;
      for (size_t k = 0; k < va.size(); ++k) {
        lt_want.push_back(va[k] < vb[k]);
        div_want.push_back(vb[k] == 0 ? (va[k] == 0 ? NAN : va[k] / 0.0) : double(float(va[k] / vb[k])));
      }
      Tensor c = lt(a, b);
      EXPECT_EQ(c.dtype(), kBool);
      expect_values(c, lt_want, 0, 0, what + " lt");
      expect_values(div(a, b), div_want, 1e-7, 0, what + " div");
      a.add_(b); // in place keeps the dtype
      EXPECT_EQ(a.dtype(), t);
      expect_values(a, ref([](int64_t x, int64_t y) { return x + y; }), 0, 0, what + " add_");
    }
  // The limits: int16 -32768 * -1 wraps to itself, uint8 255 + 1 is 0, abs(int8 -128) is -128.
  EXPECT_EQ(values(full({1}, -32768, kInt16) * -1)[0], -32768);
  EXPECT_EQ(values(full({1}, 255, kUInt8) + 1)[0], 0);
  EXPECT_EQ(values(abs(full({1}, -128, kInt8)))[0], -128);
  EXPECT_EQ(values(full({1}, 200, kUInt8) * full({1}, 200, kUInt8))[0], double((200 * 200) % 256));
  expect_error([&] { div(full({2}, 5, kInt8), zeros({2}, kInt8), "floor"); }, "division by zero");
  expect_values(div(full({1}, -7, kInt8), full({1}, 2, kInt8), "floor"), {-4});
  expect_values(div(full({1}, 250, kUInt8), full({1}, 7, kUInt8), "trunc"), {35});
}

TEST(SmallIntDTypes, ReductionsWidenSumsAndKeepExtrema) {
  for (DType t : kSmall) {
    Tensor x = make({7, 9}, t, gen);
    std::vector<double> v = values(x);
    double total = 0, best = v[0], least = v[0];
    for (double e : v) total += e, best = std::max(best, e), least = std::min(least, e);
    Tensor s = sum(x);
    EXPECT_EQ(s.dtype(), kInt64) << t; // torch: integer sums are int64, so they do not wrap
    EXPECT_EQ(values(s)[0], total) << t;
    EXPECT_EQ(max(x).dtype(), t);
    EXPECT_EQ(values(max(x))[0], best) << t;
    EXPECT_EQ(values(min(x))[0], least) << t;
    std::vector<double> rows(7, 0);
    for (size_t k = 0; k < v.size(); ++k) rows[k / 9] += v[k];
    expect_values(sum(x, {1}), rows, 0, 0, std::string(name(t)) + " sum(dim=1)");
    expect_error([&] { mean(x); }, "mean: could not infer output dtype");
    expect_values(mean(x.to(kFloat32), {1}), [&] {
      std::vector<double> m;
      for (double r : rows) m.push_back(r / 9);
      return m;
    }(), 1e-6, 0, "mean of the float32 copy");
    Tensor cs = cumsum(x, 1);
    EXPECT_EQ(cs.dtype(), kInt64) << t;
    EXPECT_EQ(values(cs)[8], rows[0]) << t;
    EXPECT_EQ(values(argmax(x.flatten()))[0], double(std::max_element(v.begin(), v.end()) - v.begin())) << t;
  }
}

TEST(SmallIntDTypes, FactoriesAndRangeChecks) {
  EXPECT_EQ(zeros({2, 3}, kUInt8).dtype(), kUInt8);
  expect_values(ones({2}, kInt8), {1, 1});
  expect_values(full({2}, 255, kUInt8), {255, 255});
  expect_values(full({2}, -1, kUInt8), {255, 255});    // torch lets negatives wrap into unsigned types
  expect_values(full({2}, -2.0, kUInt8), {254, 254});
  expect_values(arange(0, 10, 3, kInt16), {0, 3, 6, 9});
  expect_error([&] { full({2}, 256, kUInt8); }, "full: value 256 cannot be converted to type uint8 without overflow");
  expect_error([&] { full({2}, -256, kUInt8); }, "cannot be converted to type uint8");
  expect_error([&] { full({2}, 128, kInt8); }, "cannot be converted to type int8");
  expect_error([&] { full({2}, -129.0, kInt8); }, "cannot be converted to type int8");
  expect_error([&] { full({2}, 40000, kInt16); }, "cannot be converted to type int16");
  expect_values(full({1}, -32768, kInt16), {-32768});
  Tensor r = randint(0, 256, {1000}, kUInt8);
  EXPECT_EQ(r.dtype(), kUInt8);
  std::vector<double> rv = values(r);
  EXPECT_GE(*std::min_element(rv.begin(), rv.end()), 0);
  EXPECT_LE(*std::max_element(rv.begin(), rv.end()), 255);
  EXPECT_GT(*std::max_element(rv.begin(), rv.end()), 200); // not stuck near 0
  Tensor m = zeros({4}, kInt8);
  m.fill_(-7);
  expect_values(m, {-7, -7, -7, -7});
  expect_error([&] { m.fill_(1000); }, "cannot be converted to type int8");
  expect_values(zeros({3}, kInt16).masked_fill(tensor({1, 0, 1}).to(kBool), 12), {12, 0, 12});
}

TEST(SmallIntDTypes, PrintingIrAndSafetensors) {
  std::ostringstream os;
  os << make({3}, kUInt8, [](int64_t i) { return double(i * 100); });
  EXPECT_NE(os.str().find("0"), std::string::npos);
  EXPECT_NE(os.str().find("200"), std::string::npos) << os.str(); // a number, not a character
  EXPECT_NE(os.str().find("CPUByteType{3}"), std::string::npos) << os.str();
  std::ostringstream oc;
  oc << full({1}, -5, kInt8) << full({1}, 7, kInt16);
  EXPECT_NE(oc.str().find("-5"), std::string::npos) << oc.str();
  EXPECT_NE(oc.str().find("CPUCharType"), std::string::npos);
  EXPECT_NE(oc.str().find("CPUShortType"), std::string::npos);

  // The IR: u8 / i8 / i16 types and constants print and parse back.
  auto g = trace(
      [](const std::vector<Tensor> &in) {
        return std::vector<Tensor>{in[0].to(kFloat32) * 2.0, in[1] + full({2}, -3, kInt8), in[2] * 2};
      },
      {zeros({2}, kUInt8), zeros({2}, kInt8), zeros({2}, kInt16)});
  const std::string text = ir::print(*g);
  EXPECT_NE(text.find("u8[2]"), std::string::npos) << text;
  EXPECT_NE(text.find("i8[2]"), std::string::npos) << text;
  EXPECT_NE(text.find("i16[2]"), std::string::npos) << text;
  EXPECT_EQ(ir::print(*ir::parse(text)), text);
  EXPECT_THROW(ir::parse("graph @g(%x: i8[1]) {\n  %c = const i8 300\n  return %c\n}\n"), Error);

  // safetensors round trip, as U8 / I8 / I16.
  const std::string path = ::testing::TempDir() + "small_ints.safetensors";
  Tensor a = make({2, 3}, kUInt8, [](int64_t i) { return double(i * 50); });
  Tensor b = make({4}, kInt8, [](int64_t i) { return double(i * 60 - 128); });
  Tensor c = make({2, 2}, kInt16, [](int64_t i) { return double(i * 20000 - 32768); });
  save_safetensors(path, {{"a", a}, {"b", b}, {"c", c}});
  auto back = load_safetensors(path);
  std::remove(path.c_str());
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(back["a"].dtype(), kUInt8);
  EXPECT_EQ(back["b"].dtype(), kInt8);
  EXPECT_EQ(back["c"].dtype(), kInt16);
  expect_values(back["a"], values(a));
  expect_values(back["b"], values(b));
  expect_values(back["c"], values(c));
}

// A preprocessing model as users write it: a uint8 image normalized to float32, then
// fused float ops; an int8 path and an int16 sum. Compiled equals eager exactly.
TEST(SmallIntDTypes, CompiledEqualsEager) {
  Tensor mean_ = kiln::testing::rnd({3, 1, 1}, 5, kFloat32, 0.3, 0.6);
  TracedFunction fn = [=](const std::vector<Tensor> &in) {
    Tensor img = in[0].to(kFloat32) / 255.0;
    Tensor y = relu((img - mean_) * 4.0).sum(0);
    Tensor q = in[1] * 3 + in[1]; // int8, wraps
    Tensor s = sum(in[2], {1});   // int16 -> int64
    Tensor mixed = in[0].select(0, 0).slice(0, 0, 4).slice(1, 0, 6) + in[1]; // uint8 + int8 -> int16
    return std::vector<Tensor>{y, q, s, mixed, maximum(in[0], flip(in[0], {2}))};
  };
  const std::vector<Tensor> in = {randint(0, 256, {3, 8, 8}, kUInt8), make({4, 6}, kInt8, gen),
                                  make({5, 7}, kInt16, [](int64_t i) { return gen(i) * 150; })};
  kiln::testing::expect_compiled_equals_eager(fn, in, 0);
}
