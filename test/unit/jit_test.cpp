// The JIT and the kernel builder, through kiln's interfaces only (no LLVM here).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <thread>
#include <time.h>
#include <unistd.h>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/jit.h"
#include "expect_error.h"
#include "runtime/error.h"
#include "runtime/ops.h"

using namespace kiln::codegen;
using kiln::DType;

namespace {

namespace fs = std::filesystem;

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (auto &x : v) x = dist(gen);
  return v;
}

double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

// y = gelu_tanh(x * a + b), a and b broadcast over rows.
KernelDesc gelu_desc(int64_t rows, int64_t cols) {
  KernelBuilder k({rows, cols});
  Expr x = k.input(kiln::kFloat32);
  Expr a = k.input(kiln::kFloat32, {0, 1});
  Expr b = k.input(kiln::kFloat32, {0, 1});
  k.output(gelu_tanh(x * a + b));
  return k.build();
}

fs::path fresh_dir(const std::string &name) {
  fs::path dir = fs::temp_directory_path() /
                 ("kiln_jit_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  fs::permissions(dir, fs::perms(0755)); // whatever the umask: a group-writable cache dir is refused
  return dir;
}

std::vector<fs::path> cache_entries(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kobj") out.push_back(e.path());
  return out;
}

// y = x * 3 + 1 over 1000 floats: the small kernel of the cache tests.
KernelDesc small_desc() {
  KernelBuilder k({1000});
  k.output(k.input(kiln::kFloat32) * 3.0 + 1.0);
  return k.build();
}

void expect_small_kernel_works(const CompiledKernel &kernel) {
  std::vector<float> x(1000), y(1000, -1.f);
  for (int i = 0; i < 1000; ++i) x[i] = float(i) * 0.5f;
  void *bufs[] = {x.data(), y.data()};
  kernel.run(bufs);
  for (int i = 0; i < 1000; ++i) ASSERT_FLOAT_EQ(y[i], x[i] * 3.f + 1.f) << i;
}

// True if some instruction line is a packed-single FMA or multiply on ymm/zmm.
bool has_packed_float_op(const std::string &assembly) {
  std::istringstream in(assembly);
  for (std::string line; std::getline(in, line);) {
    size_t start = line.find_first_not_of(" \t");
    if (start == std::string::npos) continue;
    std::string mnemonic = line.substr(start, line.find_first_of(" \t", start) - start);
    bool fma = mnemonic.rfind("vfmadd", 0) == 0 || mnemonic.rfind("vfmsub", 0) == 0 ||
               mnemonic.rfind("vfnmadd", 0) == 0 || mnemonic.rfind("vfnmsub", 0) == 0;
    bool packed_single = mnemonic.size() > 2 && mnemonic.compare(mnemonic.size() - 2, 2, "ps") == 0;
    bool wide = line.find("%zmm") != std::string::npos || line.find("%ymm") != std::string::npos;
    if (((fma && packed_single) || mnemonic == "vmulps") && wide) return true;
  }
  return false;
}

class ThreadsTest : public ::testing::TestWithParam<int> {
protected:
  void SetUp() override { kiln::set_num_threads(GetParam()); }
  void TearDown() override { kiln::set_num_threads(1); }
};

} // namespace

TEST_P(ThreadsTest, GeluBroadcastMatchesDoubleReference) {
  const int64_t rows = 4096, cols = 1024;
  static Jit jit; // shared across the thread counts: the second run is a cache hit
  auto kernel = jit.compile(gelu_desc(rows, cols));
  auto x = random_floats(rows * cols, -6.f, 6.f, 1);
  auto a = random_floats(cols, -1.5f, 1.5f, 2);
  auto b = random_floats(cols, -1.f, 1.f, 3);
  std::vector<float> y(rows * cols, std::numeric_limits<float>::quiet_NaN());
  void *bufs[] = {x.data(), a.data(), b.data(), y.data()};
  kernel->run(bufs);
  double worst = 0;
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double z = double(x[r * cols + c]) * a[c] + b[c];
      double want = gelu_ref(z), got = y[r * cols + c];
      double err = std::abs(got - want);
      worst = std::max(worst, err);
      if (!(err <= 1e-6 + 2e-6 * std::abs(want))) ++bad;
    }
  EXPECT_EQ(bad, 0) << "max abs error " << worst;
  std::printf("gelu %lldx%lld at %d threads: max abs error %.3g\n", (long long)rows, (long long)cols,
              GetParam(), worst);
}
INSTANTIATE_TEST_SUITE_P(Jit, ThreadsTest, ::testing::Values(1, 2));

