// mm, bmm, matmul, addmm, linear against naive double-precision loops.
#include <cblas.h>

#include <thread>

#include "unit/nn_test_util.h"

using namespace kiln;
using namespace nntest;

namespace {
// torch.matmul by its definition: 1-D operands become a row / column vector
// whose dim is dropped, batch dims broadcast, each batch a plain triple loop.
Want ref_matmul(const Tensor &a, const Tensor &b) {
  Shape as = a.sizes().vec(), bs = b.sizes().vec();
  const bool av = as.size() == 1, bv = bs.size() == 1;
  if (av) as.insert(as.begin(), 1);
  if (bv) bs.push_back(1);
  const int64_t n = as[as.size() - 2], k = as.back(), p = bs.back();
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const size_t nb = std::max(ab.size(), bb.size());
  Shape batch(nb);
  for (size_t d = 0; d < nb; ++d) {
    int64_t x = d < nb - ab.size() ? 1 : ab[d - (nb - ab.size())];
    int64_t y = d < nb - bb.size() ? 1 : bb[d - (nb - bb.size())];
    batch[d] = x == 1 ? y : x;
  }
  Want r{batch, {}};
  if (!av) r.shape.push_back(n);
  if (!bv) r.shape.push_back(p);
  for (int64_t bi = 0; bi < numel_of(batch); ++bi) {
    Shape idx = unravel(bi, batch), ia, ib;
    for (size_t d = nb - ab.size(); d < nb; ++d) ia.push_back(ab[d - (nb - ab.size())] == 1 ? 0 : idx[d]);
    for (size_t d = nb - bb.size(); d < nb; ++d) ib.push_back(bb[d - (nb - bb.size())] == 1 ? 0 : idx[d]);
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < p; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) {
          Shape xa = ia, xb = ib;
          if (!av) xa.push_back(i);
          xa.push_back(q);
          xb.push_back(q);
          if (!bv) xb.push_back(j);
          s += at(a, xa) * at(b, xb);
        }
        r.v.push_back(s);
      }
  }
  return r;
}

double tol(DType dt, int64_t k) { return dt == kFloat32 ? 1e-5 * double(k + 1) : 1e-12 * double(k + 1); }

class LinalgF : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Floats, LinalgF, ::testing::Values(kFloat32, kFloat64),
                         [](const auto &info) { return std::string(name(info.param)); });
} // namespace

// ---------------------------------------------------------------- mm

TEST_P(LinalgF, MmContiguousShapes) {
  const DType dt = GetParam();
  const std::vector<std::array<int64_t, 3>> cases = {{2, 3, 4}, {1, 5, 1}, {7, 1, 3}, {1, 1, 1}, {33, 65, 17},
                                                     {0, 3, 4}, {3, 0, 4}, {3, 4, 0}};
  for (auto [m, k, n] : cases) {
    Tensor a = rnd({m, k}, dt, 1), b = rnd({k, n}, dt, 2);
    Tensor c = mm(a, b);
    EXPECT_EQ(c.dtype(), dt);
    expect_close(c, ref_matmul(a, b), tol(dt, k));
  }
}

TEST_P(LinalgF, MmTransposedOperands) {
  const DType dt = GetParam();
  Tensor at_ = rnd({6, 4}, dt, 3).t(); // [4, 6], strides (1, 4)
  Tensor bt = rnd({5, 6}, dt, 4).t();  // [6, 5], strides (1, 6)
  Tensor a = rnd({4, 6}, dt, 5), b = rnd({6, 5}, dt, 6);
  expect_close(mm(at_, b), ref_matmul(at_, b), tol(dt, 6));
  expect_close(mm(a, bt), ref_matmul(a, bt), tol(dt, 6));
  expect_close(mm(at_, bt), ref_matmul(at_, bt), tol(dt, 6));
  // A transposed view of a wider matrix: leading dimension larger than the size.
  Tensor wide = rnd({6, 9}, dt, 7).narrow(1, 2, 4).t(); // [4, 6], strides (1, 9)
  expect_close(mm(wide, b), ref_matmul(wide, b), tol(dt, 6));
}

