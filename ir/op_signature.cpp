#include "ir/op_signature.h"

namespace kiln::ir {

Arity op_arity(OpId id) {
  OpOperands o = op_operands(id);
  return {o.min, o.max};
}

} // namespace kiln::ir
