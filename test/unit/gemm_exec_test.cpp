// Compiled contractions on kiln's GEMM (KILN_GEMM=jit, codegen/gemm through
// codegen/epilogue.cpp): results against a naive double loop and against eager
// (OpenBLAS), over the edge sizes of issue 15, transposed / strided / broadcast
// operands, f32 and f64, 1 and 2 threads, NaN and inf; packed weights follow
// in-place updates (also with concurrent callers); the jit path is really taken
// and KILN_GEMM=blas takes the old one.
//
// Tolerance (stated): per element |got - ref| <= 2 (K + 2) eps sum_p |a_ip b_pj|
// + 4 eps |ref|, with ref computed in double: the deterministic bound of a
// K-term dot product in working precision (gamma_K), plus the bias add and relu.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <kiln/kiln.h>

#include "test_support.h"
#include "codegen/executable.h"
#include "codegen/gemm/path.h"
#include "codegen/jit.h"
#include "frontend/compile.h"

#include "concurrency_test_util.h"
#include "graph_test_util.h"

using namespace kiln;
using kiln::testing::PathGuard;
using kiln::testing::ThreadsGuard;
using kiln::test::concurrent_failures;
using kiln::testing::rnd;
using kiln::testing::vals;

namespace {

// The steps of one compiled call by category ("gemm-jit", "blas", "kernel", ...).
std::vector<std::string> categories(const CompiledFunction &f, const std::vector<Tensor> &in) {
  std::vector<std::string> cats;
  codegen::ScopedStepObserver obs([&](const codegen::StepEvent &e) { cats.emplace_back(e.category); });
  f(in);
  return cats;
}

int count(const std::vector<std::string> &v, const std::string &s) { return int(std::count(v.begin(), v.end(), s)); }

// relu(A @ B + bias) in double: values and the error bound (see the header).
struct Ref {
  std::vector<double> y, bound;
};
Ref reference(const Tensor &a, const Tensor &b, const Tensor &bias, bool relu_) {
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> av = vals(a), bv = vals(b), cv = vals(bias);
  const double eps = a.dtype() == kFloat64 ? std::numeric_limits<double>::epsilon()
                                           : double(std::numeric_limits<float>::epsilon());
  Ref r;
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0, abs_s = 0;
      for (int64_t p = 0; p < K; ++p) {
        s += av[size_t(i * K + p)] * bv[size_t(p * N + j)];
        abs_s += std::abs(av[size_t(i * K + p)] * bv[size_t(p * N + j)]);
      }
      s += cv[size_t(j)];
      if (relu_) s = std::max(s, 0.0);
      r.y.push_back(s);
      r.bound.push_back(2.0 * double(K + 2) * eps * (abs_s + std::abs(cv[size_t(j)])) + 4 * eps * std::abs(s));
    }
  return r;
}

::testing::AssertionResult within(const Tensor &got, const Ref &ref) {
  std::vector<double> g = vals(got);
  if (g.size() != ref.y.size()) return ::testing::AssertionFailure() << g.size() << " elements, want " << ref.y.size();
  for (size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - ref.y[i]) <= ref.bound[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << ref.y[i] << " (bound "
                                           << ref.bound[i] << ")";
  return ::testing::AssertionSuccess();
}

// Equal element by element, NaN where eager (the reference) has NaN, inf where
// it has inf, finite values within rtol * (1 + max |want|) (the summation order
// differs from OpenBLAS's, and cancellation makes an element's own size no scale).
::testing::AssertionResult same_or_close(const Tensor &got, const Tensor &want, double rtol) {
  if (got.sizes() != want.sizes()) return ::testing::AssertionFailure() << "shape " << shape_str(got.sizes());
  std::vector<double> g = vals(got), w = vals(want);
  double scale = 1;
  for (double v : w)
    if (std::isfinite(v)) scale = std::max(scale, 1 + std::abs(v));
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i]) != std::isnan(g[i]))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
    if (std::isnan(w[i])) continue;
    if (std::isinf(w[i]) || std::isinf(g[i])) {
      if (g[i] != w[i]) return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
      continue;
    }
    if (!(std::abs(g[i] - w[i]) <= rtol * scale))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " vs " << w[i];
  }
  return ::testing::AssertionSuccess();
}

