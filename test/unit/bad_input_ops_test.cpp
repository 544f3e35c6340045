// Bad input to the eager entry points (factories and ops): every class of bad
// argument either throws a kiln::Error whose message names the op and the
// argument or shape at fault, or computes the result torch would (checked
// against naive loops). Classes: wrong shapes and dtypes, negative and huge
// sizes, out-of-range dims and indices, NaN/Inf values, zero-size tensors,
// overlapping in-place writes, and results too large for memory.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "expect_error.h"

using namespace kiln;
using kiln::testing::expect_error;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();


std::vector<double> values(const Tensor &t) {
  Tensor c = t.to(kFloat64).contiguous();
  const double *p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Equal as torch prints them: NaN matches NaN, infinities match by sign.
void expect_values(const Tensor &t, const std::vector<double> &want, double tol = 1e-6) {
  std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "element " << i << " = " << got[i] << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(got[i], want[i]) << "element " << i;
    } else {
      EXPECT_NEAR(got[i], want[i], tol * (1 + std::fabs(want[i]))) << "element " << i;
    }
  }
}

#define EXPECT_VALUES(...)                                                       \
  do {                                                                         \
    SCOPED_TRACE(#__VA_ARGS__);                                                \
    expect_values(__VA_ARGS__);                                                \
  } while (0)

Tensor f64(std::vector<double> v) { return tensor(v, kFloat64); }
Tensor f32(std::vector<float> v) { return tensor(v); }

} // namespace

// ---- factories: negative, huge and overflowing sizes

TEST(BadInputFactories, NegativeSizes) {
  expect_error([] { empty({2, -1}); }, {"empty", "negative dimension -1", "[2, -1]"});
  expect_error([] { zeros({-3}); }, {"negative dimension -3"});
  expect_error([] { ones({-3}); }, {"negative dimension -3"});
  expect_error([] { full({-1, 2}, 1.0); }, {"negative dimension -1"});
  expect_error([] { randn({-2}); }, {"negative dimension -2"});
  expect_error([] { rand({-2}); }, {"negative dimension -2"});
  expect_error([] { randint(0, 5, {-2}); }, {"negative dimension -2"});
  expect_error([] { eye(-1); }, {"eye", "-1"});
  expect_error([] { eye(2, -4); }, {"eye", "-4"});
  expect_error([] { linspace(0, 1, -1); }, {"linspace", "-1"});
  float buf[4] = {};
  expect_error([&] { from_blob(buf, {-1}); }, {"from_blob", "-1"});
}

TEST(BadInputFactories, SizesWhoseProductOverflowsInt64) {
  expect_error([] { empty({int64_t(1) << 40, int64_t(1) << 40}); }, {"empty", "too many elements"});
  expect_error([] { zeros({int64_t(1) << 62, 8}); }, {"too many elements"});
  expect_error([] { ones({std::numeric_limits<int64_t>::max(), 2}); }, {"too many elements"});
  expect_error([] { randn({int64_t(1) << 32, int64_t(1) << 32}); }, {"too many elements"});
  expect_error([] { full({int64_t(1) << 31, int64_t(1) << 31, 4}, 2.0); }, {"too many elements"});
  // A zero anywhere makes the product 0, however large the other sizes.
  EXPECT_EQ(empty({0, std::numeric_limits<int64_t>::max()}).numel(), 0);
}

TEST(BadInputFactories, TensorTooLargeForMemoryThrowsKilnError) {
  // 2^60 bytes: representable, but no machine has it.
  expect_error([] { empty({int64_t(1) << 40, int64_t(1) << 20}); }, {"empty", "too large"});
  expect_error([] { zeros({int64_t(1) << 58}, kFloat64); }, {"too large"});
  // 4 TiB: passes the size checks, so the allocator itself must fail cleanly.
  expect_error([] { empty({int64_t(1) << 40}, kFloat32); }, {"4398046511104"});
  expect_error([] { ones({int64_t(1) << 20, int64_t(1) << 20}); }, {"cannot allocate"});
  // The process is fine afterwards.
  EXPECT_VALUES(ones({3}), {1, 1, 1});
}

TEST(BadInputFactories, ArangeBadSteps) {
  expect_error([] { arange(0, 10, 0); }, {"arange", "step"});
  expect_error([] { arange(0, 10, -1); }, {"arange"});
  expect_error([] { arange(0.0, kInf); }, {"arange", "inf"});
  expect_error([] { arange(0.0, kNaN); }, {"arange", "nan"});
  expect_error([] { arange(0.0, 1e300, 1e-300); }, {"arange"});
  expect_error([] { arange(int64_t(0), std::numeric_limits<int64_t>::max(), 1); }, {"arange"});
  EXPECT_EQ(arange(5, 5).numel(), 0);
}

