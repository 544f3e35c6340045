// kiln's JIT GEMM (codegen/gemm) against a naive double-precision loop with
// BLAS semantics, over the edge sweep of issue 15: every micro-kernel row count,
// N tails, K / M / N across cache blocks, transposed and strided operands,
// alpha / beta, 1 and 2 threads, NaN and inf, the AVX2 kernels next to the
// host's, f32 and f64, and packed weights equal to the unpacked path.
//
// Tolerance (stated as the issue asks): |c - ref| <= (K + 4) * eps(T) * bound,
// bound = |alpha| * sum_p |a_ip| |b_pj| + |beta| |c0_ij| (the classic gamma_K
// bound of a dot product of length K, plus the alpha/beta roundings).
#include <cstdlib>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "codegen/gemm/gemm.h"
#include "codegen/gemm/path.h"
#include "codegen/gemm/ukernel.h"
#include "runtime/error.h"
#include "runtime/ops.h"

using namespace kiln;

namespace {

const int64_t kSweep[] = {1, 2, 3, 7, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 255, 257, 1000};
constexpr int kSweepLen = 17;

template <class T> struct Case {
  bool ta = false, tb = false;
  int64_t M = 1, N = 1, K = 1, lda = 0, ldb = 0, ldc = 0;
  T alpha = 1, beta = 0;
  std::vector<T> A, B, C0;
};

// Operands filled with values in [-1, 1] (no overflow, so the double and T
// loops agree on which results are inf or NaN); `pad` extra elements per row.
template <class T> Case<T> make_case(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t pad, T alpha, T beta,
                                     uint32_t seed) {
  Case<T> c;
  c.ta = ta, c.tb = tb, c.M = M, c.N = N, c.K = K, c.alpha = alpha, c.beta = beta;
  // BLAS: ld >= max(1, columns).
  c.lda = std::max<int64_t>(1, ta ? M : K) + pad, c.ldb = std::max<int64_t>(1, tb ? K : N) + pad, c.ldc = N + pad;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  auto fill = [&](std::vector<T> &v, int64_t n) {
    v.resize(size_t(n));
    for (T &x : v) x = T(u(rng));
  };
  fill(c.A, (ta ? K : M) * c.lda);
  fill(c.B, (tb ? N : K) * c.ldb);
  fill(c.C0, M * c.ldc);
  return c;
}

template <class T> T a_at(const Case<T> &c, int64_t i, int64_t p) { return c.ta ? c.A[p * c.lda + i] : c.A[i * c.lda + p]; }
template <class T> T b_at(const Case<T> &c, int64_t p, int64_t j) { return c.tb ? c.B[j * c.ldb + p] : c.B[p * c.ldb + j]; }

struct Ref {
  std::vector<double> value, bound;
};

// BLAS's definition, in double: alpha == 0 or K == 0 reads neither A nor B,
// beta == 0 does not read C.
template <class T> Ref reference(const Case<T> &c) {
  Ref r;
  r.value.assign(size_t(c.M * c.N), 0.0);
  r.bound.assign(size_t(c.M * c.N), 0.0);
  const bool product = c.alpha != T(0) && c.K > 0;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < c.N; ++j) {
      double s = 0, sa = 0;
      for (int64_t p = 0; product && p < c.K; ++p) {
        const double x = double(a_at(c, i, p)) * double(b_at(c, p, j));
        s += x, sa += std::fabs(x);
      }
      const double c0 = c.beta == T(0) ? 0.0 : double(c.beta) * double(c.C0[i * c.ldc + j]);
      r.value[i * c.N + j] = (product ? double(c.alpha) * s : 0.0) + c0;
      r.bound[i * c.N + j] = std::fabs(double(c.alpha)) * sa + std::fabs(c0);
    }
  return r;
}