TEST_P(LinalgF, MmSlicedAndExpandedOperands) {
  const DType dt = GetParam();
  Tensor a = rnd({4, 12}, dt, 8).slice(1, 0, 12, 2);   // column stride 2: packed
  Tensor b = rnd({12, 5}, dt, 9).slice(0, 1, 12, 2);   // row stride 10: still BLAS-compatible
  Tensor e = rnd({1, 6}, dt, 10).expand({4, 6});        // row stride 0
  Tensor col = rnd({6, 1}, dt, 11).expand({6, 3});      // column stride 0
  expect_close(mm(a, b), ref_matmul(a, b), tol(dt, 6));
  expect_close(mm(e, b), ref_matmul(e, b), tol(dt, 6));
  expect_close(mm(a, col), ref_matmul(a, col), tol(dt, 6));
  Tensor rows = rnd({8, 6}, dt, 12).slice(0, 0, 8, 3); // row stride 18
  expect_close(mm(rows, b), ref_matmul(rows, b), tol(dt, 6));
}

TEST(Linalg, MmIntegers) {
  for (DType dt : {kInt64, kInt32}) {
    Tensor a = rnd({3, 5}, dt, 1), b = rnd({4, 5}, dt, 2).t(); // transposed layout
    Tensor c = mm(a, b);
    EXPECT_EQ(c.dtype(), dt);
    expect_close(c, ref_matmul(a, b), 0);
  }
}

TEST(Linalg, MmErrors) {
  Tensor a = rnd({2, 3}), b = rnd({4, 5});
  EXPECT_KILN_ERROR(mm(a, b), "mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_KILN_ERROR(mm(rnd({3}), b), "mm: mat1 must be a matrix, got shape [3]");
  EXPECT_KILN_ERROR(mm(a, rnd({3, 2, 1})), "mm: mat2 must be a matrix");
  EXPECT_KILN_ERROR(mm(a, rnd({3, 2}, kFloat64)), "mm: expected mat1 and mat2 to have the same dtype, but got float32 != float64");
  EXPECT_KILN_ERROR(mm(rnd({2, 2}, kBool), rnd({2, 2}, kBool)), "mm: bool tensors are not supported");
  EXPECT_KILN_ERROR(mm(Tensor(), a), "mm: mat1 is an undefined tensor");
}

// ---------------------------------------------------------------- bmm

TEST_P(LinalgF, Bmm) {
  const DType dt = GetParam();
  Tensor a = rnd({3, 4, 5}, dt, 1), b = rnd({3, 5, 2}, dt, 2);
  Tensor c = bmm(a, b);
  EXPECT_EQ(c.sizes().vec(), (Shape{3, 4, 2}));
  expect_close(c, ref_matmul(a, b), tol(dt, 5));
  Tensor bt = rnd({3, 2, 5}, dt, 3).transpose(1, 2); // batched transposed view
  expect_close(bmm(a, bt), ref_matmul(a, bt), tol(dt, 5));
  Tensor ap = rnd({4, 3, 5}, dt, 4).permute({1, 0, 2}); // batch stride smaller than row stride
  expect_close(bmm(ap, b), ref_matmul(ap, b), tol(dt, 5));
  expect_close(bmm(rnd({0, 4, 5}, dt), rnd({0, 5, 2}, dt)), Want{{0, 4, 2}, {}}, 0);
}

TEST(Linalg, BmmIntegers) {
  Tensor a = rnd({3, 2, 4}, kInt32, 1), b = rnd({3, 4, 5}, kInt32, 2).transpose(1, 2).transpose(1, 2);
  expect_close(bmm(a, b), ref_matmul(a, b), 0);
  Tensor at_ = rnd({3, 4, 2}, kInt64, 3).transpose(1, 2), b64 = rnd({3, 4, 5}, kInt64, 4);
  expect_close(bmm(at_, b64), ref_matmul(at_, b64), 0);
}

TEST(Linalg, BmmErrors) {
  EXPECT_KILN_ERROR(bmm(rnd({2, 3, 4}), rnd({3, 4, 5})), "bmm: batch1 and batch2 must have the same batch size");
  EXPECT_KILN_ERROR(bmm(rnd({2, 3, 4}), rnd({2, 5, 5})), "bmm: batch1 and batch2 shapes cannot be multiplied ([2, 3, 4] and [2, 5, 5])");
  EXPECT_KILN_ERROR(bmm(rnd({3, 4}), rnd({2, 4, 5})), "bmm: batch1 must be a 3-D tensor");
}

// Many small batches and a few large ones, with kiln's pool at 1 and 2 threads:
// batches spread over the pool with single-threaded BLAS must give the same values.
TEST(Linalg, BmmThreads) {
  Tensor a = rnd({64, 8, 16}, kFloat32, 1), b = rnd({64, 16, 8}, kFloat32, 2);
  Tensor big_a = rnd({3, 96, 80}, kFloat32, 3), big_b = rnd({3, 80, 70}, kFloat32, 4);
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_close(bmm(a, b), ref_matmul(a, b), 1e-4);
    expect_close(bmm(big_a, big_b), ref_matmul(big_a, big_b), 1e-3);
  }
  set_num_threads(saved);
}

