// Faults from the environment: tensors too large for memory, a damaged or
// unusable disk kernel cache, an unwritable KILN_DUMP_DIR. Each must surface as
// a kiln::Error (memory) or a logged warning with the run going on and correct
// results (cache, dumps), never as a crash, a kill or std::bad_alloc.
//
// The global Jit reads KILN_CACHE_DIR once per process, so the tests of the
// cache through kiln::compile run this binary again as a child
// (`faults_test --compile-child`) with the environment set, and read back the
// Jit's counters and the child's stderr.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <kiln/kiln.h>

#include "test_support.h"
#include "expect_error.h"

#include "codegen/jit.h"
#include "codegen/kernel.h"
#include "frontend/compile.h"
#include "runtime/log.h"

using namespace kiln;
using kiln::testing::capture_stderr;
using kiln::testing::expect_error;
namespace fs = std::filesystem;

namespace {



fs::path fresh_dir(const std::string &name) {
  fs::path d = fs::temp_directory_path() / ("kiln-faults-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  fs::permissions(d, fs::perms(0755)); // whatever the umask: a group-writable cache dir is refused
  return d;
}

// A path no directory can be created at, even as root: it lies under a regular file.
fs::path under_a_file(const fs::path &dir) {
  fs::path file = dir / "a-regular-file";
  std::ofstream(file) << "x";
  return file / "cache";
}

std::vector<fs::path> entries(const fs::path &dir) {
  std::vector<fs::path> out;
  for (const auto &e : fs::directory_iterator(dir))
    if (e.path().extension() == ".kobj") out.push_back(e.path());
  return out;
}

// The model the child compiles: an elementwise chain and a row softmax (two
// kernels) around a GEMM run eagerly inside the plan.
ModelFn child_model() {
  manual_seed(77);
  Tensor w = randn({24, 16}), b = randn({24});
  return [w, b](const std::vector<Tensor> &in) {
    Tensor h = gelu(linear(in[0], w, b) * 0.5 - 1.0, "tanh");
    return std::vector<Tensor>{softmax(h, -1), h.amax({1})};
  };
}

// Child mode: compile and run child_model once, compare with eager, print the
// global Jit's counters. Exit code 0 when the results match.
int run_compile_child() {
  ModelFn fn = child_model();
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  Tensor x = randn({9, 16});
  std::vector<Tensor> got = f({x}), want = fn({x});
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i)
    worst = std::max(worst, amax(abs(got[i].to(kFloat64) - want[i].to(kFloat64))).item<double>());
  codegen::JitStats s = codegen::Jit::global().stats();
  std::printf("child: compiles=%lld disk_hits=%lld disk_rejects=%lld disk_writes=%lld kernels=%lld match=%d\n",
              (long long)s.compiles, (long long)s.disk_hits, (long long)s.disk_rejects, (long long)s.disk_writes,
              (long long)f.kernels_per_call({x}), worst <= 1e-5 ? 1 : 0);
  std::fflush(stdout);
  return worst <= 1e-5 ? 0 : 3;
}

struct ChildResult {
  int exit_code = -1;
  std::map<std::string, long long> counters; // compiles, disk_hits, ..., match
  std::string output;                        // stdout and stderr
};

// Runs this binary in child mode with KILN_CACHE_DIR=cache_dir.
ChildResult run_child(const std::string &cache_dir) {
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = "KILN_CACHE_DIR='" + cache_dir + "' '" + self + "' --compile-child 2>&1";
  ChildResult r;
  FILE *p = popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.output.append(buf, n);
  int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  size_t at = r.output.find("child: ");
  if (at == std::string::npos) return r;
  std::istringstream line(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
  std::string kv;
  while (line >> kv) {
    size_t eq = kv.find('=');
    if (eq != std::string::npos) r.counters[kv.substr(0, eq)] = std::stoll(kv.substr(eq + 1));
  }
  return r;
}

// ---- ways to damage one cache entry

void truncate_half(const fs::path &p) { fs::resize_file(p, fs::file_size(p) / 2); }
void truncate_header(const fs::path &p) { fs::resize_file(p, 12); }
void make_empty(const fs::path &p) { fs::resize_file(p, 0); }
void flip_byte_at(const fs::path &p, std::streamoff off) {
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  char c = 0;
  f.seekg(off);
  f.read(&c, 1);
  c = char(c ^ 0x21);
  f.seekp(off);
  f.write(&c, 1);
}
void flip_object_byte(const fs::path &p) { flip_byte_at(p, std::streamoff(fs::file_size(p) - 40)); }
// The entry of another kiln/LLVM version under the same file name: the stored
// key (which starts "llvm=<version>;" after the 24-byte header) differs.
void other_version(const fs::path &p) { flip_byte_at(p, 24 + 5); }
void future_format(const fs::path &p) { flip_byte_at(p, 7); } // "KILNOBJ2" -> "KILNOBJ..."
void garbage(const fs::path &p) { std::ofstream(p, std::ios::binary | std::ios::trunc) << "\x7f" "ELF garbage"; }
void length_overflow(const fs::path &p) { // key length 2^64-1: sizes must not overflow
  std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(8);
  const char ones[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
  f.write(ones, 8);
}

} // namespace

// ---- memory

TEST(FaultsMemory, FactoriesTooLargeForMemoryThrowKilnError) {
  expect_error([] { empty({int64_t(1) << 40, int64_t(1) << 20}); }, {"empty", "[1099511627776, 1048576]", "too large"});
  expect_error([] { zeros({int64_t(1) << 58}, kFloat64); }, {"too large"});
  expect_error([] { empty({int64_t(1) << 40, int64_t(1) << 40}); }, {"empty", "too many elements"});
  // 4 TiB / 16 TiB: below the size limit, so the allocator itself must fail
  // cleanly (no std::bad_alloc, no OOM kill from touching pages).
  expect_error([] { empty({int64_t(1) << 40}); }, {"cannot allocate", "4398046511104"});
  expect_error([] { ones({int64_t(1) << 21, int64_t(1) << 21}); }, {"cannot allocate"});
  expect_error([] { randn({int64_t(1) << 42}); }, {"cannot allocate"});
  expect_error([] { full({int64_t(1) << 41}, 1.5); }, {"cannot allocate"});
  EXPECT_EQ(ones({3}).sum().item<float>(), 3.0f); // the allocator is usable afterwards
}

TEST(FaultsMemory, OpsWithHugeResultsThrowKilnError) {
  Tensor x = randn({1}).expand({int64_t(1) << 30, int64_t(1) << 30}); // a view: no memory
  EXPECT_EQ(x.numel(), int64_t(1) << 60);
  expect_error([&] { x.contiguous(); }, {"too large"});
  expect_error([&] { x.clone(); }, {"too large"});
  expect_error([&] { x + 1.0; }, {"too large"});
  expect_error([&] { exp(x); }, {"too large"});
  expect_error([&] { x.to(kFloat64); }, {"too large"});
  Tensor big = randn({1}).expand({int64_t(1) << 42}); // 16 TiB when materialized
  expect_error([&] { big.contiguous(); }, {"cannot allocate"});
  expect_error([&] { big * 2.0; }, {"cannot allocate"});
  Tensor col = randn({1, 1}).expand({int64_t(1) << 21, 1}), row = randn({1, int64_t(1) << 21});
  expect_error([&] { mm(col, row); }, {"cannot allocate"});  // a 16 TiB product
  expect_error([&] { matmul(col, row); }, {"cannot allocate"});
  expect_error([&] { col * row; }, {"cannot allocate"});
  expect_error([&] { cat({big, big}); }, {"cannot allocate"});
  expect_error([&] { randn({1}).expand({int64_t(1) << 40, int64_t(1) << 40}); }, {"expand", "too many elements"});
  EXPECT_EQ((ones({2}) * 2.0).sum().item<float>(), 4.0f);
}

TEST(FaultsMemory, CompiledFunctionsWithHugeResultsThrowKilnError) {
  ModelFn add_one = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] + 1.0)}; };
  Tensor big = randn({1}).expand({int64_t(1) << 42});
  for (Fallback fb : {Fallback::Off, Fallback::Allow}) {
    CompileOptions o;
    o.fallback = fb;
    CompiledFunction f = compile(add_one, o);
    // The compiled path allocates kernel outputs and arenas by byte count: the
    // error names the bytes (16 TiB), not the shape.
    expect_error([&] { f({big}); }, {"allocate", "17592186044416"});
    Tensor small = randn({5});
    Tensor want = add_one({small})[0];
    EXPECT_LE(amax(abs(f({small})[0] - want)).item<float>(), 1e-6f); // still works
  }
  CompileOptions off;
  off.fallback = Fallback::Off;
  ModelFn outer = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(matmul(in[0], in[1]))}; };
  Tensor col = randn({1, 1}).expand({int64_t(1) << 21, 1}), row = randn({1, int64_t(1) << 21});
  expect_error([&] { compile(outer, off)({col, row}); }, {"allocate", "17592186044416"});
  ModelFn expand_big = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{in[0].expand({int64_t(1) << 40, 4}).contiguous() * 2.0};
  };
  expect_error([&] { compile(expand_big, off)({randn({4})}); }, {"allocate", "17592186044416"});
  ModelFn overflow = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{in[0].expand({int64_t(1) << 40, int64_t(1) << 40}) * 2.0};
  };
  expect_error([&] { compile(overflow, off)({randn({1})}); }, {"expand", "too many elements"});
}

