// How many tensor operands each op takes. ops.def lists attributes only; the
// operand counts follow the typed functions in runtime/ops.h (optional tensors
// such as linear's bias count, and may be `none`).
#pragma once

#include <cstddef>

#include "runtime/op_registry.h"

namespace kiln::ir {

struct Arity {
  size_t min;
  size_t max; // kVariadic for cat/stack
};
inline constexpr size_t kVariadic = 1 << 16;

Arity op_arity(OpId id);

} // namespace kiln::ir
