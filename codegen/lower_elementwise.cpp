// Element-wise kernels (no reductions; see codegen/lower_common.h): one loop
// over the elements, or over rows and then their last dim.
#include "codegen/lower_common.h"

namespace kiln::codegen::lower_impl {

llvm::Function *Lowering::build_body(const std::string &name) {
  if (k_.runtime_layout) return build_layout_body(name);
  auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
  stamp(f);
  IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
  load_buffers(b, f);
  Value *begin = f->getArg(1), *end = f->getArg(2);
  if (blocked()) { // [begin, end) counts blocks
    begin = b.CreateMul(begin, b.getInt64(kStreamBlock), "lo", true, true);
    end = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, b.CreateMul(end, b.getInt64(kStreamBlock)),
                                  dim0_extent(b, f->getArg(0)), nullptr, "hi");
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

// [begin, end) counts rows (dims 0..rank-2, row-major); a row's bases come
// from the call's extents and strides, its last dim's strides are compiled in.
llvm::Function *Lowering::build_layout_body(const std::string &name) {
  auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
  stamp(f);
  IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
  load_buffers(b, f);
  const std::vector<Value *> words = load_layout(b, f->getArg(0));
  Value *inner = words[rank() - 1];
  emit_loop(b, f->getArg(1), f->getArg(2), "o", [&](IRBuilder<> &ob, Value *o) {
    std::vector<Value *> bases = layout_row_bases(ob, words, o);
    emit_loop(ob, ob.getInt64(0), inner, "j", [&](IRBuilder<> &ib, Value *j) { emit_element(ib, bases, j); });
  }, LoopMD::Nest);
  b.CreateRetVoid();
  return f;
}

// The call's layout words (KernelDesc::layout_words): extents, then per buffer
// its strides (the last dim's are not loaded: the compiled ones are used).
std::vector<Value *> Lowering::load_layout(IRBuilder<> &b, Value *buffers) {
  auto *ptr = llvm::PointerType::getUnqual(c_);
  Value *slot = b.CreateConstInBoundsGEP1_64(ptr, buffers, k_.num_buffers());
  Value *words = b.CreateLoad(ptr, slot, "layout");
  std::vector<Value *> out(k_.layout_words(), nullptr);
  for (size_t w = 0; w < out.size(); ++w) {
    if (w >= rank() && (w + 1) % rank() == 0) continue; // a last-dim stride
    out[w] = b.CreateLoad(b.getInt64Ty(), b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), words, w),
                          w < rank() ? "extent" : "stride");
  }
  return out;
}

std::vector<Value *> Lowering::layout_row_bases(IRBuilder<> &b, const std::vector<Value *> &words, Value *o) {
  const size_t outer = rank() - 1;
  std::vector<Value *> idx(outer);
  Value *rest = o;
  for (size_t d = outer; d-- > 0;) {
    idx[d] = d == 0 ? rest : b.CreateURem(rest, words[d]);
    if (d > 0) rest = b.CreateUDiv(rest, words[d]);
  }
  std::vector<Value *> bases;
  for (size_t buf = 0; buf < k_.num_buffers(); ++buf) {
    Value *base = b.getInt64(0);
    for (size_t d = 0; d < outer; ++d)
      base = b.CreateAdd(base, b.CreateMul(idx[d], words[rank() * (1 + buf) + d]));
    bases.push_back(base);
  }
  return bases;
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
