// KernelDesc -> LLVM IR. One scalar expression builder (emit_node) serves every
// element type; the loop vectorizer widens the inner loop it is placed in.
//
//   void K(void* const* bufs)        { kiln_parallel_for(0, outer, grain, K.body, bufs); }
//   void K.body(ctx, begin, end)     { for o in [begin, end): row(o) }   (rank >= 2)
//                                    { row over i in [begin, end) }      (rank <= 1)
//   row: for j in [lo, hi): out_k[base_k + j*s_k] = expr(in_i[base_i + j*s_i] ...)
#include "codegen/lower.h"

#include <algorithm>
#include <limits>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "codegen/kernel.h"
#include "codegen/row_plan.h"
#include "codegen/vecmath_ir.h"
#include "runtime/error.h"

namespace kiln::codegen {
namespace {

using llvm::IRBuilder;
using llvm::Value;

constexpr int64_t kDefaultGrain = 16384; // elements; below this a chunk is not worth a thread
// Per-row scratch of a reduction kernel lives on the stack of the thread running
// a chunk (kiln's pool threads and a main thread have megabytes). Beyond this,
// expensive values are recomputed instead: 64K float32 rows keep two scratch rows.
constexpr int64_t kMaxScratchBytes = 512 * 1024;
constexpr int64_t kMaxPrefetchBytes = 64 * 1024; // per buffer row, see prefetch_next_row

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
    std::string name = symbol + ".body";
    llvm::Function *body = k_.has_reductions() ? build_row_body(name) : build_body(name);
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
    load_buffers(b, f);
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

  // The buffer pointers, loaded once per chunk. An output written in place
  // takes its input's pointer (its own slot is not read): with one pointer,
  // LLVM sees that element j's loads and store touch the same address, where
  // two pointers would need a runtime overlap check that in-place data fails.
  void load_buffers(IRBuilder<> &b, llvm::Function *f) {
    auto *ptr = llvm::PointerType::getUnqual(c_);
    for (size_t i = 0; i < k_.num_buffers(); ++i) {
      int32_t alias = i < k_.inputs.size() ? -1 : k_.aliased_input(i - k_.inputs.size());
      if (alias >= 0) {
        bufs_.push_back(bufs_[size_t(alias)]);
        continue;
      }
      Value *slot = b.CreateConstInBoundsGEP1_64(ptr, f->getArg(0), i);
      bufs_.push_back(b.CreateLoad(ptr, slot, "buf" + std::to_string(i)));
    }
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
      int32_t alias = buf < k_.inputs.size() ? -1 : k_.aliased_input(buf - k_.inputs.size());
      if (alias >= 0) { // same strides as its input (share_alias_strides)
        bases.push_back(bases[size_t(alias)]);
        continue;
      }
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

  // ---- row reductions (see codegen/row_plan.h): rank >= 2 here, the last dim
  // is the row. body(ctx, begin, end): for each row o in [begin, end), the stages
  // and passes of the plan.
  llvm::Function *build_row_body(const std::string &name) {
    plan_ = plan_rows(k_, kMaxScratchBytes);
    auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
    stamp(f);
    IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
    load_buffers(b, f);
    allocate_scratch(b, f);
    emit_loop(b, f->getArg(1), f->getArg(2), "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); });
    b.CreateRetVoid();
    return f;
  }

  // Static allocas in the entry block: one row per materialized node, reused by
  // every row of the chunk. Probed, so that an overflow faults on the guard page.
  void allocate_scratch(IRBuilder<> &b, llvm::Function *f) {
    scratch_.assign(k_.nodes.size(), nullptr);
    if (plan_.scratch_bytes == 0) return;
    f->addFnAttr("probe-stack", "inline-asm");
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!plan_.materialized(int32_t(i))) continue;
      auto *a = b.CreateAlloca(value_type(c_, k_.nodes[i].dtype), b.getInt64(inner_size()), "scratch");
      a->setAlignment(llvm::Align(64));
      scratch_[i] = a;
    }
  }

