// TEMPORARY: each adapter throws until the tracer/interpreter work fills them in.
#include "runtime/op_adapters.h"

namespace kiln::adapters {
#define KILN_OP(Id, mnemonic, kind, attrs)                                                                  \
  __attribute__((weak)) std::vector<Tensor> Id(const std::vector<Tensor> &, const Attrs &) {               \
    KILN_FAIL(mnemonic, ": no uniform adapter yet");                                                        \
  }
#include "runtime/ops.def"
} // namespace kiln::adapters