const std::vector<int64_t> kEdges = {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257, 1000};

// Sparse (M, N, K) over kEdges covering every value on every axis: i, 5i + 3,
// 11i + 7 (mod 17) are each a permutation of the 17 indices.
std::vector<std::array<int64_t, 3>> edge_shapes() {
  std::vector<std::array<int64_t, 3>> s;
  for (size_t i = 0; i < kEdges.size(); ++i) s.push_back({kEdges[i], kEdges[(5 * i + 3) % 17], kEdges[(11 * i + 7) % 17]});
  return s;
}

// relu(x @ W^T + b) with captured W [N, K] (packed) and b, and x @ y + b with
// both operands inputs (not packed), over the edge shapes.
void sweep(DType dt, int threads) {
  ThreadsGuard tg(threads);
  PathGuard pg(gemm::Path::Jit);
  uint64_t seed = 100;
  for (auto [M, N, K] : edge_shapes()) {
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " " +
                 std::string(kiln::name(dt)) + " threads=" + std::to_string(threads));
    Tensor w = rnd({N, K}, seed++, dt, -1, 1), b = rnd({N}, seed++, dt, -1, 1);
    Tensor x = rnd({M, K}, seed++, dt, -1, 1), y = rnd({K, N}, seed++, dt, -1, 1);
    CompiledFunction f = compile([w, b](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{relu(matmul(in[0], w.transpose(0, 1)) + b), matmul(in[0], in[1]) + b};
    });
    std::vector<Tensor> got = f({x, y});
    EXPECT_TRUE(within(got[0], reference(x, w.transpose(0, 1), b, true)));
    EXPECT_TRUE(within(got[1], reference(x, y, b, false)));
    // Over K <= 4 both are elementwise products (decompose.cpp), tested below.
    EXPECT_EQ(count(categories(f, {x, y}), "gemm-jit"), K > 4 ? 2 : 0);
    if (K > 4) EXPECT_GT(f.stats().packed_weight_bytes, 0);
  }
}

} // namespace

TEST(GemmExec, EdgeShapesF32OneThread) { sweep(kFloat32, 1); }
TEST(GemmExec, EdgeShapesF64OneThread) { sweep(kFloat64, 1); }
TEST(GemmExec, EdgeShapesF32TwoThreads) { sweep(kFloat32, 2); }
TEST(GemmExec, EdgeShapesF64TwoThreads) { sweep(kFloat64, 2); }

// The jit path is taken under Jit and the old BLAS steps under Blas (the lone
// matmul then runs as an eager op, the fused one as a "blas" epilogue step).
TEST(GemmExec, PathSwitchSelectsTheSteps) {
  Tensor w = rnd({96, 80}, 1), x = rnd({40, 80}, 2), y = rnd({80, 50}, 3);
  auto fn = [w](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(linear(in[0], w)), matmul(in[0], in[1])};
  };
  std::vector<Tensor> want = fn({x, y});
  for (gemm::Path p : {gemm::Path::Jit, gemm::Path::Blas}) {
    PathGuard pg(p);
    CompiledFunction f = compile(fn);
    std::vector<Tensor> got = f({x, y});
    EXPECT_TRUE(same_or_close(got[0], want[0], 1e-4));
    EXPECT_TRUE(same_or_close(got[1], want[1], 1e-4));
    std::vector<std::string> cats = categories(f, {x, y});
    if (p == gemm::Path::Jit) {
      EXPECT_EQ(count(cats, "gemm-jit"), 2);
      EXPECT_EQ(count(cats, "blas"), 0);
      EXPECT_EQ(f.stats().packed_weight_bytes, 80 * 96 * 4); // 96 columns = 2 panels of 48 (f32 AVX-512) or 12 of 8
    } else {
      EXPECT_EQ(count(cats, "gemm-jit"), 0);
      EXPECT_EQ(count(cats, "blas"), 2);
      EXPECT_EQ(f.stats().packed_weight_bytes, 0);
    }
  }
}