  void emit_row(IRBuilder<> &b, Value *o) {
    std::vector<Value *> bases = row_bases(b, o);
    std::vector<Value *> row(k_.nodes.size(), nullptr); // per-row values known so far
    emit_stage(b, 0, bases, row);
    for (int p = 0; p < plan_.passes; ++p) {
      emit_pass(b, p, bases, row);
      if (p == 0 && plan_.passes >= 2) {
        prefetch_next_row(b, o, false);
        if (!plan_.transcendental) prefetch_next_row(b, o, true);
      }
      emit_stage(b, p + 1, bases, row);
    }
  }

  // The first pass pulls the row from memory; the later ones compute on the
  // cached row while memory idles. Prefetching the next row's inputs there
  // overlaps its transfer with that computation, as a single streaming pass
  // would. Outputs too (for writing: their lines are read for ownership), but
  // only in rows without transcendentals: those are compute-bound, and there
  // (softmax, 4096x1024) the extra prefetches cost ~15% instead of helping,
  // while layer_norm went from ~450 to ~330 ns/row, the speed of a copy.
  // Only contiguous rows that move from row to row and fit in L2.
  void prefetch_next_row(IRBuilder<> &b, Value *o, bool outputs) {
    std::vector<std::pair<size_t, int>> streamed; // buffer, 0 = read / 1 = write
    size_t first = outputs ? k_.inputs.size() : 0, last = outputs ? k_.num_buffers() : k_.inputs.size();
    for (size_t i = first; i < last; ++i) {
      std::vector<int64_t> st = strides_of(i);
      bool moves = std::any_of(st.begin(), st.end() - 1, [](int64_t s) { return s != 0; });
      int64_t bytes = inner_size() * int64_t(itemsize(buffer_dtype(i)));
      bool in_place = i >= k_.inputs.size() && k_.aliased_input(i - k_.inputs.size()) >= 0; // its input's lines
      if (st.back() == 1 && moves && bytes <= kMaxPrefetchBytes && !in_place)
        streamed.emplace_back(i, i >= k_.inputs.size());
    }
    if (streamed.empty()) return;
    // Past the last row this addresses beyond the buffer: harmless for a
    // prefetch, and the GEPs are not inbounds.
    std::vector<Value *> next = row_bases(b, b.CreateAdd(o, b.getInt64(1)));
    for (auto [i, write] : streamed) {
      Value *start = b.CreateGEP(memory_type(c_, buffer_dtype(i)), bufs_[i], next[i]);
      int64_t lines = inner_size() * int64_t(itemsize(buffer_dtype(i))) / 64 + 1; // +1: unaligned rows
      emit_loop(b, b.getInt64(0), b.getInt64(lines), "prefetch", [&](IRBuilder<> &lb, Value *line) {
        Value *p = lb.CreateGEP(lb.getInt8Ty(), start, lb.CreateMul(line, lb.getInt64(64)));
        lb.CreateIntrinsic(llvm::Intrinsic::prefetch, {p->getType()},
                           {p, lb.getInt32(write), lb.getInt32(2), lb.getInt32(1)}); // L2, data
      });
    }
  }

  DType buffer_dtype(size_t buf) const {
    return buf < k_.inputs.size() ? k_.inputs[buf].dtype : k_.outputs[buf - k_.inputs.size()].buffer.dtype;
  }

