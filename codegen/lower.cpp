// KernelDesc -> LLVM IR. One scalar expression builder (emit_node) serves every
// element type; the loop vectorizer widens the inner loop it is placed in.
//
//   void K(void* const* bufs)        { kiln_parallel_for(0, outer, grain, K.body, bufs); }
//   void K.body(ctx, begin, end)     { for o in [begin, end): row(o) }   (rank >= 2)
//                                    { row over i in [begin, end) }      (rank <= 1)
//   row: for j in [lo, hi): out_k[base_k + j*s_k] = expr(in_i[base_i + j*s_i] ...)
#include "codegen/lower.h"

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "codegen/kernel.h"
#include "codegen/vecmath_ir.h"
#include "runtime/error.h"

namespace kiln::codegen {
namespace {

using llvm::IRBuilder;
using llvm::Value;

constexpr int64_t kDefaultGrain = 16384; // elements; below this a chunk is not worth a thread

llvm::Type *value_type(llvm::LLVMContext &c, DType t) {
  switch (t) {
  case DType::Bool: return llvm::Type::getInt1Ty(c);
  case DType::Int32: return llvm::Type::getInt32Ty(c);
  case DType::Int64: return llvm::Type::getInt64Ty(c);
  case DType::Float32: return llvm::Type::getFloatTy(c);
  case DType::Float64: return llvm::Type::getDoubleTy(c);
  }
  KILN_FAIL("internal: bad dtype");
}

// bool lives in memory as one byte (0 or 1), as in kiln's tensors.
llvm::Type *memory_type(llvm::LLVMContext &c, DType t) {
  return t == DType::Bool ? llvm::Type::getInt8Ty(c) : value_type(c, t);
}

Value *cast_value(IRBuilder<> &b, Value *v, DType from, DType to) {
  if (from == to) return v;
  llvm::Type *ty = value_type(b.getContext(), to);
  if (to == DType::Bool) { // torch: nonzero (and NaN) is true
    if (is_floating(from)) return b.CreateFCmpUNE(v, llvm::ConstantFP::get(v->getType(), 0.0));
    return b.CreateICmpNE(v, llvm::ConstantInt::get(v->getType(), 0));
  }
  if (from == DType::Bool) return is_floating(to) ? b.CreateUIToFP(v, ty) : b.CreateZExt(v, ty);
  if (is_floating(from) && is_floating(to)) return b.CreateFPCast(v, ty);
  if (!is_floating(from) && !is_floating(to)) return b.CreateSExtOrTrunc(v, ty);
  if (is_floating(to)) return b.CreateSIToFP(v, ty);
  // Saturating: out-of-range and NaN inputs give a defined value, not poison.
  return b.CreateIntrinsic(llvm::Intrinsic::fptosi_sat, {ty, v->getType()}, {v});
}

// Integer division that never traps: x / 0 = 0, INT_MIN / -1 wraps to INT_MIN.
Value *safe_sdiv(IRBuilder<> &b, Value *x, Value *y) {
  auto *ty = llvm::cast<llvm::IntegerType>(x->getType());
  Value *zero = b.CreateICmpEQ(y, llvm::ConstantInt::get(ty, 0));
  Value *overflow = b.CreateAnd(
      b.CreateICmpEQ(x, llvm::ConstantInt::get(ty, llvm::APInt::getSignedMinValue(ty->getBitWidth()))),
      b.CreateICmpEQ(y, llvm::ConstantInt::getSigned(ty, -1)));
  Value *divisor = b.CreateSelect(b.CreateOr(zero, overflow), llvm::ConstantInt::get(ty, 1), y);
  return b.CreateSelect(zero, llvm::ConstantInt::get(ty, 0), b.CreateSDiv(x, divisor));
}

class Lowering {
public:
  Lowering(const KernelDesc &k, llvm::Module &m, const LowerTarget &t)
      : k_(k), m_(m), c_(m.getContext()), target_(t) {
    shape_ = k.shape.empty() ? std::vector<int64_t>{1} : k.shape; // rank 0 = one element
  }

  void run(const std::string &symbol) {
    llvm::Function *body = build_body(symbol + ".body");
    build_entry(symbol, body);
  }

private:
  size_t rank() const { return shape_.size(); }
  int64_t inner_size() const { return shape_.back(); }
  std::vector<int64_t> strides_of(size_t buf) const {
    const BufferSpec &s =
        buf < k_.inputs.size() ? k_.inputs[buf] : k_.outputs[buf - k_.inputs.size()].buffer;
    return k_.shape.empty() ? std::vector<int64_t>{0} : s.strides;
  }