TEST(BadInputFactories, RandintEmptyRange) {
  expect_error([] { randint(5, 5, {3}); }, {"randint", "5"});
  expect_error([] { randint(0, {3}); }, {"randint"});
}

TEST(BadInputFactories, FillValuesThatDoNotFitTheDtype) {
  // torch: "value cannot be converted to type int64_t without overflow"; C++'s
  // conversion is undefined behaviour (x86 gave INT64_MIN).
  expect_error([] { full({2}, 1e30, kInt64); }, {"full", "1e+30", "int64", "overflow"});
  expect_error([] { full({2}, kNaN, kInt64); }, {"full", "nan", "int64"});
  expect_error([] { full({2}, kInf, kInt32); }, {"full", "int32"});
  expect_error([] { full({2}, int64_t(1) << 40, kInt32); }, {"full", "1099511627776", "int32"});
  expect_error([] { full({2}, 1e300, kFloat32); }, {"full", "float32"});
  expect_error([] { zeros({2}, kInt64).fill_(9.3e18); }, {"fill_", "int64"});
  expect_error([] { masked_fill(zeros({2}, kInt64), ones({2}) > 0, -kInf); }, {"masked_fill", "int64"});
  // In range (and inf/NaN for floats, anything for bool) is fine.
  EXPECT_VALUES(full({2}, -9.2e18, kInt64), {-9.2e18, -9.2e18});
  EXPECT_VALUES(full({1}, std::numeric_limits<int64_t>::min()), {-9.223372036854775808e18});
  EXPECT_VALUES(full({2}, kInf, kFloat32), {kInf, kInf});
  EXPECT_VALUES(full({1}, kNaN, kFloat32), {kNaN});
  EXPECT_VALUES(full({1}, 1e300, kFloat64), {1e300});
  EXPECT_VALUES(full({1}, 2.5, kBool), {1});
  EXPECT_VALUES(full({1}, 7.9, kInt32), {7});
}

TEST(BadInputFactories, TensorLiterals) {
  EXPECT_EQ(tensor(std::vector<float>{}).numel(), 0);
  EXPECT_EQ(tensor(std::vector<float>{}).dim(), 1);
  EXPECT_VALUES(tensor({1.0f, float(kNaN), float(kInf)}), {1, kNaN, kInf});
}

// ---- shapes and dtypes

TEST(BadInputOps, WrongShapes) {
  Tensor a = randn({2, 3}), b = randn({4}), m = randn({3, 5}), v = randn({7});
  expect_error([&] { add(a, b); }, {"add", "[2, 3]", "[4]"});
  expect_error([&] { mul(a, b); }, {"mul", "[2, 3]", "[4]"});
  expect_error([&] { where(a > 0, a, b); }, {"where", "[4]"});
  expect_error([&] { mm(a, a); }, {"mm", "2x3 and 2x3"});
  expect_error([&] { matmul(a, v); }, {"matmul", "[7]"});
  expect_error([&] { matmul(randn({}), a); }, {"matmul"});
  expect_error([&] { bmm(a, m); }, {"bmm"});
  expect_error([&] { linear(a, randn({5, 4})); }, {"linear", "[5, 4]"});
  expect_error([&] { linear(a, randn({5, 3}), randn({4})); }, {"linear", "[4]"});
  expect_error([&] { addmm(randn({3}), a, m); }, {"addmm"});
  expect_error([&] { layer_norm(a, {4}); }, {"layer_norm", "[4]"});
  expect_error([&] { layer_norm(a, {3}, randn({4})); }, {"layer_norm", "[4]"});
  expect_error([&] { batch_norm(randn({2, 3, 4}), {}, {}, randn({4}), randn({3})); }, {"batch_norm"});
  expect_error([&] { conv2d(randn({1, 3, 8, 8}), randn({4, 2, 3, 3})); }, {"conv2d"});
  expect_error([&] { conv2d(randn({3, 8}), randn({4, 3, 3, 3})); }, {"conv2d"});
  expect_error([&] { conv2d(randn({1, 3, 2, 2}), randn({4, 3, 3, 3})); }, {"conv2d"});
  expect_error([&] { max_pool2d(randn({8}), {2}); }, {"max_pool2d"});
  expect_error([&] { max_pool2d(randn({1, 1, 2, 2}), {3}); }, {"max_pool2d"});
  expect_error([&] { avg_pool2d(randn({1, 1, 2, 2}), {3}); }, {"avg_pool2d"});
  expect_error([&] { cat({a, randn({2, 4})}, 0); }, {"cat"});
  expect_error([&] { cat({a, randn({2})}, 0); }, {"cat"});
  expect_error([&] { stack({a, randn({3, 2})}); }, {"stack"});
  expect_error([&] { scaled_dot_product_attention(randn({1, 4, 8}), randn({1, 4, 6}), randn({1, 4, 8})); },
               {"scaled_dot_product_attention"});
  expect_error([&] { a.view({4, 2}); }, {"view", "[4, 2]", "6"});
  expect_error([&] { a.view({-1, -1}); }, {"view"});
  expect_error([&] { a.t().view({6}); }, {"view"});
  expect_error([&] { a.reshape({5}); }, {"reshape", "[5]"});
  expect_error([&] { a.expand({4, 3}); }, {"expand", "[4, 3]"});
  expect_error([&] { a.expand({3}); }, {"expand"});
  expect_error([&] { randn({2, 3, 4}).t(); }, {"t"});
  expect_error([&] { masked_fill(a, randn({2, 3}) > 0, 1.0).add_(b); }, {"add_", "[4]"});
  expect_error([&] { masked_fill(a, randn({4}) > 0, 1.0); }, {"masked_fill"});
  Tensor self = randn({3});
  expect_error([&] { self.add_(a); }, {"add_", "[2, 3]"}); // result shape differs from self's
}

