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

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

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
// A rank-1 kernel with streamed outputs is split into blocks of this many
// elements, so that every chunk starts 64-byte aligned in every output.
constexpr int64_t kStreamBlock = 64;
constexpr unsigned kStreamAlign = 64;
// Marks the load of a streamed output's pointer (see mark_streamed_stores).
constexpr const char *kStreamedBufferMD = "kiln.streamed";
// Rows evaluated side by side when rows are columns (see wants_tiles): enough
// for several vectors of the widest ISA, small enough for L1 (one element per
// row per per-row value).
constexpr int64_t kTileRows = 64;
// With several outer dims, tiles span only the innermost one: below this many
// rows there, rows go one by one.
constexpr int64_t kMinTileRows = 16;

// Loop metadata (set_loop_md). Nest: a loop around other loops, never
// unrolled: LLVM fully unrolls a nest with a small constant trip count (batch
// norm's sub-rows, one per image), copying the vectorized loop inside it once
// per iteration; at batch 16, 16 copies took 1.4 s to compile instead of
// ~0.1 s, for no speed (each copy runs 1024 elements). VectorRolled: an inner
// loop vectorized and interleaved 4 times, then not unrolled any further: a
// row pass with NaN flags (see fold) that is fully unrolled has its 64 loads
// hoisted and spilled around the mask registers (softmax's max pass over
// DRAM-resident rows took 570 instead of 410 ns per 1024-float row).
enum class LoopMD : uint8_t { None, Nest, VectorRolled };

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
    streamed_.assign(k.outputs.size(), 0);
    // An in-place output stores through its input's pointer, whose alignment
    // nobody promised, into lines the kernel has just read: never streamed.
    for (size_t o = 0; o < k.outputs.size(); ++o)
      streamed_[o] = k.stream_stores && k.aliased_input(o) < 0 && rows_stay_aligned(o);
    any_streamed_ = std::any_of(streamed_.begin(), streamed_.end(), [](uint8_t s) { return s != 0; });
    row_rank_ = k.has_reductions() ? size_t(k.row_rank) : 1;
  }

  void run(const std::string &symbol) {
    std::string name = symbol + ".body";
    llvm::Function *body = k_.has_reductions() ? build_row_body(name) : build_body(name);
    build_entry(symbol, body);
  }