// ---- disk kernel cache, one Jit

namespace {

codegen::KernelDesc tiny_kernel() {
  codegen::KernelBuilder k({64});
  codegen::Expr x = k.input(kFloat32);
  k.output((x + 1.0) * x);
  return k.build();
}

void expect_tiny_kernel_works(const codegen::CompiledKernel &kernel) {
  std::vector<float> x(64), y(64, -1.f);
  for (int i = 0; i < 64; ++i) x[size_t(i)] = float(i) * 0.5f - 3.f;
  void *bufs[] = {x.data(), y.data()};
  kernel.run(bufs);
  for (int i = 0; i < 64; ++i) EXPECT_FLOAT_EQ(y[size_t(i)], (x[size_t(i)] + 1.f) * x[size_t(i)]) << i;
}

} // namespace

TEST(FaultsDiskCache, EveryKindOfDamagedEntryIsIgnoredWithAWarning) {
  const std::vector<std::pair<std::string, void (*)(const fs::path &)>> damages = {
      {"truncated", truncate_half},       {"truncated header", truncate_header}, {"empty", make_empty},
      {"flipped object byte", flip_object_byte}, {"other version", other_version}, {"future format", future_format},
      {"garbage", garbage},               {"key length overflow", length_overflow},
  };
  for (const auto &[what, damage] : damages) {
    fs::path dir = fresh_dir("jit");
    codegen::JitOptions opts;
    opts.cache_dir = dir.string();
    { codegen::Jit(opts).compile(tiny_kernel()); }
    auto files = entries(dir);
    ASSERT_EQ(files.size(), 1u) << what;
    damage(files[0]);
    codegen::Jit jit(opts);
    std::shared_ptr<const codegen::CompiledKernel> k;
    std::string err = capture_stderr([&] { k = jit.compile(tiny_kernel()); });
    EXPECT_NE(err.find("ignoring"), std::string::npos) << what << ": " << err;
    EXPECT_NE(err.find("recompiling"), std::string::npos) << what << ": " << err;
    EXPECT_EQ(jit.stats().disk_rejects, 1) << what;
    EXPECT_EQ(jit.stats().compiles, 1) << what;
    EXPECT_EQ(jit.stats().disk_writes, 1) << what; // the good entry is written back
    expect_tiny_kernel_works(*k);
    codegen::Jit healed(opts);
    expect_tiny_kernel_works(*healed.compile(tiny_kernel()));
    EXPECT_EQ(healed.stats().disk_hits, 1) << what;
    fs::remove_all(dir);
  }
}

