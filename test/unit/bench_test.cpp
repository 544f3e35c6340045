// kiln::bench_row and kiln::bytes_moved_estimate on small graphs (fast), plus
// CompiledFunction::kernels_per_call; the contraction flop count, gflops and
// fma_fraction, and the contraction path (--gemm) of each row.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <kiln/kiln.h>

#include "codegen/gemm/gemm.h"
#include "frontend/bench.h"
#include "frontend/trace.h"
#include "ir/flops.h"
#include "ir/graph.h"

using namespace kiln;

namespace {

std::vector<Tensor> add_fn(const std::vector<Tensor> &in) { return {in[0] + in[1]}; }

TEST(Bench, RowOfAnAddHasEveryField) {
  manual_seed(0);
  std::vector<Tensor> in = {randn({4096}), randn({4096})};
  BenchOptions o;
  o.warmup = 1;
  o.iters = 3;
  o.stream_gbps = 10;
  std::vector<std::string> phases;
  o.on_phase = [&](const std::string &phase, double, double dur) {
    EXPECT_GE(dur, 0);
    phases.push_back(phase);
  };
  BenchRow r = bench_row("add", add_fn, in, o);
  EXPECT_EQ(phases, (std::vector<std::string>{"eager", "compile cold", "compile warm", "compiled"}));
  EXPECT_EQ(r.name, "add");
  EXPECT_GT(r.eager_us, 0);
  EXPECT_GT(r.compiled_us, 0);
  EXPECT_DOUBLE_EQ(r.speedup, r.eager_us / r.compiled_us);
  EXPECT_GT(r.compile_ms_cold, 0);
  EXPECT_GT(r.compile_ms_warm, 0);
  // The warm compile's fresh Jit found its one kernel in the cold one's disk cache.
  EXPECT_EQ(r.warm_kernels_compiled, 0);
  EXPECT_EQ(r.kernels, 1);
  // Two inputs read, one output written, nothing in between.
  EXPECT_EQ(r.bytes_moved, 3 * 4096 * 4);
  EXPECT_NEAR(r.achieved_gbps, r.bytes_moved / (r.compiled_us * 1e3), 1e-9);
  EXPECT_NEAR(r.bandwidth_fraction, r.achieved_gbps / 10, 1e-12);
  EXPECT_EQ(r.max_abs_diff, 0);
  EXPECT_EQ(r.max_rel_diff, 0);
}

// on_step sees one extra compiled call: one "kernel" event per kernel launch and
// one "blas" or "gemm-jit" event per contraction, in order, inside the bench_row call.
TEST(Bench, OnStepReportsEachStepOfOneCompiledCall) {
  manual_seed(0);
  Tensor w = randn({32, 16});
  // exp(x) reads no contraction: a kernel; relu(mm * 2) is mm's epilogue, one contraction step.
  auto fn = [w](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(matmul(in[0], w) * 2.0), exp(in[0])};
  };
  BenchOptions o;
  o.warmup = 0;
  o.iters = 1;
  std::vector<std::string> cats, names;
  double last_end = 0;
  o.on_step = [&](const codegen::StepEvent &e) {
    cats.emplace_back(e.category);
    names.emplace_back(e.name);
    EXPECT_GE(e.dur_us, 0);
    EXPECT_GE(e.start_us, last_end);
    last_end = e.start_us + e.dur_us;
  };
  BenchRow r = bench_row("mm-relu", fn, {randn({8, 32})}, o);
  ASSERT_EQ(r.kernels, int64_t(std::count(cats.begin(), cats.end(), "kernel")));
  EXPECT_GE(r.kernels, 1);
  // The contraction step: kiln's GEMM (KILN_GEMM=jit, the default) or BLAS.
  EXPECT_EQ(std::count(cats.begin(), cats.end(), "blas") + std::count(cats.begin(), cats.end(), "gemm-jit"), 1);
  // A step is named by the value it computes, as the dump names it, then what runs.
  for (size_t i = 0; i < cats.size(); ++i) {
    EXPECT_EQ(names[i].rfind("%", 0), 0u) << names[i];
    if (cats[i] == "kernel") {
      EXPECT_NE(names[i].find(" kiln_k_"), std::string::npos) << names[i];
    }
    if (cats[i] == "blas" || cats[i] == "gemm-jit") {
      EXPECT_NE(names[i].find(" contraction+epilogue"), std::string::npos) << names[i];
    }
  }
}

