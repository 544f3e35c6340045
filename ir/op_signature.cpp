#include "ir/op_signature.h"

namespace kiln::ir {

Arity op_arity(OpId id) {
  switch (id) {
  case OpId::Add: case OpId::Sub: case OpId::Mul: case OpId::Div: case OpId::Pow:
  case OpId::Maximum: case OpId::Minimum: case OpId::Remainder:
  case OpId::Eq: case OpId::Ne: case OpId::Lt: case OpId::Le: case OpId::Gt: case OpId::Ge:
  case OpId::LogicalAnd: case OpId::LogicalOr: case OpId::MaskedFill: case OpId::Copy:
  case OpId::Mm: case OpId::Bmm: case OpId::Matmul: case OpId::Embedding:
  case OpId::IndexSelect: case OpId::Gather:
    return {2, 2};
  case OpId::Where: case OpId::Lerp: case OpId::Addmm:
    return {3, 3};
  case OpId::Linear: case OpId::Conv2d:
    return {2, 3};
  case OpId::LayerNorm:
    return {1, 3};
  case OpId::BatchNorm:
    return {1, 5};
  case OpId::Sdpa:
    return {3, 4};
  case OpId::Cat: case OpId::Stack:
    return {1, kVariadic};
  case OpId::Full: case OpId::Arange: case OpId::Linspace: case OpId::Eye:
    return {0, 0};
  default:
    return {1, 1};
  }
}

} // namespace kiln::ir
