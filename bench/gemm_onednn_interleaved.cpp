// kiln against oneDNN, interleaved in one process: on the shared machine the
// load moves wall times by 2x between Google Benchmark rows run minutes apart,
// so here each round times a batch of kiln calls and a batch of oneDNN calls
// back to back (which goes first alternates), and the ratio is taken per round.
// Prints per row: median and min wall us per call of each, and the median of
// the per-round kiln / oneDNN speed ratios (> 1: kiln faster).
//
// Rows: gemm2048 (kiln::gemm::gemm against dnnl_sgemm; `gemm2048p`: kiln with
// B packed beforehand), and W5's four linears with their epilogues (kiln's
// compiled function through the public API against oneDNN's matmul primitive
// with the same post-ops, as kiln_bench_gemm's w5post rows).
//
//   OMP_WAIT_POLICY=passive build/bench/kiln_bench_gemm_interleaved [threads=2] [rounds=15] [row-substring]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <dnnl.h>
#include <dnnl.hpp>
#include <omp.h>

#include <kiln/kiln.h>

#include "codegen/gemm/gemm.h"

namespace {

namespace gemm = kiln::gemm;
using Clock = std::chrono::steady_clock;

double process_cpu_seconds() {
  rusage r;
  getrusage(RUSAGE_SELF, &r);
  return double(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + 1e-6 * double(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

struct Impl {
  Impl(std::function<void()> f) : call(std::move(f)) {} // NOLINT: rows list their two calls inline
  std::function<void()> call;
  std::vector<double> wall_us, cpu_us; // per call, one entry per round
};

struct Row {
  std::string name;
  double gflop;
  Impl kiln, dnnl;
};

// Calls per batch so that a batch takes ~target_ms (at least 2).
int batch_size(const std::function<void()> &f, double target_ms) {
  f();
  const auto t0 = Clock::now();
  f();
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return std::max(2, int(target_ms / std::max(1e-3, ms)));
}

void time_batch(Impl &im, int n) {
  im.call(); // the first call after the other library's batch: untimed
  const double c0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) im.call();
  const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  im.wall_us.push_back(us / n);
  im.cpu_us.push_back((process_cpu_seconds() - c0) * 1e6 / n);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// ---- operands

std::vector<float> random_vector(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float &x : v) x = u(rng);
  return v;
}

struct Sgemm {
  int64_t M, N, K;
  std::vector<float> A, B, C1, C2;
  gemm::PackedB<float> packed;
  Sgemm(int64_t m, int64_t n, int64_t k)
      : M(m), N(n), K(k), A(random_vector(size_t(m * k), 1)), B(random_vector(size_t(k * n), 2)),
        C1(size_t(m * n)), C2(size_t(m * n)) {}
};

struct PostShape {
  const char *name;
  int64_t N, K;
  bool gelu, residual;
};
constexpr int64_t kM = 128;

struct Post {
  PostShape p;
  kiln::Tensor x, w, b, r;
  kiln::CompiledFunction f;
  std::vector<kiln::Tensor> in;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};
  std::unique_ptr<dnnl::matmul> prim;
  std::unordered_map<int, dnnl::memory> args;
  std::vector<float> y;
};

void set_up_post(Post &d) {
  using namespace dnnl;
  using tag = memory::format_tag;
  using dt = memory::data_type;
  const PostShape &p = d.p;
  kiln::manual_seed(7);
  d.x = kiln::randn({kM, p.K});
  d.w = kiln::randn({p.N, p.K}).mul_(0.02);
  d.b = kiln::randn({p.N}).mul_(0.1);
  d.r = kiln::randn({kM, p.N});
  const kiln::Tensor w = d.w, b = d.b;
  const bool gelu = p.gelu, residual = p.residual;
  d.f = kiln::compile([w, b, gelu, residual](const std::vector<kiln::Tensor> &in) {
    kiln::Tensor y = kiln::linear(in[0], w, b);
    if (gelu) y = kiln::gelu(y, "tanh");
    if (residual) y = in[1] + y;
    return std::vector<kiln::Tensor>{y};
  });
  d.in = {d.x};
  if (p.residual) d.in.push_back(d.r);
  const int64_t M = kM, N = p.N, K = p.K;
  const memory::desc src_md({M, K}, dt::f32, tag::ab), wei_any({K, N}, dt::f32, tag::any),
      bias_md({1, N}, dt::f32, tag::ab), dst_md({M, N}, dt::f32, tag::ab);
  post_ops po;
  if (p.gelu) po.append_eltwise(1.f, algorithm::eltwise_gelu_tanh, 0.f, 0.f);
  if (p.residual) po.append_binary(algorithm::binary_add, dst_md);
  primitive_attr attr;
  attr.set_post_ops(po);
  const matmul::primitive_desc pd(matmul::desc(src_md, wei_any, bias_md, dst_md), attr, d.eng);
  memory w_user({{K, N}, dt::f32, tag::ba}, d.eng, d.w.raw_data());
  memory w_mem(pd.weights_desc(), d.eng);
  reorder(w_user, w_mem).execute(d.s, w_user, w_mem);
  d.s.wait();
  d.y.resize(size_t(M * N));
  d.args = {{DNNL_ARG_SRC, memory(src_md, d.eng, d.x.raw_data())},
            {DNNL_ARG_WEIGHTS, w_mem},
            {DNNL_ARG_BIAS, memory(bias_md, d.eng, d.b.raw_data())},
            {DNNL_ARG_DST, memory(dst_md, d.eng, d.y.data())}};
  if (p.residual)
    d.args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(p.gelu ? 1 : 0) | DNNL_ARG_SRC_1] = memory(dst_md, d.eng, d.r.raw_data());
  d.prim = std::make_unique<matmul>(pd);
}

} // namespace