  // Per-row values of level `s` (reductions of level s are already in `row`),
  // then the per-row outputs that only needed those.
  void emit_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, std::vector<Value *> &row) {
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const Node &n = k_.nodes[i];
      if (!plan_.per_row[i] || plan_.level[i] != s || n.op == KOp::Reduce) continue;
      row[i] = n.op == KOp::Load ? load_element(b, n, bases, b.getInt64(0)) : emit_node(b, n, row);
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      int32_t v = k_.outputs[o].value;
      if (plan_.output_pass[o] < 0 && plan_.level[v] == s) store_output(b, o, bases, b.getInt64(0), row[v]);
    }
  }

  // One walk over the row: folds the reductions of pass p (vector partial sums:
  // the combines carry `reassoc`, nothing else does), writes scratch rows and
  // element-wise outputs. The row length is a constant, so an empty row
  // simply has no loop.
  void emit_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, std::vector<Value *> &row) {
    std::vector<int32_t> reductions;
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].op == KOp::Reduce && plan_.level[k_.nodes[i].args[0]] == p)
        reductions.push_back(int32_t(i));
    if (inner_size() == 0) {
      for (int32_t r : reductions) row[r] = finish(b, k_.nodes[r], reduce_identity(k_.nodes[r]));
      return;
    }
    llvm::Function *f = b.GetInsertBlock()->getParent();
    llvm::BasicBlock *pre = b.GetInsertBlock();
    auto *loop = llvm::BasicBlock::Create(c_, "pass" + std::to_string(p), f);
    auto *exit = llvm::BasicBlock::Create(c_, "pass" + std::to_string(p) + ".exit", f);
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    llvm::PHINode *j = b.CreatePHI(b.getInt64Ty(), 2, "j");
    j->addIncoming(b.getInt64(0), pre);
    std::vector<llvm::PHINode *> acc;
    for (int32_t r : reductions) {
      acc.push_back(b.CreatePHI(value_type(c_, k_.nodes[r].dtype), 2, "acc"));
      acc.back()->addIncoming(reduce_identity(k_.nodes[r]), pre);
    }
    std::vector<Value *> cur = row; // element values of this pass at j
    std::vector<Value *> next;
    for (size_t a = 0; a < reductions.size(); ++a) {
      const Node &r = k_.nodes[reductions[a]];
      next.push_back(combine(b, r, acc[a], element_value(b, r.args[0], p, bases, j, cur)));
    }
    // Every value of element j before any store to it: an output written in
    // place must not change what a later output of this pass loads.
    std::vector<std::pair<size_t, Value *>> stores;
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (plan_.output_pass[o] == p) stores.emplace_back(o, element_value(b, k_.outputs[o].value, p, bases, j, cur));
    for (auto [o, v] : stores) store_output(b, o, bases, j, v);
    Value *j_next = b.CreateAdd(j, b.getInt64(1), "j.next", true, true);
    j->addIncoming(j_next, b.GetInsertBlock());
    for (size_t a = 0; a < acc.size(); ++a) acc[a]->addIncoming(next[a], b.GetInsertBlock());
    b.CreateCondBr(b.CreateICmpSLT(j_next, b.getInt64(inner_size())), loop, exit);
    b.SetInsertPoint(exit);
    for (size_t a = 0; a < reductions.size(); ++a)
      row[reductions[a]] = finish(b, k_.nodes[reductions[a]], next[a]);
  }

  // Node `id` at element j of pass p: per-row values are in `cur` already;
  // materialized nodes are computed once (their first pass) and read back after.
  Value *element_value(IRBuilder<> &b, int32_t id, int p, const std::vector<Value *> &bases, Value *j,
                       std::vector<Value *> &cur) {
    if (cur[id]) return cur[id];
    const Node &n = k_.nodes[id];
    llvm::Type *ty = value_type(c_, n.dtype);
    int home = plan_.scratch_pass[id];
    if (home >= 0 && home < p) return cur[id] = b.CreateLoad(ty, b.CreateInBoundsGEP(ty, scratch_[id], j));
    for (int a = 0; a < op_arity(n.op); ++a) element_value(b, n.args[a], p, bases, j, cur);
    cur[id] = n.op == KOp::Load ? load_element(b, n, bases, j) : emit_node(b, n, cur);
    if (home == p) b.CreateStore(cur[id], b.CreateInBoundsGEP(ty, scratch_[id], j));
    return cur[id];
  }

  Value *reduce_identity(const Node &r) {
    llvm::Type *ty = value_type(c_, r.dtype);
    if (is_floating(r.dtype)) {
      double inf = std::numeric_limits<double>::infinity();
      switch (r.combine) {
      case KOp::Add: return llvm::ConstantFP::getNegativeZero(ty); // exact identity; finish() gives +0
      case KOp::Mul: return llvm::ConstantFP::get(ty, 1.0);
      case KOp::Max: return llvm::ConstantFP::get(ty, -inf);
      default: return llvm::ConstantFP::get(ty, inf);
      }
    }
    unsigned bits = ty->getIntegerBitWidth();
    switch (r.combine) {
    case KOp::Add: return llvm::ConstantInt::get(ty, 0);
    case KOp::Mul: return llvm::ConstantInt::get(ty, 1);
    case KOp::Max: return llvm::ConstantInt::get(c_, llvm::APInt::getSignedMinValue(bits));
    default: return llvm::ConstantInt::get(c_, llvm::APInt::getSignedMaxValue(bits));
    }
  }

  Value *combine(IRBuilder<> &b, const Node &r, Value *acc, Value *x) {
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
  Value *finish(IRBuilder<> &b, const Node &r, Value *acc) {
    if (r.combine != KOp::Add || !is_floating(r.dtype)) return acc;
    return b.CreateFAdd(acc, llvm::ConstantFP::get(acc->getType(), 0.0));
  }

  Value *load_element(IRBuilder<> &b, const Node &n, const std::vector<Value *> &bases, Value *j) {
    Value *v = b.CreateLoad(memory_type(c_, n.dtype), element_ptr(b, n.input, n.dtype, bases[n.input], j));
    return n.dtype == DType::Bool ? b.CreateICmpNE(v, b.getInt8(0)) : v;
  }

  void store_output(IRBuilder<> &b, size_t o, const std::vector<Value *> &bases, Value *j, Value *v) {
    const OutputSpec &out = k_.outputs[o];
    size_t buf = k_.inputs.size() + o;
    if (out.buffer.dtype == DType::Bool) v = b.CreateZExt(v, b.getInt8Ty());
    b.CreateStore(v, element_ptr(b, buf, out.buffer.dtype, bases[buf], j));
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
    case KOp::Load: case KOp::Reduce: break; // loads: emit_element; reductions: emit_pass
    }
    KILN_FAIL("internal: cannot lower ", op_name(n.op));
  }

  const KernelDesc &k_;
  llvm::Module &m_;
  llvm::LLVMContext &c_;
  const LowerTarget &target_;
  std::vector<int64_t> shape_;
  std::vector<Value *> bufs_;
  RowPlan plan_;                   // kernels with reductions only
  std::vector<Value *> scratch_;   // per node: its scratch row, or null
};