// Transposed and strided operands (no copies: the strides reach the packing),
// broadcast batch dims, attention's q k^T and p v, a lone bmm; f32 and f64.
TEST(GemmExec, TransposedStridedAndBatchedOperands) {
  PathGuard pg(gemm::Path::Jit);
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(kiln::name(dt)));
    Tensor xt = rnd({70, 33}, 10, dt), tall = rnd({80, 180}, 11, dt);
    Tensor q = rnd({2, 3, 17, 16}, 13, dt), k = rnd({2, 3, 17, 16}, 14, dt), v = rnd({2, 3, 17, 16}, 15, dt);
    Tensor a4 = rnd({2, 1, 9, 31}, 16, dt), b3 = rnd({3, 31, 20}, 17, dt);
    Tensor ba = rnd({4, 65, 33}, 18, dt), bb = rnd({4, 33, 70}, 19, dt);
    auto fn = [](const std::vector<Tensor> &in) {
      Tensor s = matmul(in[2], in[3].transpose(-2, -1)) * 0.25;
      return std::vector<Tensor>{
          relu(matmul(in[0].transpose(0, 1), in[1].slice(1, 0, std::nullopt, 2).slice(0, 0, 70))), // [33,70]@[70,90]
          matmul(softmax(s, -1), in[4]),                                                       // attention
          matmul(in[5], in[6]) + 1.0,                                                          // broadcast batches
          bmm(in[7], in[8]),                                                                   // lone bmm
      };
    };
    std::vector<Tensor> in = {xt, tall, q, k, v, a4, b3, ba, bb};
    std::vector<Tensor> want = fn(in);
    CompiledFunction f = compile(fn);
    std::vector<Tensor> got = f(in);
    ASSERT_EQ(got.size(), want.size());
    const double rtol = dt == kFloat64 ? 1e-12 : 2e-5;
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_or_close(got[i], want[i], rtol)) << "output " << i;
    EXPECT_GE(count(categories(f, in), "gemm-jit"), 4);
  }
}

// A contraction alone that writes its own result runs as one tile that kiln's
// GEMM splits over the threads itself (M split for many rows, N split with A
// packed once for few): lone matmuls of inputs and of a captured (packed)
// weight, against the naive loop, with M above the epilogue tiles' 256 rows,
// M tails and N tails, 1 and 2 threads, f32 and f64.
void lone(DType dt, int threads) {
  ThreadsGuard tg(threads);
  PathGuard pg(gemm::Path::Jit);
  uint64_t seed = 500;
  for (auto [M, N, K] : {std::array<int64_t, 3>{1000, 65, 33}, {300, 257, 129}, {129, 1000, 17}, {7, 100, 300}}) {
    SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K) + " " +
                 std::string(kiln::name(dt)) + " threads=" + std::to_string(threads));
    Tensor w = rnd({K, N}, seed++, dt, -1, 1), x = rnd({M, K}, seed++, dt, -1, 1), y = rnd({K, N}, seed++, dt, -1, 1);
    CompiledFunction f = compile([w](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{matmul(in[0], in[1]), matmul(in[0], w)};
    });
    std::vector<Tensor> got = f({x, y});
    const Tensor zero = zeros({N}, TensorOptions(dt));
    EXPECT_TRUE(within(got[0], reference(x, y, zero, false)));
    EXPECT_TRUE(within(got[1], reference(x, w, zero, false)));
    EXPECT_EQ(count(categories(f, {x, y}), "gemm-jit"), 2);
  }
}
TEST(GemmExec, LoneContractionsF32OneThread) { lone(kFloat32, 1); }
TEST(GemmExec, LoneContractionsF64TwoThreads) { lone(kFloat64, 2); }
TEST(GemmExec, LoneContractionsF32TwoThreads) { lone(kFloat32, 2); }

