// Factories, random streams, from_blob/tensor and torch-format printing.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include <kiln/kiln.h>

using namespace kiln;

namespace {
template <class T> std::vector<T> values(const Tensor &t) {
  EXPECT_TRUE(t.is_contiguous());
  const T *p = t.data_ptr<T>();
  return std::vector<T>(p, p + t.numel());
}
std::string str(const Tensor &t) {
  std::ostringstream os;
  os << t;
  return os.str();
}
} // namespace

TEST(Factories, ZerosOnesFullDtypes) {
  EXPECT_EQ(zeros({2, 3}).dtype(), kFloat32);
  EXPECT_EQ(values<float>(ones({4})), std::vector<float>(4, 1.f));
  EXPECT_EQ(values<double>(full({2}, 2.5, kFloat64)), std::vector<double>(2, 2.5));
  EXPECT_EQ(full({3}, 7).dtype(), kInt64); // inferred from the fill value, as torch.full
  EXPECT_EQ(full({3}, true).dtype(), kBool);
  EXPECT_EQ(full({3}, 1.5).dtype(), kFloat32);
  EXPECT_EQ(zeros({0, 4}).numel(), 0);
  EXPECT_EQ(zeros({}).dim(), 0);
  EXPECT_EQ(values<int32_t>(zeros_like(zeros({5}, kInt32))), std::vector<int32_t>(5, 0));
  EXPECT_EQ(full_like(zeros({2}, kInt64), 3).dtype(), kInt64);
  EXPECT_EQ(empty({3, 3}).numel(), 9);
}

TEST(Factories, ArangeMatchesTorch) {
  EXPECT_EQ(values<int64_t>(arange(5)), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(5).dtype(), kInt64);
  EXPECT_EQ(values<int64_t>(arange(10, 0, -3)), (std::vector<int64_t>{10, 7, 4, 1}));
  Tensor f = arange(0, 1, 0.25);
  EXPECT_EQ(f.dtype(), kFloat32);
  EXPECT_EQ(values<float>(f), (std::vector<float>{0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(1, 1).numel(), 0);
  EXPECT_THROW(arange(0, 5, 0), Error);
  EXPECT_THROW(arange(5, 0, 1), Error);
}

TEST(Factories, LinspaceEndpointsExact) {
  Tensor l = linspace(-1, 1, 5);
  std::vector<float> want = {-1, -0.5, 0, 0.5, 1};
  EXPECT_EQ(values<float>(l), want);
  Tensor l3 = linspace(0.1, 0.7, 7, kFloat64);
  std::vector<double> v = values<double>(l3);
  EXPECT_EQ(v.front(), 0.1);
  EXPECT_EQ(v.back(), 0.7);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(v[i], 0.1 + 0.1 * i, 1e-15);
  EXPECT_EQ(linspace(0, 1, 1).numel(), 1);
  EXPECT_THROW(linspace(0, 1, -1), Error);
}

TEST(Factories, Eye) {
  Tensor e = eye(2, 3);
  EXPECT_EQ(values<float>(e), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(eye(3, kInt64).sizes().vec(), (std::vector<int64_t>{3, 3}));
  EXPECT_THROW(eye(-1), Error);
}

TEST(Factories, SymNumelIsTheCountAsAnInt64Scalar) {
  Tensor n = sym_numel(randn({3, 4, 5}).transpose(0, 2));
  EXPECT_EQ(n.dim(), 0);
  EXPECT_EQ(n.dtype(), kInt64);
  EXPECT_EQ(n.item<int64_t>(), 3 * 4 * 5);
  EXPECT_EQ(sym_numel(zeros({2, 0, 7})).item<int64_t>(), 0);
  EXPECT_EQ(sym_numel(full({}, 2.0)).item<int64_t>(), 1);
  EXPECT_THROW(sym_numel(Tensor()), Error);
}

TEST(Factories, SeededRandomIsReproducibleAcrossThreadCounts) {
  set_num_threads(1);
  manual_seed(42);
  Tensor a = randn({100000});
  set_num_threads(2);
  manual_seed(42);
  Tensor b = randn({100000});
  EXPECT_EQ(values<float>(a), values<float>(b));
  Tensor c = randn({100000}); // the stream moves on
  EXPECT_NE(values<float>(a), values<float>(c));
}

TEST(Factories, RandnMomentsAndRandRange) {
  manual_seed(0);
  std::vector<double> v;
  for (float x : values<float>(randn({200000}))) v.push_back(x);
  double mean = 0, sq = 0;
  for (double x : v) mean += x;
  mean /= double(v.size());
  for (double x : v) sq += (x - mean) * (x - mean);
  double var = sq / double(v.size());
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  for (float x : values<float>(rand({100000}))) ASSERT_TRUE(x >= 0.f && x < 1.f);
  for (int64_t x : values<int64_t>(randint(-3, 4, {10000}))) ASSERT_TRUE(x >= -3 && x < 4);
  EXPECT_THROW(randint(3, 3, {2}), Error);
  EXPECT_THROW(randn({2}, kInt64), Error);
}

TEST(Factories, FromBlobBorrowsMemory) {
  float data[6] = {1, 2, 3, 4, 5, 6};
  Tensor t = from_blob(data, {2, 3});
  data[4] = 50;
  EXPECT_EQ(t.data_ptr<float>()[4], 50.f);
  EXPECT_EQ(t.data_ptr<float>(), data);
  Tensor s = from_blob(data, {3}, {2});
  EXPECT_EQ(s.select(0, 2).item<float>(), 50.f);
  EXPECT_THROW(from_blob(nullptr, {2}), Error);
}

TEST(Factories, TensorFromValues) {
  EXPECT_EQ(values<float>(tensor({1.f, 2.f})), (std::vector<float>{1, 2}));
  EXPECT_EQ(tensor({1, 2, 3}).dtype(), kInt64);
  EXPECT_EQ(tensor(std::vector<bool>{true, false}).dtype(), kBool);
  EXPECT_EQ(tensor({1.5, 2.5}).dtype(), kFloat64);
  EXPECT_EQ(tensor({1.5f}, kFloat64).dtype(), kFloat64);
  EXPECT_EQ(scalar_tensor(3.0).item<float>(), 3.f);
  EXPECT_EQ(scalar_tensor(3.0).dim(), 0);
}

TEST(Printing, TorchFormat) {
  EXPECT_EQ(str(tensor({1.f, 2.f, 3.f}).view({1, 3})), " 1  2  3\n[ CPUFloatType{1,3} ]");
  EXPECT_EQ(str(tensor({1.5f, -2.f})), " 1.5000\n-2.0000\n[ CPUFloatType{2} ]");
  EXPECT_EQ(str(tensor({7}).view({})), "7\n[ CPULongType{} ]");
  EXPECT_EQ(str(zeros({0})), "[ CPUFloatType{0} ]");
  std::string three = str(arange(8).view({2, 2, 2}));
  EXPECT_NE(three.find("(1,.,.) = \n 0  1\n 2  3\n"), std::string::npos) << three;
  EXPECT_NE(three.find("(2,.,.) = \n 4  5\n 6  7\n"), std::string::npos) << three;
  // Non-contiguous views print their logical order.
  EXPECT_EQ(str(arange(4).view({2, 2}).t()), " 0  2\n 1  3\n[ CPULongType{2,2} ]");
}