// An op called from inside kiln's own parallel_for runs BLAS single-threaded.
TEST(Linalg, MmInsideParallelRegion) {
  Tensor a = rnd({20, 30}, kFloat32, 1), b = rnd({30, 10}, kFloat32, 2);
  Want want = ref_matmul(a, b);
  std::vector<Tensor> outs(4);
  parallel_for(0, 4, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) outs[size_t(i)] = mm(a, b);
  });
  for (const Tensor &o : outs) expect_close(o, want, 1e-4);
}

// Products large enough to be split over kiln's threads (gemm_blas splits the
// longer side at multiples of 16): rows split (m >= n), columns split, sizes
// that leave a ragged last part, transposed and packed operands, and addmm's
// beta, at 1 and 2 threads. Each part is its own BLAS call, so a wrong offset
// into A, B or C shows up as wrong values here.
TEST_P(LinalgF, SplitProductsMatchReference) {
  const DType dt = GetParam();
  const std::vector<std::array<int64_t, 3>> cases = {{200, 70, 40}, {40, 70, 200}, {33, 300, 33}, {17, 1000, 47}};
  const int saved = get_num_threads();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (auto [m, k, n] : cases) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, " << m << "x" << k << "x" << n);
      Tensor a = rnd({m, k}, dt, 1), b = rnd({k, n}, dt, 2);
      Tensor at_ = rnd({k, m}, dt, 3).t(), bt = rnd({n, k}, dt, 4).t();
      Tensor as = rnd({m, 2 * k}, dt, 5).slice(1, 0, 2 * k, 2); // column stride 2: packed first
      expect_close(mm(a, b), ref_matmul(a, b), tol(dt, k));
      expect_close(mm(at_, bt), ref_matmul(at_, bt), tol(dt, k));
      expect_close(mm(as, bt), ref_matmul(as, bt), tol(dt, k));
      Tensor in = rnd({m, n}, dt, 6);
      Want want = ref_matmul(a, b);
      const std::vector<double> iv = values(in); // read once: per element it made the loop quadratic
      for (size_t i = 0; i < want.v.size(); ++i) want.v[i] = 0.5 * iv[i] + 2 * want.v[i];
      expect_close(addmm(in, a, b, 0.5, 2), want, tol(dt, k));
    }
  }
  set_num_threads(saved);
}