// NaN and inf in A and in a packed B propagate as in BLAS (eager).
TEST(GemmExec, NanAndInfPropagate) {
  PathGuard pg(gemm::Path::Jit);
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor w = rnd({50, 40}, 30, dt), b = rnd({50}, 31, dt), x = rnd({64, 40}, 32, dt); // 64 x 50 x 40 > the tiny-linear limit (decompose.cpp)
    auto put = [](Tensor &t, int64_t i, int64_t j, double v) {
      Tensor e = t.select(0, i).select(0, j);
      e.fill_(v);
    };
    put(x, 3, 5, std::nan(""));
    put(x, 7, 0, std::numeric_limits<double>::infinity());
    put(w, 11, 9, -std::numeric_limits<double>::infinity());
    put(w, 49, 39, std::nan(""));
    auto fn = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{linear(in[0], w, b) * 2.0}; };
    CompiledFunction f = compile(fn);
    EXPECT_TRUE(same_or_close(f({x})[0], fn({x})[0], dt == kFloat64 ? 1e-12 : 1e-5));
    EXPECT_EQ(count(categories(f, {x}), "gemm-jit"), 1);
  }
}

// Contractions over K <= 4 are K broadcast products added elementwise
// (passes/decompose.cpp), fused with their bias and activation into one
// kernel; at K = 5 matmul and mm stay on kiln's GEMM (the linear, under
// decompose's tiny-contraction limit, is a mul + sum). linear, matmul and mm, against the naive
// double loop (the bound above), over sizes past one vector and with tails,
// f32 and f64, 1 and 2 threads; NaN and inf as eager has them.
TEST(GemmExec, SmallKContractionsAreFusedProducts) {
  PathGuard pg(gemm::Path::Jit);
  uint64_t seed = 700;
  for (int threads : {1, 2})
    for (DType dt : {kFloat32, kFloat64})
      for (int64_t K = 1; K <= 5; ++K) {
        const int64_t M = 37 + K, N = 130 - K;
        SCOPED_TRACE("K=" + std::to_string(K) + " " + std::string(kiln::name(dt)) + " threads=" +
                     std::to_string(threads));
        ThreadsGuard tg(threads);
        Tensor w = rnd({N, K}, seed++, dt, -1, 1), b = rnd({N}, seed++, dt, -1, 1);
        Tensor x = rnd({M, K}, seed++, dt, -1, 1), y = rnd({K, N}, seed++, dt, -1, 1);
        CompiledFunction f = compile([w, b](const std::vector<Tensor> &in) {
          return std::vector<Tensor>{relu(linear(in[0], w, b)), matmul(in[0], in[1]) + b, mm(in[0], in[1])};
        });
        std::vector<Tensor> got = f({x, y});
        const Tensor zero = zeros({N}, TensorOptions(dt));
        EXPECT_TRUE(within(got[0], reference(x, w.transpose(0, 1), b, true)));
        EXPECT_TRUE(within(got[1], reference(x, y, b, false)));
        EXPECT_TRUE(within(got[2], reference(x, y, zero, false)));
        std::vector<std::string> cats = categories(f, {x, y});
        EXPECT_EQ(count(cats, "gemm-jit"), K <= 4 ? 0 : 2);
        if (K <= 4) EXPECT_EQ(f.kernels_per_call({x, y}), 1); // the three products in one fused kernel
      }
  for (DType dt : {kFloat32, kFloat64}) {
    Tensor w = rnd({50, 3}, 30, dt), b = rnd({50}, 31, dt), x = rnd({64, 3}, 32, dt);
    const double inf = std::numeric_limits<double>::infinity();
    x.select(0, 3).select(0, 1).fill_(std::nan(""));
    x.select(0, 7).select(0, 0).fill_(inf);
    w.select(0, 11).select(0, 2).fill_(-inf);
    w.select(0, 20).select(0, 0).fill_(0.0); // inf * 0 = NaN in row 7
    auto fn = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{linear(in[0], w, b) * 2.0}; };
    CompiledFunction f = compile(fn);
    EXPECT_TRUE(same_or_close(f({x})[0], fn({x})[0], dt == kFloat64 ? 1e-12 : 1e-5));
    EXPECT_EQ(count(categories(f, {x}), "gemm-jit"), 0);
  }
}