TEST(BadInputOps, WrongDtypes) {
  Tensor f = randn({2, 3}), i = randint(0, 5, {2, 3}), bo = f > 0;
  expect_error([&] { mm(f, randn({3, 2}, kFloat64)); }, {"mm", "float64"});
  expect_error([&] { softmax(i, 1); }, {"softmax", "int64"});
  expect_error([&] { layer_norm(i.to(kInt32), {3}); }, {"layer_norm", "int32"});
  expect_error([&] { index_select(f, 0, tensor({0.5f})); }, {"index_select", "float32"});
  expect_error([&] { gather(f, 0, tensor({0.5f})); }, {"gather", "float32"});
  expect_error([&] { embedding(f, tensor({0.5f})); }, {"embedding", "float32"});
  expect_error([&] { masked_fill(f, i, 1.0); }, {"masked_fill", "int64"});
  expect_error([&] { where(i, f, f); }, {"where", "int64"});
  expect_error([&] { neg(bo); }, {"neg", "bool"});
  expect_error([&] { i.add_(f); }, {"add_", "float32", "int64"});
  expect_error([&] { bo.mul_(2); }, {"mul_"});
  expect_error([&] { conv2d(randn({1, 3, 8, 8}), randn({4, 3, 3, 3}, kFloat64)); }, {"conv2d"});
  expect_error([&] { Tensor u; neg(u); }, {"neg", "undefined"});
  expect_error([&] { Tensor u; add(f, u); }, {"add", "undefined"});
}

TEST(BadInputOps, OutOfRangeDims) {
  Tensor a = randn({2, 3});
  expect_error([&] { sum(a, {2}); }, {"sum", "dim", "2"});
  expect_error([&] { sum(a, {-3}); }, {"sum", "-3"});
  expect_error([&] { sum(a, {0, 0}); }, {"sum", "0"});
  expect_error([&] { mean(a, {5}); }, {"mean", "5"});
  expect_error([&] { amax(a, {2}); }, {"amax", "2"});
  expect_error([&] { max(a, 2); }, {"max", "2"});
  expect_error([&] { argmax(a, 7); }, {"argmax", "7"});
  expect_error([&] { var(a, {9}); }, {"var", "9"});
  expect_error([&] { prod(a, 3); }, {"prod", "3"});
  expect_error([&] { softmax(a, 2); }, {"softmax", "2"});
  expect_error([&] { log_softmax(a, -3); }, {"log_softmax", "-3"});
  expect_error([&] { a.transpose(0, 2); }, {"transpose", "2"});
  expect_error([&] { a.permute({0, 0}); }, {"permute"});
  expect_error([&] { a.permute({0}); }, {"permute"});
  expect_error([&] { a.permute({0, 2}); }, {"permute", "2"});
  expect_error([&] { a.unsqueeze(4); }, {"unsqueeze", "4"});
  expect_error([&] { a.squeeze(2); }, {"squeeze", "2"});
  expect_error([&] { a.flatten(1, 0); }, {"flatten"});
  expect_error([&] { a.flatten(0, 5); }, {"flatten", "5"});
  expect_error([&] { cat({a, a}, 2); }, {"cat", "2"});
  expect_error([&] { stack({a, a}, 4); }, {"stack", "4"});
  expect_error([&] { a.split(1, 2); }, {"split", "2"});
  expect_error([&] { a.chunk(2, 3); }, {"chunk", "3"});
  expect_error([&] { a.index_select(2, tensor({int64_t(0)})); }, {"index_select", "2"});
  expect_error([&] { a.gather(2, zeros({2, 3}, kInt64)); }, {"gather", "2"});
  expect_error([&] { randn({}).transpose(0, 1); }, {"transpose"});
  expect_error([&] { tril(randn({3})); }, {"tril"});
  expect_error([&] { a.size(2); }, {"size", "2"});
  expect_error([&] { a.stride(-3); }, {"stride", "-3"});
}