TEST(FaultsDiskCache, EntryThatIsADirectoryIsIgnored) {
  fs::path dir = fresh_dir("jitdir");
  codegen::JitOptions opts;
  opts.cache_dir = dir.string();
  { codegen::Jit(opts).compile(tiny_kernel()); }
  auto files = entries(dir);
  ASSERT_EQ(files.size(), 1u);
  fs::remove(files[0]);
  fs::create_directories(files[0] / "sub");
  codegen::Jit jit(opts);
  std::shared_ptr<const codegen::CompiledKernel> k;
  std::string err = capture_stderr([&] { k = jit.compile(tiny_kernel()); });
  expect_tiny_kernel_works(*k);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().disk_hits, 0);
  EXPECT_NE(err.find("warning"), std::string::npos) << err;
  fs::remove_all(dir);
}

TEST(FaultsDiskCache, UnusableDirectoriesWarnAndCompile) {
  fs::path dir = fresh_dir("unusable");
  for (const std::string &bad : {under_a_file(dir).string(), std::string("/proc/kiln-no-such-dir/cache"),
                                 std::string("/proc/self/status")}) {
    codegen::JitOptions opts;
    opts.cache_dir = bad;
    std::unique_ptr<codegen::Jit> jit; // a kernel's code lives as long as its Jit
    std::shared_ptr<const codegen::CompiledKernel> k;
    std::string err = capture_stderr([&] {
      jit = std::make_unique<codegen::Jit>(opts);
      k = jit->compile(tiny_kernel());
    });
    EXPECT_EQ(jit->stats().compiles, 1) << bad;
    EXPECT_EQ(jit->stats().disk_writes, 0) << bad;
    EXPECT_NE(err.find("unusable"), std::string::npos) << bad << ": " << err;
    expect_tiny_kernel_works(*k);
  }
  fs::remove_all(dir);
}