// OpenBLAS's thread count is process-wide and must not change per call: a
// caller switching it while another thread is inside OpenBLAS is unsupported.
// kiln keeps it at 1 whatever kiln's own thread count.
TEST(Linalg, OpenBlasStaysSingleThreaded) {
  const int saved = get_num_threads();
  set_num_threads(2);
  Tensor a = rnd({256, 128}, kFloat32, 1), b = rnd({128, 256}, kFloat32, 2);
  expect_close(mm(a, b), ref_matmul(a, b), 1e-3);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  Tensor x = rnd({2, 8, 20, 20}, kFloat32, 3), w = rnd({16, 8, 3, 3}, kFloat32, 4);
  conv2d(x, w);
  EXPECT_EQ(openblas_get_num_threads(), 1);
  set_num_threads(saved);
}

// Several caller threads at once, each running products that split over the
// pool next to batched products whose batches spread over it (the mix that
// used to switch OpenBLAS's thread count under another caller's BLAS call).
TEST(Linalg, ConcurrentCallersSplitProducts) {
  const int saved = get_num_threads();
  set_num_threads(2);
  Tensor a = rnd({160, 96}, kFloat32, 1), b = rnd({96, 120}, kFloat32, 2);
  Tensor ba = rnd({8, 24, 32}, kFloat32, 3), bb = rnd({8, 32, 16}, kFloat32, 4);
  const Want want = ref_matmul(a, b), bwant = ref_matmul(ba, bb);
  std::vector<std::thread> callers;
  std::vector<Tensor> outs(8);
  for (size_t t = 0; t < outs.size(); ++t)
    callers.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep) outs[t] = t % 2 ? bmm(ba, bb) : mm(a, b);
    });
  for (std::thread &c : callers) c.join();
  for (size_t t = 0; t < outs.size(); ++t) expect_close(outs[t], t % 2 ? bwant : want, 1e-3);
  set_num_threads(saved);
}

// ---------------------------------------------------------------- matmul

TEST_P(LinalgF, MatmulRankCombinations) {
  const DType dt = GetParam();
  struct Case {
    Shape a, b, out;
  };
  const std::vector<Case> cases = {
      {{4}, {4}, {}},                       // dot
      {{4}, {4, 3}, {3}},                   // vec-mat
      {{3, 4}, {4}, {3}},                   // mat-vec
      {{3, 4}, {4, 5}, {3, 5}},             // mm
      {{2, 3, 4}, {4}, {2, 3}},             // batched mat-vec
      {{4}, {2, 4, 5}, {2, 5}},             // vec @ batch
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},       // batch @ matrix (folded into one GEMM)
      {{3, 4}, {2, 4, 5}, {2, 3, 5}},       // matrix @ batch
      {{2, 1, 3, 4}, {5, 4, 6}, {2, 5, 3, 6}}, // broadcast batch dims
      {{1, 3, 4}, {2, 4, 5}, {2, 3, 5}},
      {{2, 2, 3, 4}, {2, 2, 4, 1}, {2, 2, 3, 1}},
      {{0, 3, 4}, {4, 5}, {0, 3, 5}},
      {{2, 3, 0}, {0, 5}, {2, 3, 5}}, // k == 0: zeros
  };
  uint32_t seed = 1;
  for (const Case &c : cases) {
    Tensor a = rnd(c.a, dt, seed++), b = rnd(c.b, dt, seed++);
    Tensor out = matmul(a, b);
    EXPECT_EQ(out.sizes().vec(), c.out) << shape_str(c.a) << " @ " << shape_str(c.b);
    expect_close(out, ref_matmul(a, b), tol(dt, c.a.back()));
    expect_close(a.matmul(b), ref_matmul(a, b), tol(dt, c.a.back()));
  }
}