// Without an observer, compiled calls report nothing (the observer is per thread and scoped).
TEST(Bench, StepObserverIsScopedToItsThread) {
  int events = 0;
  CompiledFunction f = compile(add_fn);
  std::vector<Tensor> in = {randn({64}), randn({64})};
  {
    codegen::ScopedStepObserver observe([&](const codegen::StepEvent &) { ++events; });
    f(in);
    EXPECT_EQ(events, 1);
    std::thread([&] { f(in); }).join(); // another thread: not observed
    EXPECT_EQ(events, 1);
  }
  f(in);
  EXPECT_EQ(events, 1);
}

TEST(Bench, IntermediatesBetweenStepsCountTwice) {
  // The relu reads the matmul through a transpose, so it cannot be the matmul's
  // epilogue: the [8, 8] product is written and read back.
  manual_seed(0);
  Tensor w = randn({8, 8});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(matmul(in[0], w).t()) + 1}; };
  std::vector<Tensor> in = {randn({8, 8})};
  CompiledFunction f = compile(fn);
  auto g = f.graph_for(in);
  ASSERT_NE(g, nullptr);
  // input + param + output, plus 2x each non-view intermediate result that is read.
  EXPECT_GE(bytes_moved_estimate(*g), 3 * 64 * 4 + 2 * 64 * 4);
  EXPECT_GE(f.kernels_per_call(in), 1);
}

TEST(Bench, KernelsPerCallIsMinusOneWhenForcedEager) {
  CompileOptions co;
  co.fallback = Fallback::Force;
  CompiledFunction f = compile(add_fn, co);
  EXPECT_EQ(f.kernels_per_call({randn({4}), randn({4})}), -1);
}

// ---- contractions: flops, gflops, fma_fraction; the contraction path

TEST(BenchGemm, ParseGemmFlag) {
  EXPECT_EQ(parse_bench_gemm("jit"), std::vector<gemm::Path>{gemm::Path::Jit});
  EXPECT_EQ(parse_bench_gemm("blas"), std::vector<gemm::Path>{gemm::Path::Blas});
  EXPECT_EQ(parse_bench_gemm("both"), (std::vector<gemm::Path>{gemm::Path::Jit, gemm::Path::Blas}));
  for (const char *bad : {"", "JIT", "cublas", "jit,blas", "both "}) {
    try {
      parse_bench_gemm(bad);
      ADD_FAILURE() << "no error for --gemm '" << bad << "'";
    } catch (const Error &e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("--gemm"), std::string::npos) << msg;
      EXPECT_NE(msg.find("jit, blas or both"), std::string::npos) << msg;
      EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << msg;
    }
  }
}

int64_t traced_flops(const ModelFn &fn, const std::vector<Tensor> &in) {
  return ir::contraction_flops(*trace(fn, in, "flops"));
}

// Each contraction's count against its textbook formula, written out here.
TEST(BenchGemm, ContractionFlopsPerOp) {
  manual_seed(0);
  Tensor a = randn({3, 17}), b = randn({17, 33}), w = randn({65, 17}), bias = randn({65});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{matmul(a, b)}; }, {}),
            2 * 3 * 33 * 17);
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{mm(a, b)}; }, {}),
            2 * 3 * 33 * 17);
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{linear(a, w, bias)}; }, {}),
            2 * 3 * 65 * 17);
  Tensor c = randn({3, 33});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{addmm(c, a, b, 0.5, 2)}; }, {}),
            2 * 3 * 33 * 17);
  Tensor x = randn({5, 3, 17}), y = randn({5, 17, 7});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{bmm(x, y)}; }, {}),
            2 * 5 * 3 * 7 * 17);
  // Broadcast batch: [5, 3, 17] @ [17, 7].
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{matmul(x, randn({17, 7}))}; },
                         {}),
            2 * 5 * 3 * 7 * 17);
  // Matrix-vector and dot.
  Tensor v = randn({17});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{matmul(a, v)}; }, {}),
            2 * 3 * 17);
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{matmul(v, v)}; }, {}), 2 * 17);
  // conv2d: N 2, Cin 6, H 9, W 11; Cout 4, groups 2, 3x3, stride 2, pad 1 ->
  // Ho = (9 + 2 - 3) / 2 + 1 = 5, Wo = (11 + 2 - 3) / 2 + 1 = 6.
  Tensor img = randn({2, 6, 9, 11}), k = randn({4, 3, 3, 3});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) {
              return std::vector<Tensor>{conv2d(img, k, {}, {2, 2}, {1, 1}, {1, 1}, 2)};
            },
                         {}),
            2 * 2 * 5 * 6 * 4 * (6 / 2) * 3 * 3);
  // Attention: q [2, 4, 8] over S = 6 keys of E = 8, values Ev = 5: q k^T and p v.
  Tensor q = randn({2, 4, 8}), kk = randn({2, 6, 8}), vv = randn({2, 6, 5});
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) {
              return std::vector<Tensor>{scaled_dot_product_attention(q, kk, vv)};
            },
                         {}),
            2 * 2 * 4 * 6 * 8 + 2 * 2 * 4 * 6 * 5);
  // Several contractions add up; elementwise ops count nothing.
  EXPECT_EQ(traced_flops([=](const std::vector<Tensor> &) { return std::vector<Tensor>{relu(matmul(a, b)) + 1, exp(a)}; },
                         {}),
            2 * 3 * 33 * 17);
  EXPECT_EQ(traced_flops(add_fn, {randn({8}), randn({8})}), 0);
}