TEST(FaultsDiskCache, DirectoryThatBecomesUnwritableWarnsAndCompiles) {
  fs::path dir = fresh_dir("vanish");
  codegen::JitOptions opts;
  opts.cache_dir = (dir / "cache").string();
  codegen::Jit jit(opts);
  // Replace the directory by a regular file after the Jit checked it.
  fs::remove_all(dir / "cache");
  std::ofstream(dir / "cache") << "not a directory";
  std::shared_ptr<const codegen::CompiledKernel> k;
  std::string err = capture_stderr([&] { k = jit.compile(tiny_kernel()); });
  expect_tiny_kernel_works(*k);
  EXPECT_EQ(jit.stats().compiles, 1);
  EXPECT_EQ(jit.stats().disk_writes, 0);
  EXPECT_NE(err.find("cannot write"), std::string::npos) << err;
  fs::remove_all(dir);
}

// ---- disk kernel cache through kiln::compile (child processes)

TEST(FaultsDiskCache, CompileUsesTheCacheAndRecompilesDamagedEntries) {
  fs::path dir = fresh_dir("compile");
  ChildResult cold = run_child(dir.string());
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  long long kernels = cold.counters["kernels"];
  ASSERT_GE(kernels, 1) << cold.output;
  EXPECT_EQ(cold.counters["compiles"], kernels);
  EXPECT_EQ(cold.counters["disk_writes"], kernels);
  EXPECT_EQ(cold.counters["match"], 1);

  ChildResult warm = run_child(dir.string());
  ASSERT_EQ(warm.exit_code, 0) << warm.output;
  EXPECT_EQ(warm.counters["compiles"], 0) << warm.output;
  EXPECT_EQ(warm.counters["disk_hits"], kernels);

  const std::vector<std::pair<std::string, void (*)(const fs::path &)>> damages = {
      {"truncated", truncate_half}, {"flipped object byte", flip_object_byte},
      {"other version", other_version}, {"garbage", garbage}, {"empty", make_empty}};
  for (const auto &[what, damage] : damages) {
    for (const fs::path &p : entries(dir)) damage(p);
    ChildResult r = run_child(dir.string());
    ASSERT_EQ(r.exit_code, 0) << what << ": " << r.output;
    EXPECT_EQ(r.counters["match"], 1) << what;
    EXPECT_EQ(r.counters["disk_rejects"], kernels) << what << ": " << r.output;
    EXPECT_EQ(r.counters["compiles"], kernels) << what;
    EXPECT_EQ(r.counters["disk_hits"], 0) << what;
    EXPECT_NE(r.output.find("[warning]"), std::string::npos) << what << ": " << r.output;
    EXPECT_NE(r.output.find("recompiling"), std::string::npos) << what << ": " << r.output;
    ChildResult healed = run_child(dir.string());
    EXPECT_EQ(healed.counters["disk_hits"], kernels) << what << ": " << healed.output;
    EXPECT_EQ(healed.counters["compiles"], 0) << what;
  }
  fs::remove_all(dir);
}

TEST(FaultsDiskCache, CompileWithAnUnusableCacheDirWarnsAndRuns) {
  fs::path dir = fresh_dir("compile-unusable");
  for (const std::string &bad : {under_a_file(dir).string(), std::string("/proc/kiln-no-such-dir")}) {
    ChildResult r = run_child(bad);
    ASSERT_EQ(r.exit_code, 0) << bad << ": " << r.output;
    EXPECT_EQ(r.counters["match"], 1) << bad;
    EXPECT_GE(r.counters["compiles"], 1) << bad;
    EXPECT_EQ(r.counters["disk_writes"], 0) << bad;
    EXPECT_NE(r.output.find("unusable"), std::string::npos) << bad << ": " << r.output;
  }
  fs::remove_all(dir);
}