// Compares C with the reference (NaN-ness and inf positions exactly) and
// checks that the padding between rows of C was not touched.
template <class T> void expect_matches(const Case<T> &c, const std::vector<T> &C, const Ref &r, const std::string &what) {
  const double eps = std::numeric_limits<T>::epsilon();
  int bad = 0;
  for (int64_t i = 0; i < c.M && bad < 5; ++i) {
    for (int64_t j = 0; j < c.ldc && bad < 5; ++j) {
      const double got = C[i * c.ldc + j];
      if (j >= c.N) { // padding: untouched
        if (C[i * c.ldc + j] != c.C0[i * c.ldc + j]) ++bad, ADD_FAILURE() << what << ": wrote padding at " << i << "," << j;
        continue;
      }
      const double want = r.value[i * c.N + j];
      bool ok;
      if (std::isnan(want) || std::isinf(want)) ok = std::isnan(want) ? std::isnan(got) : got == want;
      else ok = std::isfinite(got) && std::fabs(got - want) <= (double(c.K) + 4) * eps * r.bound[i * c.N + j] + 1e-300;
      if (!ok) ++bad, ADD_FAILURE() << what << ": C[" << i << "," << j << "] = " << got << ", want " << want;
    }
  }
}

template <class T> std::vector<T> run_gemm(const Case<T> &c, const gemm::Config &cfg) {
  std::vector<T> C = c.C0;
  gemm::gemm<T>(c.ta, c.tb, c.M, c.N, c.K, c.alpha, c.A.data(), c.lda, c.B.data(), c.ldb, c.beta, C.data(), c.ldc, cfg);
  return C;
}

template <class T> std::string describe(const Case<T> &c, const gemm::Config &cfg) {
  return std::string(sizeof(T) == 4 ? "f32" : "f64") + " M=" + std::to_string(c.M) + " N=" + std::to_string(c.N) +
         " K=" + std::to_string(c.K) + " ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) +
         " lda=" + std::to_string(c.lda) + " ldb=" + std::to_string(c.ldb) + " ldc=" + std::to_string(c.ldc) +
         " alpha=" + std::to_string(double(c.alpha)) + " beta=" + std::to_string(double(c.beta)) +
         " threads=" + std::to_string(cfg.threads) + " [" + cfg.to_string() + "]";
}

// The ISAs this host can run: its own, and AVX2 on an AVX-512 host; and the
// configurations product_config picks for the matmul family (the narrower
// tile, the longer k blocks), where they differ from the default.
template <class T> std::vector<gemm::Config> isa_configs() {
  std::vector<gemm::Config> out{gemm::default_config<T>()};
  if (gemm::host_isa() == "avx512") out.push_back(gemm::config_for_isa<T>("avx2"));
  for (int64_t N : {48, 64}) {
    const gemm::Config p = gemm::product_config<T>(N);
    if (p.nr() != out[0].nr() || p.kc != out[0].kc) out.push_back(p);
  }
  return out;
}

// isa_configs, and for a row-major op(A) (not ta) each again with kernels
// that read A in place (Config::a_in_place: no packing of A).
template <class T> std::vector<gemm::Config> configs_for(bool ta) {
  std::vector<gemm::Config> out = isa_configs<T>();
  if (ta) return out;
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) {
    out.push_back(out[i]);
    out.back().a_in_place = true;
  }
  return out;
}

// Tiny cache blocks, so that small shapes cross every kc / mc / nc boundary.
template <class T> gemm::Config tiny_blocks(gemm::Config c) {
  c.kc = 5, c.mc = 2 * c.mr, c.nc = 2 * c.nr();
  return c;
}

template <class T> void sweep(int threads) {
  set_num_threads(2);
  for (int t = 0; t < kSweepLen; ++t) {
    // Multiplying the index by 5 and 11 (units mod 17) permutes the values: every value on every axis.
    const int64_t M = kSweep[t], N = kSweep[(t * 5 + 3) % kSweepLen], K = kSweep[(t * 11 + 7) % kSweepLen];
    const T alpha = t % 3 == 0 ? T(1) : T(-0.75), beta = t % 4 == 0 ? T(0) : t % 4 == 1 ? T(1) : T(0.5);
    Case<T> c = make_case<T>(t & 1, t & 2, M, N, K, t % 3 == 2 ? 3 : 0, alpha, beta, 1000 + t);
    const Ref r = reference(c);
    for (gemm::Config cfg : configs_for<T>(c.ta)) {
      cfg.threads = threads;
      expect_matches(c, run_gemm(c, cfg), r, describe(c, cfg));
      if (M * N * K <= 1 << 22) {
        gemm::Config tiny = tiny_blocks<T>(cfg);
        expect_matches(c, run_gemm(c, tiny), r, describe(c, tiny));
      }
    }
  }
}