TEST(Jit, GeluAssemblyIsPackedVectorCode) {
  JitOptions opts;
  opts.capture_ir = opts.capture_asm = true;
  Jit jit(opts);
  auto kernel = jit.compile(gelu_desc(64, 1024));
  const std::string &s = kernel->assembly();
  ASSERT_FALSE(s.empty());
  // AT&T syntax: e.g. "vfmadd213ps %zmm1, %zmm2, %zmm3" or "vmulps %ymm0, ...".
  EXPECT_TRUE(has_packed_float_op(s)) << s.substr(0, 4000);
  EXPECT_NE(kernel->llvm_ir().find("x float>"), std::string::npos) << "no vector IR";
  // The transcendental is inline polynomial code, not a scalar libm call.
  EXPECT_EQ(s.find("tanhf"), std::string::npos);
}

TEST(Jit, TransposedAndBroadcastLoads) {
  // y[i, j] = xt[i, j] * s + col[j] - row[i], xt a transposed view of a [C, R] buffer.
  const int64_t R = 37, C = 53;
  KernelBuilder k({R, C});
  Expr xt = k.input(kiln::kFloat64, {1, R});
  Expr s = k.input(kiln::kFloat64, {0, 0});
  Expr col = k.input(kiln::kFloat64, {0, 1});
  Expr row = k.input(kiln::kFloat64, {1, 0});
  k.output(xt * s + col - row);
  k.output(xt, {1, R}); // a strided (transposed) store: a copy back to the original layout
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<double> x(C * R), cv(C), rv(R), y(R * C), back(C * R, -1);
  for (size_t i = 0; i < x.size(); ++i) x[i] = double(i) * 0.25 - 7;
  for (int64_t j = 0; j < C; ++j) cv[j] = j * 10.0;
  for (int64_t i = 0; i < R; ++i) rv[i] = i * 1000.0;
  double sv = -2;
  void *bufs[] = {x.data(), &sv, cv.data(), rv.data(), y.data(), back.data()};
  kernel->run(bufs);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j)
      ASSERT_EQ(y[i * C + j], x[j * R + i] * sv + cv[j] - rv[i]) << i << "," << j;
  EXPECT_EQ(back, x);
}

TEST(Jit, FourDimensionalPermutedAndNegativeStrides) {
  // Iteration [2, 3, 4, 5]; input is a [5, 4, 3, 2] buffer read permuted; a
  // second input is a length-5 vector read backwards (stride -1 from its end).
  const std::vector<int64_t> shape{2, 3, 4, 5};
  KernelBuilder k(shape);
  Expr p = k.input(kiln::kInt64, {1, 2, 6, 24});
  Expr rev = k.input(kiln::kInt64, {0, 0, 0, -1});
  k.output(p * rev);
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<int64_t> buf(120), v{1, 2, 3, 4, 5}, y(120);
  for (int i = 0; i < 120; ++i) buf[i] = i;
  void *bufs[] = {buf.data(), v.data() + 4, y.data()};
  kernel->run(bufs);
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 3; ++b)
      for (int c = 0; c < 4; ++c)
        for (int d = 0; d < 5; ++d)
          ASSERT_EQ(y[((a * 3 + b) * 4 + c) * 5 + d], buf[a + 2 * b + 6 * c + 24 * d] * v[4 - d]);
}

TEST(Jit, CollapsibleDimsMatchInterpreter) {
  // Size-1 dims and dims every buffer walks contiguously are merged by codegen;
  // the broadcast operand only allows the inner two dims to merge.
  const std::vector<int64_t> shape{2, 1, 3, 40};
  KernelBuilder k(shape);
  Expr x = k.input(kiln::kFloat32);
  Expr y = k.input(kiln::kFloat32, {0, 0, 40, 1});
  k.output(x * y + 1.0);
  KernelDesc desc = k.build();
  Jit jit;
  auto kernel = jit.compile(desc);
  std::vector<float> xv(240), yv(120), got(240), want(240);
  for (int i = 0; i < 240; ++i) xv[i] = float(i % 17) - 8;
  for (int i = 0; i < 120; ++i) yv[i] = float(i % 7) * 0.5f;
  void *bufs[] = {xv.data(), yv.data(), got.data()};
  void *ref[] = {xv.data(), yv.data(), want.data()};
  kernel->run(bufs);
  interpret(desc, ref);
  EXPECT_EQ(got, want);
}