  int64_t outer_count() const {
    if (rank() == 1) return shape_[0];
    int64_t n = 1;
    for (size_t d = 0; d + 1 < rank(); ++d) n *= shape_[d];
    return n;
  }
  int64_t outer_grain() const {
    int64_t grain = k_.grain > 0 ? k_.grain : kDefaultGrain;
    if (rank() == 1) return grain;
    return std::max<int64_t>(1, grain / std::max<int64_t>(1, inner_size()));
  }

  void stamp(llvm::Function *f) {
    f->addFnAttr(llvm::Attribute::NoUnwind);
    if (!target_.cpu.empty()) f->addFnAttr("target-cpu", target_.cpu);
    if (!target_.features.empty()) f->addFnAttr("target-features", target_.features);
  }

  llvm::FunctionType *body_type() {
    auto *i64 = llvm::Type::getInt64Ty(c_);
    auto *ptr = llvm::PointerType::getUnqual(c_);
    return llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {ptr, i64, i64}, false);
  }

  void build_entry(const std::string &symbol, llvm::Function *body) {
    auto *ptr = llvm::PointerType::getUnqual(c_);
    auto *i64 = llvm::Type::getInt64Ty(c_);
    auto *fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {ptr}, false);
    auto *f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
    stamp(f);
    auto *pfty = llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {i64, i64, i64, ptr, ptr}, false);
    llvm::FunctionCallee pfor = m_.getOrInsertFunction(kParallelForSymbol, pfty);
    IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
    b.CreateCall(pfor, {b.getInt64(0), b.getInt64(outer_count()), b.getInt64(outer_grain()), body,
                        f->getArg(0)});
    b.CreateRetVoid();
  }

  llvm::Function *build_body(const std::string &name) {
    auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
    stamp(f);
    IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
    // The buffer pointers, loaded once per chunk.
    auto *ptr = llvm::PointerType::getUnqual(c_);
    for (size_t i = 0; i < k_.num_buffers(); ++i) {
      Value *slot = b.CreateConstInBoundsGEP1_64(ptr, f->getArg(0), i);
      bufs_.push_back(b.CreateLoad(ptr, slot, "buf" + std::to_string(i)));
    }
    Value *begin = f->getArg(1), *end = f->getArg(2);
    if (rank() == 1) {
      std::vector<Value *> zero(k_.num_buffers(), b.getInt64(0));
      emit_loop(b, begin, end, "i", [&](IRBuilder<> &lb, Value *i) { emit_element(lb, zero, i); });
    } else {
      emit_loop(b, begin, end, "o", [&](IRBuilder<> &ob, Value *o) {
        std::vector<Value *> bases = row_bases(ob, o);
        emit_loop(ob, ob.getInt64(0), ob.getInt64(inner_size()), "j",
                  [&](IRBuilder<> &ib, Value *j) { emit_element(ib, bases, j); });
      });
    }
    b.CreateRetVoid();
    return f;
  }

  // for (iv = lo; iv < hi; ++iv) body(iv); leaves `b` after the loop.
  template <class Body>
  void emit_loop(IRBuilder<> &b, Value *lo, Value *hi, const char *name, Body &&body) {
    llvm::Function *f = b.GetInsertBlock()->getParent();
    llvm::BasicBlock *pre = b.GetInsertBlock();
    auto *loop = llvm::BasicBlock::Create(c_, std::string(name) + ".loop", f);
    auto *exit = llvm::BasicBlock::Create(c_, std::string(name) + ".exit", f);
    b.CreateCondBr(b.CreateICmpSLT(lo, hi), loop, exit);
    b.SetInsertPoint(loop);
    llvm::PHINode *iv = b.CreatePHI(b.getInt64Ty(), 2, name);
    iv->addIncoming(lo, pre);
    body(b, iv);
    Value *next = b.CreateAdd(iv, b.getInt64(1), std::string(name) + ".next", true, true);
    iv->addIncoming(next, b.GetInsertBlock());
    b.CreateCondBr(b.CreateICmpSLT(next, hi), loop, exit);
    b.SetInsertPoint(exit);
  }

  // Element offset of row `o`'s first element in every buffer (dims 0..rank-2).
  std::vector<Value *> row_bases(IRBuilder<> &b, Value *o) {
    std::vector<Value *> idx(rank() - 1);
    Value *rest = o;
    for (size_t d = rank() - 1; d-- > 0;) {
      Value *size = b.getInt64(shape_[d]);
      idx[d] = d == 0 ? rest : b.CreateURem(rest, size);
      if (d > 0) rest = b.CreateUDiv(rest, size);
    }
    std::vector<Value *> bases;
    for (size_t buf = 0; buf < k_.num_buffers(); ++buf) {
      std::vector<int64_t> st = strides_of(buf);
      Value *base = b.getInt64(0);
      for (size_t d = 0; d + 1 < rank(); ++d)
        if (st[d] != 0) base = b.CreateAdd(base, b.CreateMul(idx[d], b.getInt64(st[d])));
      bases.push_back(base);
    }
    return bases;
  }

  Value *element_ptr(IRBuilder<> &b, size_t buf, DType t, Value *base, Value *j) {
    int64_t s = strides_of(buf).back();
    Value *off = s == 0 ? base : b.CreateAdd(base, b.CreateMul(j, b.getInt64(s)));
    return b.CreateInBoundsGEP(memory_type(c_, t), bufs_[buf], off);
  }

  void emit_element(IRBuilder<> &b, const std::vector<Value *> &bases, Value *j) {
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

  Value *libm(IRBuilder<> &b, const char *name, Value *x) {
    auto *d = b.getDoubleTy();
    llvm::FunctionCallee f =
        m_.getOrInsertFunction(std::string(kLibmSymbolPrefix) + name, llvm::FunctionType::get(d, {d}, false));
    if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
      fn->setDoesNotThrow();
      fn->setDoesNotAccessMemory(); // pure: lets LLVM hoist and CSE the calls
      fn->setWillReturn();
    }
    return b.CreateCall(f, {x});
  }

  // f32: inline vectorizable polynomial; f64: scalar libm through a host symbol.
  Value *transcendental(IRBuilder<> &b, KOp op, DType t, Value *x) {
    bool f32 = t == DType::Float32;
    switch (op) {
    case KOp::Exp: return f32 ? vecmath::exp(b, x) : libm(b, "exp", x);
    case KOp::Expm1: return f32 ? vecmath::expm1(b, x) : libm(b, "expm1", x);
    case KOp::Log: return f32 ? vecmath::log(b, x) : libm(b, "log", x);
    case KOp::Log1p: return f32 ? vecmath::log1p(b, x) : libm(b, "log1p", x);
    case KOp::Tanh: return f32 ? vecmath::tanh(b, x) : libm(b, "tanh", x);
    case KOp::Erf: return f32 ? vecmath::erf(b, x) : libm(b, "erf", x);
    case KOp::Sigmoid: {
      if (f32) return vecmath::sigmoid(b, x);
      Value *one = llvm::ConstantFP::get(x->getType(), 1.0);
      return b.CreateFDiv(one, b.CreateFAdd(one, libm(b, "exp", b.CreateFNeg(x))));
    }
    default: KILN_FAIL("internal: ", op_name(op), " is not a transcendental");
    }
  }

  Value *constant(const Node &n) {
    llvm::Type *ty = value_type(c_, n.dtype);
    if (is_floating(n.dtype)) return llvm::ConstantFP::get(ty, n.fvalue);
    return llvm::ConstantInt::get(ty, uint64_t(n.ivalue), true);
  }

  Value *compare(IRBuilder<> &b, KOp op, DType t, Value *x, Value *y) {
    using P = llvm::CmpInst::Predicate;
    static const P fp[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT, P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
    static const P si[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_SLT, P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
    static const P ui[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_ULT, P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
    int i = int(op) - int(KOp::Eq);
    if (is_floating(t)) return b.CreateFCmp(fp[i], x, y);
    return b.CreateICmp(t == DType::Bool ? ui[i] : si[i], x, y); // bool: false < true
  }

  Value *emit_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals) {
    Value *x = n.args[0] >= 0 ? vals[n.args[0]] : nullptr;
    Value *y = n.args[1] >= 0 ? vals[n.args[1]] : nullptr;
    Value *z = n.args[2] >= 0 ? vals[n.args[2]] : nullptr;
    DType at = x ? k_.nodes[n.args[0]].dtype : n.dtype; // operand type
    bool fp = is_floating(at);
    using I = llvm::Intrinsic::ID;
    switch (n.op) {
    case KOp::Const: return constant(n);
    case KOp::Add: return fp ? b.CreateFAdd(x, y) : b.CreateAdd(x, y);
    case KOp::Sub: return fp ? b.CreateFSub(x, y) : b.CreateSub(x, y);
    case KOp::Mul: return fp ? b.CreateFMul(x, y) : b.CreateMul(x, y);
    case KOp::Div: return fp ? b.CreateFDiv(x, y) : safe_sdiv(b, x, y);
    case KOp::Min: return b.CreateBinaryIntrinsic(fp ? I(llvm::Intrinsic::minimum) : I(llvm::Intrinsic::smin), x, y);
    case KOp::Max: return b.CreateBinaryIntrinsic(fp ? I(llvm::Intrinsic::maximum) : I(llvm::Intrinsic::smax), x, y);
    case KOp::Eq: case KOp::Ne: case KOp::Lt: case KOp::Le: case KOp::Gt: case KOp::Ge:
      return compare(b, n.op, at, x, y);
    case KOp::And: return b.CreateAnd(x, y);
    case KOp::Or: return b.CreateOr(x, y);
    case KOp::Xor: return b.CreateXor(x, y);
    case KOp::Not: return b.CreateNot(x);
    case KOp::Neg: return fp ? b.CreateFNeg(x) : b.CreateNeg(x);
    case KOp::Abs:
      if (fp) return b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, x);
      return b.CreateBinaryIntrinsic(llvm::Intrinsic::abs, x, b.getFalse()); // INT_MIN wraps
    case KOp::Cast: return cast_value(b, x, at, n.dtype);
    case KOp::Sqrt: return b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x);
    case KOp::Rsqrt:
      return b.CreateFDiv(llvm::ConstantFP::get(x->getType(), 1.0),
                          b.CreateUnaryIntrinsic(llvm::Intrinsic::sqrt, x));
    case KOp::Floor: return b.CreateUnaryIntrinsic(llvm::Intrinsic::floor, x);
    case KOp::Ceil: return b.CreateUnaryIntrinsic(llvm::Intrinsic::ceil, x);
    case KOp::Round: return b.CreateUnaryIntrinsic(llvm::Intrinsic::roundeven, x);
    case KOp::Exp: case KOp::Expm1: case KOp::Log: case KOp::Log1p: case KOp::Tanh:
    case KOp::Erf: case KOp::Sigmoid:
      return transcendental(b, n.op, n.dtype, x);
    case KOp::Fma:
      if (fp) return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
      return b.CreateAdd(b.CreateMul(x, y), z);
    case KOp::Select: return b.CreateSelect(x, y, z);
    case KOp::Load: break; // handled by emit_element
    }
    KILN_FAIL("internal: cannot lower ", op_name(n.op));
  }

  const KernelDesc &k_;
  llvm::Module &m_;
  llvm::LLVMContext &c_;
  const LowerTarget &target_;
  std::vector<int64_t> shape_;
  std::vector<Value *> bufs_;
};

