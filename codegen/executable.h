// A compiled specialization: a fixed sequence of steps built once from an
// optimized graph. Fusion groups become JIT kernels; everything else (views,
// contractions, ops without a lowering, groups codegen cannot lower) runs as an
// eager step of the compiled program (codegen/program.h).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::ir {
class Graph;
}

namespace kiln::codegen {

struct ExecutableStats {
  int64_t kernels = 0;      // JIT kernel launches per call
  int64_t eager_steps = 0;  // eager op calls per call (views included)
  int64_t groups_fallen_back = 0; // fusion groups run eagerly because codegen could not lower them
  int64_t epilogue_steps = 0; // contractions run with their fused epilogue (BLAS/conv + JIT kernel per tile)
  int64_t gemm_jit_steps = 0; // contraction steps (fused or lone) on kiln's GEMM (KILN_GEMM=jit)
  int64_t packed_weight_bytes = 0; // B operands packed once for kiln's GEMM (captured weights)
  double compile_ms = 0;
  int64_t arena_bytes = 0;   // one per running call: the memory plan's values (if any) and step scratch
  int64_t arena_values = 0;  // kernel outputs written in the arena
  int64_t bytes_read = 0;    // per call, estimate: each non-view node reads each operand once
  int64_t bytes_written = 0; // per call, estimate: each non-view node writes each result once
  // Every call runs all its steps on the calling thread (a chain of small
  // steps; see choose_serial in codegen/program_builder.cpp).
  bool serial = false;
};

class Executable {
public:
  virtual ~Executable() = default;
  // Runs the program; thread-safe: each running call takes its own arena and value
  // table from a pool (steady state: no allocation but the outputs).
  virtual std::vector<Tensor> run(const std::vector<Tensor> &inputs) const = 0;
  // run() for inputs the caller has already checked against the signature the
  // program was built for (dtype, sizes and strides of each; kiln::compile's
  // guards do): skips that check, which costs as much as the guards on tiny calls.
  virtual std::vector<Tensor> run_matched(const std::vector<Tensor> &inputs) const = 0;
  // run_matched() for a symbolic program whose caller also bound the graph's
  // symbols from the inputs' sizes (ir::bind_symbols' values, by symbol id):
  // kiln::compile's guard does, and a call under a microsecond would otherwise
  // bind them twice. A program that binds anything else ignores them.
  virtual std::vector<Tensor> run_bound(const std::vector<Tensor> &inputs, std::span<const int64_t> /*symbols*/) const {
    return run_matched(inputs);
  }
  virtual ExecutableStats stats() const = 0;
  // How many calls (run or run_matched) have started so far. Counted without a
  // read-modify-write per call: exact once the calls have returned.
  virtual int64_t calls() const = 0;
  // Per graph output: true when every call returns it in memory the call
  // allocated for it alone (a kernel's result outside the arena), so it can
  // share memory with no input, parameter, constant or other output.
  virtual std::vector<bool> outputs_allocated_per_call() const = 0;
};

// One step of a compiled call, as `kiln bench --trace` shows it.
struct StepEvent {
  // "kernel" (a JIT kernel), "blas" (a contraction: BLAS call, with its fused
  // epilogue if any), "gemm-jit" (a contraction on kiln's GEMM or conv
  // micro-kernels, with its fused epilogue if any), "eager" (an eager op; views included) or "eager-group"
  // (a fusion group codegen could not lower, interpreted).
  std::string_view category;
  // The value it computes as the IR dump names it, then the kernel symbol or
  // what runs: "%86 kiln_k_<hash>", "%90 contraction+epilogue", "%5 matmul".
  std::string_view name;
  double start_us = 0;   // steady_clock microseconds
  double dur_us = 0;
};
using StepObserver = std::function<void(const StepEvent &)>;

// While alive, every compiled call made on this thread reports each of its
// steps to `observer` (timed; calls on other threads are unaffected). Costs a
// thread-local load per call when no observer is set.
class ScopedStepObserver {
public:
  explicit ScopedStepObserver(StepObserver observer);
  ~ScopedStepObserver();
  ScopedStepObserver(const ScopedStepObserver &) = delete;
  ScopedStepObserver &operator=(const ScopedStepObserver &) = delete;

private:
  StepObserver observer_;
  const StepObserver *saved_;
};
// The observer of this thread, or nullptr.
const StepObserver *current_step_observer();

// Builds the program for `g` (already through the pass pipeline) specialised to
// the input tensors' dtypes, shapes and strides.
std::shared_ptr<Executable> make_executable(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &inputs);

// Builds one program for symbolic graph `g` (issue 17; through the passes that
// keep symbols, without a memory plan) that serves every call whose sizes bind
// its symbols (ir::bind_symbols; kiln::Error naming the input and dim
// otherwise): its kernels read their batch per call, so no call compiles.
// Intermediates are allocated per call (codegen/symbolic_executor.cpp).
std::shared_ptr<Executable> make_symbolic_executable(std::shared_ptr<const ir::Graph> g);

// How that program runs each fusion group and contraction of `g`, one line
// each (kiln dump --dynamic): "kernel: fusion group %7 reads its dim 0 per
// call", "gemm-jit: fusion group %16 (a contraction and its epilogue) reads
// its M per call", or why it runs eagerly.
std::vector<std::string> describe_symbolic_executable(std::shared_ptr<const ir::Graph> g);

} // namespace kiln::codegen