// The optimized graph's fusion groups hold contractions too (matmul + relu is
// one epilogue group): the count walks group bodies.
TEST(BenchGemm, ContractionFlopsInsideFusionGroups) {
  manual_seed(0);
  Tensor w = randn({32, 16});
  ModelFn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(matmul(in[0], w) * 2.0)}; };
  std::vector<Tensor> in = {randn({8, 32})};
  CompiledFunction f = compile(fn);
  f(in);
  auto g = f.graph_for(in);
  ASSERT_NE(g, nullptr);
  int groups = 0;
  for (const ir::Node *n : g->nodes()) {
    EXPECT_NE(n->info().kind, OpKind::Contraction) << "the matmul is not in a group";
    groups += n->body() != nullptr;
  }
  EXPECT_EQ(groups, 1);
  EXPECT_EQ(ir::contraction_flops(*g), 2 * 8 * 16 * 32);
}

// max_phase_ms caps a timed phase at min(iters, 5) calls once it is spent:
// a 100 ms GEMM row does not take 20 calls per phase without --repeat.
TEST(BenchGemm, PhaseTimeCapStopsAfterFiveCalls) {
  int eager_calls = 0;
  ModelFn fn = [&](const std::vector<Tensor> &in) {
    ++eager_calls; // eager calls and traces; compiled calls run the graph
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return std::vector<Tensor>{in[0] + 1};
  };
  BenchOptions o;
  o.warmup = 0;
  o.iters = 200;
  o.max_phase_ms = 1;
  bench_row("sleep", fn, {randn({4})}, o);
  // 1 (outputs) + 5 timed + a handful of traces (cold, warm, compiled, flops); 201+ without the cap.
  EXPECT_GE(eager_calls, 6);
  EXPECT_LT(eager_calls, 20);
}

// A matmul row: flops from an independent count, gflops = flops / compiled time,
// fma_fraction = gflops / the FMA peak measured here, in (0, 1.5).
TEST(BenchGemm, MatmulRowHasGflopsAndFmaFraction) {
  manual_seed(0);
  constexpr int64_t M = 128, N = 96, K = 256;
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
  std::vector<Tensor> in = {randn({M, K}), randn({K, N})};
  BenchOptions o;
  o.warmup = 1;
  o.iters = 5;
  // The bound is the physical peak: one core's rate per CPU-second of its
  // thread times the threads. The wall-time probe (fma_peak_gflops) shrinks
  // with other tenants' load while a ~50 us matmul can run inside one time
  // slice, which put the fraction at 1.6-2.6 at load average 17.
  o.fma_gflops = codegen::gemm::fma_peak_cpu_gflops() * get_num_threads();
  ASSERT_GT(o.fma_gflops, 0);
  BenchRow r = bench_row("mm", fn, in, o);
  const double flops = 2.0 * M * N * K;
  EXPECT_EQ(r.flops, int64_t(flops));
  EXPECT_GT(r.gflops, 0);
  EXPECT_NEAR(r.gflops, flops / (r.compiled_us * 1e3), 1e-9 * r.gflops);
  EXPECT_NEAR(r.fma_fraction, r.gflops / o.fma_gflops, 1e-12);
  EXPECT_GT(r.fma_fraction, 0);
  EXPECT_LT(r.fma_fraction, 1.5);
  EXPECT_EQ(r.gemm, gemm::path_name(gemm::path()));
}

TEST(BenchGemm, RowWithoutContractionsHasNoGflops) {
  BenchOptions o;
  o.warmup = 0;
  o.iters = 1;
  o.fma_gflops = 100;
  BenchRow r = bench_row("add", add_fn, {randn({64}), randn({64})}, o);
  EXPECT_EQ(r.flops, 0);
  EXPECT_TRUE(std::isnan(r.gflops));
  EXPECT_TRUE(std::isnan(r.fma_fraction));
}