// Drops size-1 dims and merges neighbouring dims that every buffer walks as one
// (stride[d] == stride[d+1] * size[d+1]), so that e.g. a contiguous [64, 3]
// kernel becomes one vectorizable loop of 192 instead of 64 loops of 3.
KernelDesc collapse_dims(const KernelDesc &in) {
  if (in.shape.size() <= 1 || in.numel() == 0) return in;
  KernelDesc k = in;
  size_t nbuf = k.num_buffers();
  auto strides = [&](KernelDesc &d, size_t b) -> std::vector<int64_t> & {
    return b < d.inputs.size() ? d.inputs[b].strides : d.outputs[b - d.inputs.size()].buffer.strides;
  };
  std::vector<int64_t> shape;                      // innermost first while building
  std::vector<std::vector<int64_t>> st(nbuf);      // per buffer, innermost first
  for (size_t d = in.shape.size(); d-- > 0;) {
    int64_t size = in.shape[d];
    if (size == 1) continue;
    bool merge = !shape.empty();
    for (size_t b = 0; merge && b < nbuf; ++b) merge = strides(k, b)[d] == st[b].back() * shape.back();
    if (merge) {
      shape.back() *= size;
      continue;
    }
    shape.push_back(size);
    for (size_t b = 0; b < nbuf; ++b) st[b].push_back(strides(k, b)[d]);
  }
  if (shape.empty()) { // all dims were 1: one element
    shape.push_back(1);
    for (size_t b = 0; b < nbuf; ++b) st[b].push_back(0);
  }
  k.shape.assign(shape.rbegin(), shape.rend());
  for (size_t b = 0; b < nbuf; ++b) strides(k, b).assign(st[b].rbegin(), st[b].rend());
  return k;
}

} // namespace

std::unique_ptr<llvm::Module> lower_kernel(const KernelDesc &desc, const std::string &symbol,
                                           const LowerTarget &target, llvm::LLVMContext &ctx) {
  desc.validate();
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  KernelDesc simple = collapse_dims(desc);
  Lowering(simple, *m, target).run(symbol);
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os)) KILN_FAIL("codegen: kernel ", symbol, " produced invalid IR: ", os.str());
  return m;
}

} // namespace kiln::codegen