TEST(GemmJit, SweepF32OneThread) { sweep<float>(1); }
TEST(GemmJit, SweepF64OneThread) { sweep<double>(1); }
TEST(GemmJit, SweepF32TwoThreads) { sweep<float>(2); }
TEST(GemmJit, SweepF64TwoThreads) { sweep<double>(2); }

// Every row count 1..mr of the micro-kernel with every column tail 1..nr + 1.
template <class T> void every_tile_edge() {
  for (gemm::Config cfg : configs_for<T>(false)) {
    cfg.threads = 1;
    for (int64_t M = 1; M <= cfg.mr + 1; ++M)
      for (int64_t N = 1; N <= cfg.nr() + 1; N += (N < 4 || N > cfg.nr() - 3) ? 1 : 5) {
        Case<T> c = make_case<T>(false, false, M, N, 9, 1, T(1.5), T(0.5), uint32_t(M * 100 + N));
        expect_matches(c, run_gemm(c, cfg), reference(c), describe(c, cfg));
      }
  }
}
TEST(GemmJit, EveryTileEdgeF32) { every_tile_edge<float>(); }
TEST(GemmJit, EveryTileEdgeF64) { every_tile_edge<double>(); }

// NaN and inf in A, B and C land where BLAS puts them (compared with the double loop).
template <class T> void special_values(int threads) {
  set_num_threads(2);
  const T inf = std::numeric_limits<T>::infinity(), nan = std::numeric_limits<T>::quiet_NaN();
  for (gemm::Config cfg : configs_for<T>(false)) {
    cfg.threads = threads;
    for (T beta : {T(0), T(1)}) {
      Case<T> c = make_case<T>(false, true, 37, 70, 300, 2, T(1), beta, 7);
      c.A[3 * c.lda + 5] = nan;              // row 3 of C: NaN
      c.A[10 * c.lda + 299] = inf;           // row 10: +-inf by the sign of B
      c.B[20 * c.ldb + 7] = -inf;            // column 20: inf, NaN where row 10 meets it
      c.B[65 * c.ldb + 100] = nan;           // column 65 (in the N tail): NaN
      c.C0[30 * c.ldc + 40] = nan;           // read only when beta != 0
      c.C0[31 * c.ldc + 41] = inf;
      expect_matches(c, run_gemm(c, cfg), reference(c), describe(c, cfg));
    }
  }
}
TEST(GemmJit, NanInfPropagateF32OneThread) { special_values<float>(1); }
TEST(GemmJit, NanInfPropagateF32TwoThreads) { special_values<float>(2); }
TEST(GemmJit, NanInfPropagateF64TwoThreads) { special_values<double>(2); }

// The configuration per N: on an AVX-512 host, float32 products whose N leaves
// much of a 48-column panel empty take 32-column panels; multiples of 48 and
// large N keep the default tile; all take k blocks twice the default's.
// Float64 and other ISAs always keep the default.
TEST(GemmJit, ProductConfigPicksTileAndKBlock) {
  const gemm::Config d = gemm::default_config<float>();
  auto nr = [](int64_t N) { return gemm::product_config<float>(N).nr(); };
  for (int64_t N : {48, 96, 768, 2304, 3072}) EXPECT_EQ(nr(N), d.nr()) << "N=" << N;
  EXPECT_EQ(gemm::product_config<double>(64).nr(), gemm::default_config<double>().nr());
  if (gemm::host_isa() != "avx512" || std::getenv("KILN_GEMM_TILE")) GTEST_SKIP() << "the default tile is not 8 x 3";
  for (int64_t N : {32, 64, 128, 160, 256}) EXPECT_EQ(nr(N), 32) << "N=" << N;
  EXPECT_EQ(nr(2048), 48) << "2048 = 42 x 48 + 32 wastes under 1%";
  EXPECT_EQ(nr(80), 48) << "80 wastes 16 columns either way";
  for (int64_t N : {1, 17, 64, 129, 257}) {
    EXPECT_EQ(gemm::product_config<float>(N).mr, d.mr) << "N=" << N;
    EXPECT_EQ(gemm::product_config<float>(N).kc, 2 * d.kc) << "N=" << N << ": k blocks twice the default";
  }
}