TEST(Jit, Int32Arithmetic) {
  KernelBuilder k({8});
  Expr a = k.input(kiln::kInt32), b = k.input(kiln::kInt32);
  k.output(a / b);
  k.output(max(a, b) - min(a, b) * 2);
  k.output(k.select(k.binary(KOp::Lt, a, b), abs(a), -b));
  k.output(k.cast(a, kiln::kFloat32));
  Jit jit;
  auto kernel = jit.compile(k.build());
  const int32_t mn = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> av{7, -7, 5, mn, 9, 0, -3, 100}, bv{2, 2, 0, -1, -4, 5, -3, 7};
  std::vector<int32_t> q(8), m(8), s(8);
  std::vector<float> f(8);
  void *bufs[] = {av.data(), bv.data(), q.data(), m.data(), s.data(), f.data()};
  kernel->run(bufs);
  for (int i = 0; i < 8; ++i) {
    int32_t want_q = bv[i] == 0 ? 0 : (av[i] == mn && bv[i] == -1 ? mn : av[i] / bv[i]);
    EXPECT_EQ(q[i], want_q) << i;
    EXPECT_EQ(m[i], int32_t(uint32_t(std::max(av[i], bv[i])) - uint32_t(std::min(av[i], bv[i])) * 2u)) << i;
    EXPECT_EQ(s[i], av[i] < bv[i] ? int32_t(uint32_t(av[i] < 0 ? -int64_t(av[i]) : av[i])) : -bv[i]) << i;
    EXPECT_EQ(f[i], float(av[i])) << i;
  }
}

TEST(Jit, Int64AndBool) {
  KernelBuilder k({6});
  Expr a = k.input(kiln::kInt64), flag = k.input(kiln::kBool);
  Expr big = k.binary(KOp::Gt, a, k.constant(1e10, kiln::kInt64));
  k.output(k.binary(KOp::Or, k.binary(KOp::And, big, flag), k.unary(KOp::Not, flag)));
  k.output(k.fma(a, a, k.constant(-1, kiln::kInt64)));
  k.output(k.cast(flag, kiln::kFloat64));
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<int64_t> av{1, int64_t(3e10), -5, int64_t(2e10), 0, 7};
  uint8_t fl[6] = {1, 1, 0, 0, 1, 0};
  uint8_t out[6];
  std::vector<int64_t> sq(6);
  std::vector<double> fd(6);
  void *bufs[] = {av.data(), fl, out, sq.data(), fd.data()};
  kernel->run(bufs);
  for (int i = 0; i < 6; ++i) {
    bool want = (av[i] > int64_t(1e10) && fl[i]) || !fl[i];
    EXPECT_EQ(out[i], uint8_t(want)) << i; // bools are stored as exactly 0 or 1
    EXPECT_EQ(sq[i], int64_t(uint64_t(av[i]) * uint64_t(av[i]) - 1)) << i; // wraps, as the kernel
    EXPECT_EQ(fd[i], double(fl[i])) << i;
  }
}