// A chain of small contractions, each reading what the last computed, runs on
// the calling thread (codegen's choose_serial): on two cores each split step
// would leave half its output in the other core's cache. The choice is the
// graph's, not the thread count's; a lone small contraction, a chain of large
// ones and a small chain with a large result still split. Results equal the naive loop on 1 and 2 threads.
TEST(GemmExec, ChainOfSmallContractionsRunsOnTheCallingThread) {
  PathGuard pg(gemm::Path::Jit);
  // Whether the program built for `in` runs serially (ExecutableStats::serial).
  auto serial = [](const CompiledFunction &f, const std::vector<Tensor> &in) {
    return codegen::make_executable(f.graph_for(in), in)->stats().serial;
  };
  auto chain = [](const Tensor &w1, const Tensor &w2) {
    return [w1, w2](const std::vector<Tensor> &in) {
      Tensor h = relu(matmul(in[0], w1));
      return std::vector<Tensor>{h, matmul(h, w2)};
    };
  };
  for (int threads : {2, 1}) {
    SCOPED_TRACE("threads=" + std::to_string(threads));
    ThreadsGuard tg(threads);
    Tensor w1 = rnd({128, 128}, 40, kFloat32, -0.1, 0.1), w2 = rnd({128, 128}, 41, kFloat32, -0.1, 0.1);
    Tensor x = rnd({128, 128}, 42, kFloat32, -1, 1);
    const Tensor zero = zeros({128});
    CompiledFunction f = compile(chain(w1, w2));
    std::vector<Tensor> got = f({x});
    EXPECT_TRUE(serial(f, {x}));
    EXPECT_TRUE(within(got[0], reference(x, w1, zero, true)));
    EXPECT_TRUE(within(got[1], reference(got[0], w2, zero, false)));

    CompiledFunction lone = compile([w1](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w1))}; });
    EXPECT_TRUE(within(lone({x})[0], reference(x, w1.transpose(0, 1), zero, true)));
    EXPECT_FALSE(serial(lone, {x}));

    Tensor v1 = rnd({256, 256}, 43, kFloat32, -0.1, 0.1), v2 = rnd({256, 256}, 44, kFloat32, -0.1, 0.1);
    Tensor big = rnd({256, 256}, 45, kFloat32, -1, 1);
    CompiledFunction large = compile(chain(v1, v2));
    EXPECT_TRUE(within(large({big})[1], reference(relu(matmul(big, v1)), v2, zeros({256}), false)));
    EXPECT_FALSE(serial(large, {big}));

    // The small chain, then a result of 8 x 128 x 128 elements (above 64K): split.
    auto wide_fn = [f = chain(w1, w2)](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{f(in)[1].unsqueeze(0) * in[1]};
    };
    Tensor scale = rnd({8, 1, 1}, 46, kFloat32, -1, 1);
    CompiledFunction wide = compile(wide_fn);
    std::vector<Tensor> wide_got = wide({x, scale});
    EXPECT_TRUE(same_or_close(wide_got[0], wide_fn({x, scale})[0], 1e-5));
    EXPECT_FALSE(serial(wide, {x, scale}));
  }
}

