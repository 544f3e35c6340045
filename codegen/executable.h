// A compiled specialization: a fixed sequence of steps built once from an
// optimized graph. Fusion groups become JIT kernels; everything else (views,
// contractions, ops without a lowering, groups codegen cannot lower) runs as an
// eager node inside the plan.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace kiln::ir {
class Graph;
}

namespace kiln::codegen {

struct PlanStats {
  int64_t kernels = 0;      // JIT kernel launches per call
  int64_t eager_steps = 0;  // eager op calls per call (views included)
  int64_t groups_fallen_back = 0; // fusion groups run eagerly because codegen could not lower them
  double compile_ms = 0;
};

class Executable {
public:
  virtual ~Executable() = default;
  // Runs the plan; thread-safe (no mutable state shared between calls).
  virtual std::vector<Tensor> run(const std::vector<Tensor> &inputs) const = 0;
  virtual PlanStats stats() const = 0;
};

// Builds the plan for `g` (already through the pass pipeline) specialised to
// the input tensors' dtypes, shapes and strides.
std::shared_ptr<Executable> make_executable(std::shared_ptr<const ir::Graph> g, const std::vector<Tensor> &inputs);

} // namespace kiln::codegen