private:
  size_t rank() const { return shape_.size(); }
  int64_t inner_size() const { return shape_.back(); }
  // Dims walked by the outer (parallel) loop: all but the row's (all but the
  // last one for element-wise kernels). collapse_outer_dims leaves at least one.
  size_t outer_rank() const { return rank() - row_rank_; }
  int64_t row_length() const {
    int64_t n = 1;
    for (size_t d = outer_rank(); d < rank(); ++d) n *= shape_[d];
    return n;
  }
  // Inner-loop runs per row: a row of several dims is walked as sub-rows of its last dim.
  int64_t sub_rows() const { return inner_size() == 0 ? 0 : row_length() / inner_size(); }
  std::vector<int64_t> strides_of(size_t buf) const {
    const BufferSpec &s =
        buf < k_.inputs.size() ? k_.inputs[buf] : k_.outputs[buf - k_.inputs.size()].buffer;
    return k_.shape.empty() ? std::vector<int64_t>{0} : s.strides;
  }

  // Whether output o's rows start where its element 0 does, modulo 64 bytes
  // (given rank-1 blocks of kStreamBlock): then, with a 64-byte aligned
  // element 0, LLVM can prove the vector stores of the row aligned, which
  // non-temporal vector stores need. Per-row outputs are single stores: never.
  bool rows_stay_aligned(size_t o) const {
    std::vector<int64_t> st = strides_of(k_.inputs.size() + o);
    if (st.back() != 1) return false;
    int64_t size = int64_t(itemsize(k_.outputs[o].buffer.dtype));
    return std::all_of(st.begin(), st.end() - 1, [&](int64_t s) { return s * size % kStreamAlign == 0; });
  }
  bool blocked() const { return rank() == 1 && any_streamed_; }

  int64_t outer_count() const {
    if (blocked()) return (shape_[0] + kStreamBlock - 1) / kStreamBlock;
    if (block_ > 0) return (shape_[0] + block_ - 1) / block_; // row blocks: outer_rank() == 1
    if (rank() == 1) return shape_[0];
    int64_t n = 1;
    for (size_t d = 0; d < outer_rank(); ++d) n *= shape_[d];
    return n;
  }
  int64_t outer_grain() const {
    int64_t grain = k_.grain > 0 ? k_.grain : kDefaultGrain;
    if (blocked()) return (grain + kStreamBlock - 1) / kStreamBlock;
    if (rank() == 1) return grain;
    int64_t rows = std::max<int64_t>(1, grain / std::max<int64_t>(1, row_length()));
    if (block_ > 0) return (rows + block_ - 1) / block_; // in blocks
    return tiled_ ? std::max<int64_t>(rows, 16) : rows; // tiles want neighbouring rows together
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

  // Non-temporal stores are weakly ordered: without a fence, the thread that
  // joins this chunk (the pool's done counter is a locked RMW, which x86 does
  // order them by, but the C++ model says nothing about them) could read stale
  // lines. One sfence per chunk, on the thread that stored.
  void fence_streamed_stores(IRBuilder<> &b) {
    if (!any_streamed_) return;
    llvm::Triple triple(target_.triple);
    if (triple.isX86()) b.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
    else b.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
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
      llvm::LoadInst *p = b.CreateLoad(ptr, slot, "buf" + std::to_string(i));
      // The caller's promise (KernelDesc::stream_stores) lets LLVM prove the
      // streamed rows' vector stores aligned; mark_streamed_stores finds them
      // by this pointer after vectorization.
      if (i >= k_.inputs.size() && streamed_[i - k_.inputs.size()]) {
        llvm::Metadata *align = llvm::ConstantAsMetadata::get(b.getInt64(kStreamAlign));
        p->setMetadata(llvm::LLVMContext::MD_align, llvm::MDNode::get(c_, align));
        p->setMetadata(llvm::LLVMContext::MD_noundef, llvm::MDNode::get(c_, {}));
        p->setMetadata(kStreamedBufferMD, llvm::MDNode::get(c_, {}));
      }
      bufs_.push_back(p);
    }
  }

  // for (iv = lo; iv < hi; ++iv) body(iv); leaves `b` after the loop.
  template <class Body>
  void emit_loop(IRBuilder<> &b, Value *lo, Value *hi, const char *name, Body &&body, LoopMD md = LoopMD::None) {
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
    set_loop_md(b.CreateCondBr(b.CreateICmpSLT(next, hi), loop, exit), md);
    b.SetInsertPoint(exit);
  }

  // Element offset of row `o`'s first element in every buffer (dims 0..outer_rank()-1).
  std::vector<Value *> row_bases(IRBuilder<> &b, Value *o) {
    std::vector<Value *> zero(k_.num_buffers(), b.getInt64(0));
    return offset_bases(b, zero, o, 0, outer_rank());
  }

  // `bases` moved to the point whose flat index over dims [from, to) is `flat`.
  std::vector<Value *> offset_bases(IRBuilder<> &b, const std::vector<Value *> &bases, Value *flat, size_t from,
                                    size_t to) {
    std::vector<Value *> idx(to - from);
    Value *rest = flat;
    for (size_t d = to; d-- > from;) {
      Value *size = b.getInt64(shape_[d]);
      idx[d - from] = d == from ? rest : b.CreateURem(rest, size);
      if (d > from) rest = b.CreateUDiv(rest, size);
    }
    std::vector<Value *> out;
    for (size_t buf = 0; buf < k_.num_buffers(); ++buf) {
      int32_t alias = buf < k_.inputs.size() ? -1 : k_.aliased_input(buf - k_.inputs.size());
      if (alias >= 0) { // same strides as its input (share_alias_strides)
        out.push_back(out[size_t(alias)]);
        continue;
      }
      std::vector<int64_t> st = strides_of(buf);
      Value *base = bases[buf];
      for (size_t d = from; d < to; ++d)
        if (st[d] != 0) base = b.CreateAdd(base, b.CreateMul(idx[d - from], b.getInt64(st[d])));
      out.push_back(base);
    }
    return out;
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
    tiled_ = wants_tiles();
    plan_ = plan_rows(k_, tiled_ ? 0 : kMaxScratchBytes);
    centering_ = reductions_used_by_reductions();
    auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
    stamp(f);
    IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
    load_buffers(b, f);
    if (tiled_) {
      allocate_tile(b);
      emit_tiles(b, f->getArg(1), f->getArg(2));
      fence_streamed_stores(b);
      b.CreateRetVoid();
      return f;
    }
    allocate_scratch(b, f);
    block_ = plan_row_block(k_, plan_, f32_lanes()); // (never with tiles: their rows are strided)
    if (block_ > 0) {
      emit_row_blocks(b, f->getArg(1), f->getArg(2));
    } else {
      emit_loop(b, f->getArg(1), f->getArg(2), "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); }, LoopMD::Nest);
    }
    fence_streamed_stores(b);
    b.CreateRetVoid();
    return f;
  }

  // ---- row blocks (see plan_row_block): short contiguous rows, such as the
  // rows of W in a matrix-vector product W x. Row by row, the vectorizer turns
  // a 64-element sum into 4 vector FMAs and then a 9-instruction horizontal
  // reduction plus scalar epilogue: most of the row's time. Here block_ rows
  // (one vector of float32 lanes) are walked together, each into its own
  // vector accumulator, so that row-invariant loads (the broadcast x) are
  // loaded once per block; a transposing shuffle tree then folds the block_
  // accumulators into one vector whose lane r is row r's result (about 3
  // shuffles and combines per row), and the per-row stages (bias, relu,
  // stores) run on that vector when the rows' per-row data is contiguous.
  // The kernel's last rows (count % block_) take emit_row.

  // float32 lanes of the widest vector the target has (x86 feature string).
  int64_t f32_lanes() const {
    const std::string &f = target_.features;
    if (f.find("+avx512f") != std::string::npos) return 16;
    if (f.find("+avx") != std::string::npos) return 8;
    return 4; // SSE, NEON: 128-bit vectors
  }

  llvm::FixedVectorType *lane_type(llvm::Type *scalar) const {
    return llvm::FixedVectorType::get(scalar, unsigned(block_));
  }

  // [begin, end) counts blocks (see outer_count): only the kernel's last
  // block can be short, and its rows (count % block_) go row by row.
  void emit_row_blocks(IRBuilder<> &b, Value *begin, Value *end) {
    invariant_ = row_invariant_nodes();
    int64_t whole = shape_[0] / block_;
    Value *last = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, end, b.getInt64(whole), nullptr, "whole.end");
    emit_loop(b, begin, last, "block", [&](IRBuilder<> &bb, Value *t) {
      emit_row_block(bb, bb.CreateMul(t, bb.getInt64(block_), "block.first", true, true));
    }, LoopMD::Nest);
    if (shape_[0] % block_ == 0) return;
    Value *has_rest = b.CreateICmpSGT(end, b.getInt64(whole));
    Value *lo = b.CreateSelect(has_rest, b.getInt64(whole * block_), b.getInt64(shape_[0]));
    emit_loop(b, lo, b.getInt64(shape_[0]), "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); }, LoopMD::Nest);
  }

  // Per node: the same value in every row (depends on no load that moves
  // from row to row): computed once per block, not once per row.
  std::vector<uint8_t> row_invariant_nodes() const {
    std::vector<uint8_t> inv(k_.nodes.size(), 0);
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const Node &n = k_.nodes[i];
      if (n.op == KOp::Load) inv[i] = strides_of(size_t(n.input))[0] == 0;
      else if (n.op == KOp::Const) inv[i] = 1;
      else if (n.op != KOp::Reduce) {
        inv[i] = 1;
        for (int a = 0; a < op_arity(n.op); ++a) inv[i] &= inv[size_t(n.args[a])];
      }
    }
    return inv;
  }

  // Per node: a per-row value that the pass's element values read (with the
  // per-row values it is computed from).
  std::vector<uint8_t> per_row_inputs_of_pass(const std::vector<int32_t> &reductions) const {
    std::vector<uint8_t> seen(k_.nodes.size(), 0);
    std::vector<int32_t> stack;
    for (int32_t r : reductions) stack.push_back(k_.nodes[size_t(r)].args[0]);
    while (!stack.empty()) {
      int32_t n = stack.back();
      stack.pop_back();
      if (seen[size_t(n)]) continue;
      seen[size_t(n)] = 1;
      for (int a = 0; a < op_arity(k_.nodes[size_t(n)].op); ++a) stack.push_back(k_.nodes[size_t(n)].args[a]);
    }
    for (size_t i = 0; i < seen.size(); ++i) seen[i] &= plan_.per_row[i];
    return seen;
  }

  // Rows [first, first + block_): the per-row values the pass reads, the
  // pass (one vector accumulator per row and reduction), the shuffle tree,
  // then the per-row stages and outputs.
  void emit_row_block(IRBuilder<> &b, Value *first) {
    wide_.assign(k_.nodes.size(), nullptr); // block sums are float vectors (rows are short)
    shift_.assign(k_.nodes.size(), nullptr);
    size_t rows = size_t(block_);
    std::vector<Value *> bases = row_bases(b, first);
    std::vector<std::vector<Value *>> at(rows), row(rows, std::vector<Value *>(k_.nodes.size(), nullptr));
    for (size_t r = 0; r < rows; ++r) at[r] = tile_row(b, bases, b.getInt64(int64_t(r)));
    std::vector<int32_t> reductions; // plan_row_block: all of them fold in the one pass
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].op == KOp::Reduce) reductions.push_back(int32_t(i));
    emit_block_pass_inputs(b, reductions, at, row);
    std::vector<Value *> results = fold_row_block(b, reductions, at, row);
    if (row_block_stage_is_vector(k_, plan_)) {
      emit_block_stage(b, bases, results);
      return;
    }
    for (size_t r = 0; r < rows; ++r) {
      for (int32_t red : reductions) row[r][size_t(red)] = b.CreateExtractElement(results[size_t(red)], uint64_t(r));
      emit_stage(b, 0, at[r], row[r]);
      emit_stage(b, 1, at[r], row[r]);
    }
  }

  // Only the per-row values the pass reads, before it: the others (bias...)
  // would hold registers that the block_ accumulators need. Row-invariant
  // ones are computed once.
  void emit_block_pass_inputs(IRBuilder<> &b, const std::vector<int32_t> &reductions,
                              const std::vector<std::vector<Value *>> &at, std::vector<std::vector<Value *>> &row) {
    std::vector<uint8_t> before = per_row_inputs_of_pass(reductions);
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!before[i]) continue;
      const Node &n = k_.nodes[i];
      for (size_t r = 0; r < row.size(); ++r) {
        if (invariant_[i] && r > 0) row[r][i] = row[0][i];
        else row[r][i] = n.op == KOp::Load ? load_element(b, n, at[r], b.getInt64(0)) : emit_node(b, n, row[r]);
      }
    }
  }

  // The pass over the block's rows: full vectors in a loop, then the row's
  // tail (length % block_) under a mask. Returns, per reduction node, the
  // finished vector whose lane r is row r's result.
  std::vector<Value *> fold_row_block(IRBuilder<> &b, const std::vector<int32_t> &reductions,
                                      const std::vector<std::vector<Value *>> &at,
                                      const std::vector<std::vector<Value *>> &row) {
    size_t rows = size_t(block_);
    std::vector<Value *> acc; // reduction a, row r: acc[a * rows + r]
    for (int32_t red : reductions) {
      Value *identity = b.CreateVectorSplat(unsigned(block_), reduce_identity(k_.nodes[size_t(red)]));
      acc.insert(acc.end(), rows, identity);
    }
    int64_t full = inner_size() / block_, tail = inner_size() % block_;
    if (full > 0) {
      emit_carried_loop(b, b.getInt64(full), "block.j", acc, [&](IRBuilder<> &lb, Value *c, std::vector<Value *> &a) {
        fold_block_chunk(lb, lb.CreateMul(c, lb.getInt64(block_), "j", true, true), nullptr, reductions, at, row, a);
      });
    }
    if (tail > 0) {
      std::vector<llvm::Constant *> bits;
      for (int64_t l = 0; l < block_; ++l) bits.push_back(b.getInt1(l < tail));
      fold_block_chunk(b, b.getInt64(full * block_), llvm::ConstantVector::get(bits), reductions, at, row, acc);
    }
    std::vector<Value *> results(k_.nodes.size(), nullptr);
    for (size_t a = 0; a < reductions.size(); ++a) {
      const Node &red = k_.nodes[size_t(reductions[a])];
      auto from = acc.begin() + std::ptrdiff_t(a * rows);
      Value *lanes = transpose_combine(b, red, std::vector<Value *>(from, from + std::ptrdiff_t(rows)));
      results[size_t(reductions[a])] = finish(b, red, lanes);
    }
    return results;
  }


  // One vector of elements [j, j + block_) of every row of the block into the
  // rows' accumulators. `mask` (tail of the row): lanes past its end are
  // loaded as 0 and replaced by the identity before they are combined.
  // A sum of products is folded with fmuladd (contracted into an FMA on
  // targets with one): one rounding less per element than the row-by-row
  // path, well within the unspecified summation order's float32 tolerance.
  void fold_block_chunk(IRBuilder<> &b, Value *j, Value *mask, const std::vector<int32_t> &reductions,
                        const std::vector<std::vector<Value *>> &at, const std::vector<std::vector<Value *>> &row,
                        std::vector<Value *> &acc) {
    size_t rows = size_t(block_);
    std::vector<Value *> shared(k_.nodes.size(), nullptr); // row-invariant values of this chunk
    for (size_t r = 0; r < rows; ++r) {
      std::vector<Value *> cur(k_.nodes.size(), nullptr);
      for (size_t a = 0; a < reductions.size(); ++a) {
        const Node &red = k_.nodes[size_t(reductions[a])];
        int32_t v = red.args[0];
        const Node &vn = k_.nodes[size_t(v)];
        Value *&sum = acc[a * rows + r];
        if (!mask && red.combine == KOp::Add && vn.op == KOp::Mul && !plan_.per_row[size_t(v)]) {
          Value *x = lane_value(b, vn.args[0], j, mask, at[r], row[r], cur, shared);
          Value *y = lane_value(b, vn.args[1], j, mask, at[r], row[r], cur, shared);
          sum = b.CreateIntrinsic(llvm::Intrinsic::fmuladd, {x->getType()}, {x, y, sum});
          continue;
        }
        Value *x = lane_value(b, v, j, mask, at[r], row[r], cur, shared);
        if (mask) x = b.CreateSelect(mask, x, b.CreateVectorSplat(unsigned(block_), reduce_identity(red)));
        sum = combine(b, red, sum, x);
      }
    }
  }

  // Element value `id` of one row at elements [j, j + block_), as a vector.
  Value *lane_value(IRBuilder<> &b, int32_t id, Value *j, Value *mask, const std::vector<Value *> &at,
                    const std::vector<Value *> &row, std::vector<Value *> &cur, std::vector<Value *> &shared) {
    size_t i = size_t(id);
    if (cur[i]) return cur[i];
    if (invariant_[i] && shared[i]) return cur[i] = shared[i];
    const Node &n = k_.nodes[i];
    Value *v = nullptr;
    if (plan_.per_row[i]) {
      v = b.CreateVectorSplat(unsigned(block_), row[i]);
    } else if (n.op == KOp::Load) {
      llvm::Type *ty = lane_type(value_type(c_, n.dtype));
      Value *p = element_ptr(b, size_t(n.input), n.dtype, at[size_t(n.input)], j);
      if (mask) v = b.CreateMaskedLoad(ty, p, llvm::Align(4), mask, llvm::Constant::getNullValue(ty));
      else v = b.CreateAlignedLoad(ty, p, llvm::Align(4));
    } else {
      for (int a = 0; a < op_arity(n.op); ++a) lane_value(b, n.args[a], j, mask, at, row, cur, shared);
      v = emit_node(b, n, cur);
    }
    if (invariant_[i]) shared[i] = v;
    return cur[i] = v;
  }

  // Folds vectors v[0..block_) (v[r]: row r's partial results in every lane)
  // into one whose lane r is row r's result. Each round pairs neighbours: a
  // vector holding rows of g lanes each becomes, with its neighbour, one
  // holding twice the rows of g/2 lanes (low halves + high halves).
  Value *transpose_combine(IRBuilder<> &b, const Node &red, std::vector<Value *> v) {
    int lanes = int(block_), half = lanes / 2;
    for (int g = lanes; v.size() > 1; g /= 2) {
      int h = g / 2;
      std::vector<int> lo, hi;
      for (int l = 0; l < lanes; ++l) {
        int k = l % half;
        int idx = (l < half ? 0 : lanes) + (k / h) * g + k % h;
        lo.push_back(idx);
        hi.push_back(idx + h);
      }
      std::vector<Value *> next;
      for (size_t p = 0; p + 1 < v.size(); p += 2)
        next.push_back(combine(b, red, b.CreateShuffleVector(v[p], v[p + 1], lo),
                               b.CreateShuffleVector(v[p], v[p + 1], hi)));
      v = std::move(next);
    }
    return v[0];
  }

  // The per-row values and outputs of the block as vectors across its rows
  // (row_block_stage_is_vector): lane r = row r.
  void emit_block_stage(IRBuilder<> &b, const std::vector<Value *> &bases, std::vector<Value *> lane) {
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const Node &n = k_.nodes[i];
      if (!plan_.per_row[i] || lane[i]) continue;
      if (n.op == KOp::Const) {
        lane[i] = b.CreateVectorSplat(unsigned(block_), constant(n));
      } else if (n.op == KOp::Load && strides_of(size_t(n.input))[0] == 0) {
        lane[i] = b.CreateVectorSplat(unsigned(block_), load_element(b, n, bases, b.getInt64(0)));
      } else if (n.op == KOp::Load) {
        Value *p = element_ptr(b, size_t(n.input), n.dtype, bases[size_t(n.input)], b.getInt64(0));
        lane[i] = b.CreateAlignedLoad(lane_type(value_type(c_, n.dtype)), p, llvm::Align(4));
      } else {
        lane[i] = emit_node(b, n, lane);
      }
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      size_t buf = k_.inputs.size() + o;
      Value *p = element_ptr(b, buf, DType::Float32, bases[buf], b.getInt64(0));
      b.CreateAlignedStore(lane[size_t(k_.outputs[o].value)], p, llvm::Align(4));
    }
  }

  // ---- tiles: rows that are columns. When an input's rows run across memory
  // (row stride != 1) while neighbouring rows are neighbours in memory (outer
  // stride 1) -- batch-norm statistics of an [N, C] input, or of channels-last
  // NCHW -- walking one row at a time touches a cache line per element and
  // never vectorizes. Instead kTileRows rows advance together: every loop over
  // a row's elements gets an innermost loop over the tile's rows, contiguous
  // in memory and vectorized, with per-row values (accumulators included) in
  // small arrays of one element per row. The same passes and stages as
  // emit_row, in the same order per row; no scratch rows (plan without them).
  //
  // With several outer dims (x.permute(0, 2, 1).sum(-1): rows [B, C] whose
  // elements are C apart), the tile's rows are neighbours along the innermost
  // outer dim, and a tile never crosses from one index of the dims before it
  // to the next (emit_tiles). Walking such a row down memory instead (the
  // vectorizer gathers) ran 5x slower than eager, and a contiguous copy first
  // 10x.
  size_t tile_dim() const { return outer_rank() - 1; }

  bool wants_tiles() const {
    size_t d = tile_dim();
    int64_t min_rows = outer_rank() == 1 ? 2 : kMinTileRows;
    if (shape_[d] < min_rows || inner_size() < 2) return false;
    for (size_t i = 0; i < k_.inputs.size(); ++i) {
      std::vector<int64_t> st = strides_of(i);
      if (st[d] == 1 && st.back() != 0 && st.back() != 1) return true;
    }
    return false;
  }

  // Float32 sums of a tile accumulate in double, one per row (tile_wide_):
  // each row is a sequential sum, which in float32 lost 1.5e-4 (relative)
  // over 16384 elements; the double adds run across the tile's rows, vectorized.
  bool tile_sums_wide(const Node &n) const {
    return n.op == KOp::Reduce && n.combine == KOp::Add && n.dtype == DType::Float32;
  }

  void allocate_tile(IRBuilder<> &b) {
    tile_.assign(k_.nodes.size(), nullptr);
    tile_wide_.assign(k_.nodes.size(), nullptr);
    auto array = [&](llvm::Type *ty) {
      auto *a = b.CreateAlloca(ty, b.getInt64(kTileRows), "tile");
      a->setAlignment(llvm::Align(64));
      return a;
    };
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!plan_.per_row[i]) continue;
      tile_[i] = array(value_type(c_, k_.nodes[i].dtype));
      if (tile_sums_wide(k_.nodes[i])) tile_wide_[i] = array(b_double());
    }
  }

  // Tiles of rows [begin, end): with one outer dim, runs of kTileRows rows;
  // with several, the same within each index of the dims before the tile's.
  void emit_tiles(IRBuilder<> &b, Value *begin, Value *end) {
    if (outer_rank() == 1) {
      emit_tile_run(b, begin, end);
      return;
    }
    int64_t width = shape_[tile_dim()];
    Value *g0 = b.CreateUDiv(begin, b.getInt64(width));
    Value *g1 = b.CreateUDiv(b.CreateAdd(end, b.getInt64(width - 1)), b.getInt64(width));
    emit_loop(b, g0, g1, "tile.group", [&](IRBuilder<> &gb, Value *g) {
      Value *lo = gb.CreateMul(g, gb.getInt64(width));
      Value *hi = gb.CreateBinaryIntrinsic(llvm::Intrinsic::smin, end, gb.CreateAdd(lo, gb.getInt64(width)));
      lo = gb.CreateBinaryIntrinsic(llvm::Intrinsic::smax, begin, lo);
      emit_tile_run(gb, lo, hi);
    }, LoopMD::Nest);
  }

  // for (t = begin; t < end; t += kTileRows) tile of min(kTileRows, end - t) rows.
  void emit_tile_run(IRBuilder<> &b, Value *begin, Value *end) {
    Value *count = b.CreateSub(end, begin);
    Value *tiles = b.CreateUDiv(b.CreateAdd(count, b.getInt64(kTileRows - 1)), b.getInt64(kTileRows));
    emit_loop(b, b.getInt64(0), tiles, "tile", [&](IRBuilder<> &tb, Value *t) {
      Value *first = tb.CreateAdd(begin, tb.CreateMul(t, tb.getInt64(kTileRows)));
      Value *left = tb.CreateSub(end, first);
      Value *n = tb.CreateSelect(tb.CreateICmpSLT(left, tb.getInt64(kTileRows)), left, tb.getInt64(kTileRows));
      emit_tile(tb, first, n);
    }, LoopMD::Nest);
  }

  void emit_tile(IRBuilder<> &b, Value *first, Value *n) {
    std::vector<Value *> bases = row_bases(b, first);
    known_.assign(k_.nodes.size(), 0);
    emit_tile_stage(b, 0, bases, n);
    for (int p = 0; p < plan_.passes; ++p) {
      emit_tile_pass(b, p, bases, n);
      emit_tile_stage(b, p + 1, bases, n);
    }
  }

  // Row r of the tile: bases moved along the tile's dim.
  std::vector<Value *> tile_row(IRBuilder<> &b, const std::vector<Value *> &bases, Value *r) {
    std::vector<Value *> out = bases;
    for (size_t buf = 0; buf < k_.num_buffers(); ++buf) {
      int32_t alias = buf < k_.inputs.size() ? -1 : k_.aliased_input(buf - k_.inputs.size());
      int64_t s = strides_of(buf)[tile_dim()];
      if (alias >= 0) out[buf] = out[size_t(alias)]; // one address expression, as offset_bases
      else if (s != 0) out[buf] = b.CreateAdd(bases[buf], b.CreateMul(r, b.getInt64(s)));
    }
    return out;
  }

  Value *tile_slot(IRBuilder<> &b, size_t node, Value *r) {
    return b.CreateInBoundsGEP(value_type(c_, k_.nodes[node].dtype), tile_[node], r);
  }

  Value *tile_wide_slot(IRBuilder<> &b, size_t node, Value *r) {
    return b.CreateInBoundsGEP(b_double(), tile_wide_[node], r);
  }

  // The per-row values known so far, for row r.
  std::vector<Value *> load_known(IRBuilder<> &b, Value *r) {
    std::vector<Value *> cur(k_.nodes.size(), nullptr);
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (known_[i]) cur[i] = b.CreateLoad(value_type(c_, k_.nodes[i].dtype), tile_slot(b, i, r));
    return cur;
  }

  // The double sums known so far (see exact_mean), for row r.
  std::vector<Value *> load_known_wide(IRBuilder<> &b, Value *r) {
    std::vector<Value *> wide(k_.nodes.size(), nullptr);
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (known_[i] && tile_wide_[i]) wide[i] = b.CreateLoad(b_double(), tile_wide_slot(b, i, r));
    return wide;
  }

  // emit_stage for every row of the tile.
  void emit_tile_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, Value *n) {
    std::vector<size_t> nodes, outs;
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (plan_.per_row[i] && plan_.level[i] == s && k_.nodes[i].op != KOp::Reduce) nodes.push_back(i);
    for (size_t o = 0; o < k_.outputs.size(); ++o)
      if (plan_.output_pass[o] < 0 && plan_.level[k_.outputs[o].value] == s) outs.push_back(o);
    if (nodes.empty() && outs.empty()) return;
    emit_loop(b, b.getInt64(0), n, "stage.r", [&](IRBuilder<> &lb, Value *r) {
      std::vector<Value *> br = tile_row(lb, bases, r);
      std::vector<Value *> cur = load_known(lb, r), wide = load_known_wide(lb, r);
      for (size_t i : nodes) {
        const Node &node = k_.nodes[i];
        cur[i] = node.op == KOp::Load ? load_element(lb, node, br, lb.getInt64(0)) : emit_row_node(lb, node, cur, wide);
        lb.CreateStore(cur[i], tile_slot(lb, i, r));
      }
      for (size_t o : outs) store_output(lb, o, br, lb.getInt64(0), cur[size_t(k_.outputs[o].value)]);
    });
    for (size_t i : nodes) known_[i] = 1;
  }

  // emit_pass for every row of the tile: the tile's rows innermost.
  void emit_tile_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *n) {
    std::vector<int32_t> reductions;
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].op == KOp::Reduce && plan_.level[k_.nodes[i].args[0]] == p) reductions.push_back(int32_t(i));
    auto over_rows = [&](const char *name, auto &&body) { emit_loop(b, b.getInt64(0), n, name, body); };
    over_rows("init.r", [&](IRBuilder<> &lb, Value *r) {
      for (int32_t red : reductions) {
        if (tile_wide_[size_t(red)]) lb.CreateStore(wide_identity(), tile_wide_slot(lb, size_t(red), r));
        else lb.CreateStore(reduce_identity(k_.nodes[red]), tile_slot(lb, size_t(red), r));
      }
    });
    if (row_length() > 0) {
      emit_loop(b, b.getInt64(0), b.getInt64(sub_rows()), "sub", [&](IRBuilder<> &sb, Value *rr) {
        std::vector<Value *> sub = offset_bases(sb, bases, rr, outer_rank(), rank() - 1);
        emit_loop(sb, sb.getInt64(0), sb.getInt64(inner_size()), "j", [&](IRBuilder<> &jb, Value *j) {
          emit_loop(jb, jb.getInt64(0), n, "r", [&](IRBuilder<> &lb, Value *r) {
            std::vector<Value *> br = tile_row(lb, sub, r);
            std::vector<Value *> cur = load_known(lb, r);
            for (int32_t red : reductions) {
              const Node &node = k_.nodes[size_t(red)];
              Value *x = element_value(lb, node.args[0], p, br, j, j, cur);
              if (tile_wide_[size_t(red)]) {
                Value *slot = tile_wide_slot(lb, size_t(red), r);
                lb.CreateStore(lb.CreateFAdd(lb.CreateLoad(b_double(), slot), widen(lb, x)), slot);
                continue;
              }
              Value *slot = tile_slot(lb, size_t(red), r);
              Value *acc = lb.CreateLoad(value_type(c_, node.dtype), slot);
              lb.CreateStore(combine(lb, node, acc, x), slot);
            }
            std::vector<std::pair<size_t, Value *>> stores; // all values before any store, as emit_sub_row
            for (size_t o = 0; o < k_.outputs.size(); ++o)
              if (plan_.output_pass[o] == p)
                stores.emplace_back(o, element_value(lb, k_.outputs[o].value, p, br, j, j, cur));
            for (auto [o, v] : stores) store_output(lb, o, br, j, v);
          });
        }, LoopMD::Nest);
      }, LoopMD::Nest);
    }
    over_rows("finish.r", [&](IRBuilder<> &lb, Value *r) {
      for (int32_t red : reductions) {
        const Node &node = k_.nodes[size_t(red)];
        Value *slot = tile_slot(lb, size_t(red), r);
        Value *acc = tile_wide_[size_t(red)]
                         ? lb.CreateFPTrunc(lb.CreateLoad(b_double(), tile_wide_slot(lb, size_t(red), r)),
                                            value_type(c_, node.dtype))
                         : lb.CreateLoad(value_type(c_, node.dtype), slot);
        lb.CreateStore(finish(lb, node, acc), slot);
      }
    });
    for (int32_t red : reductions) known_[size_t(red)] = 1;
  }

  // Static allocas in the entry block: one row per materialized node, reused by
  // every row of the chunk. Probed, so that an overflow faults on the guard page.
  void allocate_scratch(IRBuilder<> &b, llvm::Function *f) {
    scratch_.assign(k_.nodes.size(), nullptr);
    if (plan_.scratch_bytes == 0) return;
    f->addFnAttr("probe-stack", "inline-asm");
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      if (!plan_.materialized(int32_t(i))) continue;
      auto *a = b.CreateAlloca(value_type(c_, k_.nodes[i].dtype), b.getInt64(row_length()), "scratch");
      a->setAlignment(llvm::Align(64));
      scratch_[i] = a;
    }
  }

  void emit_row(IRBuilder<> &b, Value *o) {
    wide_.assign(k_.nodes.size(), nullptr);
    shift_.assign(k_.nodes.size(), nullptr);
    std::vector<Value *> bases = row_bases(b, o);
    std::vector<Value *> row(k_.nodes.size(), nullptr); // per-row values known so far
    emit_stage(b, 0, bases, row);
    for (int p = 0; p < plan_.passes; ++p) {
      emit_pass(b, p, bases, row);
      if (p == 0 && plan_.passes >= 2 && row_rank_ == 1) {
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
      // A non-temporal store of a line brought in by a prefetch writes it back
      // and drops it: the prefetch would only add traffic.
      bool nt = i >= k_.inputs.size() && streamed_[i - k_.inputs.size()];
      bool in_place = i >= k_.inputs.size() && k_.aliased_input(i - k_.inputs.size()) >= 0; // its input's lines
      if (st.back() == 1 && moves && bytes <= kMaxPrefetchBytes && !in_place && !nt)
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
      if (row[i]) continue; // a row block computed it before its pass
      row[i] = n.op == KOp::Load ? load_element(b, n, bases, b.getInt64(0)) : emit_row_node(b, n, row, wide_);
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) {
      int32_t v = k_.outputs[o].value;
      if (plan_.output_pass[o] < 0 && plan_.level[v] == s) store_output(b, o, bases, b.getInt64(0), row[v]);
    }
  }

  // One walk over the row: folds the reductions of pass p (vector partial sums:
  // the combines carry `reassoc`, nothing else does), writes scratch rows and
  // element-wise outputs. The row length is a constant, so an empty row
  // simply has no loop. A row of several dims is walked as sub-rows of its last
  // dim, the accumulators carried from one to the next.
  void emit_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, std::vector<Value *> &row) {
    std::vector<int32_t> reductions;
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].op == KOp::Reduce && plan_.level[k_.nodes[i].args[0]] == p)
        reductions.push_back(int32_t(i));
    std::vector<Value *> acc;
    for (int32_t r : reductions) {
      const Node &red = k_.nodes[size_t(r)];
      acc.push_back(accum_of(red) == Accum::Plain ? reduce_identity(red) : wide_identity());
      if (accum_of(red) == Accum::Shifted && row_length() > 0) shift_[size_t(r)] = row_shift(b, red, bases);
    }
    std::vector<int> nan_flag = add_nan_flags(b, reductions, acc);
    if (row_length() == 0) {
      finish_pass(b, reductions, nan_flag, acc, row);
      return;
    }
    if (row_rank_ == 1) {
      acc = emit_sub_row_blocks(b, p, bases, nullptr, reductions, nan_flag, acc, row);
    } else {
      emit_carried_loop(b, b.getInt64(sub_rows()), "r", acc, [&](IRBuilder<> &rb, Value *r, std::vector<Value *> &a) {
        std::vector<Value *> sub = offset_bases(rb, bases, r, outer_rank(), rank() - 1);
        Value *first = rb.CreateMul(r, rb.getInt64(inner_size()), "r.first", true, true);
        a = emit_sub_row_blocks(rb, p, sub, first, reductions, nan_flag, a, row);
      }, LoopMD::Nest);
    }
    finish_pass(b, reductions, nan_flag, acc, row);
  }

  // ---- float sums. Folding a long row element by element into float32
  // partial sums (the vectorizer's 64 lanes) loses digits as the partial sums
  // grow: 4M values were off by 6e-4. So, as the eager kernels do, every float
  // sum keeps vector partial sums in its own type over blocks of kSumBlock
  // elements (16 adds per lane), and each block's total is added to a double:
  // the error grows with the block, not the row. One horizontal add per block
  // costs ~2% of a 1024-element block. (Double lanes instead, each element
  // extended, made an in-cache [128, 1024] sum 1.5x slower and layer_norm 1.2x.)
  // - Shifted: a float32 sum of values loaded from memory whose result a
  //   later reduction of the row uses (the mean in var, layer_norm and batch
  //   norm: sum((x - mean)^2)) folds x - K, K = the row's first element (0 if
  //   it is not below 2^100 in magnitude: inf, NaN, or so large that x - K
  //   could overflow), and adds L * K in double at the end (exact for
  //   L < 2^29). A constant row then sums exactly, its mean (scaled in double,
  //   exact_mean) is the constant itself, and the variance 0, as eagerly
  //   (2.3e-13 for a row of 4.7 before); for other rows, shifted data are
  //   the usual way to keep a variance's mean accurate. The cost: the error
  //   bound is eps * sum|x - K| instead of eps * sum|x|, so a row whose
  //   first element is an outlier (1e30 among values near 1) gets a mean
  //   with fewer digits (about L * |K| / |sum| times eps); hence not for a
  //   sum that is only a result.
  // - Blocked: any other float sum (sum(exp(x - max)), sum((x - mean)^2),
  //   float64 sums).
  // Tiles (rows down columns) accumulate float32 sums in double (tile_wide_).
  enum class Accum : uint8_t { Plain, Shifted, Blocked };
  static constexpr int64_t kSumBlock = 1024;

  Accum accum_of(const Node &r) const {
    if (r.op != KOp::Reduce || r.combine != KOp::Add || !is_floating(r.dtype)) return Accum::Plain;
    bool loaded = k_.nodes[size_t(r.args[0])].op == KOp::Load;
    bool centers = !centering_.empty() && centering_[size_t(&r - k_.nodes.data())];
    return r.dtype == DType::Float32 && loaded && centers ? Accum::Shifted : Accum::Blocked;
  }

  // Per node: a reduction whose result the operand of another reduction uses.
  std::vector<uint8_t> reductions_used_by_reductions() const {
    std::vector<uint8_t> used(k_.nodes.size(), 0);
    for (const Node &q : k_.nodes) {
      if (q.op != KOp::Reduce) continue;
      std::vector<uint8_t> seen(k_.nodes.size(), 0);
      std::vector<int32_t> stack = {q.args[0]};
      while (!stack.empty()) {
        size_t n = size_t(stack.back());
        stack.pop_back();
        if (seen[n]) continue;
        seen[n] = 1;
        if (k_.nodes[n].op == KOp::Reduce) {
          used[n] = 1;
          continue;
        }
        for (int a = 0; a < op_arity(k_.nodes[n].op); ++a) stack.push_back(k_.nodes[n].args[a]);
      }
    }
    return used;
  }

  // K of a Shifted sum (see above): the row's first element of its operand
  // when its magnitude is below 2^100, else 0.
  Value *row_shift(IRBuilder<> &b, const Node &r, const std::vector<Value *> &bases) {
    Value *first = load_element(b, k_.nodes[size_t(r.args[0])], bases, b.getInt64(0));
    Value *small = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, first),
                                   llvm::ConstantFP::get(first->getType(), 0x1p100));
    return b.CreateSelect(small, first, llvm::ConstantFP::get(first->getType(), 0.0), "shift");
  }
  Value *wide_identity() { return llvm::ConstantFP::getNegativeZero(b_double()); }
  llvm::Type *b_double() { return llvm::Type::getDoubleTy(c_); }
  Value *widen(IRBuilder<> &b, Value *v) { return v->getType()->isDoubleTy() ? v : b.CreateFPExt(v, b_double()); }

  // A row's run of the last dim (emit_sub_row) in blocks of kSumBlock when some
  // float sum is Shifted or Blocked; `acc` and the result hold those sums in double.
  std::vector<Value *> emit_sub_row_blocks(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                           const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                                           std::vector<Value *> acc, const std::vector<Value *> &row) {
    bool blocked = std::any_of(reductions.begin(), reductions.end(),
                               [&](int32_t r) { return accum_of(k_.nodes[size_t(r)]) != Accum::Plain; });
    int64_t n = inner_size();
    if (!blocked) return emit_sub_row(b, p, bases, first, b.getInt64(0), n, reductions, nan_flag, acc, row);
    int64_t full = n / kSumBlock, rest = n % kSumBlock;
    if (full == 1) {
      acc = emit_sum_block(b, p, bases, first, b.getInt64(0), kSumBlock, reductions, nan_flag, acc, row);
    } else if (full > 1) {
      emit_carried_loop(b, b.getInt64(full), "sumblock", acc, [&](IRBuilder<> &lb, Value *c, std::vector<Value *> &a) {
        Value *lo = lb.CreateMul(c, lb.getInt64(kSumBlock), "sumblock.lo", true, true);
        a = emit_sum_block(lb, p, bases, first, lo, kSumBlock, reductions, nan_flag, a, row);
      }, LoopMD::Nest);
    }
    if (rest > 0)
      acc = emit_sum_block(b, p, bases, first, b.getInt64(full * kSumBlock), rest, reductions, nan_flag, acc, row);
    return acc;
  }

  // Elements [lo, lo + count) of the run: Shifted and Blocked sums start from
  // their identity and their block total is added to the double in `acc`.
  std::vector<Value *> emit_sum_block(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                      Value *lo, int64_t count, const std::vector<int32_t> &reductions,
                                      const std::vector<int> &nan_flag, const std::vector<Value *> &acc,
                                      const std::vector<Value *> &row) {
    std::vector<Value *> part = acc;
    for (size_t i = 0; i < reductions.size(); ++i)
      if (accum_of(k_.nodes[size_t(reductions[i])]) != Accum::Plain) part[i] = reduce_identity(k_.nodes[size_t(reductions[i])]);
    part = emit_sub_row(b, p, bases, first, lo, count, reductions, nan_flag, part, row);
    for (size_t i = 0; i < reductions.size(); ++i)
      if (accum_of(k_.nodes[size_t(reductions[i])]) != Accum::Plain) part[i] = b.CreateFAdd(acc[i], widen(b, part[i]));
    return part;
  }

  // A mean's scaling (reduce_mean: sum * (1 / L)) applied to the double sum
  // before rounding to float32 (one rounding, as eager's mean), or null when `n` is not sum * constant of a
  // sum held in double (`wide`: per node, its double sum or null).
  Value *exact_mean(IRBuilder<> &b, const Node &n, const std::vector<Value *> &wide) {
    if (n.op != KOp::Mul || n.dtype != DType::Float32 || wide.empty()) return nullptr;
    for (int s = 0; s < 2; ++s) {
      int32_t sum = n.args[s], scale = n.args[1 - s];
      if (!wide[size_t(sum)] || k_.nodes[size_t(scale)].op != KOp::Const) continue;
      // The kernel holds 1 / L rounded to float32 (2.5e-8 off for L = 1000,
      // enough to move the mean of a constant row by an ulp): use 1 / L itself.
      double factor = k_.nodes[size_t(scale)].fvalue, inverse = 1.0 / double(k_.row_length());
      if (factor == double(float(inverse))) factor = inverse;
      Value *total = b.CreateFAdd(wide[size_t(sum)], llvm::ConstantFP::get(b_double(), 0.0)); // -0 -> +0, see finish
      Value *m = b.CreateFMul(total, llvm::ConstantFP::get(b_double(), factor));
      return b.CreateFPTrunc(m, value_type(c_, n.dtype));
    }
    return nullptr;
  }

  // emit_node for a per-row value (see exact_mean).
  Value *emit_row_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals,
                       const std::vector<Value *> &wide) {
    if (Value *m = exact_mean(b, n, wide)) return m;
    return emit_node(b, n, vals);
  }

  // A float max/min over a row folds with maxnum/minnum flagged no-NaNs (one
  // vmaxps, where llvm.maximum costs six instructions on AVX-512 and made
  // softmax's max pass ~10% of W2's time) and keeps "saw a NaN" in a separate
  // i1 accumulator, an or-reduction the vectorizer also widens. The flagged fold
  // is poison once a NaN went in, but then the flag is set and finish_pass
  // selects NaN instead. The sign of a zero maximum is unspecified (-0 or +0,
  // equal as numbers); torch does not order them either.
  static bool folds_ignoring_nan(const Node &r) {
    return is_floating(r.dtype) && (r.combine == KOp::Max || r.combine == KOp::Min);
  }

  // Appends a false NaN flag to `acc` for each reduction that folds ignoring
  // NaNs; returns, per reduction, the index of its flag in `acc` (-1: none).
  std::vector<int> add_nan_flags(IRBuilder<> &b, const std::vector<int32_t> &reductions, std::vector<Value *> &acc) {
    std::vector<int> flag(reductions.size(), -1);
    for (size_t i = 0; i < reductions.size(); ++i) {
      if (!folds_ignoring_nan(k_.nodes[reductions[i]])) continue;
      flag[i] = int(acc.size());
      acc.push_back(b.getFalse());
    }
    return flag;
  }

  // acc[i] and, with a flag, acc[flag] after element value x.
  void fold(IRBuilder<> &b, const Node &r, int flag, std::vector<Value *> &acc, size_t i, Value *x) {
    if (flag < 0) {
      acc[i] = combine(b, r, acc[i], x);
      return;
    }
    IRBuilder<>::FastMathFlagGuard guard(b);
    llvm::FastMathFlags fmf;
    fmf.setNoNaNs();
    fmf.setNoSignedZeros();
    b.setFastMathFlags(fmf);
    auto id = r.combine == KOp::Max ? llvm::Intrinsic::maxnum : llvm::Intrinsic::minnum;
    acc[i] = b.CreateBinaryIntrinsic(id, acc[i], x);
    b.clearFastMathFlags();
    acc[size_t(flag)] = b.CreateOr(acc[size_t(flag)], b.CreateFCmpUNO(x, x));
  }

  void finish_pass(IRBuilder<> &b, const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                   const std::vector<Value *> &acc, std::vector<Value *> &row) {
    for (size_t a = 0; a < reductions.size(); ++a) {
      const Node &r = k_.nodes[reductions[a]];
      Value *sum = acc[a];
      if (Value *k = shift_[size_t(reductions[a])]) // + L * K (exact in double, see Accum)
        sum = b.CreateFAdd(sum, b.CreateFMul(widen(b, k), llvm::ConstantFP::get(b_double(), double(row_length()))));
      if (accum_of(r) != Accum::Plain) {
        wide_[size_t(reductions[a])] = sum;
        if (r.dtype != DType::Float64) sum = b.CreateFPTrunc(sum, value_type(c_, r.dtype));
      }
      Value *v = finish(b, r, sum);
      if (nan_flag[a] >= 0)
        v = b.CreateSelect(acc[size_t(nan_flag[a])], llvm::ConstantFP::getNaN(v->getType()), v);
      row[reductions[a]] = v;
    }
  }

  // Loop metadata on a loop's latch (LoopMD).
  void set_loop_md(llvm::BranchInst *latch, LoopMD kind) {
    if (kind == LoopMD::None) return;
    std::vector<llvm::Metadata *> ops = {nullptr,
                                         llvm::MDNode::get(c_, {llvm::MDString::get(c_, "llvm.loop.unroll.disable")})};
    if (kind == LoopMD::VectorRolled)
      ops.push_back(llvm::MDNode::get(c_, {llvm::MDString::get(c_, "llvm.loop.interleave.count"),
                                           llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(
                                               llvm::Type::getInt32Ty(c_), 4))}));
    auto *md = llvm::MDNode::getDistinct(c_, ops);
    md->replaceOperandWith(0, md);
    latch->setMetadata(llvm::LLVMContext::MD_loop, md);
  }

  // for (iv = 0; iv < count; ++iv) body(iv, values), where `values` are carried
  // from one iteration to the next (in: their start; out: after the last).
  // count > 0. Leaves `b` after the loop; `md`: see LoopMD.
  template <class Body>
  void emit_carried_loop(IRBuilder<> &b, Value *count, const std::string &name, std::vector<Value *> &values,
                         Body &&body, LoopMD md = LoopMD::None) {
    llvm::Function *f = b.GetInsertBlock()->getParent();
    llvm::BasicBlock *pre = b.GetInsertBlock();
    auto *loop = llvm::BasicBlock::Create(c_, name, f);
    auto *exit = llvm::BasicBlock::Create(c_, name + ".exit", f);
    b.CreateBr(loop);
    b.SetInsertPoint(loop);
    llvm::PHINode *iv = b.CreatePHI(b.getInt64Ty(), 2, name);
    iv->addIncoming(b.getInt64(0), pre);
    std::vector<llvm::PHINode *> phis;
    for (Value *v : values) {
      phis.push_back(b.CreatePHI(v->getType(), 2, "acc"));
      phis.back()->addIncoming(v, pre);
    }
    std::vector<Value *> next(phis.begin(), phis.end());
    body(b, iv, next);
    Value *iv_next = b.CreateAdd(iv, b.getInt64(1), name + ".next", true, true);
    iv->addIncoming(iv_next, b.GetInsertBlock());
    for (size_t a = 0; a < phis.size(); ++a) phis[a]->addIncoming(next[a], b.GetInsertBlock());
    set_loop_md(b.CreateCondBr(b.CreateICmpSLT(iv_next, count), loop, exit), md);
    b.SetInsertPoint(exit);
    values = next;
  }

  // The inner loop of pass p over elements [lo, lo + count) of one run of the
  // last dim, from `bases`; `first` is the run's first element within the row
  // (its scratch index; null = 0). Returns the accumulators of `reductions`
  // after it (not finished).
  std::vector<Value *> emit_sub_row(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                    Value *lo, int64_t count, const std::vector<int32_t> &reductions,
                                    const std::vector<int> &nan_flag, std::vector<Value *> acc,
                                    const std::vector<Value *> &row) {
    emit_carried_loop(b, b.getInt64(count), "pass" + std::to_string(p), acc,
                      [&](IRBuilder<> &lb, Value *jj, std::vector<Value *> &a) {
                        Value *j = llvm::isa<llvm::Constant>(lo) && llvm::cast<llvm::Constant>(lo)->isNullValue()
                                       ? jj
                                       : lb.CreateAdd(lo, jj, "j", true, true);
                        std::vector<Value *> cur = row; // element values of this pass at j
                        Value *slot = first ? lb.CreateAdd(first, j, "slot", true, true) : j;
                        for (size_t i = 0; i < reductions.size(); ++i) {
                          const Node &r = k_.nodes[reductions[i]];
                          Value *x = element_value(lb, r.args[0], p, bases, j, slot, cur);
                          if (Value *k = shift_[size_t(reductions[i])]) x = lb.CreateFSub(x, k); // see Accum
                          fold(lb, r, nan_flag[i], a, i, x);
                        }
                        // Every value of element j before any store to it: an output written in
                        // place must not change what a later output of this pass loads.
                        std::vector<std::pair<size_t, Value *>> stores;
                        for (size_t o = 0; o < k_.outputs.size(); ++o)
                          if (plan_.output_pass[o] == p)
                            stores.emplace_back(o, element_value(lb, k_.outputs[o].value, p, bases, j, slot, cur));
                        for (auto [o, v] : stores) store_output(lb, o, bases, j, v);
                      },
                      std::any_of(nan_flag.begin(), nan_flag.end(), [](int f) { return f >= 0; }) ? LoopMD::VectorRolled
                                                                                                  : LoopMD::None);
    return acc;
  }

  // Node `id` at element j of pass p (element `slot` of the row's scratch):
  // per-row values are in `cur` already; materialized nodes are computed once
  // (their first pass) and read back after.
  Value *element_value(IRBuilder<> &b, int32_t id, int p, const std::vector<Value *> &bases, Value *j, Value *slot,
                       std::vector<Value *> &cur) {
    if (cur[id]) return cur[id];
    const Node &n = k_.nodes[id];
    llvm::Type *ty = value_type(c_, n.dtype);
    int home = plan_.scratch_pass[id];
    if (home >= 0 && home < p) return cur[id] = b.CreateLoad(ty, b.CreateInBoundsGEP(ty, scratch_[id], slot));
    for (int a = 0; a < op_arity(n.op); ++a) element_value(b, n.args[a], p, bases, j, slot, cur);
    cur[id] = n.op == KOp::Load ? load_element(b, n, bases, j) : emit_node(b, n, cur);
    if (home == p) b.CreateStore(cur[id], b.CreateInBoundsGEP(ty, scratch_[id], slot));
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

  // An element divided by a per-row value that comes from a reduction
  // (softmax's e / sum(e)): multiplied by its reciprocal instead, which LICM
  // computes once per row. A vector division costs as much as the exp on
  // AVX-512; eager softmax also multiplies by 1 / sum (at most 1 ulp apart).
  bool divides_by_row_statistic(const Node &n) const {
    if (plan_.per_row.empty()) return false; // not a row kernel
    return plan_.per_row[size_t(n.args[1])] && plan_.level[size_t(n.args[1])] >= 1 && !plan_.per_row[size_t(n.args[0])];
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
  size_t row_rank_ = 1;            // dims of a row (kernels with reductions), see collapse_outer_dims
  std::vector<Value *> bufs_;
  std::vector<uint8_t> streamed_; // per output: stored non-temporally
  bool any_streamed_ = false;
  RowPlan plan_;                   // kernels with reductions only
  bool tiled_ = false;             // rows evaluated in tiles (see wants_tiles)
  std::vector<Value *> tile_;      // tiles: per per-row node, its value for each row of the tile
  std::vector<uint8_t> known_;     // tiles: per node, whether tile_ holds it already
  std::vector<Value *> scratch_;   // per node: its scratch row, or null
  std::vector<Value *> wide_;      // row by row: per Shifted/Blocked sum, its double total in this row (Accum)
  std::vector<Value *> shift_;     // row by row: per Shifted sum, its K in this row (Accum)
  std::vector<uint8_t> centering_; // per node: reductions_used_by_reductions()
  std::vector<Value *> tile_wide_; // tiles: per float32 sum, its double accumulator per row of the tile
  int64_t block_ = 0;              // rows per row block (see plan_row_block), 0 = row by row
  std::vector<uint8_t> invariant_; // row blocks: per node, the same in every row
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

// The kernel restricted to dims [from, to) of its iteration space.
KernelDesc dims_slice(const KernelDesc &in, size_t from, size_t to) {
  KernelDesc k = in;
  auto cut = [&](std::vector<int64_t> &v) { v = std::vector<int64_t>(v.begin() + from, v.begin() + to); };
  cut(k.shape);
  for (auto &b : k.inputs) cut(b.strides);
  for (auto &o : k.outputs) cut(o.buffer.strides);
  k.row_rank = 1;
  return k;
}

// For row reductions the row dims stay apart from the outer ones. A row of one
// dim stays as it is (even of size 1); a row of several dims is collapsed as
// above among itself (batch norm's [N, H, W] row of an NCHW x becomes [N, H*W]),
// and may become a one-dim row. The outer dims are collapsed as above, and a
// kernel without outer dims gets an outer [1], so that the row code always has
// an outer loop.
KernelDesc collapse_outer_dims(const KernelDesc &in) {
  size_t rank = in.shape.size(), first_row = rank - size_t(in.row_rank);
  KernelDesc outer = collapse_dims(dims_slice(in, 0, first_row));
  KernelDesc row = dims_slice(in, first_row, rank);
  if (in.row_rank > 1) row = collapse_dims(row);
  KernelDesc k = in;
  size_t outer_rank = std::max<size_t>(outer.shape.size(), 1); // the [1] of a kernel without outer dims
  k.shape = outer.shape;
  k.shape.resize(outer_rank, 1);
  k.shape.insert(k.shape.end(), row.shape.begin(), row.shape.end());
  k.row_rank = int32_t(row.shape.size());
  auto fix = [&](std::vector<int64_t> &strides, const std::vector<int64_t> &o, const std::vector<int64_t> &r) {
    strides = o;
    strides.resize(outer_rank, 0);
    strides.insert(strides.end(), r.begin(), r.end());
  };
  for (size_t b = 0; b < k.inputs.size(); ++b) fix(k.inputs[b].strides, outer.inputs[b].strides, row.inputs[b].strides);
  for (size_t o = 0; o < k.outputs.size(); ++o)
    fix(k.outputs[o].buffer.strides, outer.outputs[o].buffer.strides, row.outputs[o].buffer.strides);
  return k;
}

} // namespace

void mark_streamed_stores(llvm::Module &m) {
  unsigned kind = m.getContext().getMDKindID(kStreamedBufferMD);
  llvm::MDNode *one = llvm::MDNode::get(
      m.getContext(), llvm::ConstantAsMetadata::get(llvm::ConstantInt::get(llvm::Type::getInt32Ty(m.getContext()), 1)));
  for (llvm::Function &f : m)
    for (llvm::BasicBlock &bb : f)
      for (llvm::Instruction &inst : bb) {
        auto *st = llvm::dyn_cast<llvm::StoreInst>(&inst);
        if (!st) continue;
        auto *base = llvm::dyn_cast<llvm::LoadInst>(llvm::getUnderlyingObject(st->getPointerOperand()));
        if (base && base->getMetadata(kind)) st->setMetadata(llvm::LLVMContext::MD_nontemporal, one);
      }
}

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