int main(int argc, char **argv) {
  const int threads = argc > 1 ? std::max(1, std::atoi(argv[1])) : 2;
  const int rounds = argc > 2 ? std::max(1, std::atoi(argv[2])) : 15;
  const std::string filter = argc > 3 ? argv[3] : "";
  kiln::set_num_threads(threads);
  omp_set_num_threads(threads);
  auto wanted = [&](const char *name) { return filter.empty() || std::strstr(name, filter.c_str()); };

  std::vector<Row> rows;
  const bool big = wanted("gemm2048") || wanted("gemm2048p");
  Sgemm g(big ? 2048 : 1, big ? 2048 : 1, big ? 2048 : 1);
  const gemm::Config cfg = [&] {
    gemm::Config c = gemm::default_config<float>();
    c.threads = threads;
    return c;
  }();
  gemm::warm_up<float>(cfg);
  const double g_gflop = 2.0 * 2048 * 2048 * 2048 * 1e-9;
  auto dnnl_2048 = [&g] {
    dnnl_sgemm('N', 'N', g.M, g.N, g.K, 1.f, g.A.data(), g.K, g.B.data(), g.N, 0.f, g.C2.data(), g.N);
  };
  if (wanted("gemm2048")) {
    rows.push_back({"gemm2048", g_gflop, {[&g, &cfg] {
                                             gemm::gemm<float>(false, false, g.M, g.N, g.K, 1.f, g.A.data(), g.K,
                                                               g.B.data(), g.N, 0.f, g.C1.data(), g.N, cfg);
                                           }},
                    {dnnl_2048}});
  }
  if (wanted("gemm2048p")) {
    g.packed = gemm::pack_b<float>(false, g.K, g.N, g.B.data(), g.N);
    rows.push_back({"gemm2048p", g_gflop, {[&g, threads] {
                                              gemm::gemm_packed<float>(false, g.M, 1.f, g.A.data(), g.K, g.packed, 0.f,
                                                                       g.C1.data(), g.N, threads);
                                            }},
                    {dnnl_2048}});
  }
  const PostShape shapes[] = {{"qkv_bias", 2304, 768, false, false},
                              {"proj_bias_residual", 768, 768, false, true},
                              {"fc_bias_gelu", 3072, 768, true, false},
                              {"fc2_bias_residual", 768, 3072, false, true}};
  std::vector<std::unique_ptr<Post>> posts;
  for (const PostShape &p : shapes) {
    if (!wanted(p.name)) continue;
    posts.push_back(std::make_unique<Post>());
    Post &d = *posts.back();
    d.p = p;
    set_up_post(d);
    rows.push_back({p.name, 2.0 * kM * p.N * p.K * 1e-9, {[&d] { (void)d.f(d.in); }}, {[&d] {
                      d.prim->execute(d.s, d.args);
                      d.s.wait();
                    }}});
  }

  std::printf("threads %d, rounds %d, OMP_WAIT_POLICY=%s\n", threads, rounds,
              std::getenv("OMP_WAIT_POLICY") ? std::getenv("OMP_WAIT_POLICY") : "(unset)");
  std::printf("fma peak %d thread(s): %.1f GFLOP/s\n", threads, gemm::fma_peak_gflops(threads, 100));
  std::printf("%-20s %10s %10s %10s %10s %8s %8s %7s %7s\n", "row", "kiln us", "(min)", "onednn us", "(min)",
              "kiln GF", "dnnl GF", "speed", "cpu");
  for (Row &r : rows) {
    const int nk = batch_size(r.kiln.call, 150), nd = batch_size(r.dnnl.call, 150);
    std::vector<double> ratio, cpu_ratio;
    for (int i = 0; i < rounds; ++i) {
      if (i % 2 == 0) time_batch(r.kiln, nk), time_batch(r.dnnl, nd);
      else time_batch(r.dnnl, nd), time_batch(r.kiln, nk);
      ratio.push_back(r.dnnl.wall_us.back() / r.kiln.wall_us.back());
      cpu_ratio.push_back(r.dnnl.cpu_us.back() / r.kiln.cpu_us.back());
    }
    const double mk = median(r.kiln.wall_us), md = median(r.dnnl.wall_us);
    std::printf("%-20s %10.0f %10.0f %10.0f %10.0f %8.1f %8.1f %7.3f %7.3f\n", r.name.c_str(), mk,
                *std::min_element(r.kiln.wall_us.begin(), r.kiln.wall_us.end()), md,
                *std::min_element(r.dnnl.wall_us.begin(), r.dnnl.wall_us.end()), r.gflop / mk * 1e6,
                r.gflop / md * 1e6, median(ratio), median(cpu_ratio));
    std::fflush(stdout);
  }
  return 0;
}
