// GEMM sweep: kiln's JIT GEMM (codegen/gemm, unpacked and with B packed once),
// OpenBLAS sgemm (as configured here: OPENBLAS_CORETYPE pins its AVX2 kernels)
// and oneDNN's sgemm (when built with it) on the same shapes, 1 and 2 threads.
// Counters: `flops` (GFLOP/s) and `fma_frac`, the fraction of the register-only
// FMA peak of the same thread count, measured at start-up and printed in the
// context. Also `Ukernel`: the micro-kernel alone on L1-resident panels.
//
// Shapes: 2048^3 (issue 15's gemm-2048), W5's four linear layers (GPT-2 block,
// M = 128 tokens, y = x W^T: B transposed), 512^3, and W6's 1 x 64 x 64.
//
// W5's four linears with their epilogues (`w5post_*`): kiln's compiled linear +
// epilogue through the public API (compile a traced function, call it: packed
// weights, the epilogue fused, a fresh output per call) against oneDNN's matmul
// primitive with the same post-ops (bias; binary_add of the residual for proj
// and fc2; eltwise_gelu_tanh for fc, as W5's gelu(..., "tanh")), its weights
// reordered once to the primitive's preferred format. The oneDNN row's label is
// the implementation oneDNN chose; `max_diff` is max |oneDNN - kiln| on the same data.
// Run: build/bench/kiln_bench_gemm --benchmark_filter=w5post
// Run: build/bench/kiln_bench_gemm --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <unordered_map>
#include <string>
#include <vector>

#ifdef KILN_HAVE_DNNL
#include <dnnl.h>
#include <dnnl.hpp>
#include <omp.h>
#endif

#include <kiln/kiln.h>

#include "codegen/gemm/gemm.h"
#include "runtime/ops.h"

extern "C" void openblas_set_num_threads(int);

namespace {

namespace gemm = kiln::gemm;

struct Shape {
  const char *name;
  int64_t M, N, K;
  bool tb; // B given as W[N, K] (linear)
};

const Shape kShapes[] = {
    {"gemm2048", 2048, 2048, 2048, false}, {"w5_qkv", 128, 2304, 768, true}, {"w5_proj", 128, 768, 768, true},
    {"w5_fc", 128, 3072, 768, true},       {"w5_fc2", 128, 768, 3072, true}, {"gemm512", 512, 512, 512, false},
    {"w6_linear", 1, 64, 64, true},
};

double g_peak[3]; // FMA peak GFLOP/s by thread count; [0]: 1 thread per CPU-second

struct Operands {
  std::vector<float> A, B, C;
  int64_t lda, ldb, ldc;
  explicit Operands(const Shape &s) : lda(s.K), ldb(s.tb ? s.K : s.N), ldc(s.N) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1, 1);
    A.resize(size_t(s.M * s.K));
    B.resize(size_t(s.K * s.N));
    C.assign(size_t(s.M * s.N), 0.f);
    for (float &x : A) x = u(rng);
    for (float &x : B) x = u(rng);
  }
};

// fma_frac: against the wall-time peak of `threads` threads, or with
// KILN_BENCH_CPU (rates per process CPU-second) against one thread's CPU-time peak.
void set_counters(benchmark::State &state, const Shape &s, int threads) {
  const double flops = 2.0 * s.M * s.N * s.K;
  const double peak = std::getenv("KILN_BENCH_CPU") ? g_peak[0] : g_peak[threads];
  state.counters["flops"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["fma_frac"] = benchmark::Counter(flops * 1e-9 / peak, benchmark::Counter::kIsIterationInvariantRate);
}

void kiln_jit(benchmark::State &state, Shape s, int threads) {
  kiln::set_num_threads(threads);
  Operands o(s);
  gemm::Config cfg = gemm::default_config<float>();
  cfg.threads = threads;
  gemm::warm_up<float>(cfg);
  for (auto _ : state)
    gemm::gemm<float>(false, s.tb, s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, o.C.data(), o.ldc,
                      cfg);
  set_counters(state, s, threads);
}

void kiln_jit_packed(benchmark::State &state, Shape s, int threads) {
  kiln::set_num_threads(threads);
  Operands o(s);
  gemm::warm_up<float>();
  auto packed = gemm::pack_b<float>(s.tb, s.K, s.N, o.B.data(), o.ldb);
  for (auto _ : state)
    gemm::gemm_packed<float>(false, s.M, 1.f, o.A.data(), o.lda, packed, 0.f, o.C.data(), o.ldc, threads);
  set_counters(state, s, threads);
}

void openblas(benchmark::State &state, Shape s, int threads) {
  openblas_set_num_threads(threads);
  Operands o(s);
  for (auto _ : state)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, int(s.M), int(s.N), int(s.K), 1.f,
                o.A.data(), int(o.lda), o.B.data(), int(o.ldb), 0.f, o.C.data(), int(o.ldc));
  set_counters(state, s, threads);
}