// addmm runs on kiln's GEMM (decomposed into a matmul with the epilogue
// beta * input + alpha * product) with eager's semantics: input broadcast from
// every shape addmm takes, beta 0 ignoring input (its NaN too), f32 and f64;
// mat2 a parameter is packed. alpha 0 stays on BLAS (neither matrix is read,
// so their inf does not show). Tolerance: same_or_close's, as the tests above.
TEST(GemmExec, AddmmAlphaBetaMatchEager) {
  PathGuard pg(gemm::Path::Jit);
  const std::vector<std::vector<int64_t>> inputs = {{30, 40}, {40}, {1, 40}, {30, 1}, {}};
  const std::vector<std::pair<double, double>> alpha_beta = {{1, 1}, {0.5, -2}, {2, 0}, {-1.5, 1}};
  for (DType dt : {kFloat32, kFloat64})
    for (const std::vector<int64_t> &shape : inputs)
      for (auto [alpha, beta] : alpha_beta) {
        SCOPED_TRACE(std::string(kiln::name(dt)) + " input " + shape_str(shape) + " alpha " + std::to_string(alpha) +
                     " beta " + std::to_string(beta));
        Tensor c = rnd(shape, 40, dt), a = rnd({30, 50}, 41, dt), m = rnd({50, 40}, 42, dt);
        if (beta == 0 && dt == kFloat32) c.data_ptr<float>()[0] = std::numeric_limits<float>::quiet_NaN();
        if (beta == 0 && dt == kFloat64) c.data_ptr<double>()[0] = std::numeric_limits<double>::quiet_NaN();
        auto fn = [alpha, beta](const std::vector<Tensor> &in) {
          return std::vector<Tensor>{addmm(in[0], in[1], in[2], beta, alpha)};
        };
        CompiledFunction f = compile(fn);
        EXPECT_TRUE(same_or_close(f({c, a, m})[0], fn({c, a, m})[0], 1e-5));
        const std::vector<std::string> cats = categories(f, {c, a, m});
        EXPECT_EQ(count(cats, "gemm-jit"), 1);
        EXPECT_EQ(count(cats, "blas"), 0);
      }
  // mat2 a parameter: packed once, and an in-place update is seen.
  Tensor w = rnd({50, 40}, 43), bias = rnd({40}, 44), x = rnd({30, 50}, 45);
  auto lin = [w, bias](const std::vector<Tensor> &in) { return std::vector<Tensor>{addmm(bias, in[0], w, 0.5, 2)}; };
  CompiledFunction g = compile(lin);
  EXPECT_TRUE(same_or_close(g({x})[0], lin({x})[0], 1e-5));
  EXPECT_GT(g.stats().packed_weight_bytes, 0);
  w.mul_(-1);
  EXPECT_TRUE(same_or_close(g({x})[0], lin({x})[0], 1e-5));
  // alpha 0: inf in a matrix does not reach the result (BLAS semantics, as eager).
  Tensor c = rnd({30, 40}, 46), a = rnd({30, 50}, 47), m = rnd({50, 40}, 48);
  static_cast<float *>(a.data_ptr())[3] = std::numeric_limits<float>::infinity();
  auto zero = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{addmm(in[0], in[1], in[2], 1.5, 0)}; };
  CompiledFunction h = compile(zero);
  const Tensor want = zero({c, a, m})[0];
  for (double v : vals(want)) ASSERT_TRUE(std::isfinite(v));
  EXPECT_TRUE(same_or_close(h({c, a, m})[0], want, 1e-6));
}

// An in-place update of a packed weight (add_, copy_, a write through
// data_ptr()) changes the next call's result; two functions share a weight.
TEST(GemmExec, PackedWeightFollowsInPlaceUpdates) {
  PathGuard pg(gemm::Path::Jit);
  Tensor w = rnd({64, 96}, 50), b = rnd({64}, 51), x = rnd({24, 96}, 52);
  auto fn1 = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w, b))}; };
  auto fn2 = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], w.transpose(0, 1))}; };
  CompiledFunction f1 = compile(fn1), f2 = compile(fn2);
  auto check = [&](const char *what) {
    SCOPED_TRACE(what);
    EXPECT_TRUE(same_or_close(f1({x})[0], fn1({x})[0], 1e-5));
    EXPECT_TRUE(same_or_close(f2({x})[0], fn2({x})[0], 1e-5));
  };
  check("initial");
  w.add_(1);
  check("after add_");
  Tensor other = rnd({64, 96}, 53);
  w.copy_(other);
  check("after copy_");
  static_cast<float *>(w.data_ptr())[5] = 100.f;
  check("after a write through data_ptr()");
  EXPECT_EQ(count(categories(f1, {x}), "gemm-jit"), 1);
  EXPECT_EQ(count(categories(f2, {x}), "gemm-jit"), 1);
}

