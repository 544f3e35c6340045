// Kernels whose outputs are written with non-temporal stores
// (KernelDesc::stream_stores): the assembly has them, and the results equal a
// naive double-precision reference, at one and two threads, for elementwise
// rows, rank-1 kernels (split into aligned blocks, with a ragged tail) and row
// reductions. Rows that cannot stay 64-byte aligned keep ordinary stores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "codegen/jit.h"
#include "runtime/ops.h"

using namespace kiln::codegen;

namespace {

// 64-byte aligned floats, as kiln's allocator hands out.
struct AlignedFloats {
  explicit AlignedFloats(size_t n) : n(n), p(static_cast<float *>(std::aligned_alloc(64, (n * 4 + 63) / 64 * 64))) {}
  ~AlignedFloats() { std::free(p); }
  AlignedFloats(const AlignedFloats &) = delete;
  AlignedFloats &operator=(const AlignedFloats &) = delete;
  float &operator[](size_t i) { return p[i]; }
  size_t n;
  float *p;
};

void fill_random(AlignedFloats &v, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (size_t i = 0; i < v.n; ++i) v[i] = dist(gen);
}

void fill_nan(AlignedFloats &v) {
  for (size_t i = 0; i < v.n; ++i) v[i] = std::nanf("");
}

// Whether some instruction is a non-temporal vector store.
bool has_nontemporal_store(const std::string &assembly) {
  return assembly.find("vmovntps") != std::string::npos || assembly.find("vmovntdq") != std::string::npos ||
         assembly.find("vmovntpd") != std::string::npos;
}

bool x86_host() {
#if defined(__x86_64__)
  return true;
#else
  return false;
#endif
}

std::shared_ptr<const CompiledKernel> compile_with_asm(const KernelDesc &desc) {
  JitOptions opts;
  opts.capture_asm = true;
  static Jit *jit = new Jit(opts); // one per test binary: kernels may be shared by the parametrized runs
  return jit->compile(desc);
}

class StreamStores : public ::testing::TestWithParam<int> {
protected:
  void SetUp() override { kiln::set_num_threads(GetParam()); }
  void TearDown() override { kiln::set_num_threads(1); }
};

} // namespace

TEST_P(StreamStores, ElementwiseRowsMatchReference) {
  const int64_t rows = 1024, cols = 1024;
  KernelBuilder k({rows, cols});
  Expr x = k.input(kiln::kFloat32);
  Expr a = k.input(kiln::kFloat32, {0, 1});
  k.output(x * a + 1.0);
  k.set_stream_stores(true);
  auto kernel = compile_with_asm(k.build());
  if (x86_host()) {
    EXPECT_TRUE(has_nontemporal_store(kernel->assembly())) << kernel->assembly().substr(0, 6000);
    if (std::getenv("PRINT_ASM")) std::printf("%s", kernel->assembly().c_str());
  }

  AlignedFloats xs(rows * cols), as(cols), y(rows * cols);
  fill_random(xs, -4, 4, 1);
  fill_random(as, -2, 2, 2);
  fill_nan(y);
  void *bufs[] = {xs.p, as.p, y.p};
  kernel->run(bufs);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double want = double(xs[r * cols + c]) * as[c] + 1.0;
      if (!(std::abs(y[r * cols + c] - want) <= 1e-5 * (1 + std::abs(want)))) ++bad;
    }
  EXPECT_EQ(bad, 0);
}

TEST_P(StreamStores, RankOneBlocksWithRaggedTail) {
  // Not a multiple of the 64-element block, and a small grain so that both
  // threads get several chunks.
  const int64_t n = 1'000'003;
  KernelBuilder k({n});
  Expr x = k.input(kiln::kFloat32);
  Expr y = k.input(kiln::kFloat32);
  k.output(x + y);
  k.output(x * y);
  k.set_grain(1000);
  k.set_stream_stores(true);
  auto kernel = compile_with_asm(k.build());
  if (x86_host()) {
    EXPECT_TRUE(has_nontemporal_store(kernel->assembly()));
  }

  AlignedFloats xs(n), ys(n), sum(n + 64), prod(n + 64);
  fill_random(xs, -4, 4, 3);
  fill_random(ys, -4, 4, 4);
  fill_nan(sum);
  fill_nan(prod);
  void *bufs[] = {xs.p, ys.p, sum.p, prod.p};
  kernel->run(bufs);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bad += sum[i] != xs[i] + ys[i];
    bad += prod[i] != xs[i] * ys[i];
  }
  EXPECT_EQ(bad, 0);
  for (int64_t i = n; i < n + 64; ++i) EXPECT_TRUE(std::isnan(sum[i])) << "wrote past the end at " << i;
}

