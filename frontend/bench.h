// The benchmark row of shared/workloads.md for one model function: eager and
// compiled time per call, compile cost, kernels per call, estimated bytes moved,
// achieved bandwidth and the compiled-vs-eager difference. `kiln bench` prints
// these rows; stream_triad_gbps() measures the bandwidth they are compared to.
// Your own function goes into the same table (docs/bench.md,
// examples/bench_custom.cpp):
//
//   std::vector<kiln::BenchRow> rows{kiln::bench_row("my-model", fn, inputs)};
//   kiln::print_bench_table(std::cout, kiln::get_num_threads(), 0, rows);
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "codegen/executable.h"
#include "codegen/gemm/path.h"
#include "frontend/compile.h"
#include "runtime/tensor.h"

namespace kiln {

namespace ir {
class Graph;
}

struct BenchOptions {
  int warmup = 3;
  int iters = 20;           // timed calls; the median is reported
  // When > 0, a timed phase (eager, compiled) stops after this many milliseconds
  // once it has at least min(iters, 5) calls: a 100 ms GEMM row then takes ~1 s
  // per phase instead of 2 (`kiln bench` without --repeat uses 1000).
  double max_phase_ms = 0;
  double stream_gbps = 0;   // bandwidth_fraction = achieved / this (0: fraction left at 0)
  double fma_gflops = 0;    // fma_fraction = gflops / this (0: fraction left unmeasured, NaN)
  // Called after each phase ("eager", "compile cold", "compile warm", "compiled")
  // with its start and length in microseconds of steady_clock (for `kiln bench --trace`).
  std::function<void(const std::string &phase, double start_us, double dur_us)> on_phase;
  // When set, one extra compiled call (after the timed ones) reports each of its
  // steps here: one event per JIT kernel, BLAS call and eager op.
  codegen::StepObserver on_step;
};

struct BenchRow {
  std::string name;
  std::string gemm;            // the compiled contraction path it was built with: "jit" or "blas"
  double eager_us = 0;
  double compiled_us = 0;
  double speedup = 0;          // eager_us / compiled_us
  // First call of a fresh compile() (trace, passes, plan, JIT, one run) with a
  // fresh Jit over an empty disk cache (cold), then with another fresh Jit over
  // the cache the first one filled (warm: what a second process pays). Neither
  // touches the process's global Jit or $KILN_CACHE_DIR.
  double compile_ms_cold = 0;
  double compile_ms_warm = 0;
  int64_t warm_kernels_compiled = 0; // kernels the warm compile still had to compile (0: all from disk)
  int64_t kernels = 0;         // JIT kernel launches per compiled call (-1: runs eagerly)
  int64_t bytes_moved = 0;     // estimate, see bytes_moved_estimate()
  double achieved_gbps = 0;    // bytes_moved / compiled time
  // Above 1 when the working set stays in cache between calls (the triad's
  // 3 x 128 MiB does not), e.g. W9's 48 MiB on a machine with a large L3.
  double bandwidth_fraction = 0;
  double max_abs_diff = 0;
  double max_rel_diff = 0;
  // Contractions: flops per call (ir::contraction_flops, ir/flops.h, of the
  // traced graph: the optimized one may have lowered a tiny contraction into a
  // fused kernel), that over compiled_us, and that over BenchOptions::fma_gflops. NaN (JSON
  // null, "-" in the table) for a function without contractions, or without a peak.
  int64_t flops = 0;
  double gflops = std::numeric_limits<double>::quiet_NaN();
  double fma_fraction = std::numeric_limits<double>::quiet_NaN();
  // Training rows (bench_training_row): bytes one steady-state step allocates
  // at its peak, above what was allocated before it: eager's through the
  // caching allocator; compiled's the same plus the plan's arena (held between
  // calls). 0 for other rows.
  int64_t eager_peak_bytes = 0;
  int64_t compiled_peak_bytes = 0;
};

// A training step and what it updates: fn changes params (and optimizer
// state) in place, so eager and compiled each train a copy of their own.
struct TrainingSetup {
  ModelFn step;
  std::vector<Tensor> inputs;
  std::vector<Tensor> params;
};

// A training step's row: eager and compiled step times, each on its own copy
// from `make` (copies made alike: same seed), compile costs on further copies,
// max_abs_diff / max_rel_diff between the parameters of two copies after
// kTrainingCheckSteps eager and compiled steps, and each path's peak memory.
inline constexpr int kTrainingCheckSteps = 10;
BenchRow bench_training_row(const std::string &name, const std::function<TrainingSetup()> &make,
                            const BenchOptions &options = {});
// One row per contraction path, as bench_rows.
std::vector<BenchRow> bench_training_rows(const std::string &name, const std::function<TrainingSetup()> &make,
                                          const std::vector<gemm::Path> &paths, const BenchOptions &options = {});

// One row, compiled with the current contraction path (codegen::gemm::path()).
BenchRow bench_row(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                   const BenchOptions &options = {});

// One row per path in `paths`, eager timed once (each row carries the same
// eager time): every compile of a row runs with its path set
// (codegen::gemm::set_path, restored afterwards), so a row measures the path it
// names. `kiln bench --gemm both` prints jit and blas rows from one run.
std::vector<BenchRow> bench_rows(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                                 const std::vector<gemm::Path> &paths, const BenchOptions &options = {});

// The paths `kiln bench --gemm VALUE` selects: "jit", "blas" or "both" (jit,
// then blas); any other value throws kiln::Error naming --gemm and the allowed values.
std::vector<gemm::Path> parse_bench_gemm(std::string_view value);

// Bytes one call of the optimized graph moves, estimated from the graph: every
// graph input and parameter read once, every output written once, and every
// intermediate tensor between top-level steps (fusion groups, contractions,
// eager ops) written once and read once. View results move nothing. Caches,
// re-reads inside a kernel and BLAS packing are ignored, so this is a floor.
int64_t bytes_moved_estimate(const ir::Graph &g);

// STREAM-like triad a = b + s*c over 3 x 32M floats on `threads` threads with
// kiln::parallel_for; the best of a few runs, in GB/s (3 x 128 MiB per run).
double stream_triad_gbps(int threads);

// The register-only FP32 FMA peak of `threads` threads in GFLOP/s: a JIT-compiled
// loop of independent vector FMAs at the host's widest vector (codegen/gemm), the
// GEMM ceiling rows are compared with, as the triad is for bandwidth.
double fma_peak_gflops(int threads);

// The table `kiln bench` prints: a line with the thread count and the triad
// bandwidth (`stream_gbps`, 0 when not measured), a header, one line per row
// (GFLOP/s and the FMA-peak fraction "-" for rows without contractions; the
// gemm column is the row's contraction path).
void print_bench_table(std::ostream &os, int threads, double stream_gbps, const std::vector<BenchRow> &rows);
// The same with the FMA peak (`fma_gflops`, 0 when not measured) and the
// contraction path(s) of the rows ("gemm: jit") after the triad.
void print_bench_table(std::ostream &os, int threads, double stream_gbps, double fma_gflops,
                       const std::vector<BenchRow> &rows);

// The same as `kiln bench --json` writes: {"threads", "stream_gbps", "rows": [{"name", "gemm", "eager_us",
// "compiled_us", "speedup", "compile_ms_cold", "compile_ms_warm", "kernels", "bytes_moved",
// "achieved_gbps", "bandwidth_fraction", "max_abs_diff", "max_rel_diff", "flops", "gflops",
// "fma_fraction"}, ...]}; null for a non-finite number (gflops and fma_fraction of rows without contractions).
void write_bench_json(std::ostream &os, int threads, double stream_gbps, const std::vector<BenchRow> &rows);
// The same with a top-level "fma_peak_gflops" when `fma_gflops` > 0, and a
// top-level "gemm": the rows' path ("jit", "blas"), or "both" when they differ.
void write_bench_json(std::ostream &os, int threads, double stream_gbps, double fma_gflops,
                      const std::vector<BenchRow> &rows);

// ---- Dynamic shapes (issue 17): `kiln bench NAME --dynamic`

struct DynamicBenchOptions {
  int calls = 100;                     // the sequence's length
  int64_t min_size = 1, max_size = 64; // batch sizes drawn uniformly from this range
  int passes = 5;                      // warm passes over the sequence; the median is reported
  uint64_t seed = 17;
};

struct DynamicBenchRow {
  std::string name;
  std::string skipped; // why the row has no numbers ("" when it has)
  int64_t calls = 0, distinct_sizes = 0, min_size = 0, max_size = 0;
  // The function compiled with dynamic = Auto: its compiles during the first
  // pass over the sequence, how long that pass took (compiles included), and
  // its compiles in the warm passes after it (0 when it serves every size).
  int64_t compiles = 0, dynamic_specializations = 0, compiles_after_first_pass = 0;
  double first_pass_ms = 0;
  // The first call (it compiles the static graph) and the call that compiled
  // again with the changed dims symbolic (0 if none did).
  double first_call_ms = 0, turn_dynamic_ms = 0;
  // Per call over warm passes: the Auto function, a static specialization per
  // size (each compiled and called once before timing), eager.
  double dynamic_us = 0, static_us = 0, eager_us = 0;
  double ratio = 0; // dynamic_us / static_us
  // At the workload's own inputs: compiled with dynamic = On against Off.
  double on_us = 0, static_at_size_us = 0, on_ratio = 0;
  bool on_symbolic = false; // On kept some dim symbolic
};

// The batch (dim 0 of input 0, and of each input of the same size there)
// drawn `calls` times from [min_size, max_size]; inputs at each size take rows
// of `inputs` cyclically. A model that takes no other batch gives a skipped row.
DynamicBenchRow bench_dynamic(const std::string &name, const ModelFn &fn, const std::vector<Tensor> &inputs,
                              const DynamicBenchOptions &options = {});
void print_dynamic_bench_table(std::ostream &os, int threads, const std::vector<DynamicBenchRow> &rows);

} // namespace kiln