TEST(BadInputOps, OutOfRangeIndicesAndSlices) {
  Tensor a = randn({2, 3});
  expect_error([&] { a.select(0, 2); }, {"select", "2"});
  expect_error([&] { a.select(1, -4); }, {"select", "-4"});
  expect_error([&] { a[5]; }, {"5"});
  expect_error([&] { a.narrow(1, 2, 2); }, {"narrow"});
  expect_error([&] { a.narrow(1, -1, 2); }, {"narrow"});
  expect_error([&] { a.narrow(1, 0, -1); }, {"narrow", "-1"});
  expect_error([&] { a.slice(1, 0, 3, 0); }, {"slice", "step"});
  expect_error([&] { a.slice(1, 0, 3, -1); }, {"slice", "step"});
  expect_error([&] { a.index_select(1, tensor({int64_t(3)})); }, {"index_select", "3"});
  expect_error([&] { a.index_select(1, tensor({int64_t(-4)})); }, {"index_select", "-4"});
  expect_error([&] { a.gather(1, tensor({int64_t(0), int64_t(3)}).view({1, 2})); }, {"gather", "3"});
  expect_error([&] { a.gather(1, tensor({int64_t(-1)}).view({1, 1})); }, {"gather", "-1"});
  expect_error([&] { embedding(randn({4, 2}), tensor({int64_t(4)})); }, {"embedding", "4"});
  expect_error([&] { embedding(randn({4, 2}), tensor({int64_t(-1)})); }, {"embedding", "-1"});
  expect_error([&] { a.as_strided({2, 4}, {3, 1}); }, {"as_strided"});
  expect_error([&] { a.as_strided({2}, {1}, 5); }, {"as_strided"});
  expect_error([&] { a.as_strided({2}, {1}, -1); }, {"as_strided", "-1"});
  expect_error([&] { a.as_strided({2}, {-1}); }, {"as_strided", "-1"});
  expect_error([&] { a.as_strided({-2}, {1}); }, {"as_strided", "-2"});
  // Slices past the end clamp as in Python.
  EXPECT_EQ(a.slice(1, 1, 100).size(1), 2);
  EXPECT_EQ(a.slice(1, 100, 200).size(1), 0);
  EXPECT_EQ(a.slice(1, -100, 1).size(1), 1);
}

TEST(BadInputOps, NegativeAndHugeArguments) {
  Tensor a = randn({2, 3}), img = randn({1, 1, 4, 4});
  expect_error([&] { a.split(0); }, {"split", "0"});
  expect_error([&] { a.split(-1); }, {"split", "-1"});
  expect_error([&] { a.split({1, 1}, 1); }, {"split", "[1, 1]"});
  expect_error([&] { a.chunk(0); }, {"chunk", "0"});
  expect_error([&] { a.view({-2, 3}); }, {"view", "-2"});
  expect_error([&] { a.expand({-2, 3}); }, {"expand", "-2"});
  expect_error([&] { max_pool2d(img, {0}); }, {"max_pool2d", "kernel_size"});
  expect_error([&] { max_pool2d(img, {2}, {0}); }, {"max_pool2d", "stride"});
  expect_error([&] { max_pool2d(img, {2}, {1}, {2}); }, {"max_pool2d", "pad"});
  expect_error([&] { max_pool2d(img, {2}, {1}, {-1}); }, {"max_pool2d", "-1"});
  expect_error([&] { max_pool2d(img, {2}, {1}, {0}, {0}); }, {"max_pool2d", "dilation"});
  expect_error([&] { avg_pool2d(img, {2}, {-1}); }, {"avg_pool2d", "stride"});
  expect_error([&] { adaptive_avg_pool2d(img, {-1, 2}); }, {"adaptive_avg_pool2d", "-1"});
  expect_error([&] { conv2d(img, randn({1, 1, 2, 2}), {}, {0}); }, {"conv2d", "stride"});
  expect_error([&] { conv2d(img, randn({1, 1, 2, 2}), {}, {1}, {-1}); }, {"conv2d", "-1"});
  expect_error([&] { conv2d(img, randn({1, 1, 2, 2}), {}, {1}, {0}, {0}); }, {"conv2d", "dilation"});
  expect_error([&] { conv2d(img, randn({1, 1, 2, 2}), {}, {1}, {0}, {1}, 0); }, {"conv2d", "groups"});
  expect_error([&] { conv2d(img, randn({1, 1, 2, 2}), {}, {1}, {0}, {1}, -1); }, {"conv2d", "groups"});
  expect_error([&] { dropout(tensor({1, 2}), 0.5, true); }, {"dropout", "floating"});
  expect_error([&] { dropout(a, 1.5, false); }, {"dropout", "1.5"});
  expect_error([&] { gelu(a, "fast"); }, {"gelu", "fast"});
  expect_error([&] { div(a, a, std::string("ceil")); }, {"div", "ceil"});
  expect_error([&] { set_num_threads(0); }, {"set_num_threads", "0"});
  expect_error([&] { set_num_threads(-3); }, {"set_num_threads", "-3"});
  int threads = get_num_threads();
  expect_error([&] { set_num_threads(100000); }, {"set_num_threads", "100000"});
  EXPECT_EQ(get_num_threads(), threads);
}