// Concurrent callers while the weight is updated between rounds: every call
// of a round sees the round's weight (repacked once, by whichever caller comes first).
TEST(GemmExec, ConcurrentCallersAcrossWeightUpdates) {
  PathGuard pg(gemm::Path::Jit);
  ThreadsGuard tg(2);
  Tensor w = rnd({256, 128}, 60), b = rnd({256}, 61), x = rnd({64, 128}, 62), x2 = rnd({3, 128}, 63);
  auto fn = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w, b))}; };
  CompiledFunction f = compile(fn);
  for (int round = 0; round < 4; ++round) {
    if (round > 0) w.add_(0.25);
    const Tensor want = fn({x})[0], want2 = fn({x2})[0];
    int bad = concurrent_failures(4, 12, [&](int t, int) {
      const bool small = t % 2 == 1;
      Tensor y = f({small ? x2 : x})[0];
      return bool(same_or_close(y, small ? want2 : want, 1e-5));
    });
    EXPECT_EQ(bad, 0) << "round " << round;
  }
}

// A concurrent caller of a second function on the same weight while the first is called.
TEST(GemmExec, ConcurrentCallersOfTwoFunctionsSharingAWeight) {
  PathGuard pg(gemm::Path::Jit);
  Tensor w = rnd({200, 100}, 70), x = rnd({128, 100}, 71);
  auto fn1 = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w))}; };
  auto fn2 = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{linear(in[0], w) * 3.0}; };
  CompiledFunction f1 = compile(fn1), f2 = compile(fn2);
  const Tensor want1 = fn1({x})[0], want2 = fn2({x})[0];
  EXPECT_TRUE(same_or_close(f1({x})[0], want1, 1e-5));
  EXPECT_TRUE(same_or_close(f2({x})[0], want2, 1e-5));
  w.add_(-0.5); // both repack at their next call, concurrently
  const Tensor want1b = fn1({x})[0], want2b = fn2({x})[0];
  int bad = concurrent_failures(4, 10, [&](int t, int) {
    return t % 2 ? bool(same_or_close(f1({x})[0], want1b, 1e-5)) : bool(same_or_close(f2({x})[0], want2b, 1e-5));
  });
  EXPECT_EQ(bad, 0);
}

// The micro-kernels are generic over shapes (compiled per tile configuration
// and row count): once those of a configuration exist, a second model with
// other linear shapes (the same row tail: M a multiple of mr) compiles no new
// kernel, it finds them in the Jit's memory cache. A fresh Jit without disk
// cache, so that nothing comes from disk or from earlier tests.
TEST(GemmExec, SecondModelWithOtherShapesCompilesNoMicroKernel) {
  PathGuard pg(gemm::Path::Jit);
  codegen::Jit jit;
  codegen::ScopedJit use(jit);
  // N = 80 and 288 take the same tile (gemm::product_config): 288 = 6 x 48.
  Tensor w1 = rnd({96, 80}, 90), w2 = rnd({200, 288}, 91), x1 = rnd({128, 96}, 92), x2 = rnd({64, 200}, 93);
  auto fn1 = [w1](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], w1)}; };
  auto fn2 = [w2](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], w2)}; };
  CompiledFunction f1 = compile(fn1);
  EXPECT_TRUE(same_or_close(f1({x1})[0], fn1({x1})[0], 1e-5));
  const codegen::JitStats first = jit.stats();
  EXPECT_GT(first.compiles, 0) << "the first model compiled no micro-kernel";
  CompiledFunction f2 = compile(fn2);
  EXPECT_TRUE(same_or_close(f2({x2})[0], fn2({x2})[0], 1e-5));
  EXPECT_EQ(count(categories(f2, {x2}), "gemm-jit"), 1);
  const codegen::JitStats second = jit.stats();
  EXPECT_EQ(second.compiles, first.compiles) << "the second model compiled a micro-kernel";
  EXPECT_GT(second.memory_hits, first.memory_hits);
}