// BLAS quick returns: alpha == 0 never reads A or B (their NaNs do not reach C);
// K == 0 scales C by beta; beta == 0 overwrites a NaN C.
TEST(GemmJit, AlphaZeroAndEmptyK) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Case<float> c = make_case<float>(false, false, 20, 40, 10, 0, 0.f, 0.5f, 3);
  c.A[0] = nan;
  expect_matches(c, run_gemm(c, gemm::default_config<float>()), reference(c), "alpha=0");
  Case<float> e = make_case<float>(false, false, 20, 40, 0, 0, 1.f, 0.f, 4);
  e.C0[5] = nan;
  expect_matches(e, run_gemm(e, gemm::default_config<float>()), reference(e), "K=0 beta=0");
  e.beta = 2.f;
  expect_matches(e, run_gemm(e, gemm::default_config<float>()), reference(e), "K=0 beta=2");
}

// Weights packed once give bit-identical results to the unpacked path (same
// kernels, same k order), transposed (linear's W[N, K]) or not. Packings of
// 2^18 elements or more are spread over the pool (2304 x 768; 1000 x 300 with a
// short last k block and a panel count that is no multiple of the 16-panel items).
template <class T> void packed_equals_unpacked(int threads) {
  set_num_threads(2);
  for (gemm::Config cfg : configs_for<T>(false)) {
    cfg.threads = threads;
    for (auto [M, N, K] : {std::tuple{128, 2304, 768}, {33, 1000, 300}, {1, 64, 64}, {65, 33, 1000}, {17, 257, 129}})
      for (bool tb : {false, true}) {
        Case<T> c = make_case<T>(false, tb, M, N, K, 1, T(1), T(0.5), uint32_t(M + N + K));
        auto packed = gemm::pack_b<T>(tb, K, N, c.B.data(), c.ldb, cfg);
        std::vector<T> C = c.C0;
        gemm::gemm_packed<T>(false, M, c.alpha, c.A.data(), c.lda, packed, c.beta, C.data(), c.ldc, threads);
        const std::vector<T> U = run_gemm(c, cfg);
        EXPECT_EQ(0, std::memcmp(C.data(), U.data(), C.size() * sizeof(T))) << describe(c, cfg);
        if (M * N * K <= 1 << 22) expect_matches(c, C, reference(c), "packed " + describe(c, cfg));
      }
  }
}
// Packings that outlive a call: 64-byte aligned; from 2 MiB on, 2 MiB aligned so
// that whole transparent huge pages back them (the advice is taken or not; the
// alignment is what kiln controls). Every byte is writable (ASan checks the size).
TEST(GemmJit, AllocPackingAlignment) {
  for (size_t bytes : {size_t(1), size_t(100), size_t(2 << 20) - 4, size_t(2) << 20, size_t(3) << 20, size_t(28) << 20}) {
    void *p = gemm::alloc_packing(bytes);
    ASSERT_NE(p, nullptr) << bytes;
    const size_t align = bytes >= (size_t(2) << 20) ? (size_t(2) << 20) : 64;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % align, 0u) << bytes << " bytes";
    std::memset(p, 0x5a, bytes);
    std::free(p);
  }
}

TEST(GemmJit, PackedEqualsUnpackedF32OneThread) { packed_equals_unpacked<float>(1); }
TEST(GemmJit, PackedEqualsUnpackedF32TwoThreads) { packed_equals_unpacked<float>(2); }
TEST(GemmJit, PackedEqualsUnpackedF64TwoThreads) { packed_equals_unpacked<double>(2); }