TEST(Jit, IntegerConstantsAreExactOrSaturated) {
  KernelBuilder k({2});
  Expr a = k.input(kiln::kInt64);
  const int64_t big = (int64_t(1) << 62) + 1; // not representable as a double
  k.output(a + k.constant_int(big, kiln::kInt64));
  Expr i32 = k.cast(a, kiln::kInt32);
  k.output(k.select(k.binary(KOp::Gt, i32, k.constant(0, kiln::kInt32)), k.constant(1e20, kiln::kInt32),
                    k.constant(-1e20, kiln::kInt32)));
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<int64_t> av{1, -1}, sum(2);
  std::vector<int32_t> sat(2);
  void *bufs[] = {av.data(), sum.data(), sat.data()};
  kernel->run(bufs);
  EXPECT_EQ(sum[0], big + 1);
  EXPECT_EQ(sum[1], big - 1);
  EXPECT_EQ(sat[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(sat[1], std::numeric_limits<int32_t>::min());
}

TEST(Jit, Float32CastsComparesAndNaNs) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelBuilder k({6});
  Expr a = k.input(kiln::kFloat32), b = k.input(kiln::kFloat32);
  k.output(max(a, b));
  k.output(k.cast(a, kiln::kInt32));
  k.output(k.cast(a, kiln::kBool));
  k.output(k.binary(KOp::Ne, a, b));
  k.output(k.unary(KOp::Round, a));
  k.output(rsqrt(abs(b)) + sqrt(abs(a)));
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<float> av{1.5f, -2.5f, nan, 3e10f, 0.f, 2.5f}, bv{2.f, -3.f, 1.f, 1.f, 4.f, nan};
  std::vector<float> mx(6), rd(6), rs(6);
  std::vector<int32_t> ci(6);
  uint8_t cb[6], ne[6];
  void *bufs[] = {av.data(), bv.data(), mx.data(), ci.data(), cb, ne, rd.data(), rs.data()};
  kernel->run(bufs);
  EXPECT_EQ(mx[0], 2.f);
  EXPECT_EQ(mx[1], -2.5f);
  EXPECT_TRUE(std::isnan(mx[2])); // torch.maximum propagates NaN
  EXPECT_TRUE(std::isnan(mx[5]));
  EXPECT_EQ(ci[0], 1);
  EXPECT_EQ(ci[1], -2);
  EXPECT_EQ(ci[2], 0);                                      // NaN saturates to 0
  EXPECT_EQ(ci[3], std::numeric_limits<int32_t>::max());    // out of range saturates
  EXPECT_EQ(cb[2], 1);                                      // bool(nan) is true
  EXPECT_EQ(cb[4], 0);
  EXPECT_EQ(ne[2], 1);
  EXPECT_EQ(ne[0], 1);
  EXPECT_EQ(rd[1], -2.f); // half to even
  EXPECT_EQ(rd[5], 2.f);
  EXPECT_FLOAT_EQ(rs[0], 1.f / std::sqrt(2.f) + std::sqrt(1.5f));
}

TEST(Jit, Float64TranscendentalsUseLibm) {
  const int64_t n = 1000;
  KernelBuilder k({n});
  Expr x = k.input(kiln::kFloat64);
  Expr pos = abs(x) + 1e-3;
  k.output(exp(x) + log(pos) + tanh(x) + erf(x) + sigmoid(x) + expm1(x) + log1p(pos));
  Jit jit;
  auto kernel = jit.compile(k.build());
  std::vector<double> xv(n), y(n);
  for (int64_t i = 0; i < n; ++i) xv[i] = -10 + 20.0 * double(i) / n;
  void *bufs[] = {xv.data(), y.data()};
  kernel->run(bufs);
  for (int64_t i = 0; i < n; ++i) {
    double v = xv[i], p = std::abs(v) + 1e-3;
    double want = std::exp(v) + std::log(p) + std::tanh(v) + std::erf(v) + 1 / (1 + std::exp(-v)) +
                  std::expm1(v) + std::log1p(p);
    ASSERT_NEAR(y[i], want, 1e-12 * (1 + std::abs(want))) << v;
  }
}

TEST(Jit, RankZeroAndEmptyIterationSpace) {
  Jit jit;
  {
    KernelBuilder k({});
    k.output(k.input(kiln::kFloat32) * 2.0);
    auto kernel = jit.compile(k.build());
    float x = 21, y = 0;
    void *bufs[] = {&x, &y};
    kernel->run(bufs);
    EXPECT_EQ(y, 42);
  }
  {
    KernelBuilder k({0, 7});
    k.output(k.input(kiln::kFloat32) * 2.0);
    auto kernel = jit.compile(k.build());
    void *bufs[] = {nullptr, nullptr};
    kernel->run(bufs); // touches nothing
  }
}

TEST(Jit, IdenticalDescriptionsCompileOnce) {
  Jit jit;
  auto k1 = jit.compile(small_desc());
  auto k2 = jit.compile(small_desc()); // built again, structurally identical
  EXPECT_EQ(k1, k2);
  EXPECT_EQ(small_desc().hash(), small_desc().hash());
  JitStats s = jit.stats();
  EXPECT_EQ(s.requests, 2);
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.memory_hits, 1);
  // A different constant is a different kernel.
  KernelBuilder k({1000});
  k.output(k.input(kiln::kFloat32) * 3.0 + 2.0);
  auto k3 = jit.compile(k.build());
  EXPECT_NE(k3, k1);
  EXPECT_NE(k.build().hash(), small_desc().hash());
  EXPECT_EQ(jit.stats().compiles, 2);
  expect_small_kernel_works(*k2);
}

TEST(Jit, ConcurrentCompilesOfOneKernelCompileOnce) {
  Jit jit;
  std::vector<std::shared_ptr<const CompiledKernel>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[t] = jit.compile(small_desc()); });
  for (auto &t : threads) t.join();
  for (auto &k : got) EXPECT_EQ(k, got[0]);
  EXPECT_EQ(jit.stats().compiles, 1);
}

TEST(Jit, DiskCacheSecondInstanceCompilesNothing) {
  fs::path dir = fresh_dir("disk");
  JitOptions opts;
  opts.cache_dir = dir.string();
  {
    Jit first(opts);
    auto k = first.compile(small_desc());
    EXPECT_FALSE(k->from_disk_cache());
    EXPECT_EQ(first.stats().compiles, 1);
    EXPECT_EQ(first.stats().disk_writes, 1);
  }
  ASSERT_EQ(cache_entries(dir).size(), 1u);
  Jit second(opts);
  auto k = second.compile(small_desc());
  JitStats s = second.stats();
  EXPECT_EQ(s.compiles, 0);
  EXPECT_EQ(s.disk_hits, 1);
  EXPECT_EQ(s.disk_writes, 0);
  EXPECT_TRUE(k->from_disk_cache());
  expect_small_kernel_works(*k);
  fs::remove_all(dir);
}

