// Element-wise kernels (no reductions; see codegen/lower_common.h): one loop
// over the elements, or over rows and then their last dim.
#include "codegen/lower_common.h"

namespace kiln::codegen::lower_impl {

llvm::Function *Lowering::build_body(const std::string &name) {
  auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
  stamp(f);
  IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
  load_buffers(b, f);
  Value *begin = f->getArg(1), *end = f->getArg(2);
  if (blocked()) { // [begin, end) counts blocks
    begin = b.CreateMul(begin, b.getInt64(kStreamBlock), "lo", true, true);
    end = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b.CreateMul(end, b.getInt64(kStreamBlock)),
                                  b.getInt64(shape_[0]), nullptr, "hi");
  }
  if (rank() == 1) {
    std::vector<Value *> zero(k_.num_buffers(), b.getInt64(0));
    emit_loop(b, begin, end, "i", [&](IRBuilder<> &lb, Value *i) { emit_element(lb, zero, i); });
  } else {
    emit_loop(b, begin, end, "o", [&](IRBuilder<> &ob, Value *o) {
      std::vector<Value *> bases = row_bases(ob, o);
      emit_loop(ob, ob.getInt64(0), ob.getInt64(inner_size()), "j",
                [&](IRBuilder<> &ib, Value *j) { emit_element(ib, bases, j); });
    }, LoopMD::Nest);
  }
  fence_streamed_stores(b);
  b.CreateRetVoid();
  return f;
}

void Lowering::emit_element(IRBuilder<> &b, const std::vector<Value *> &bases, Value *j) {
  std::vector<Value *> vals(k_.nodes.size(), nullptr);
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    const Node &n = k_.nodes[i];
    if (n.op == KOp::Load) {
      Value *p = element_ptr(b, n.input, n.dtype, bases[n.input], j);
      Value *v = b.CreateLoad(memory_type(c_, n.dtype), p);
      vals[i] = n.dtype == DType::Bool ? b.CreateICmpNE(v, b.getInt8(0)) : v;
      continue;
    }
    vals[i] = emit_node(b, n, vals);
  }
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    const OutputSpec &out = k_.outputs[o];
    size_t buf = k_.inputs.size() + o;
    Value *v = vals[out.value];
    if (out.buffer.dtype == DType::Bool) v = b.CreateZExt(v, b.getInt8Ty());
    b.CreateStore(v, element_ptr(b, buf, out.buffer.dtype, bases[buf], j));
  }
}

} // namespace kiln::codegen::lower_impl
