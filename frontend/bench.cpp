#include "frontend/bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "codegen/gemm/gemm.h"
#include "codegen/gemm/path.h"
#include "codegen/jit.h"
#include "frontend/trace.h"
#include "ir/flops.h"
#include "ir/graph.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

namespace kiln {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Median microseconds per call after `warmup` untimed calls: options.iters
// calls, or fewer (at least min(iters, 5)) once options.max_phase_ms is spent.
double median_us(const ModelFn &fn, const std::vector<Tensor> &inputs, const BenchOptions &options) {
  for (int i = 0; i < options.warmup; ++i) fn(inputs);
  const int min_iters = std::min(options.iters, 5);
  std::vector<double> us;
  us.reserve(size_t(options.iters));
  auto start = Clock::now();
  for (int i = 0; i < options.iters; ++i) {
    auto t0 = Clock::now();
    fn(inputs);
    us.push_back(ms_since(t0) * 1e3);
    if (options.max_phase_ms > 0 && i + 1 >= min_iters && ms_since(start) > options.max_phase_ms) break;
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// Wall time of the first call of a fresh compile(): trace, passes, plan, JIT and one run.
double first_call_ms(const ModelFn &fn, const std::vector<Tensor> &inputs, std::vector<Tensor> *out) {
  CompiledFunction f = compile(fn);
  auto t0 = Clock::now();
  std::vector<Tensor> y = f(inputs);
  double ms = ms_since(t0);
  if (out) *out = std::move(y);
  return ms;
}

// A fresh directory for one bench row's disk cache, removed on destruction.
class TempCacheDir {
public:
  TempCacheDir() {
    std::random_device rd;
    namespace fs = std::filesystem;
    path_ = fs::temp_directory_path() / ("kiln-bench-cache-" + std::to_string(rd()) + std::to_string(rd()));
  }
  ~TempCacheDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }

private:
  std::filesystem::path path_;
};

// First-call time of a fresh compile() whose kernels compile with `jit`; the
// function (and its kernels) is gone before `jit` is.
double first_call_ms_with(codegen::Jit &jit, const ModelFn &fn, const std::vector<Tensor> &inputs,
                          std::vector<Tensor> *out) {
  codegen::ScopedJit use(jit);
  return first_call_ms(fn, inputs, out);
}

int64_t type_bytes(const ir::TensorType &t) { return t.numel() * int64_t(itemsize(t.dtype)); }

bool is_view(const ir::Node &n) { return n.kind() == ir::Node::Kind::Op && n.info().kind == OpKind::View; }

// max |c - e| and that divided by max |e| (a norm-wise relative difference:
// element-wise ratios blow up on outputs that are close to zero).
void output_diffs(const std::vector<Tensor> &compiled, const std::vector<Tensor> &eager, BenchRow &row) {
  KILN_CHECK(compiled.size() == eager.size(), "bench: compiled function returned ", compiled.size(),
             " outputs, eager ", eager.size());
  double max_abs = 0, max_ref = 0;
  for (size_t i = 0; i < eager.size(); ++i) {
    Tensor e = eager[i].to(kFloat64), c = compiled[i].to(kFloat64);
    if (e.numel() == 0) continue;
    max_abs = std::max(max_abs, amax(abs(c - e)).item<double>());
    max_ref = std::max(max_ref, amax(abs(e)).item<double>());
  }
  row.max_abs_diff = max_abs;
  row.max_rel_diff = max_ref > 0 ? max_abs / max_ref : max_abs;
}

double now_us() {
  return std::chrono::duration<double, std::micro>(Clock::now().time_since_epoch()).count();
}

// Reports [start, now) as `phase` to options.on_phase, when set.
void report(const BenchOptions &options, const char *phase, double start_us) {
  if (options.on_phase) options.on_phase(phase, start_us, now_us() - start_us);
}

// Sets the contraction path while alive; restores the previous one after.
class ScopedGemmPath {
public:
  explicit ScopedGemmPath(gemm::Path p) : saved_(gemm::path()) { gemm::set_path(p); }
  ~ScopedGemmPath() { gemm::set_path(saved_); }
  ScopedGemmPath(const ScopedGemmPath &) = delete;
  ScopedGemmPath &operator=(const ScopedGemmPath &) = delete;

private:
  gemm::Path saved_;
};

} // namespace

namespace {

// contraction_flops of fn traced on `inputs`; 0 when it cannot be traced (a
// function that reads tensor data runs eagerly: its row has no flop count).
int64_t traced_flops(const ModelFn &fn, const std::vector<Tensor> &inputs) {
  try {
    return ir::contraction_flops(*trace(fn, inputs, "bench"));
  } catch (const Error &e) {
    log()->debug("bench: no flop count, tracing failed: {}", e.what());
    return 0;
  }
}

} // namespace

std::vector<gemm::Path> parse_bench_gemm(std::string_view value) {
  if (value == "both") return {gemm::Path::Jit, gemm::Path::Blas};
  if (std::optional<gemm::Path> p = gemm::parse_path(value)) return {*p};
  throw Error("--gemm must be jit, blas or both, got '" + std::string(value) + "'");
}

int64_t bytes_moved_estimate(const ir::Graph &g) {
  int64_t bytes = 0;
  for (const ir::Value *v : g.inputs()) bytes += type_bytes(v->type());
  for (const ir::Value *v : g.params()) bytes += type_bytes(v->type());
  for (const ir::Value *v : g.outputs()) bytes += type_bytes(v->type());
  for (const ir::Node *n : g.nodes()) {
    if (is_view(*n)) continue;
    for (const ir::Value *r : n->results()) {
      bool is_output = std::find(g.outputs().begin(), g.outputs().end(), r) != g.outputs().end();
      if (!is_output && g.has_uses(r)) bytes += 2 * type_bytes(r->type()); // written, then read
    }
  }
  return bytes;
}

namespace {

// Cold and warm compiles each get a fresh Jit (created outside the timed
// region) over one temporary disk cache: the cold one compiles every kernel
// and fills the cache, the warm one finds them all there, as a second process
// would.
void compile_costs(BenchRow &row, const ModelFn &fn, const std::vector<Tensor> &inputs,
                   std::vector<Tensor> *compiled_out, const BenchOptions &options) {
  TempCacheDir dir;
  codegen::JitOptions jo;
  jo.cache_dir = dir.str();
  auto cold = std::make_unique<codegen::Jit>(jo);
  double t = now_us();
  row.compile_ms_cold = first_call_ms_with(*cold, fn, inputs, compiled_out);
  report(options, "compile cold", t);
  cold.reset();
  codegen::Jit warm(jo);
  t = now_us();
  row.compile_ms_warm = first_call_ms_with(warm, fn, inputs, nullptr);
  report(options, "compile warm", t);
  row.warm_kernels_compiled = warm.stats().compiles;
}

// What a row derives from its timings and from f's plan.
void plan_stats(BenchRow &row, const CompiledFunction &f, const ModelFn &fn, const std::vector<Tensor> &inputs,
                const BenchOptions &options) {
  row.speedup = row.compiled_us > 0 ? row.eager_us / row.compiled_us : 0;
  row.kernels = f.kernels_per_call(inputs);
  if (auto g = f.graph_for(inputs)) row.bytes_moved = bytes_moved_estimate(*g);
  row.achieved_gbps = row.compiled_us > 0 ? double(row.bytes_moved) / (row.compiled_us * 1e3) : 0;
  row.bandwidth_fraction = options.stream_gbps > 0 ? row.achieved_gbps / options.stream_gbps : 0;
  // From the traced graph: the optimized one may have lowered a small
  // contraction into a fused kernel (W6's [1, 64] linears), with no
  // contraction node left to count, though the work is the same.
  row.flops = traced_flops(fn, inputs);
  if (row.flops <= 0 || row.compiled_us <= 0) return;
  row.gflops = double(row.flops) / (row.compiled_us * 1e3);
  if (options.fma_gflops > 0) row.fma_fraction = row.gflops / options.fma_gflops;
}

// The compiled half of a row (everything after the eager timing), with the
// current contraction path.
void bench_compiled(BenchRow &row, const ModelFn &fn, const std::vector<Tensor> &inputs,
                    const std::vector<Tensor> &eager_out, const BenchOptions &options) {
  row.gemm = std::string(gemm::path_name(gemm::path()));
  std::vector<Tensor> compiled_out;
  compile_costs(row, fn, inputs, &compiled_out, options);
  double t = now_us();
  CompiledFunction f = compile(fn);
  compiled_out = f(inputs);
  output_diffs(compiled_out, eager_out, row);
  row.compiled_us = median_us([&](const std::vector<Tensor> &in) { return f(in); }, inputs, options);
  report(options, "compiled", t);
  if (options.on_step) {
    codegen::ScopedStepObserver observe(options.on_step);
    f(inputs);
  }
  plan_stats(row, f, fn, inputs, options);
}

} // namespace

std::vector<BenchRow> bench_rows(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                                 const std::vector<gemm::Path> &paths, const BenchOptions &options) {
  KILN_CHECK(options.iters >= 1 && options.warmup >= 0, "bench: iters must be >= 1 and warmup >= 0");
  KILN_CHECK(!paths.empty(), "bench: no contraction path to measure");
  BenchRow eager;
  eager.name = name;
  double t = now_us();
  std::vector<Tensor> eager_out = fn(inputs);
  eager.eager_us = median_us(fn, inputs, options);
  report(options, "eager", t);
  std::vector<BenchRow> rows;
  for (gemm::Path p : paths) {
    ScopedGemmPath use(p);
    rows.push_back(eager);
    bench_compiled(rows.back(), fn, inputs, eager_out, options);
  }
  return rows;
}

BenchRow bench_row(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                   const BenchOptions &options) {
  return bench_rows(name, fn, inputs, {gemm::path()}, options).front();
}

namespace {
// The bytes one call of fn allocates at its peak above the level before it.
int64_t peak_bytes_of_call(const ModelFn &fn, const std::vector<Tensor> &inputs) {
  reset_peak_memory_stats();
  fn(inputs);
  return allocator_stats().peak_allocated_bytes;
}
} // namespace

BenchRow bench_training_row(const std::string &name, const std::function<TrainingSetup()> &make,
                            const BenchOptions &options) {
  KILN_CHECK(options.iters >= 1 && options.warmup >= 0, "bench: iters must be >= 1 and warmup >= 0");
  BenchRow row;
  row.name = name;
  row.gemm = std::string(gemm::path_name(gemm::path()));
  // Agreement: two copies made alike, trained the same number of steps.
  {
    TrainingSetup e = make(), c = make();
    KILN_CHECK(e.params.size() == c.params.size() && !e.params.empty(),
               "bench ", name, ": a training setup names no parameters, or its copies differ");
    CompiledFunction f = compile(c.step);
    for (int i = 0; i < kTrainingCheckSteps; ++i) {
      e.step(e.inputs);
      f(c.inputs);
    }
    output_diffs(c.params, e.params, row);
  }
  TrainingSetup e = make();
  double t = now_us();
  row.eager_us = median_us(e.step, e.inputs, options);
  report(options, "eager", t);
  row.eager_peak_bytes = peak_bytes_of_call(e.step, e.inputs);
  {
    TrainingSetup fresh = make();
    compile_costs(row, fresh.step, fresh.inputs, nullptr, options);
  }
  TrainingSetup c = make();
  t = now_us();
  CompiledFunction f = compile(c.step);
  f(c.inputs);
  row.compiled_us = median_us([&](const std::vector<Tensor> &in) { return f(in); }, c.inputs, options);
  report(options, "compiled", t);
  row.compiled_peak_bytes = peak_bytes_of_call([&](const std::vector<Tensor> &in) { return f(in); }, c.inputs) +
                            f.stats().peak_arena_bytes;
  if (options.on_step) {
    codegen::ScopedStepObserver observe(options.on_step);
    f(c.inputs);
  }
  TrainingSetup traced = make(); // tracing runs the step's Python-side effects (zero_grad) on its copy
  plan_stats(row, f, traced.step, traced.inputs, options);
  return row;
}

std::vector<BenchRow> bench_training_rows(const std::string &name, const std::function<TrainingSetup()> &make,
                                          const std::vector<gemm::Path> &paths, const BenchOptions &options) {
  KILN_CHECK(!paths.empty(), "bench: no contraction path to measure");
  std::vector<BenchRow> rows;
  for (gemm::Path p : paths) {
    ScopedGemmPath use(p);
    rows.push_back(bench_training_row(name, make, options));
  }
  return rows;
}

namespace {

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// `v` with `digits` decimals (times 100 and a '%' when `percent`), "-" when not finite.
std::string fixed_or_dash(double v, int digits, bool percent) {
  if (!std::isfinite(v)) return "-";
  char buf[64];
  std::snprintf(buf, sizeof buf, percent ? "%.*f%%" : "%.*f", digits, percent ? 100 * v : v);
  return buf;
}

// The rows' contraction paths, each once, in order of first appearance.
std::vector<std::string> gemm_paths(const std::vector<BenchRow> &rows) {
  std::vector<std::string> paths;
  for (const BenchRow &r : rows)
    if (!r.gemm.empty() && std::find(paths.begin(), paths.end(), r.gemm) == paths.end()) paths.push_back(r.gemm);
  return paths;
}

} // namespace

void print_bench_table(std::ostream &os, int threads, double stream_gbps, const std::vector<BenchRow> &rows) {
  print_bench_table(os, threads, stream_gbps, 0, rows);
}

void print_bench_table(std::ostream &os, int threads, double stream_gbps, double fma_gflops,
                       const std::vector<BenchRow> &rows) {
  char line[512];
  std::snprintf(line, sizeof line, "threads: %d, stream triad: %.2f GB/s", threads, stream_gbps);
  os << line;
  if (fma_gflops > 0) {
    std::snprintf(line, sizeof line, ", fma peak: %.1f GFLOP/s", fma_gflops);
    os << line;
  }
  if (std::vector<std::string> paths = gemm_paths(rows); !paths.empty()) {
    os << ", gemm: " << paths[0];
    for (size_t i = 1; i < paths.size(); ++i) os << ", " << paths[i];
  }
  os << "\n";
  std::snprintf(line, sizeof line, "%-18s %12s %12s %8s %10s %10s %7s %8s %7s %8s %6s %10s %5s\n", "example",
                "eager us", "compiled us", "speedup", "cold ms", "warm ms", "kernels", "GB/s", "triad", "GFLOP/s",
                "fma", "max diff", "gemm");
  os << line;
  for (const BenchRow &r : rows) {
    std::snprintf(line, sizeof line,
                  "%-18s %12.2f %12.2f %7.2fx %10.1f %10.1f %7lld %8.2f %6.1f%% %8s %6s %10.3g %5s\n",
                  r.name.c_str(), r.eager_us, r.compiled_us, r.speedup, r.compile_ms_cold, r.compile_ms_warm,
                  (long long)r.kernels, r.achieved_gbps, 100 * r.bandwidth_fraction, fixed_or_dash(r.gflops, 1, false).c_str(),
                  fixed_or_dash(r.fma_fraction, 1, true).c_str(), r.max_abs_diff, r.gemm.empty() ? "-" : r.gemm.c_str());
    os << line;
  }
}

void write_bench_json(std::ostream &os, int threads, double stream_gbps, const std::vector<BenchRow> &rows) {
  write_bench_json(os, threads, stream_gbps, 0, rows);
}

void write_bench_json(std::ostream &os, int threads, double stream_gbps, double fma_gflops,
                      const std::vector<BenchRow> &rows) {
  os << "{\"threads\": " << threads << ", \"stream_gbps\": " << json_number(stream_gbps);
  if (fma_gflops > 0) os << ", \"fma_peak_gflops\": " << json_number(fma_gflops);
  std::vector<std::string> paths = gemm_paths(rows);
  if (!paths.empty()) os << ", \"gemm\": \"" << (paths.size() == 1 ? paths[0] : "both") << "\"";
  os << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const BenchRow &r = rows[i];
    // The name may be a file path: quoted and escaped as JSON.
    os << (i ? ",\n  " : "\n  ") << "{\"name\": " << nlohmann::json(r.name).dump(-1, ' ', false,
                                                                              nlohmann::json::error_handler_t::replace)
       << ", \"gemm\": " << (r.gemm.empty() ? "null" : "\"" + r.gemm + "\"")
       << ", \"eager_us\": " << json_number(r.eager_us) << ", \"compiled_us\": " << json_number(r.compiled_us)
       << ", \"speedup\": " << json_number(r.speedup) << ", \"compile_ms_cold\": " << json_number(r.compile_ms_cold)
       << ", \"compile_ms_warm\": " << json_number(r.compile_ms_warm) << ", \"kernels\": " << r.kernels
       << ", \"bytes_moved\": " << r.bytes_moved << ", \"achieved_gbps\": " << json_number(r.achieved_gbps)
       << ", \"bandwidth_fraction\": " << json_number(r.bandwidth_fraction)
       << ", \"max_abs_diff\": " << json_number(r.max_abs_diff)
       << ", \"max_rel_diff\": " << json_number(r.max_rel_diff) << ", \"flops\": " << r.flops
       << ", \"gflops\": " << json_number(r.gflops) << ", \"fma_fraction\": " << json_number(r.fma_fraction);
    if (r.eager_peak_bytes > 0 || r.compiled_peak_bytes > 0)
      os << ", \"eager_peak_bytes\": " << r.eager_peak_bytes << ", \"compiled_peak_bytes\": " << r.compiled_peak_bytes;
    os << "}";
  }
  os << "\n]}\n";
}

