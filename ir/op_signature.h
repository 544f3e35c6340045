// How many tensor operands each op takes: the In(...) column of ops.def, which
// follows the typed functions in runtime/ops.h (optional tensors such as
// linear's bias count, and may be `none`).
#pragma once

#include <cstddef>

#include "runtime/op_registry.h"

namespace kiln::ir {

struct Arity {
  size_t min;
  size_t max; // kVariadic for cat/stack
};
inline constexpr size_t kVariadic = kVariadicOperands;

Arity op_arity(OpId id);

} // namespace kiln::ir
