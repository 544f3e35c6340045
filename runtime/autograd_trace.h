// What autograd did while this thread traced, for kiln::compile: a traced
// function whose backward accumulated into leaves is a training step, whose
// graph already holds the backward and the gradient write-backs.
#pragma once

#include <memory>
#include <vector>

#include "runtime/autograd.h"

namespace kiln::detail {
// A leaf whose gradient a trace wrote, and the real buffer it wrote into.
struct TracedGrad {
  std::shared_ptr<AutogradMeta> leaf;
  Tensor grad;
};
// The leaves' gradients written while tracing on this thread since the last call
// (and forgets them).
std::vector<TracedGrad> take_traced_grads();
} // namespace kiln::detail