#ifdef KILN_HAVE_DNNL
void onednn(benchmark::State &state, Shape s, int threads) {
  omp_set_num_threads(threads);
  Operands o(s);
  for (auto _ : state)
    dnnl_sgemm('N', s.tb ? 'T' : 'N', s.M, s.N, s.K, 1.f, o.A.data(), o.lda, o.B.data(), o.ldb, 0.f, o.C.data(),
               o.ldc);
  set_counters(state, s, threads);
}
#endif

// ---- W5's linears with their epilogues: kiln compiled vs oneDNN's matmul primitive

struct PostShape {
  const char *name;
  int64_t N, K;
  bool gelu, residual; // y = [residual +] [gelu_tanh](x W^T + b)
};

const PostShape kPostShapes[] = {
    {"w5post_qkv_bias", 2304, 768, false, false},
    {"w5post_proj_bias_residual", 768, 768, false, true},
    {"w5post_fc_bias_gelu", 3072, 768, true, false},
    {"w5post_fc2_bias_residual", 768, 3072, false, true},
};
constexpr int64_t kPostM = 128;

// The same operands for both rows (x [M, K], W [N, K], b [N], residual [M, N]),
// and kiln's result, which the oneDNN row compares with.
struct PostData {
  kiln::Tensor x, w, b, r, y_kiln;
};

std::map<std::string, PostData> &post_data() {
  static std::map<std::string, PostData> m;
  return m;
}

PostData &post_operands(const PostShape &p) {
  PostData &d = post_data()[p.name];
  if (d.x.defined()) return d;
  kiln::manual_seed(7);
  d.x = kiln::randn({kPostM, p.K});
  d.w = kiln::randn({p.N, p.K}).mul_(0.02);
  d.b = kiln::randn({p.N}).mul_(0.1);
  d.r = kiln::randn({kPostM, p.N});
  return d;
}

kiln::CompiledFunction compile_post(const PostShape &p, const PostData &d) {
  const kiln::Tensor w = d.w, b = d.b;
  const bool gelu = p.gelu, residual = p.residual;
  return kiln::compile([w, b, gelu, residual](const std::vector<kiln::Tensor> &in) {
    kiln::Tensor y = kiln::linear(in[0], w, b);
    if (gelu) y = kiln::gelu(y, "tanh");
    if (residual) y = in[1] + y;
    return std::vector<kiln::Tensor>{y};
  });
}

void set_post_counters(benchmark::State &state, const PostShape &p, int threads) {
  set_counters(state, Shape{p.name, kPostM, p.N, p.K, true}, threads);
}

void kiln_compiled_post(benchmark::State &state, PostShape p, int threads) {
  kiln::set_num_threads(threads);
  PostData &d = post_operands(p);
  kiln::CompiledFunction f = compile_post(p, d);
  std::vector<kiln::Tensor> in{d.x};
  if (p.residual) in.push_back(d.r);
  d.y_kiln = f(in).at(0); // the specialization is built here, outside the timing
  for (auto _ : state) benchmark::DoNotOptimize(f(in));
  set_post_counters(state, p, threads);
}

