// The uniform adapter of each op: unpacks positional attributes (in ops.def
// order) and calls the typed public function. Each is defined beside its
// op's kernel in runtime/kernels/*.cpp (views: runtime/kernels/view_adapters.cpp).
#pragma once

#include <vector>

#include "runtime/op_registry.h"

namespace kiln::adapters {
#define KILN_OP(Id, mnemonic, kind, operands, traits, attrs) std::vector<Tensor> Id(const std::vector<Tensor> &in, const Attrs &a);
#include "runtime/ops.def"
} // namespace kiln::adapters