// A kernel found in the disk cache is linked from its object: its module is not
// even built (building it was most of a cached kernel's load time).
TEST(Jit, DiskCacheHitBuildsNoModule) {
  fs::path dir = fresh_dir("nobuild");
  JitOptions opts;
  opts.cache_dir = dir.string();
  {
    Jit first(opts);
    first.compile(small_desc());
    EXPECT_EQ(first.stats().modules_built, 1);
  }
  Jit second(opts);
  auto k = second.compile(small_desc());
  EXPECT_EQ(second.stats().modules_built, 0);
  EXPECT_EQ(second.stats().disk_hits, 1);
  EXPECT_TRUE(k->from_disk_cache());
  expect_small_kernel_works(*k);
  fs::remove_all(dir);
}

namespace {
// Damages the single cache entry in `dir`, then checks that a fresh Jit ignores
// it, recompiles, produces correct results, and rewrites a good entry.
void check_damaged_entry_recompiles(const fs::path &dir, void (*damage)(const fs::path &)) {
  JitOptions opts;
  opts.cache_dir = dir.string();
  { Jit(opts).compile(small_desc()); }
  auto entries = cache_entries(dir);
  ASSERT_EQ(entries.size(), 1u);
  damage(entries[0]);
  {
    Jit jit(opts);
    auto k = jit.compile(small_desc());
    JitStats s = jit.stats();
    EXPECT_EQ(s.disk_rejects, 1);
    EXPECT_EQ(s.disk_hits, 0);
    EXPECT_EQ(s.compiles, 1);
    EXPECT_EQ(s.disk_writes, 1);
    EXPECT_FALSE(k->from_disk_cache());
    expect_small_kernel_works(*k);
  }
  Jit healed(opts);
  healed.compile(small_desc());
  EXPECT_EQ(healed.stats().disk_hits, 1);
  EXPECT_EQ(healed.stats().compiles, 0);
}
} // namespace

TEST(Jit, DiskCacheTruncatedEntryIsRecompiled) {
  fs::path dir = fresh_dir("trunc");
  check_damaged_entry_recompiles(dir, [](const fs::path &p) {
    fs::resize_file(p, fs::file_size(p) / 2);
  });
  fs::remove_all(dir);
}

TEST(Jit, DiskCacheCorruptEntryIsRecompiled) {
  fs::path dir = fresh_dir("corrupt");
  check_damaged_entry_recompiles(dir, [](const fs::path &p) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    auto size = fs::file_size(p);
    for (auto off : {size - 17, size / 2 + 3}) { // flip bytes inside the object
      f.seekg(std::streamoff(off));
      char c = 0;
      f.read(&c, 1);
      c = char(c ^ 0x5a);
      f.seekp(std::streamoff(off));
      f.write(&c, 1);
    }
  });
  fs::remove_all(dir);
}

TEST(Jit, DiskCacheGarbageEntryIsRecompiled) {
  fs::path dir = fresh_dir("garbage");
  check_damaged_entry_recompiles(dir, [](const fs::path &p) {
    std::ofstream(p, std::ios::binary | std::ios::trunc) << "not an object file at all";
  });
  fs::remove_all(dir);
}

TEST(Jit, UnusableCacheDirectoryWarnsAndContinues) {
  fs::path dir = fresh_dir("unusable");
  fs::path file = dir / "a_file";
  std::ofstream(file) << "x";
  JitOptions opts;
  opts.cache_dir = (file / "sub").string(); // a directory cannot live under a file
  Jit jit(opts);
  auto k = jit.compile(small_desc());
  expect_small_kernel_works(*k);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().disk_writes, 0);
  fs::remove_all(dir);
}

namespace {
// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv &) = delete;
  ScopedEnv &operator=(const ScopedEnv &) = delete;

private:
  const char *name_;
  std::optional<std::string> old_;
};
} // namespace

// Library users get the disk cache without asking (as the CLI's users do):
// $XDG_CACHE_HOME/kiln, else ~/.cache/kiln; KILN_CACHE_DIR overrides it and
// KILN_CACHE_DIR= (set and empty) turns it off.
TEST(Jit, DiskCacheIsOnByDefault) {
  fs::path dir = fresh_dir("default");
  ScopedEnv no_dir("KILN_CACHE_DIR", nullptr);
  {
    ScopedEnv xdg("XDG_CACHE_HOME", (dir / "xdg").c_str());
    EXPECT_EQ(JitOptions::from_env().cache_dir, (dir / "xdg" / "kiln").string());
    Jit jit(JitOptions::from_env());
    expect_small_kernel_works(*jit.compile(small_desc()));
    EXPECT_EQ(jit.stats().disk_writes, 1);
    EXPECT_EQ(cache_entries(dir / "xdg" / "kiln").size(), 1u);
  }
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", (dir / "home").c_str());
  EXPECT_EQ(JitOptions::from_env().cache_dir, (dir / "home" / ".cache" / "kiln").string());
  {
    ScopedEnv chosen("KILN_CACHE_DIR", (dir / "chosen").c_str());
    EXPECT_EQ(JitOptions::from_env().cache_dir, (dir / "chosen").string());
  }
  {
    ScopedEnv off("KILN_CACHE_DIR", "");
    EXPECT_EQ(JitOptions::from_env().cache_dir, "");
  }
  fs::remove_all(dir);
}