// op(A) packed once (pack_a_shared, 1 and 2 packing threads) and read by
// products over row tiles x column tiles, as the executor's contraction steps
// do: each tile against the naive loop. M tails (M % mr), row tiles from mr-
// aligned r0, K across kc blocks with a short last block, row-major A (the
// transposing f32 pack) and transposed A (ta: the scalar pack), 1 and 2 threads
// inside each product, both the unpacked-B (gemm_strided) and packed-B entries.
template <class T> void shared_a_tiles(int threads) {
  set_num_threads(2);
  for (gemm::Config cfg : isa_configs<T>()) {
    const int64_t mr = cfg.mr, nr = cfg.nr();
    const gemm::KernelSet ks = gemm::resolve_kernels<T>(cfg, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13});
    for (auto [M, N, K] : {std::tuple{128, 2304 / 8, 768}, {129, 100, 300}, {7, 3 * nr + 5, 777}, {17, 2 * nr, 9},
                           {3 * mr + 5, nr + 1, 1}})
      for (bool ta : {false, true}) {
        Case<T> c = make_case<T>(ta, true, M, N, K, 2, T(1), T(0), uint32_t(7 * M + N + K));
        const Ref r = reference(c);
        const int64_t ars = ta ? 1 : c.lda, acs = ta ? c.lda : 1;
        const T *ap = gemm::pack_a_shared<T>(M, K, c.A.data(), ars, acs, cfg, threads);
        const auto packed = gemm::pack_b<T>(true, K, N, c.B.data(), c.ldb, cfg);
        // Row tiles of 2 * mr rows (the last one the M tail), column tiles of nr.
        for (bool use_packed_b : {false, true}) {
          std::vector<T> C = c.C0;
          for (int64_t r0 = 0; r0 < M; r0 += 2 * mr)
            for (int64_t j0 = 0; j0 < N; j0 += nr) {
              const int64_t m = std::min(2 * mr, M - r0), n = std::min(nr, N - j0);
              const gemm::PackedARef<T> ref{ap, M, r0};
              T *ct = C.data() + r0 * c.ldc + j0;
              if (use_packed_b)
                gemm::gemm_packed_cols<T>(m, T(1), nullptr, 0, 0, packed, j0, n, T(0), ct, c.ldc, ks, threads, ref);
              else
                gemm::gemm_strided<T>(m, n, K, T(1), nullptr, 0, 0, c.B.data() + j0 * c.ldb, 1, c.ldb, T(0), ct,
                                      c.ldc, ks, threads, ref);
            }
          expect_matches(c, C, r, std::string("shared A, packed B ") + std::to_string(use_packed_b) + " " +
                                      describe(c, cfg) + " packing threads " + std::to_string(threads));
        }
      }
  }
}
TEST(GemmJit, SharedAOverTilesF32OneThread) { shared_a_tiles<float>(1); }
TEST(GemmJit, SharedAOverTilesF32TwoThreads) { shared_a_tiles<float>(2); }
TEST(GemmJit, SharedAOverTilesF64TwoThreads) { shared_a_tiles<double>(2); }

// The N split inside one call (M below 16 row blocks per thread, many panels)
// packs A once for both threads: every row of the 2-thread result equals the
// 1-thread one bit for bit (same kernels, same k order) and the naive loop.
TEST(GemmJit, NSplitSharesASameBitsTwoThreads) {
  set_num_threads(2);
  for (gemm::Config cfg : configs_for<float>(false))
    for (auto [M, N, K] : {std::tuple{128, 2304, 768}, {13, 1000, 1000}, {129, 480, 33}}) {
      Case<float> c = make_case<float>(false, true, M, N, K, 0, 1.f, 0.f, uint32_t(M + K));
      cfg.threads = 1;
      const std::vector<float> one = run_gemm(c, cfg);
      cfg.threads = 2;
      const std::vector<float> two = run_gemm(c, cfg);
      EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float))) << describe(c, cfg);
      expect_matches(c, two, reference(c), describe(c, cfg));
    }
}