// A function that reads tensor data cannot be traced: it runs eagerly when
// compiled, and its row has no flop count (no error).
TEST(BenchGemm, UntraceableFunctionRowHasNoFlops) {
  manual_seed(0);
  Tensor w = randn({8, 8});
  ModelFn fn = [w](const std::vector<Tensor> &in) {
    Tensor y = matmul(in[0], w);
    return std::vector<Tensor>{sum(y).item<double>() > 0 ? y : -y};
  };
  BenchOptions o;
  o.warmup = 0;
  o.iters = 1;
  BenchRow r = bench_row("item", fn, {randn({4, 8})}, o);
  EXPECT_EQ(r.kernels, -1);
  EXPECT_EQ(r.flops, 0);
  EXPECT_TRUE(std::isnan(r.gflops));
}

// bench_rows: eager once, then one row per path, each built with its path set;
// the process's path is restored afterwards.
TEST(BenchGemm, RowsPerPathRestoreThePath) {
  manual_seed(0);
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
  std::vector<Tensor> in = {randn({17, 33}), randn({33, 65})};
  BenchOptions o;
  o.warmup = 0;
  o.iters = 2;
  std::vector<std::string> phases;
  o.on_phase = [&](const std::string &phase, double, double) { phases.push_back(phase); };
  const gemm::Path before = gemm::path();
  std::vector<BenchRow> rows = bench_rows("mm", fn, in, {gemm::Path::Jit, gemm::Path::Blas}, o);
  EXPECT_EQ(gemm::path(), before);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].gemm, "jit");
  EXPECT_EQ(rows[1].gemm, "blas");
  EXPECT_EQ(rows[0].eager_us, rows[1].eager_us);
  for (const BenchRow &r : rows) {
    EXPECT_EQ(r.flops, 2 * 17 * 65 * 33);
    EXPECT_GT(r.gflops, 0);
    EXPECT_LE(r.max_abs_diff, 1e-4);
  }
  EXPECT_EQ(std::count(phases.begin(), phases.end(), "eager"), 1);
  EXPECT_EQ(std::count(phases.begin(), phases.end(), "compiled"), 2);
  EXPECT_THROW(bench_rows("mm", fn, in, {}, o), Error);
}

// The JSON: top-level gemm, and per row gemm, flops, gflops and fma_fraction
// (null without contractions); the table shows "-" there.
TEST(BenchGemm, JsonAndTableCarryTheNewFields) {
  BenchRow mm, add;
  mm.name = "mm";
  mm.gemm = "jit";
  mm.compiled_us = 10;
  mm.flops = 2000000;
  mm.gflops = 200;
  mm.fma_fraction = 0.5;
  add.name = "add";
  add.gemm = "blas";
  std::ostringstream js;
  write_bench_json(js, 2, 50, 400, {mm, add});
  nlohmann::json doc = nlohmann::json::parse(js.str());
  EXPECT_EQ(doc["gemm"], "both");
  EXPECT_EQ(doc["fma_peak_gflops"], 400);
  EXPECT_EQ(doc["rows"][0]["gemm"], "jit");
  EXPECT_EQ(doc["rows"][0]["flops"], 2000000);
  EXPECT_EQ(doc["rows"][0]["gflops"], 200);
  EXPECT_EQ(doc["rows"][0]["fma_fraction"], 0.5);
  EXPECT_EQ(doc["rows"][1]["gemm"], "blas");
  EXPECT_EQ(doc["rows"][1]["flops"], 0);
  EXPECT_TRUE(doc["rows"][1]["gflops"].is_null());
  EXPECT_TRUE(doc["rows"][1]["fma_fraction"].is_null());
  std::ostringstream one;
  write_bench_json(one, 2, 50, 400, {mm});
  EXPECT_EQ(nlohmann::json::parse(one.str())["gemm"], "jit");

  std::ostringstream table;
  print_bench_table(table, 2, 50, 400, {mm, add});
  std::string t = table.str();
  EXPECT_NE(t.find("fma peak: 400.0 GFLOP/s, gemm: jit, blas\n"), std::string::npos) << t;
  EXPECT_NE(t.find(" GFLOP/s "), std::string::npos) << t;
  EXPECT_NE(t.find("  200.0  50.0%"), std::string::npos) << t;
  std::string add_line = t.substr(t.find("\nadd ") + 1);
  EXPECT_NE(add_line.find("       -      - "), std::string::npos) << t;
}

TEST(Bench, StreamTriadMeasuresSomething) {
  double gbps = stream_triad_gbps(1);
  EXPECT_GT(gbps, 0.1);
  EXPECT_LT(gbps, 10000);
}

} // namespace