// A default cache directory that cannot be made (HOME is a file) only warns.
TEST(Jit, UnusableDefaultCacheDirectoryOnlyWarns) {
  fs::path dir = fresh_dir("default_bad");
  fs::path file = dir / "a_file";
  std::ofstream(file) << "x";
  ScopedEnv no_dir("KILN_CACHE_DIR", nullptr);
  ScopedEnv no_xdg("XDG_CACHE_HOME", nullptr);
  ScopedEnv home("HOME", file.c_str());
  Jit jit(JitOptions::from_env());
  expect_small_kernel_works(*jit.compile(small_desc()));
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().disk_writes, 0);
  fs::remove_all(dir);
}

TEST(Jit, InvalidDescriptionThrowsAndJitStaysUsable) {
  Jit jit;
  KernelDesc bad = small_desc();
  bad.nodes.back().args[0] = 99; // refers to a node that does not exist
  EXPECT_THROW(jit.compile(bad), kiln::Error);
  KernelDesc bad_type = small_desc();
  bad_type.outputs[0].buffer.dtype = kiln::kInt32;
  EXPECT_THROW(jit.compile(bad_type), kiln::Error);
  EXPECT_EQ(jit.stats().failures, 2);
  expect_small_kernel_works(*jit.compile(small_desc()));
}

TEST(KernelBuilder, RejectsTypeErrors) {
  KernelBuilder k({4});
  Expr f = k.input(kiln::kFloat32);
  Expr i = k.input(kiln::kInt32);
  EXPECT_THROW(f + i, kiln::Error);
  EXPECT_THROW(exp(i), kiln::Error);
  EXPECT_THROW(k.select(f, f, f), kiln::Error);
  EXPECT_THROW(k.unary(KOp::Neg, k.cast(i, kiln::kBool)), kiln::Error);
  EXPECT_THROW(k.input(kiln::kFloat32, {1, 2}), kiln::Error); // wrong stride count
  EXPECT_THROW(k.build(), kiln::Error);                       // no outputs
  k.output(f + k.cast(i, kiln::kFloat32));
  EXPECT_NO_THROW(k.build());
  EXPECT_NE(k.build().to_string().find("Cast.f32"), std::string::npos);
}

// ---- in-place outputs (KernelDesc::output_aliases_input)

namespace {

// LLVM's runtime pointer-overlap check before a vector loop (value names of
// the loop vectorizer: "diff.check", "found.conflict" in "vector.memcheck").
bool has_overlap_check(const std::string &ir) {
  for (const char *name : {"diff.check", "found.conflict", "vector.memcheck"})
    if (ir.find(name) != std::string::npos) return true;
  return false;
}

KernelDesc gelu_in_place_desc(int64_t rows, int64_t cols) {
  KernelDesc d = gelu_desc(rows, cols);
  d.output_aliases_input = {0}; // y over x
  d.validate();
  return d;
}

} // namespace

TEST(JitInPlace, AliasedKernelMatchesSeparateBuffersAndReference) {
  const int64_t rows = 67, cols = 1000; // a vector loop plus a remainder per row
  Jit jit;
  auto separate = jit.compile(gelu_desc(rows, cols));
  auto in_place = jit.compile(gelu_in_place_desc(rows, cols));
  EXPECT_NE(separate.get(), in_place.get()) << "the alias is part of the kernel's key";
  auto x = random_floats(rows * cols, -6.f, 6.f, 11);
  auto a = random_floats(cols, -1.5f, 1.5f, 12);
  auto b = random_floats(cols, -1.f, 1.f, 13);
  std::vector<float> y(rows * cols, -1.f);
  void *sep_bufs[] = {x.data(), a.data(), b.data(), y.data()};
  separate->run(sep_bufs);
  // The aliased kernel writes through x's pointer and ignores its output slot.
  std::vector<float> xy = x, untouched(rows * cols, -7.f);
  void *inp_bufs[] = {xy.data(), a.data(), b.data(), untouched.data()};
  in_place->run(inp_bufs);
  EXPECT_EQ(xy, y) << "same code per element: bit-identical results";
  EXPECT_EQ(untouched, std::vector<float>(rows * cols, -7.f));
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      double want = gelu_ref(double(x[r * cols + c]) * a[c] + b[c]);
      if (!(std::abs(xy[r * cols + c] - want) <= 1e-6 + 2e-6 * std::abs(want))) ++bad;
    }
  EXPECT_EQ(bad, 0);
  // The interpreter follows the same contract.
  std::vector<float> ixy = x;
  void *int_bufs[] = {ixy.data(), a.data(), b.data(), nullptr};
  interpret(gelu_in_place_desc(rows, cols), int_bufs);
  for (int64_t i = 0; i < rows * cols; ++i) ASSERT_NEAR(ixy[i], xy[i], 1e-5) << i;
}