TEST(GemmJit, SharedABadArgumentsThrow) {
  const gemm::Config cfg = gemm::default_config<float>();
  std::vector<float> a(64 * 64), c(64 * 64);
  // Larger than the shared scratch's bound.
  const int64_t big = gemm::kSharedABytes / int64_t(sizeof(float)) / 64 + 1;
  EXPECT_THROW(gemm::pack_a_shared<float>(64, big, a.data(), big, 1, cfg, 1), Error);
  EXPECT_THROW(gemm::pack_a_shared<float>(8, 8, a.data(), -1, 1, cfg, 1), Error);
  const float *ap = gemm::pack_a_shared<float>(64, 64, a.data(), 64, 1, cfg, 1);
  const gemm::KernelSet ks = gemm::resolve_kernels<float>(cfg, {64, 3});
  auto run = [&](int64_t m, int64_t r0) {
    gemm::gemm_strided<float>(m, 64, 64, 1.f, nullptr, 0, 0, a.data(), 64, 1, 0.f, c.data(), 64, ks, 1,
                              gemm::PackedARef<float>{ap, 64, r0});
  };
  EXPECT_THROW(run(3, 1), Error);           // r0 not a multiple of mr
  EXPECT_THROW(run(3, 64 - cfg.mr + 8), Error); // rows past the packed ones
  EXPECT_NO_THROW(run(3, 64 - cfg.mr));
}

// Any element strides (the executor's strided views): A and B read through
// non-unit strides on both axes, and a broadcast (stride 0) operand.
template <class T> void strided_operands(int threads) {
  set_num_threads(2);
  for (gemm::Config cfg : isa_configs<T>()) {
    cfg.threads = threads;
    for (auto [M, N, K] : {std::tuple{65, 50, 33}, {300, 17, 129}, {7, 257, 64}}) {
      // Both strides of A and B other than 1 (and than the row length).
      const int64_t ars = 3, acs = 3 * M + 1, brs = 2 * N + 5, bcs = 2;
      Case<T> c = make_case<T>(false, false, M, N, K, 2, T(0.5), T(-1), uint32_t(M * N));
      std::vector<T> As(size_t((M - 1) * ars + (K - 1) * acs + 1)), Bs(size_t((K - 1) * brs + (N - 1) * bcs + 1));
      for (int64_t i = 0; i < M; ++i)
        for (int64_t p = 0; p < K; ++p) As[i * ars + p * acs] = c.A[i * c.lda + p];
      for (int64_t p = 0; p < K; ++p)
        for (int64_t j = 0; j < N; ++j) Bs[p * brs + j * bcs] = c.B[p * c.ldb + j];
      std::vector<T> C = c.C0;
      gemm::gemm_strided<T>(M, N, K, c.alpha, As.data(), ars, acs, Bs.data(), brs, bcs, c.beta, C.data(), c.ldc, cfg);
      expect_matches(c, C, reference(c), "strided " + describe(c, cfg));
      // B broadcast along k (stride 0): every row of op(B) is row 0.
      for (int64_t p = 1; p < K; ++p)
        for (int64_t j = 0; j < N; ++j) c.B[p * c.ldb + j] = c.B[j];
      C = c.C0;
      gemm::gemm_strided<T>(M, N, K, c.alpha, As.data(), ars, acs, c.B.data(), 0, 1, c.beta, C.data(), c.ldc, cfg);
      expect_matches(c, C, reference(c), "broadcast B " + describe(c, cfg));
    }
  }
}
TEST(GemmJit, StridedOperandsF32OneThread) { strided_operands<float>(1); }
TEST(GemmJit, StridedOperandsF64TwoThreads) { strided_operands<double>(2); }