// An output written in place addresses its input's elements: give it the
// input's strides (they may differ only in dims of size 1), so that both
// collapse alike and their addresses are the same expressions.
KernelDesc share_alias_strides(const KernelDesc &in) {
  KernelDesc k = in;
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (k.aliased_input(o) >= 0) k.outputs[o].buffer.strides = k.inputs[size_t(k.aliased_input(o))].strides;
  return k;
}

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

// For row reductions the last dim is the row and must stay as it is (even of
// size 1); the outer dims are collapsed as above, and a rank-1 kernel becomes
// one row [1, L], so that the row code always has an outer loop.
KernelDesc collapse_outer_dims(const KernelDesc &in) {
  KernelDesc outer = in;
  size_t rank = in.shape.size();
  outer.shape.pop_back();
  for (auto &b : outer.inputs) b.strides.pop_back();
  for (auto &o : outer.outputs) o.buffer.strides.pop_back();
  outer = collapse_dims(outer);
  KernelDesc k = in;
  k.shape = outer.shape;
  k.shape.push_back(in.shape.back());
  if (k.shape.size() == 1) k.shape.insert(k.shape.begin(), 1);
  size_t rows_rank = k.shape.size() - 1;
  auto fix = [&](std::vector<int64_t> &strides, const std::vector<int64_t> &collapsed) {
    int64_t last = strides[rank - 1];
    strides = collapsed;
    strides.resize(rows_rank, 0); // the [1] of a rank-1 kernel
    strides.push_back(last);
  };
  for (size_t b = 0; b < k.inputs.size(); ++b) fix(k.inputs[b].strides, outer.inputs[b].strides);
  for (size_t o = 0; o < k.outputs.size(); ++o)
    fix(k.outputs[o].buffer.strides, outer.outputs[o].buffer.strides);
  return k;
}

} // namespace

std::unique_ptr<llvm::Module> lower_kernel(const KernelDesc &desc, const std::string &symbol,
                                           const LowerTarget &target, llvm::LLVMContext &ctx) {
  desc.validate();
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  KernelDesc shared = share_alias_strides(desc);
  KernelDesc simple = desc.has_reductions() ? collapse_outer_dims(shared) : collapse_dims(shared);
  Lowering(simple, *m, target).run(symbol);
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os)) KILN_FAIL("codegen: kernel ", symbol, " produced invalid IR: ", os.str());
  return m;
}

} // namespace kiln::codegen