// Two pointers to one buffer need LLVM's runtime overlap check, which in-place
// data fails (the scalar loop runs); one pointer needs none. (With other
// inputs, the check between them and the output remains, and passes.)
TEST(JitInPlace, AliasedKernelIsVectorCodeWithoutAnOverlapCheck) {
  JitOptions opts;
  opts.capture_ir = opts.capture_asm = true;
  Jit jit(opts);
  auto one_input = [](bool alias) {
    KernelBuilder k({64, 1024});
    k.output(gelu_tanh(k.input(kiln::kFloat32) * 3.0 + 1.0));
    if (alias) k.alias_output(0, 0);
    return k.build();
  };
  auto separate = jit.compile(one_input(false));
  auto in_place = jit.compile(one_input(true));
  EXPECT_TRUE(has_overlap_check(separate->llvm_ir())) << "expected a runtime check";
  EXPECT_FALSE(has_overlap_check(in_place->llvm_ir())) << in_place->llvm_ir();
  EXPECT_NE(in_place->llvm_ir().find("x float>"), std::string::npos) << "no vector IR";
  EXPECT_TRUE(has_packed_float_op(in_place->assembly())) << in_place->assembly().substr(0, 4000);
  auto broadcast = jit.compile(gelu_in_place_desc(64, 1024)); // W1's kernel, in place
  EXPECT_TRUE(has_packed_float_op(broadcast->assembly())) << broadcast->assembly().substr(0, 4000);
}

TEST(JitInPlace, BuilderAndValidationRejectUnsafeAliases) {
  using kiln::testing::expect_error;
  auto elementwise = [](std::vector<int64_t> out_strides, DType out_type) {
    KernelBuilder k({8, 16});
    Expr x = k.input(kiln::kFloat32);
    k.output(k.cast(x * 2.0, out_type), std::move(out_strides));
    k.alias_output(0, 0);
    return k;
  };
  EXPECT_NO_THROW(elementwise({}, kiln::kFloat32).build());
  EXPECT_NO_THROW(elementwise({}, kiln::kInt32).build()); // same element size
  expect_error([&] { elementwise({1, 8}, kiln::kFloat32).build(); }, {"output 0", "strides differ in dim 0"});
  expect_error([&] { elementwise({}, kiln::kFloat64).build(); }, {"element sizes differ"});
  expect_error([&] { elementwise({0, 1}, kiln::kFloat32).build(); }, {"strides differ"});
  KernelBuilder broadcast({8, 16}); // every row stored over the same 16 elements
  Expr row = broadcast.input(kiln::kFloat32, {0, 1});
  broadcast.output(row + 1.0, {0, 1});
  broadcast.alias_output(0, 0);
  expect_error([&] { broadcast.build(); }, {"stores dim 0 with stride 0"});
  KernelBuilder twice({8});
  Expr x = twice.input(kiln::kFloat32);
  twice.output(x + 1.0);
  twice.output(x + 2.0);
  twice.alias_output(0, 0);
  twice.alias_output(1, 0);
  expect_error([&] { twice.build(); }, {"outputs 0 and 1 both overwrite input 0"});
  KernelBuilder missing({8});
  missing.output(missing.input(kiln::kFloat32) + 1.0);
  missing.alias_output(0, 3);
  expect_error([&] { missing.build(); }, {"aliases missing input 3"});
  EXPECT_THROW(missing.alias_output(1, 0), kiln::Error);
  // The alias changes the key; a kernel without one keeps its old key.
  KernelDesc plain = gelu_desc(4, 8), aliased = gelu_desc(4, 8);
  aliased.output_aliases_input = {0};
  KernelDesc none = gelu_desc(4, 8);
  none.output_aliases_input = {-1};
  EXPECT_NE(plain.key(), aliased.key());
  EXPECT_EQ(plain.key(), none.key());
  EXPECT_NE(aliased.to_string().find("in place of in0"), std::string::npos) << aliased.to_string();
}