TEST_P(LinalgF, MatmulNonContiguousOperands) {
  const DType dt = GetParam();
  // Batch dims that do not nest (cannot be folded): a permuted [3, 2, 4] @ [4, 5].
  Tensor ap = rnd({2, 3, 4}, dt, 1).permute({1, 0, 2});
  Tensor b = rnd({4, 5}, dt, 2);
  expect_close(matmul(ap, b), ref_matmul(ap, b), tol(dt, 4));
  // Transposed last two dims of a batch, and a transposed matrix.
  Tensor at_ = rnd({2, 4, 3}, dt, 3).transpose(1, 2);
  expect_close(matmul(at_, b), ref_matmul(at_, b), tol(dt, 4));
  Tensor bt = rnd({5, 4}, dt, 4).t();
  expect_close(matmul(at_, bt), ref_matmul(at_, bt), tol(dt, 4));
  // Expanded batch (stride 0) on both sides, and a sliced vector.
  Tensor ae = rnd({1, 3, 4}, dt, 5).expand({6, 3, 4});
  Tensor be = rnd({4, 5}, dt, 6).expand({6, 4, 5});
  expect_close(matmul(ae, be), ref_matmul(ae, be), tol(dt, 4));
  Tensor v = rnd({8}, dt, 7).slice(0, 0, 8, 2);
  expect_close(matmul(ap, v), ref_matmul(ap, v), tol(dt, 4));
  expect_close(matmul(v, b), ref_matmul(v, b), tol(dt, 4));
  // A size-1 middle batch dim with an odd stride still folds correctly.
  Tensor odd = rnd({2, 5, 3, 4}, dt, 8).narrow(1, 1, 1);
  expect_close(matmul(odd, b), ref_matmul(odd, b), tol(dt, 4));
}

TEST(Linalg, MatmulIntegers) {
  Tensor a = rnd({2, 3, 4}, kInt64, 1), b = rnd({4, 2}, kInt64, 2);
  expect_close(matmul(a, b), ref_matmul(a, b), 0);
  Tensor x = rnd({5}, kInt32, 3), y = rnd({5}, kInt32, 4);
  expect_close(matmul(x, y), ref_matmul(x, y), 0);
}

TEST(Linalg, MatmulErrors) {
  EXPECT_KILN_ERROR(matmul(rnd({}), rnd({3})), "matmul: both arguments need to be at least 1D, but they are 0D and 1D");
  EXPECT_KILN_ERROR(matmul(rnd({3}), rnd({4})), "matmul: shapes [3] and [4] cannot be multiplied");
  EXPECT_KILN_ERROR(matmul(rnd({2, 3, 4}), rnd({5, 6})), "matmul: shapes [2, 3, 4] and [5, 6] cannot be multiplied (3x4 and 5x6)");
  EXPECT_KILN_ERROR(matmul(rnd({2, 3, 4}), rnd({3, 4, 5})), "matmul: shapes [2] and [3] are not broadcastable");
  EXPECT_KILN_ERROR(matmul(rnd({3}, kInt64), rnd({3})), "matmul: expected self and other to have the same dtype");
}

// ---------------------------------------------------------------- addmm

TEST_P(LinalgF, Addmm) {
  const DType dt = GetParam();
  Tensor m1 = rnd({3, 4}, dt, 1), m2 = rnd({4, 5}, dt, 2);
  Want prod = ref_matmul(m1, m2);
  for (const Shape &ishape : std::vector<Shape>{{3, 5}, {5}, {1, 5}, {3, 1}, {}}) {
    Tensor in = rnd(ishape, dt, 3);
    for (auto [beta, alpha] : std::vector<std::pair<double, double>>{{1, 1}, {0.5, 2}, {0, 1.5}, {-1, 0}}) {
      Want want{{3, 5}, {}};
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 5; ++j) {
          Shape idx;
          if (ishape.size() == 2) idx = {ishape[0] == 1 ? 0 : i, ishape[1] == 1 ? 0 : j};
          if (ishape.size() == 1) idx = {j};
          want.v.push_back(beta * at(in, idx) + alpha * prod.v[size_t(i * 5 + j)]);
        }
      expect_close(addmm(in, m1, m2, beta, alpha), want, tol(dt, 4));
    }
  }
  // Transposed mat1 and default beta = alpha = 1.
  Tensor m1t = rnd({4, 3}, dt, 4).t(), in = rnd({3, 5}, dt, 5);
  Want p2 = ref_matmul(m1t, m2);
  for (size_t i = 0; i < p2.v.size(); ++i) p2.v[i] += values(in)[i];
  expect_close(addmm(in, m1t, m2), p2, tol(dt, 4));
}

