// Internal forms of view ops that the uniform adapters need (not user API).
#pragma once

#include "runtime/tensor.h"

namespace kiln::detail {

// torch's squeeze(dims): removes the listed dims that have size 1, keeps the
// others; dims may be negative and must not repeat. Records OpId::Squeeze with
// the wrapped size-1 dims.
Tensor squeeze_dims(const Tensor &x, IntArrayRef dims);

} // namespace kiln::detail