#ifdef KILN_HAVE_DNNL
void onednn_matmul_post(benchmark::State &state, PostShape p, int threads) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  omp_set_num_threads(threads);
  PostData &d = post_operands(p);
  const int64_t M = kPostM, N = p.N, K = p.K;
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  const memory::desc src_md({M, K}, dt::f32, tag::ab), wei_any({K, N}, dt::f32, tag::any),
      bias_md({1, N}, dt::f32, tag::ab), dst_md({M, N}, dt::f32, tag::ab);
  post_ops po;
  if (p.gelu) po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  if (p.residual) po.append_binary(algorithm::binary_add, dst_md);
  primitive_attr attr;
  attr.set_post_ops(po);
  const matmul::primitive_desc pd(matmul::desc(src_md, wei_any, bias_md, dst_md), attr, eng);
  // W [N, K] row-major is W^T [K, N] in format `ba`: reordered once to the primitive's choice.
  memory w_user({{K, N}, dt::f32, tag::ba}, eng, d.w.raw_data());
  memory w_mem(pd.weights_desc(), eng);
  reorder(w_user, w_mem).execute(s, w_user, w_mem);
  s.wait();
  std::vector<float> y(size_t(M * N));
  memory src(src_md, eng, d.x.raw_data()), bias(bias_md, eng, d.b.raw_data()), dst(dst_md, eng, y.data()),
      res(dst_md, eng, d.r.raw_data());
  std::unordered_map<int, memory> args{
      {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, w_mem}, {DNNL_ARG_BIAS, bias}, {DNNL_ARG_DST, dst}};
  if (p.residual) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.gelu ? 1 : 0) | DNNL_ARG_SRC_1] = res;
  const matmul prim(pd);
  prim.execute(s, args);
  s.wait();
  for (auto _ : state) {
    prim.execute(s, args);
    s.wait();
  }
  set_post_counters(state, p, threads);
  state.SetLabel(pd.impl_info_str());
  if (d.y_kiln.defined()) { // the kiln row ran first: same data, same post-ops
    const float *k = static_cast<const float *>(d.y_kiln.raw_data());
    double diff = 0;
    for (size_t i = 0; i < y.size(); ++i) diff = std::max(diff, double(std::fabs(y[i] - k[i])));
    state.counters["max_diff"] = diff;
  }
}
#endif

// The micro-kernel alone (1 thread, L1-resident panels) at the default kc.
void ukernel(benchmark::State &state) {
  const gemm::Config cfg = gemm::default_config<float>();
  double g = 0;
  for (auto _ : state) g = gemm::ukernel_gflops<float>(cfg, cfg.kc, 50);
  state.counters["flops"] = g;
  state.counters["fma_frac"] = g / g_peak[0];
}

void register_all() {
  benchmark::RegisterBenchmark("Ukernel", ukernel)->Iterations(1)->Unit(benchmark::kMillisecond);
  for (const Shape &s : kShapes)
    for (int t : {1, 2}) {
      auto reg = [&](const char *impl, void (*fn)(benchmark::State &, Shape, int)) {
        std::string name = std::string(s.name) + "/" + impl + "/threads:" + std::to_string(t);
        auto *b = benchmark::RegisterBenchmark(name.c_str(), fn, s, t)->Unit(benchmark::kMicrosecond);
        // KILN_BENCH_CPU=1: rates per CPU-second of the whole process (all
        // threads), which other tenants' load disturbs far less than wall time:
        // for comparing kiln's own configurations on a busy machine.
        if (std::getenv("KILN_BENCH_CPU")) b->MeasureProcessCPUTime();
        else b->UseRealTime();
      };
      reg("kiln_jit", kiln_jit);
      reg("kiln_jit_packed", kiln_jit_packed);
      reg("openblas", openblas);
#ifdef KILN_HAVE_DNNL
      reg("onednn", onednn);
#endif
    }
  for (const PostShape &p : kPostShapes)
    for (int t : {1, 2}) {
      auto reg = [&](const char *impl, void (*fn)(benchmark::State &, PostShape, int)) {
        std::string name = std::string(p.name) + "/" + impl + "/threads:" + std::to_string(t);
        auto *b = benchmark::RegisterBenchmark(name.c_str(), fn, p, t)->Unit(benchmark::kMicrosecond);
        if (std::getenv("KILN_BENCH_CPU")) b->MeasureProcessCPUTime();
        else b->UseRealTime();
      };
      reg("kiln_compiled", kiln_compiled_post);
#ifdef KILN_HAVE_DNNL
      reg("onednn_matmul", onednn_matmul_post);
#endif
    }
}

} // namespace

int main(int argc, char **argv) {
  kiln::set_num_threads(2);
  g_peak[1] = gemm::fma_peak_gflops(1);
  g_peak[2] = gemm::fma_peak_gflops(2);
  g_peak[0] = gemm::fma_peak_cpu_gflops();
  char buf[96];
  std::snprintf(buf, sizeof buf, "%.1f / %.1f GFLOP/s (per CPU-second of one thread: %.1f)", g_peak[1], g_peak[2],
                g_peak[0]);
  benchmark::AddCustomContext("fma_peak_1t_2t", buf);
  benchmark::AddCustomContext("kiln_gemm_isa", gemm::host_isa());
  benchmark::AddCustomContext("kiln_gemm_config", gemm::default_config<float>().to_string());
#ifdef KILN_HAVE_DNNL
  benchmark::AddCustomContext("onednn", "dnnl_sgemm (libdnnl)");
#else
  benchmark::AddCustomContext("onednn", "not found at configure time: oneDNN rows skipped");
#endif
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