// Callers on several threads at once (each splitting its product over the
// pool), first calls included: kernels compile once, scratch is per thread.
TEST(GemmJit, ConcurrentCallersTwoThreads) {
  set_num_threads(2);
  std::vector<Case<float>> cases;
  for (int t = 0; t < 4; ++t) cases.push_back(make_case<float>(t & 1, t & 2, 100 + 37 * t, 90 + 11 * t, 200, 1, 1.f, 0.5f, 50 + t));
  std::vector<std::vector<float>> got(cases.size());
  std::vector<std::thread> threads;
  for (size_t t = 0; t < cases.size(); ++t)
    threads.emplace_back([&, t] {
      gemm::Config cfg = gemm::config_for_isa<float>(gemm::host_isa());
      cfg.mr = 5, cfg.mc = 5 * 8; // a tile no other test compiled: the callers race to compile it
      cfg.threads = 2;
      for (int rep = 0; rep < 3; ++rep) got[t] = run_gemm(cases[t], cfg);
    });
  for (auto &th : threads) th.join();
  for (size_t t = 0; t < cases.size(); ++t) expect_matches(cases[t], got[t], reference(cases[t]), "concurrent");
}

TEST(GemmJit, BadArgumentsThrow) {
  std::vector<float> a(100), b(100), c(100);
  auto call = [&](int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
    gemm::sgemm(false, false, M, N, K, 1.f, a.data(), lda, b.data(), ldb, 0.f, c.data(), ldc);
  };
  EXPECT_THROW(call(-1, 2, 2, 2, 2, 2), Error);
  EXPECT_THROW(call(2, 2, 4, 3, 2, 2), Error); // lda < K
  EXPECT_THROW(call(2, 4, 2, 2, 3, 4), Error); // ldb < N
  EXPECT_THROW(call(2, 4, 2, 2, 4, 3), Error); // ldc < N
  gemm::Config bad = gemm::default_config<float>();
  bad.mc = bad.mr + 1;
  EXPECT_THROW(gemm::gemm<float>(false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2, bad), Error);
  // Kernels that read A in place take a row-major op(A) only, and no packed A.
  gemm::Config in_place = gemm::default_config<float>();
  in_place.a_in_place = true;
  EXPECT_THROW(gemm::gemm<float>(true, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2, in_place),
               Error);
  EXPECT_NO_THROW(
      gemm::gemm<float>(false, false, 2, 2, 2, 1.f, a.data(), 2, b.data(), 2, 0.f, c.data(), 2, in_place));
  const gemm::KernelSet ks = gemm::resolve_kernels<float>(in_place, {8});
  const float *ap = gemm::pack_a_shared<float>(8, 8, a.data(), 8, 1, gemm::default_config<float>(), 1);
  EXPECT_THROW(gemm::gemm_strided<float>(8, 8, 8, 1.f, a.data(), 8, 1, b.data(), 8, 1, 0.f, c.data(), 8, ks, 1,
                                         gemm::PackedARef<float>{ap, 8, 0}),
               Error);
  EXPECT_THROW(gemm::micro_kernel<float>(in_place, 1), Error);
}

TEST(GemmJit, FmaPeakProbeIsPositive) {
  set_num_threads(2);
  EXPECT_GT(gemm::fma_peak_gflops(1, 5), 0.0);
}

} // namespace

// KILN_GEMM's values: the two names, nothing else (an unknown one warns at first use).
TEST(GemmJit, PathNamesParseAndRoundTrip) {
  using kiln::gemm::Path;
  EXPECT_EQ(kiln::gemm::parse_path("jit"), Path::Jit);
  EXPECT_EQ(kiln::gemm::parse_path("blas"), Path::Blas);
  EXPECT_FALSE(kiln::gemm::parse_path("JIT").has_value());
  EXPECT_FALSE(kiln::gemm::parse_path("").has_value());
  EXPECT_FALSE(kiln::gemm::parse_path("openblas").has_value());
  for (Path p : {Path::Jit, Path::Blas}) EXPECT_EQ(kiln::gemm::parse_path(kiln::gemm::path_name(p)), p);
  const Path before = kiln::gemm::path();
  kiln::gemm::set_path(Path::Blas);
  EXPECT_EQ(kiln::gemm::path(), Path::Blas);
  kiln::gemm::set_path(Path::Jit);
  EXPECT_EQ(kiln::gemm::path(), Path::Jit);
  kiln::gemm::set_path(before);
}