// Prints (does not assert) compile latency and kernel throughput.
TEST(JitPerf, CompileLatencyAndThroughput) {
  using Clock = std::chrono::steady_clock;
  auto ms = [](Clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  // CPU time of this thread too: the machines are shared, wall time is noisy.
  auto cpu_ms = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e3 + double(ts.tv_nsec) * 1e-6;
  };
  Jit jit;
  for (int i = 0; i < 4; ++i) {
    KernelBuilder k({1 << 16});
    k.output(k.input(kiln::kFloat32) * double(i + 2) + 1.0);
    auto t0 = Clock::now();
    double c0 = cpu_ms();
    jit.compile(k.build());
    std::printf("compile small kernel #%d: %.2f ms wall, %.2f ms cpu\n", i, ms(t0), cpu_ms() - c0);
  }
  const int64_t rows = 4096, cols = 1024, n = rows * cols;
  auto kernel = jit.compile(gelu_desc(rows, cols));
  std::printf("compile gelu kernel: %.2f ms\n", kernel->compile_ms());
  auto x = random_floats(n, -6.f, 6.f, 1);
  std::vector<float> a(cols, 1.f), b(cols, 0.f), y(n), z(n);
  void *bufs[] = {x.data(), a.data(), b.data(), y.data()};
  for (int threads : {1, 2}) {
    kiln::set_num_threads(threads);
    kernel->run(bufs);
    double best = 1e30, best_copy = 1e30, best_cpu = 1e30;
    for (int rep = 0; rep < 10; ++rep) {
      auto t0 = Clock::now();
      double c0 = cpu_ms();
      kernel->run(bufs);
      best = std::min(best, ms(t0));
      best_cpu = std::min(best_cpu, cpu_ms() - c0);
      t0 = Clock::now();
      std::memcpy(z.data(), x.data(), n * sizeof(float));
      best_copy = std::min(best_copy, ms(t0));
    }
    std::printf("gelu 4096x1024 f32, %d thread(s): %.3f ns/element wall, calling thread cpu %.3f "
                "(memcpy of the same bytes, 1 thread: %.3f ns/element)\n",
                threads, best * 1e6 / double(n), best_cpu * 1e6 / double(n), best_copy * 1e6 / double(n));
  }
  kiln::set_num_threads(1);
}

// Prints (does not assert) what in place costs: a bias+relu and a softmax
// kernel over separate buffers, in place through two pointers (LLVM's overlap
// check fails, the scalar loop runs) and in place with the alias declared.
TEST(JitPerf, InPlaceKernels) {
  auto thread_cpu_us = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) * 1e6 + double(ts.tv_nsec) * 1e-3;
  };
  auto best_us = [&](const CompiledKernel &k, void **bufs) {
    k.run(bufs);
    double best = 1e30;
    for (int rep = 0; rep < 50; ++rep) {
      double t0 = thread_cpu_us();
      k.run(bufs);
      best = std::min(best, thread_cpu_us() - t0);
    }
    return best;
  };
  auto bias_relu = [](bool alias) {
    KernelBuilder k({256, 1024});
    Expr x = k.input(kiln::kFloat32);
    Expr b = k.input(kiln::kFloat32, {0, 1});
    k.output(max(x + b, k.constant(0, kiln::kFloat32)));
    if (alias) k.alias_output(0, 0);
    return k.build();
  };
  auto softmax = [](bool alias) { // W5's attention rows: 12 heads x 128 queries, 128 keys
    KernelBuilder k({1536, 128});
    Expr x = k.input(kiln::kFloat32);
    Expr e = exp(x - reduce_max(x));
    k.output(e / reduce_sum(e));
    if (alias) k.alias_output(0, 0);
    return k.build();
  };
  kiln::set_num_threads(1);
  Jit jit;
  auto x = random_floats(256 * 1024, -2.f, 2.f, 5), bias = random_floats(1024, -1.f, 1.f, 6);
  std::vector<float> y(x.size());
  auto br = jit.compile(bias_relu(false)), br_alias = jit.compile(bias_relu(true));
  void *sep[] = {x.data(), bias.data(), y.data()}, *two[] = {y.data(), bias.data(), y.data()};
  double s = best_us(*br, sep), t = best_us(*br, two), a = best_us(*br_alias, two);
  std::printf("bias+relu 256x1024, 1 thread (thread cpu us): separate %.1f, in place two pointers %.1f, "
              "in place aliased %.1f\n", s, t, a);
  auto sx = random_floats(1536 * 128, -4.f, 4.f, 7);
  std::vector<float> sy(sx.size());
  auto sm = jit.compile(softmax(false)), sm_alias = jit.compile(softmax(true));
  void *ssep[] = {sx.data(), sy.data()}, *stwo[] = {sy.data(), sy.data()};
  s = best_us(*sm, ssep), t = best_us(*sm, stwo), a = best_us(*sm_alias, stwo);
  std::printf("softmax 1536x128, 1 thread (thread cpu us): separate %.1f, in place two pointers %.1f, "
              "in place aliased %.1f\n", s, t, a);
}