TEST(Linalg, AddmmBetaZeroIgnoresNan) {
  Tensor in = from_values({2, 2}, {NAN, NAN, NAN, NAN}, kFloat32);
  Tensor m1 = rnd({2, 3}, kFloat32, 1), m2 = rnd({3, 2}, kFloat32, 2);
  expect_close(addmm(in, m1, m2, 0, 1), ref_matmul(m1, m2), 1e-5);
}

TEST(Linalg, AddmmIntegersAndErrors) {
  Tensor in = rnd({2, 2}, kInt64, 1), m1 = rnd({2, 3}, kInt64, 2), m2 = rnd({3, 2}, kInt64, 3);
  Want p = ref_matmul(m1, m2);
  for (size_t i = 0; i < p.v.size(); ++i) p.v[i] = 2 * values(in)[i] + 3 * p.v[i];
  expect_close(addmm(in, m1, m2, 2, 3), p, 0);
  EXPECT_KILN_ERROR(addmm(in, m1, m2, 0.5, 1), "addmm: for integral input tensors, beta and alpha");
  EXPECT_KILN_ERROR(addmm(rnd({3, 2}), rnd({2, 3}), rnd({3, 2})), "addmm: self of shape [3, 2] cannot be broadcast to [2, 2]");
  EXPECT_KILN_ERROR(addmm(rnd({2, 2}), rnd({2, 3}), rnd({2, 2})), "addmm: mat1 and mat2 shapes cannot be multiplied (2x3 and 2x2)");
}

// ---------------------------------------------------------------- linear

namespace {
Want ref_linear(const Tensor &x, const Tensor &w, const Tensor &b) {
  Shape shape = x.sizes().vec();
  const int64_t in_f = shape.back(), out_f = w.size(0);
  shape.back() = out_f;
  Want r{shape, {}};
  const Shape lead(shape.begin(), shape.end() - 1);
  for (int64_t row = 0; row < numel_of(lead); ++row) {
    Shape idx = unravel(row, lead);
    for (int64_t o = 0; o < out_f; ++o) {
      double s = b.defined() ? at(b, b.dim() == 0 ? Shape{} : Shape{b.size(0) == 1 ? 0 : o}) : 0.0;
      for (int64_t i = 0; i < in_f; ++i) {
        Shape xi = idx;
        xi.push_back(i);
        s += at(x, xi) * at(w, {o, i});
      }
      r.v.push_back(s);
    }
  }
  return r;
}
} // namespace

TEST_P(LinalgF, Linear) {
  const DType dt = GetParam();
  Tensor w = rnd({5, 4}, dt, 1), b = rnd({5}, dt, 2);
  for (const Shape &xs : std::vector<Shape>{{3, 4}, {2, 3, 4}, {4}, {2, 1, 3, 4}, {0, 4}}) {
    Tensor x = rnd(xs, dt, 3);
    expect_close(linear(x, w, b), ref_linear(x, w, b), tol(dt, 4));
    expect_close(linear(x, w), ref_linear(x, w, Tensor()), tol(dt, 4));
  }
  // Non-contiguous input (rows that do not nest), transposed weight storage, bias of size 1.
  Tensor xp = rnd({3, 2, 4}, dt, 4).permute({1, 0, 2});
  Tensor wt = rnd({4, 5}, dt, 5).t();
  Tensor b1 = rnd({1}, dt, 6);
  expect_close(linear(xp, wt, b1), ref_linear(xp, wt, b1), tol(dt, 4));
  expect_close(linear(xp, w, b), ref_linear(xp, w, b), tol(dt, 4));
  // in_features == 0: the result is the bias.
  Tensor w0 = rnd({5, 0}, dt), x0 = rnd({2, 0}, dt);
  expect_close(linear(x0, w0, b), ref_linear(x0, w0, b), 0);
}

