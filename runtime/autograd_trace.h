// What autograd did while this thread traced, for kiln::compile: a traced
// function whose backward accumulated into leaves is a training step, whose
// graph already holds the backward and the gradient write-backs.
#pragma once

#include <cstdint>

namespace kiln::detail {
extern thread_local uint64_t t_traced_accumulations;
// Gradients added into leaves while tracing, on this thread, ever.
uint64_t traced_accumulations();
} // namespace kiln::detail