TEST(BadInputOps, HugeResultsThrowKilnError) {
  // Views of huge shapes are fine (no memory); materializing them is not.
  Tensor x = randn({1}).expand({int64_t(1) << 30, int64_t(1) << 30});
  EXPECT_EQ(x.numel(), int64_t(1) << 60);
  expect_error([&] { x.contiguous(); }, {"too large"});
  expect_error([&] { x.clone(); }, {"too large"});
  expect_error([&] { x + 1.0; }, {"too large"});
  expect_error([&] { exp(x); }, {"too large"});
  expect_error([&] { x.to(kFloat64); }, {"too large"});
  Tensor col = randn({int64_t(1) << 21, 1}).expand({int64_t(1) << 21, 1});
  Tensor row = randn({1, int64_t(1) << 21});
  expect_error([&] { mm(col, row); }, {"cannot allocate"}); // 16 TiB result
  expect_error([&] { col * row; }, {"cannot allocate"});
  // Overflowing expand / view shapes.
  expect_error([&] { randn({1, 1}).expand({int64_t(1) << 40, int64_t(1) << 40}); }, {"expand", "too many elements"});
  expect_error([&] { randn({0}).view({-1, 0}); }, {"view"});
  EXPECT_VALUES(ones({2}) * 2.0, {2, 2}); // the allocator is fine afterwards
}

// ---- NaN and Inf: propagated as torch does