// A KILN_CACHE_DIR others can write (here world-writable, holding a valid
// entry): the process refuses it with one warning, reads and writes nothing
// there, and the compiled results equal eager's.
TEST(FaultsDiskCache, CompileRefusesACacheDirOthersCanWrite) {
  fs::path dir = fresh_dir("compile-shared");
  ChildResult cold = run_child(dir.string());
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
  ASSERT_GE(cold.counters["disk_writes"], 1) << cold.output;
  size_t files = entries(dir).size();
  fs::permissions(dir, fs::perms(0777));
  ChildResult r = run_child(dir.string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.counters["match"], 1) << r.output;
  EXPECT_EQ(r.counters["compiles"], cold.counters["compiles"]) << r.output;
  EXPECT_EQ(r.counters["disk_hits"], 0) << r.output;
  EXPECT_EQ(r.counters["disk_writes"], 0) << r.output;
  size_t warnings = 0;
  for (size_t at = r.output.find("[warning]"); at != std::string::npos; at = r.output.find("[warning]", at + 1))
    ++warnings;
  EXPECT_EQ(warnings, 1u) << r.output;
  EXPECT_NE(r.output.find("refusing object cache directory"), std::string::npos) << r.output;
  EXPECT_EQ(entries(dir).size(), files);
  fs::remove_all(dir);
}

TEST(FaultsDiskCache, ConcurrentProcessesShareOneCacheDir) {
  // Entries are written to a temporary file and renamed into place: processes
  // compiling the same kernels at once never read a half-written entry.
  fs::path dir = fresh_dir("shared");
  std::string self = fs::read_symlink("/proc/self/exe").string();
  std::string cmd = "KILN_CACHE_DIR='" + dir.string() + "' '" + self + "' --compile-child 2>&1";
  std::vector<FILE *> children;
  for (int i = 0; i < 4; ++i) children.push_back(popen(cmd.c_str(), "r"));
  for (FILE *p : children) {
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    int status = pclose(p);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
    EXPECT_NE(out.find("match=1"), std::string::npos) << out;
    EXPECT_EQ(out.find("ignoring"), std::string::npos) << out;
  }
  ChildResult after = run_child(dir.string());
  EXPECT_EQ(after.counters["compiles"], 0) << after.output;
  EXPECT_EQ(after.counters["disk_rejects"], 0) << after.output;
  fs::remove_all(dir);
}

// ---- KILN_DUMP_DIR

TEST(FaultsDumpDir, UnwritableDumpDirWarnsAndCompiledResultsAreCorrect) {
  fs::path dir = fresh_dir("dump");
  ModelFn fn = child_model();
  Tensor x = randn({5, 16});
  std::vector<Tensor> want = fn({x});
  for (const std::string &bad : {under_a_file(dir).string(), std::string("/proc/kiln-cannot-write-here"),
                                 std::string("/proc/self/status")}) {
    setenv("KILN_DUMP_DIR", bad.c_str(), 1);
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    std::vector<Tensor> got;
    std::string err = capture_stderr([&] { got = f({x}); });
    unsetenv("KILN_DUMP_DIR");
    EXPECT_NE(err.find("IR dumps disabled"), std::string::npos) << bad << ": " << err;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_LE(amax(abs(got[i] - want[i])).item<float>(), 1e-5f) << bad << " output " << i;
    EXPECT_EQ(f.stats().eager_calls, 0) << bad;
  }
  // A dump directory that exists but where one dump file name is taken by a directory.
  fs::path taken = dir / "taken";
  fs::create_directories(taken / "main" / "f32-5x16" / "00-after-trace.kir");
  setenv("KILN_DUMP_DIR", taken.c_str(), 1);
  CompiledFunction f = compile(fn);
  std::vector<Tensor> got;
  std::string err = capture_stderr([&] { got = f({x}); });
  unsetenv("KILN_DUMP_DIR");
  EXPECT_NE(err.find("IR dumps disabled"), std::string::npos) << err;
  EXPECT_LE(amax(abs(got[0] - want[0])).item<float>(), 1e-5f);
  fs::remove_all(dir);
}

// ---- KILN_LOG: an unknown level used to mean warn silently.
TEST(Faults, UnknownLogLevelWarnsNamingItAndTheValidOnes) {
  setenv("KILN_LOG", "verbose", 1);
  std::string err = capture_stderr([] { reload_log_level(); });
  setenv("KILN_LOG", "debug", 1);
  std::string ok = capture_stderr([] { reload_log_level(); });
  unsetenv("KILN_LOG");
  reload_log_level();
  EXPECT_NE(err.find("KILN_LOG=verbose"), std::string::npos) << err;
  EXPECT_NE(err.find("trace, debug, info, warn, error, critical, off"), std::string::npos) << err;
  EXPECT_NE(err.find("using warn"), std::string::npos) << err;
  EXPECT_EQ(ok.find("KILN_LOG"), std::string::npos) << ok;
}

int main(int argc, char **argv) {
  if (argc > 1 && std::strcmp(argv[1], "--compile-child") == 0) {
    try {
      return run_compile_child();
    } catch (const std::exception &e) {
      std::printf("child: error %s\n", e.what());
      return 4;
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
