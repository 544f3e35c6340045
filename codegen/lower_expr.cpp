// Scalar expressions of the kernel lowering (see codegen/lower_common.h): one
// KernelDesc node at one element (or one vector of elements), for every dtype.
#include <limits>

#include "codegen/lower_common.h"
#include "codegen/lower_vector.h"
#include "codegen/vecmath_ir.h"
#include "runtime/error.h"

namespace kiln::codegen::lower_impl {

llvm::Type *value_type(llvm::LLVMContext &c, DType t) {
  switch (t) {
  case DType::Bool: return llvm::Type::getInt1Ty(c);
  case DType::Int32: return llvm::Type::getInt32Ty(c);
  case DType::Int64: return llvm::Type::getInt64Ty(c);
  case DType::Float32: return llvm::Type::getFloatTy(c);
  case DType::Float64: return llvm::Type::getDoubleTy(c);
  // float16 / bfloat16 values are their bits; only casts read them (kernel.cpp checks).
  case DType::Float16:
  case DType::BFloat16: return llvm::Type::getInt16Ty(c);
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16: KILN_FAIL("internal: codegen has no lowering for dtype ", t); // refused by rule_misfit
  }
  KILN_FAIL("internal: bad dtype");
}

// bool lives in memory as one byte (0 or 1), as in kiln's tensors.
llvm::Type *memory_type(llvm::LLVMContext &c, DType t) {
  return t == DType::Bool ? llvm::Type::getInt8Ty(c) : value_type(c, t);
}

namespace {

// The same type with `elem` lanes: v's shape (scalar or vector) with another element type.
llvm::Type *like(Value *v, llvm::Type *elem) {
  if (auto *vt = llvm::dyn_cast<llvm::VectorType>(v->getType())) return llvm::VectorType::get(elem, vt->getElementCount());
  return elem;
}

// 16-bit float bits -> float32, exact (runtime/half.h's conversions).
Value *widen_16(IRBuilder<> &b, Value *bits, DType from) {
  llvm::LLVMContext &c = b.getContext();
  if (from == DType::Float16) // vcvtph2ps: exact, NaN payloads kept
    return b.CreateFPExt(b.CreateBitCast(bits, like(bits, llvm::Type::getHalfTy(c))), like(bits, b.getFloatTy()));
  Value *u = b.CreateShl(b.CreateZExt(bits, like(bits, b.getInt32Ty())), 16);
  return b.CreateBitCast(u, like(bits, b.getFloatTy()));
}

// float32 -> 16-bit float bits, rounded to nearest even as runtime/half.h rounds. float16:
// vcvtps2ph (RNE, NaN quieted keeping its top payload bits, as the eager conversion).
// bfloat16 by integer arithmetic rather than vcvtneps2bf16, which flushes subnormals.
Value *narrow_16(IRBuilder<> &b, Value *f, DType to) {
  llvm::LLVMContext &c = b.getContext();
  llvm::Type *i16 = like(f, b.getInt16Ty());
  if (to == DType::Float16) return b.CreateBitCast(b.CreateFPTrunc(f, like(f, llvm::Type::getHalfTy(c))), i16);
  llvm::Type *i32 = like(f, b.getInt32Ty());
  auto k = [&](uint32_t x) { return llvm::ConstantInt::get(i32, x); };
  Value *u = b.CreateBitCast(f, i32);
  Value *odd = b.CreateAnd(b.CreateLShr(u, 16), k(1));
  Value *rounded = b.CreateLShr(b.CreateAdd(u, b.CreateAdd(k(0x7FFF), odd)), 16);
  Value *quiet = b.CreateOr(b.CreateLShr(u, 16), k(0x40));
  Value *nan = b.CreateICmpUGT(b.CreateAnd(u, k(0x7FFFFFFF)), k(0x7F800000));
  return b.CreateTrunc(b.CreateSelect(nan, quiet, rounded), i16);
}

} // namespace

Value *cast_value(IRBuilder<> &b, Value *v, DType from, DType to) {
  if (from == to) return v;
  if (is_reduced_float(from)) return cast_value(b, widen_16(b, v, from), DType::Float32, to);
  if (is_reduced_float(to)) return narrow_16(b, cast_value(b, v, from, DType::Float32), to);
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

Value *Lowering::reduce_identity(const Node &r) {
  llvm::Type *ty = value_type(c_, r.dtype);
  if (is_floating(r.dtype)) {
    double inf = std::numeric_limits<double>::infinity();
    if (r.combine == KOp::Add) return llvm::ConstantFP::getNegativeZero(ty); // exact identity; finish() gives +0
    if (r.combine == KOp::Mul) return llvm::ConstantFP::get(ty, 1.0);
    if (r.combine == KOp::Max) return llvm::ConstantFP::get(ty, -inf);
    if (r.combine == KOp::Min) return llvm::ConstantFP::get(ty, inf);
  } else {
    unsigned bits = ty->getIntegerBitWidth();
    if (r.combine == KOp::Add) return llvm::ConstantInt::get(ty, 0);
    if (r.combine == KOp::Mul) return llvm::ConstantInt::get(ty, 1);
    if (r.combine == KOp::Max) return llvm::ConstantInt::get(c_, llvm::APInt::getSignedMinValue(bits));
    if (r.combine == KOp::Min) return llvm::ConstantInt::get(c_, llvm::APInt::getSignedMaxValue(bits));
  }
  // KernelBuilder::reduce accepts only these four (is_reduce_combine): a new
  // combine fails here instead of being taken for Min.
  KILN_FAIL("lower: ", op_name(r.combine), " is not a reduction combine");
}

Value *Lowering::combine(IRBuilder<> &b, const Node &r, Value *acc, Value *x) {
  bool fp = is_floating(r.dtype);
  using I = llvm::Intrinsic::ID;
  if (r.combine == KOp::Max)
    return b.CreateBinaryIntrinsic(fp ? I(llvm::Intrinsic::maximum) : I(llvm::Intrinsic::smax), acc, x);
  if (r.combine == KOp::Min)
    return b.CreateBinaryIntrinsic(fp ? I(llvm::Intrinsic::minimum) : I(llvm::Intrinsic::smin), acc, x);
  if (!fp) return r.combine == KOp::Add ? b.CreateAdd(acc, x) : b.CreateMul(acc, x);
  // The only reassociation in the kernel: it lets the vectorizer keep partial
  // sums per lane and per unrolled copy (the documented unspecified order).
  IRBuilder<>::FastMathFlagGuard guard(b);
  llvm::FastMathFlags fmf;
  fmf.setAllowReassoc();
  b.setFastMathFlags(fmf);
  return r.combine == KOp::Add ? b.CreateFAdd(acc, x) : b.CreateFMul(acc, x);
}

// A float sum started from -0 (the identity the vectorizer splits into lanes);
// adding +0 turns an all-(-0) or empty sum into +0, as torch's sum from 0.
Value *Lowering::finish(IRBuilder<> &b, const Node &r, Value *acc) {
  if (r.combine != KOp::Add || !is_floating(r.dtype)) return acc;
  return b.CreateFAdd(acc, llvm::ConstantFP::get(acc->getType(), 0.0));
}

Value *Lowering::libm(IRBuilder<> &b, const char *name, Value *x, Value *y) {
  llvm::Type *d = x->getType(); // double, or float for the libm lists' _f32 functions
  std::vector<llvm::Type *> params(y ? 2 : 1, d);
  llvm::FunctionCallee f =
      m_.getOrInsertFunction(std::string(kLibmSymbolPrefix) + name, llvm::FunctionType::get(d, params, false));
  if (auto *fn = llvm::dyn_cast<llvm::Function>(f.getCallee())) {
    fn->setDoesNotThrow();
    fn->setDoesNotAccessMemory(); // pure: lets LLVM hoist and CSE the calls
    fn->setWillReturn();
  }
  if (y) return b.CreateCall(f, {x, y});
  return b.CreateCall(f, {x});
}

// f32: inline vectorizable polynomial; f64: the list's float64 definition
// (kiln_vm_<fn>_f64, scalar libm) through a host symbol.
Value *Lowering::transcendental(IRBuilder<> &b, KOp op, DType t, Value *x, Value *y) {
  bool f32 = t == DType::Float32;
  switch (op) {
#define X(Id, fn, f64)                                                                                     \
  case KOp::Id: return f32 ? vecmath::fn(b, x) : libm(b, #fn, x);
    KILN_VECMATH_OPS(X)
#undef X
#define X(Id, fn, def)                                                                                     \
  case KOp::Id: return libm(b, f32 ? "lm_" #fn "_f32" : "lm_" #fn "_f64", x);
    KILN_LIBM_OPS(X)
#undef X
#define X(Id, fn, def)                                                                                     \
  case KOp::Id: return libm(b, f32 ? "lm2_" #fn "_f32" : "lm2_" #fn "_f64", x, y);
    KILN_LIBM2_OPS(X)
#undef X
#define X(name, arity, traits) case KOp::name:
    KILN_KERNEL_OPS(X)
#undef X
    break;
  }
  KILN_FAIL("internal: ", op_name(op), " is not a transcendental");
}

Value *Lowering::constant(const Node &n) {
  llvm::Type *ty = value_type(c_, n.dtype);
  if (n.inverse_row_length && row_len_) return inverse_len_.at(size_t(&n - k_.nodes.data())); // see build_row_body
  if (is_floating(n.dtype)) return llvm::ConstantFP::get(ty, n.fvalue);
  return llvm::ConstantInt::get(ty, uint64_t(n.ivalue), true);
}

Value *Lowering::compare(IRBuilder<> &b, KOp op, DType t, Value *x, Value *y) {
  using P = llvm::CmpInst::Predicate;
  static const P fp[] = {P::FCMP_OEQ, P::FCMP_UNE, P::FCMP_OLT, P::FCMP_OLE, P::FCMP_OGT, P::FCMP_OGE};
  static const P si[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_SLT, P::ICMP_SLE, P::ICMP_SGT, P::ICMP_SGE};
  static const P ui[] = {P::ICMP_EQ, P::ICMP_NE, P::ICMP_ULT, P::ICMP_ULE, P::ICMP_UGT, P::ICMP_UGE};
  int i = int(op) - int(KOp::Eq);
  if (is_floating(t)) return b.CreateFCmp(fp[i], x, y);
  return b.CreateICmp(t == DType::Bool ? ui[i] : si[i], x, y); // bool: false < true
}

// An element divided by a per-row value that comes from a reduction
// (softmax's e / sum(e)): multiplied by its reciprocal instead, which LICM
// computes once per row. A vector division costs as much as the exp on
// AVX-512; eager softmax also multiplies by 1 / sum (at most 1 ulp apart).
bool Lowering::divides_by_row_statistic(const Node &n) const {
  if (sched_.per_row.empty()) return false; // not a row kernel
  return sched_.per_row[size_t(n.args[1])] && sched_.level[size_t(n.args[1])] >= 1 && !sched_.per_row[size_t(n.args[0])];
}

Value *Lowering::emit_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals) {
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
  case KOp::Div:
    if (fp && divides_by_row_statistic(n)) return b.CreateFMul(x, b.CreateFDiv(llvm::ConstantFP::get(y->getType(), 1.0), y));
    return fp ? b.CreateFDiv(x, y) : safe_sdiv(b, x, y);
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
#define X(Id, fn, f64) case KOp::Id:
    KILN_VECMATH_OPS(X) KILN_LIBM_OPS(X)
#undef X
    return transcendental(b, n.op, n.dtype, x);
#define X(Id, fn, def) case KOp::Id:
    KILN_LIBM2_OPS(X)
#undef X
    return transcendental(b, n.op, n.dtype, x, y);
  case KOp::Fma:
    if (fp) return b.CreateIntrinsic(llvm::Intrinsic::fma, {x->getType()}, {x, y, z});
    return b.CreateAdd(b.CreateMul(x, y), z);
  case KOp::Select: return b.CreateSelect(x, y, z);
  case KOp::Load: case KOp::Reduce: break; // loads: emit_element; reductions: emit_pass
  }
  KILN_FAIL("internal: cannot lower ", op_name(n.op));
}

} // namespace kiln::codegen::lower_impl

namespace kiln::codegen {
namespace lower_impl {

Value *Lowering::emit_lanes(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals, unsigned width) {
  KILN_CHECK(n.op != KOp::Load && n.op != KOp::Reduce, "internal: emit_lanes of a ", op_name(n.op));
  if (width <= 1) return emit_node(b, n, vals);
  if (n.op == KOp::Const) return b.CreateVectorSplat(width, constant(n));
  const bool scalar_only =
      n.op == KOp::Cast || is_libm(n.op) || (is_transcendental(n.op) && n.dtype == DType::Float64);
  if (!scalar_only) return emit_node(b, n, vals);
  // Lane by lane: cast_value and libm take scalars (the loop vectorizer
  // scalarizes them the same way in a compiled kernel).
  Value *out = llvm::PoisonValue::get(llvm::FixedVectorType::get(value_type(c_, n.dtype), width));
  std::vector<Value *> lane(vals.size(), nullptr);
  for (unsigned l = 0; l < width; ++l) {
    for (int32_t a : n.args)
      if (a >= 0) lane[size_t(a)] = b.CreateExtractElement(vals[size_t(a)], uint64_t(l));
    out = b.CreateInsertElement(out, emit_node(b, n, lane), uint64_t(l));
  }
  return out;
}

} // namespace lower_impl

VectorExpr::VectorExpr(const KernelDesc &desc, llvm::Module &m, const LowerTarget &target)
    : desc_(desc), l_(std::make_unique<lower_impl::Lowering>(desc, m, target)) {}

VectorExpr::~VectorExpr() = default;

llvm::Value *VectorExpr::emit(llvm::IRBuilder<> &b, size_t id, const std::vector<llvm::Value *> &vals, unsigned width) {
  return l_->emit_lanes(b, desc_.nodes.at(id), vals, width);
}

} // namespace kiln::codegen