TEST(BadInputOps, NaNPropagatesThroughReductionsAndComparisons) {
  Tensor x = f64({1, kNaN, 3});
  EXPECT_VALUES(max(x), {kNaN});
  EXPECT_VALUES(min(x), {kNaN});
  EXPECT_VALUES(amax(x), {kNaN});
  EXPECT_VALUES(amin(x), {kNaN});
  EXPECT_VALUES(argmax(x), {1});
  EXPECT_VALUES(argmin(x), {1});
  auto [mv, mi] = max(x.view({1, 3}), 1);
  EXPECT_VALUES(mv, {kNaN});
  EXPECT_VALUES(mi, {1});
  EXPECT_VALUES(sum(x), {kNaN});
  EXPECT_VALUES(mean(x), {kNaN});
  EXPECT_VALUES(prod(x), {kNaN});
  EXPECT_VALUES(var(x), {kNaN});
  EXPECT_VALUES(norm(x), {kNaN});
  EXPECT_VALUES(maximum(x, f64({2, 2, 2})), {2, kNaN, 3});
  EXPECT_VALUES(minimum(f64({2, 2, 2}), x), {1, kNaN, 2});
  EXPECT_VALUES(clamp(x, 0.0, 2.0), {1, kNaN, 2});
  EXPECT_VALUES(relu(x), {1, kNaN, 3});
  EXPECT_VALUES(eq(x, x), {1, 0, 1});
  EXPECT_VALUES(ne(x, x), {0, 1, 0});
  EXPECT_VALUES(lt(x, 2.0), {1, 0, 0});
  // float32 goes through the vectorized kernels.
  Tensor y = f32({1, float(kNaN), 3, -1, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  EXPECT_VALUES(amax(y), {kNaN});
  EXPECT_VALUES(amin(y), {kNaN});
  EXPECT_VALUES(argmax(y), {1});
  EXPECT_VALUES(max(y), {kNaN});
  EXPECT_VALUES(relu(y).slice(0, 0, 3), {1, kNaN, 3});
  EXPECT_VALUES(clamp(y, 0.0, 2.0).slice(0, 0, 4), {1, kNaN, 2, 0});
  Tensor z = f32({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17});
  EXPECT_VALUES(maximum(z, y).slice(0, 0, 3), {1, kNaN, 3});
  EXPECT_VALUES(maximum(y, z).slice(0, 0, 3), {1, kNaN, 3});
  EXPECT_VALUES(minimum(y, z).slice(0, 0, 3), {1, kNaN, 3});
}

TEST(BadInputOps, NaNAndInfThroughNnOps) {
  EXPECT_VALUES(softmax(f32({1, float(kNaN), 2}), 0), {kNaN, kNaN, kNaN});
  EXPECT_VALUES(softmax(f32({1, float(kInf), 2}), 0), {kNaN, kNaN, kNaN});
  EXPECT_VALUES(softmax(f32({-float(kInf), 0}), 0), {0, 1});
  EXPECT_VALUES(softmax(f32({-float(kInf), -float(kInf)}), 0), {kNaN, kNaN});
  EXPECT_VALUES(log_softmax(f32({-float(kInf), 0}), 0), {-kInf, 0});
  EXPECT_VALUES(layer_norm(f32({1, float(kNaN), 2}), {3}), {kNaN, kNaN, kNaN});
  EXPECT_VALUES(layer_norm(f32({1, float(kInf), 2}), {3}), {kNaN, kNaN, kNaN});
  Tensor img = f32({1, float(kNaN), 3, 4}).view({1, 1, 2, 2});
  EXPECT_VALUES(max_pool2d(img, {2}), {kNaN});
  EXPECT_VALUES(max_pool2d(f32({float(kNaN), 1, 2, 3}).view({1, 1, 2, 2}), {2}), {kNaN});
  EXPECT_VALUES(avg_pool2d(img, {2}), {kNaN});
  EXPECT_VALUES(adaptive_avg_pool2d(img, {1, 1}), {kNaN});
  EXPECT_VALUES(matmul(f32({1, float(kNaN)}).view({1, 2}), f32({1, 1}).view({2, 1})), {kNaN});
  EXPECT_VALUES(matmul(f32({float(kInf), 1}).view({1, 2}), f32({0, 1}).view({2, 1})), {kNaN});
  // -inf * 0 inside gelu and silu is NaN, as in torch.
  EXPECT_VALUES(gelu(f32({float(kNaN), float(kInf), -float(kInf)})), {kNaN, kInf, kNaN});
  EXPECT_VALUES(gelu(f32({float(kNaN), float(kInf), -float(kInf)}), "tanh"), {kNaN, kInf, kNaN});
  EXPECT_VALUES(sigmoid(f32({float(kNaN), float(kInf), -float(kInf)})), {kNaN, 1, 0});
  // Huge finite inputs stay finite (x^2 overflowed inside gelu's erf tail: NaN).
  EXPECT_VALUES(gelu(f32({-1e30f, -1e20f, -3e38f, -25.f, 1e30f})), {0, 0, 0, 0, 1e30});
  EXPECT_VALUES(gelu(f32({-1e30f, -3e38f}).expand({40, 2}).contiguous()).slice(0, 0, 1), {0, 0});
  EXPECT_VALUES(tanh(f32({float(kNaN), float(kInf), -float(kInf)})), {kNaN, 1, -1});
  EXPECT_VALUES(silu(f32({float(kNaN), float(kInf), -float(kInf)})), {kNaN, kInf, kNaN});
  EXPECT_VALUES(exp(f32({float(kNaN), float(kInf), -float(kInf)})), {kNaN, kInf, 0});
  EXPECT_VALUES(log(f32({-1, 0, float(kInf)})), {kNaN, -kInf, kInf});
  EXPECT_VALUES(sqrt(f32({-1, float(kInf)})), {kNaN, kInf});
  EXPECT_VALUES(f32({1, -1, 0}) / f32({0, 0, 0}), {kInf, -kInf, kNaN});
  EXPECT_VALUES(pow(f32({0, float(kNaN), 1}), f32({-1, 0, float(kNaN)})), {kInf, 1, 1});
  EXPECT_VALUES(scaled_dot_product_attention(f32({1, float(kNaN)}).view({1, 1, 2}), randn({1, 2, 2}),
                                             randn({1, 2, 2}))
                    .view({2}),
                {kNaN, kNaN});
  // NaN and out-of-range floats to integers: undefined in C++; kiln gives what
  // torch gets on x86 (the "integer indefinite" INT_MIN), in every layout.
  Tensor specials = f32({float(kNaN), float(kInf), -float(kInf), 3e9f, -3e9f, 7.9f});
  EXPECT_VALUES(specials.to(kInt32), {-2147483648.0, -2147483648.0, -2147483648.0, -2147483648.0, -2147483648.0, 7});
  EXPECT_VALUES(specials.to(kInt64), {-9.223372036854775808e18, -9.223372036854775808e18, -9.223372036854775808e18,
                                      3e9, -3e9, 7});
  EXPECT_VALUES(specials.to(kBool), {1, 1, 1, 1, 1, 1});
  Tensor ints = zeros({2, 6}, kInt32);
  ints.copy_(specials.expand({2, 6}).t().contiguous().t());
  EXPECT_VALUES(ints.select(0, 1), {-2147483648.0, -2147483648.0, -2147483648.0, -2147483648.0, -2147483648.0, 7});
}

TEST(BadInputOps, IntegerDivisionByZeroThrows) {
  Tensor i = tensor({int64_t(7), int64_t(-7)});
  Tensor zero = zeros({2}, kInt64);
  expect_error([&] { div(i, zero, std::string("trunc")); }, {"div", "division by zero"});
  expect_error([&] { div(i, zero, std::string("floor")); }, {"div", "division by zero"});
  expect_error([&] { remainder(i, zero); }, {"remainder", "division by zero"});
  expect_error([&] { remainder(i, 0); }, {"remainder", "division by zero"});
  expect_error([&] { div(i.to(kInt32), zero.to(kInt32), std::string("trunc")); }, {"div", "division by zero"});
  // True division promotes to float: x / 0 is inf, as in torch.
  EXPECT_VALUES(div(i, zero), {kInf, -kInf});
  // INT64_MIN / -1 overflows in C++; torch wraps it.
  Tensor mn = tensor({std::numeric_limits<int64_t>::min()});
  EXPECT_NO_THROW(div(mn, tensor({int64_t(-1)}), std::string("trunc")));
  EXPECT_NO_THROW(remainder(mn, tensor({int64_t(-1)})));
}

TEST(BadInputOps, IntegerPowerEdgeCases) {
  Tensor i = tensor({int64_t(2), int64_t(3)});
  // torch refuses a negative integer scalar exponent; a tensor exponent gives 0 (|base| > 1).
  expect_error([&] { pow(i, int64_t(-2)); }, {"pow", "negative"});
  EXPECT_VALUES(pow(i, tensor({int64_t(-1), int64_t(1)})), {0, 3});
  EXPECT_VALUES(pow(tensor({int64_t(1), int64_t(-1)}), tensor({int64_t(-3), int64_t(-3)})), {1, -1});
  EXPECT_VALUES(pow(i, int64_t(0)), {1, 1});
}

// ---- zero-size tensors

TEST(BadInputOps, ZeroSizeTensors) {
  Tensor e = randn({0, 3});
  EXPECT_EQ((e + 1.0).sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_VALUES(sum(e), {0});
  EXPECT_VALUES(sum(e, {0}), {0, 0, 0});
  EXPECT_VALUES(prod(e), {1});
  EXPECT_VALUES(mean(e), {kNaN});
  EXPECT_VALUES(mean(e, {0}), {kNaN, kNaN, kNaN});
  EXPECT_EQ(sum(e, {1}).numel(), 0);
  EXPECT_VALUES(norm(e), {0});
  EXPECT_VALUES(var(randn({1})), {kNaN});
  expect_error([&] { amax(e); }, {"amax"});
  expect_error([&] { max(e); }, {"max"});
  expect_error([&] { argmax(e); }, {"argmax"});
  expect_error([&] { max(e, 0); }, {"max"});
  EXPECT_EQ(std::get<0>(max(e, 1)).numel(), 0);
  EXPECT_EQ(amax(e, {1}).numel(), 0);
  EXPECT_EQ(softmax(e, 1).numel(), 0);
  EXPECT_VALUES(softmax(e, 0), {});
  EXPECT_EQ(layer_norm(e, {3}).numel(), 0);
  EXPECT_VALUES(mm(randn({2, 0}), randn({0, 3})), {0, 0, 0, 0, 0, 0});
  EXPECT_VALUES(matmul(randn({2, 0}), randn({0})), {0, 0});
  EXPECT_VALUES(addmm(ones({2, 2}), randn({2, 0}), randn({0, 2}), 2.0), {2, 2, 2, 2});
  EXPECT_EQ(mm(randn({0, 4}), randn({4, 3})).sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_EQ(bmm(randn({0, 2, 4}), randn({0, 4, 3})).sizes().vec(), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(linear(randn({0, 4}), randn({3, 4}), randn({3})).sizes().vec(), (std::vector<int64_t>{0, 3}));
  EXPECT_VALUES(linear(randn({1, 0}), randn({2, 0}), f32({5, 6})), {5, 6});
  EXPECT_EQ(conv2d(randn({0, 3, 8, 8}), randn({4, 3, 3, 3})).sizes().vec(), (std::vector<int64_t>{0, 4, 6, 6}));
  EXPECT_EQ(max_pool2d(randn({0, 2, 4, 4}), {2}).sizes().vec(), (std::vector<int64_t>{0, 2, 2, 2}));
  EXPECT_EQ(avg_pool2d(randn({0, 2, 4, 4}), {2}).numel(), 0);
  EXPECT_EQ(adaptive_avg_pool2d(randn({0, 2, 4, 4}), {1, 1}).numel(), 0);
  EXPECT_EQ(batch_norm(randn({0, 3}), ones({3}), zeros({3}), zeros({3}), ones({3})).numel(), 0);
  EXPECT_EQ(cat({e, randn({2, 3})}).size(0), 2);
  EXPECT_EQ(cat({randn({0}), randn({2, 3})}).size(0), 2); // legacy 1-D empty is skipped, as in torch
  EXPECT_EQ(stack({e, e}).sizes().vec(), (std::vector<int64_t>{2, 0, 3}));
  EXPECT_EQ(e.split(2).size(), 1u);
  EXPECT_EQ(e.index_select(1, tensor(std::vector<int64_t>{})).numel(), 0);
  EXPECT_EQ(embedding(randn({4, 2}), tensor(std::vector<int64_t>{})).sizes().vec(), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(scaled_dot_product_attention(randn({1, 0, 4}), randn({1, 3, 4}), randn({1, 3, 4})).numel(), 0);
  // No keys: the weighted sum over nothing is 0.
  EXPECT_VALUES(scaled_dot_product_attention(randn({1, 2, 4}), randn({1, 0, 4}), randn({1, 0, 4})),
                std::vector<double>(8, 0.0));
  EXPECT_EQ(tril(randn({0, 3})).numel(), 0);
  EXPECT_EQ(where(e > 0, e, 1.0).numel(), 0);
  Tensor ez = randn({0, 3});
  ez.add_(1.0);
  ez.copy_(randn({3}));
  EXPECT_EQ(ez.numel(), 0);
  EXPECT_EQ(randn({0}).to(kInt64).numel(), 0);
  EXPECT_EQ(arange(0).numel(), 0);
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(eye(0).numel(), 0);
  EXPECT_EQ(randint(0, 5, {0}).numel(), 0);
}

// ---- overlapping in-place writes

TEST(BadInputOps, InPlaceFromATransposedAliasIsCorrect) {
  // torch raises "unsupported operation: some elements of the input tensor and
  // the written-to tensor refer to a single memory location"; kiln computes
  // the result as if `other` had been copied first.
  Tensor x = arange(9, kFloat32).view({3, 3});
  std::vector<double> want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) want.push_back((3 * i + j) + (3 * j + i));
  x.add_(x.t());
  EXPECT_VALUES(x, want);

  Tensor big = arange(64 * 64, kFloat32).view({64, 64});
  Tensor ref = big + big.t();
  big.mul_(1.0).add_(big.t());
  EXPECT_VALUES(big, values(ref));
}

TEST(BadInputOps, InPlaceFromAShiftedAliasIsCorrect) {
  for (int64_t n : {5, 100, 4099}) {
    Tensor x = arange(n, kFloat64);
    std::vector<double> want(size_t(n - 1));
    for (int64_t i = 0; i < n - 1; ++i) want[size_t(i)] = double(i + 1) + double(i);
    Tensor dst = x.slice(0, 1);
    dst.add_(x.slice(0, 0, n - 1));
    EXPECT_VALUES(dst, want);
    Tensor y = arange(n, kFloat64);
    std::vector<double> want2(size_t(n - 1));
    for (int64_t i = 0; i < n - 1; ++i) want2[size_t(i)] = double(i) * double(i + 1);
    Tensor d2 = y.slice(0, 0, n - 1);
    d2.mul_(y.slice(0, 1));
    EXPECT_VALUES(d2, want2);
    Tensor z = arange(n, kFloat32);
    Tensor d3 = z.slice(0, 1);
    d3.copy_(z.slice(0, 0, n - 1));
    std::vector<double> want3(size_t(n - 1));
    for (int64_t i = 0; i < n - 1; ++i) want3[size_t(i)] = double(i);
    EXPECT_VALUES(d3, want3);
  }
}

TEST(BadInputOps, InPlaceIntoAnExpandedTensorThrows) {
  Tensor base = randn({3});
  Tensor ex = base.expand({4, 3});
  expect_error([&] { ex.add_(1.0); }, {"add_", "single memory location"});
  expect_error([&] { ex.add_(randn({4, 3})); }, {"add_", "single memory location"});
  expect_error([&] { ex.copy_(randn({4, 3})); }, {"copy_", "single memory location"});
  expect_error([&] { ex.fill_(1.0); }, {"fill_", "single memory location"});
  expect_error([&] { ex.zero_(); }, {"zero_", "single memory location"});
  expect_error([&] { ex.relu_(); }, {"relu_", "single memory location"});
  expect_error([&] { ex.clamp_(0.0, 1.0); }, {"clamp_", "single memory location"});
}
