// kiln::compile: a traced, optimized, cached callable with eager fallback.
//
//   auto f = kiln::compile(model_fn);
//   std::vector<kiln::Tensor> out = f(inputs);
//
// The first call with an input signature (dtypes, shapes, strides, captured
// tensors' shapes and dtypes; not the thread count: a plan runs at any) traces
// fn, runs the pass pipeline and builds a plan; later calls with the same
// signature run the plan. A guard miss recompiles and logs why; past
// `cache_limit` specializations the least recently used one is evicted. A
// specialization with symbolic dims (CompileOptions::dynamic) serves every
// size of them without compiling again. When
// tracing meets a data-dependent read, or when compilation fails, the call runs
// eagerly and the reason is logged once; a call that throws caches nothing.
// Safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln {

namespace ir {
class Graph;
}

using ModelFn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

enum class Fallback {
  Off,   // a failure to compile throws kiln::Error
  Allow, // a failure to compile runs eagerly with a logged warning (default)
  Force, // always run eagerly
};

// Dynamic shapes (issue 17): which input dims a specialization keeps
// symbolic, so that one compiled program serves every size of them.
enum class Dynamic {
  Auto, // the first call specializes; a later call that differs from a compiled
        // specialization only in some sizes makes those dims symbolic (default)
  On,   // every dim of every input is symbolic from the first call, where the graph allows
  Off,  // every specialization has the sizes of its call (dynamic_dims aside)
};

// One dim of one input: torch's mark_dynamic / mark_static argument.
struct InputDim {
  size_t input = 0;
  int64_t dim = 0;
};

struct CompileOptions {
  std::string name = "main";
  // Pass pipeline; empty = passes::default_pipeline().
  std::string pipeline;
  // Specializations kept per function; a new signature past it evicts the
  // least recently used one (logged at KILN_LOG=info).
  int cache_limit = 8;
  // Defaults to KILN_FALLBACK=off|allow|force, else Allow.
  std::optional<Fallback> fallback;
  Dynamic dynamic = Dynamic::Auto;
  // Dims symbolic from the first call, whatever `dynamic` says (torch's
  // mark_dynamic), and dims that always specialize (mark_static). Sizes 0 and
  // 1 specialize even here, as in torch (broadcasting depends on them), and so
  // does a dim whose size the graph depends on (logged at KILN_LOG=info).
  std::vector<InputDim> dynamic_dims, static_dims;
};

struct CompileStats {
  int64_t calls = 0;
  int64_t compiles = 0;       // specializations built
  int64_t eager_calls = 0;    // calls that ran the model function eagerly
  int64_t specializations = 0; // cached now: at most cache_limit
  int64_t dynamic_specializations = 0; // of those, ones with symbolic dims (each serves many sizes)
  // The largest arena (memory plan, bytes) of the specializations built; each
  // running call of a specialization holds one.
  int64_t peak_arena_bytes = 0;
  // Weights (captured tensors used as a GEMM's B or a conv2d's weight) packed
  // once for kiln's GEMM and conv kernels (KILN_GEMM=jit), summed over the
  // specializations cached now.
  int64_t packed_weight_bytes = 0;
  std::string last_fallback_reason;
  std::string last_recompile_reason;
};

class CompiledFunction {
public:
  std::vector<Tensor> operator()(const std::vector<Tensor> &inputs) const;
  CompileStats stats() const;
  // The optimized graph of the specialization that `inputs` select (compiling
  // it if needed); nullptr when those inputs run eagerly.
  std::shared_ptr<const ir::Graph> graph_for(const std::vector<Tensor> &inputs) const;
  // JIT kernel launches per call of the specialization `inputs` select
  // (compiling it if needed); -1 when those inputs run eagerly.
  int64_t kernels_per_call(const std::vector<Tensor> &inputs) const;

  struct Impl;

private:
  friend CompiledFunction compile(ModelFn fn, CompileOptions options);
  std::shared_ptr<Impl> impl_;
};

CompiledFunction compile(ModelFn fn, CompileOptions options = {});

} // namespace kiln