double stream_triad_gbps(int threads) {
  KILN_CHECK(threads >= 1, "stream_triad_gbps: threads must be >= 1, got ", threads);
  constexpr int64_t n = int64_t(32) << 20;
  constexpr int runs = 5;
  int saved = get_num_threads();
  set_num_threads(threads);
  std::unique_ptr<float[]> a(new float[n]), b(new float[n]), c(new float[n]);
  // First touch in parallel too, so pages land where the workers run.
  parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) a[i] = 0.f, b[i] = 1.f, c[i] = 2.f;
  });
  const float s = 3.f;
  double best_s = 1e30;
  for (int r = 0; r < runs; ++r) {
    auto t0 = Clock::now();
    parallel_for(0, n, 1 << 16, [&](int64_t lo, int64_t hi) {
      float *pa = a.get();
      const float *pb = b.get(), *pc = c.get();
      for (int64_t i = lo; i < hi; ++i) pa[i] = pb[i] + s * pc[i];
    });
    best_s = std::min(best_s, ms_since(t0) / 1e3);
  }
  set_num_threads(saved);
  KILN_CHECK(a[n - 1] == 7.f, "stream_triad_gbps: wrong triad result"); // also keeps the loop alive
  return 3.0 * double(n) * sizeof(float) / best_s / 1e9;
}

double fma_peak_gflops(int threads) {
  KILN_CHECK(threads >= 1, "fma_peak_gflops: threads must be >= 1, got ", threads);
  return codegen::gemm::fma_peak_gflops(threads);
}

} // namespace kiln