TEST(Linalg, LinearErrors) {
  EXPECT_KILN_ERROR(linear(rnd({3, 4}), rnd({5, 3})), "linear: input and weight shapes cannot be multiplied (input [3, 4], weight [5, 3])");
  EXPECT_KILN_ERROR(linear(rnd({3, 4}), rnd({4})), "linear: weight must be 2-D");
  EXPECT_KILN_ERROR(linear(rnd({3, 4}), rnd({5, 4}), rnd({4})), "linear: bias of shape [4] does not match out_features 5");
  EXPECT_KILN_ERROR(linear(rnd({3, 4}), rnd({5, 4}), rnd({5}, kFloat64)), "linear: expected bias to have dtype float32");
}

// ---------------------------------------------------------------- meta and adapters

TEST(Linalg, MetaShapes) {
  EXPECT_EQ(mm(meta({2, 3}), meta({3, 7})).sizes().vec(), (Shape{2, 7}));
  EXPECT_TRUE(mm(meta({2, 3}), rnd({3, 7})).is_meta());
  EXPECT_EQ(bmm(meta({4, 2, 3}), meta({4, 3, 7})).sizes().vec(), (Shape{4, 2, 7}));
  EXPECT_EQ(matmul(meta({2, 1, 3, 4}), meta({4, 5})).sizes().vec(), (Shape{2, 1, 3, 5}));
  EXPECT_EQ(matmul(meta({4}), meta({6, 4, 2})).sizes().vec(), (Shape{6, 2}));
  EXPECT_EQ(addmm(meta({7}), meta({2, 3}), meta({3, 7})).sizes().vec(), (Shape{2, 7}));
  EXPECT_EQ(linear(meta({8, 3, 4}, kFloat64), meta({6, 4}, kFloat64)).dtype(), kFloat64);
  EXPECT_KILN_ERROR(mm(meta({2, 3}), meta({4, 7})), "mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x7)");
}

TEST(Linalg, Adapters) {
  Tensor a = rnd({3, 4}, kFloat32, 1), b = rnd({4, 5}, kFloat32, 2), in = rnd({5}, kFloat32, 3);
  expect_same(run_op(OpId::Mm, {a, b}, {}).at(0), mm(a, b));
  Tensor ba = rnd({2, 3, 4}, kFloat32, 4), bb = rnd({2, 4, 5}, kFloat32, 5);
  expect_same(run_op(OpId::Bmm, {ba, bb}, {}).at(0), bmm(ba, bb));
  expect_same(run_op(OpId::Matmul, {ba, b}, {}).at(0), matmul(ba, b));
  expect_same(run_op(OpId::Addmm, {in, a, b}, {Scalar(0.5), Scalar(2)}).at(0), addmm(in, a, b, 0.5, 2));
  Tensor w = rnd({6, 4}, kFloat32, 6), bias = rnd({6}, kFloat32, 7);
  expect_same(run_op(OpId::Linear, {ba, w, bias}, {}).at(0), linear(ba, w, bias));
  expect_same(run_op(OpId::Linear, {ba, w, Tensor()}, {}).at(0), linear(ba, w));
  EXPECT_KILN_ERROR(run_op(OpId::Mm, {a}, {}), "mm: expected 2 inputs, got 1");
}