TEST_P(StreamStores, SoftmaxRowsMatchReference) {
  const int64_t rows = 512, cols = 1024;
  KernelBuilder k({rows, cols});
  Expr x = k.input(kiln::kFloat32);
  Expr e = exp(x - reduce_max(x));
  k.output(e / reduce_sum(e));
  k.set_stream_stores(true);
  auto kernel = compile_with_asm(k.build());
  if (x86_host()) {
    EXPECT_TRUE(has_nontemporal_store(kernel->assembly()));
  }

  AlignedFloats xs(rows * cols), y(rows * cols);
  fill_random(xs, -8, 8, 5);
  fill_nan(y);
  void *bufs[] = {xs.p, y.p};
  kernel->run(bufs);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, double(xs[r * cols + c]));
    for (int64_t c = 0; c < cols; ++c) s += std::exp(double(xs[r * cols + c]) - m);
    for (int64_t c = 0; c < cols; ++c) {
      double want = std::exp(double(xs[r * cols + c]) - m) / s;
      if (!(std::abs(y[r * cols + c] - want) <= 1e-6 + 1e-5 * want)) ++bad;
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_P(StreamStores, UnalignedRowsKeepOrdinaryStores) {
  // Rows of 1000 floats start 4000 bytes apart: only row 0 is 64-byte aligned,
  // so no output may be streamed (an aligned non-temporal store would fault).
  const int64_t rows = 300, cols = 1000;
  KernelBuilder k({rows, cols});
  Expr x = k.input(kiln::kFloat32);
  Expr a = k.input(kiln::kFloat32, {0, 1});
  k.output(x - a);
  k.set_stream_stores(true);
  auto kernel = compile_with_asm(k.build());
  EXPECT_FALSE(has_nontemporal_store(kernel->assembly()));

  AlignedFloats xs(rows * cols), as(cols), y(rows * cols);
  fill_random(xs, -4, 4, 6);
  fill_random(as, -4, 4, 7);
  fill_nan(y);
  void *bufs[] = {xs.p, as.p, y.p};
  kernel->run(bufs);
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) bad += y[r * cols + c] != xs[r * cols + c] - as[c];
  EXPECT_EQ(bad, 0);
}

// The same over a runtime dim 0 (KernelDesc::runtime_dim0, dynamic shapes):
// the blocks end at the call's extent, not the traced one, at a ragged
// extent, one below a block and one far above the traced 4096.
TEST_P(StreamStores, RankOneBlocksOverARuntimeExtent) {
  KernelBuilder k({4096});
  Expr x = k.input(kiln::kFloat32);
  Expr y = k.input(kiln::kFloat32);
  k.output(x * 2.0 - y);
  k.set_grain(1000);
  k.set_stream_stores(true);
  KernelDesc desc = k.build();
  desc.runtime_dim0 = true;
  auto kernel = compile_with_asm(desc);
  if (x86_host()) {
    EXPECT_TRUE(has_nontemporal_store(kernel->assembly()));
  }
  for (int64_t n : {int64_t(1'000'003), int64_t(37), int64_t(4096 + 64)}) {
    AlignedFloats xs(n), ys(n), out(n + 64);
    fill_random(xs, -4, 4, 5);
    fill_random(ys, -4, 4, 6);
    fill_nan(out);
    int64_t extent = n;
    void *bufs[] = {xs.p, ys.p, out.p, &extent};
    kernel->run(bufs);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad += out[i] != xs[i] * 2.0f - ys[i];
    EXPECT_EQ(bad, 0) << "extent " << n;
    for (int64_t i = n; i < n + 64; ++i) ASSERT_TRUE(std::isnan(out[i])) << "extent " << n << ": wrote past the end at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, StreamStores, ::testing::Values(1, 2));

TEST(StreamStoresDecision, ByOutputBytes) {
  auto desc = [](int64_t rows, int64_t cols) {
    KernelBuilder k({rows, cols});
    k.output(k.input(kiln::kFloat32) * 2.0);
    return k.build();
  };
  EXPECT_EQ(output_bytes(desc(4096, 1024)), int64_t(16) << 20);
  EXPECT_EQ(footprint_bytes(desc(4096, 1024)), int64_t(32) << 20);
  if (std::getenv("KILN_STREAM_STORES")) GTEST_SKIP() << "KILN_STREAM_STORES forces the decision";
  EXPECT_FALSE(streaming_stores_pay_off(desc(128, 768)));    // W5's activations: stay in cache
  EXPECT_TRUE(streaming_stores_pay_off(desc(65536, 1024)));  // 512 MiB touched: beyond any cache
  // A broadcast input counts its distinct elements once.
  KernelBuilder b({4096, 1024});
  b.output(b.input(kiln::kFloat32) * b.input(kiln::kFloat32, {0, 1}));
  EXPECT_EQ(footprint_bytes(b.build()), (int64_t(32) << 20) + 4096);
  // Compute-bound: per-element transcendentals keep ordinary stores.
  KernelBuilder g({65536, 1024});
  g.output(gelu_tanh(g.input(kiln::kFloat32)));
  EXPECT_FALSE(streaming_stores_pay_off(g.build()));
  EXPECT_EQ(streaming_threshold_bytes(g.build()), -1);
  // For a kernel sized per call: the same rule as a footprint.
  EXPECT_GT(streaming_threshold_bytes(desc(128, 768)), footprint_bytes(desc(128, 768)));
  EXPECT_LT(streaming_threshold_bytes(desc(128, 768)), footprint_bytes(desc(65536, 1024)));
  // Per-row outputs count one element per row.
  KernelBuilder k({4096, 1024});
  k.output_per_row(reduce_sum(k.input(kiln::kFloat32)));
  EXPECT_EQ(output_bytes(k.build()), 4096 * 4);
}
