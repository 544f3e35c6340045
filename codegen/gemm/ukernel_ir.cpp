// Emits the GEMM micro-kernel described in codegen/gemm/ukernel.h.
//
// Shape of the code (why): the MR x nv accumulators are SSA values carried
// through the k loop as phis, so the register allocator keeps them in vector
// registers for the whole loop (MR * nv + nv + 1 <= 32 zmm on AVX-512). Each
// k step loads nv vectors of B and broadcasts MR scalars of A, which the x86
// backend folds into the FMA's memory operand ({1to16} broadcast), so a step
// is nv loads + MR * nv FMAs. The loop is unrolled `unroll` times with a
// one-step tail loop, because kc is a run-time value.
//
// With an epilogue (gemm.h, Epilogue), each store variant evaluates the
// expression on the final values of the tile, vector by vector, before the
// stores: a value that does not vary along the rows (a bias, or anything
// computed from per-column vectors only) is loaded or computed once per
// column vector, one that does not vary along the columns once per row.
#include "codegen/gemm/ukernel.h"

#include <map>
#include <tuple>
#include <vector>

#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Intrinsics.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>

#include "codegen/gemm/gemm.h"
#include "codegen/lower.h"
#include "codegen/lower_vector.h"
#include "codegen/module_flags.h"
#include "runtime/error.h"

namespace kiln::codegen::gemm {

std::string TileConfig::key() const {
  return std::string("gemm-ukr-v3;") + (f64 ? "f64" : "f32") + ";mr=" + std::to_string(mr) +
         ";nv=" + std::to_string(nv) + ";lanes=" + std::to_string(lanes) + ";unroll=" + std::to_string(unroll) +
         (a_rows ? ";a=rows" : "");
}

namespace {

// What the generator takes: elementwise nodes over inputs and outputs of C's type.
void check_epilogue(const TileConfig &cfg, const Epilogue &epi) {
  const KernelDesc &k = epi.expr;
  const DType t = cfg.f64 ? DType::Float64 : DType::Float32;
  KILN_CHECK(epi.inputs.size() == k.inputs.size(), "gemm epilogue: ", epi.inputs.size(), " operand kinds for ",
             k.inputs.size(), " inputs");
  for (size_t q = 0; q < k.inputs.size(); ++q)
    KILN_CHECK(epi.inputs[q] != Epilogue::Operand::Acc || k.inputs[q].dtype == t, "gemm epilogue: a ",
               k.inputs[q].dtype, " contraction value in a ", t, " kernel");
  for (const OutputSpec &o : k.outputs) {
    KILN_CHECK(o.buffer.dtype == t, "gemm epilogue: a ", o.buffer.dtype, " output");
    KILN_CHECK(o.value >= 0 && size_t(o.value) < k.nodes.size(), "gemm epilogue: output of a bad node");
  }
  for (const Node &n : k.nodes) {
    KILN_CHECK(n.op != KOp::Reduce, "gemm epilogue: a reduction");
    KILN_CHECK(n.op != KOp::Load || (n.input >= 0 && size_t(n.input) < k.inputs.size()), "gemm epilogue: bad load");
  }
}

using Acc = std::vector<llvm::Value *>; // row-major: acc[i * nv + j]

class UkernelBuilder {
public:
  UkernelBuilder(const TileConfig &cfg, llvm::Module &m, const LowerTarget &target, const Epilogue *epi)
      : cfg_(cfg), c_(m.getContext()), m_(m), b_(c_), target_(target), epi_(epi) {
    elt_ = cfg.f64 ? b_.getDoubleTy() : b_.getFloatTy();
    vec_ = llvm::FixedVectorType::get(elt_, cfg.lanes);
    vec_align_ = llvm::Align(std::min<uint64_t>(64, cfg.lanes * (cfg.f64 ? 8 : 4)));
    elt_align_ = llvm::Align(cfg.f64 ? 8 : 4);
  }

  void build(const std::string &symbol) {
    auto *ptr = b_.getPtrTy();
    auto *i64 = b_.getInt64Ty();
    std::vector<llvm::Type *> params = {ptr, ptr, ptr, i64, i64, i64, elt_, elt_};
    if (epi_) params.insert(params.end(), {ptr, ptr, i64, i64});
    if (cfg_.a_rows) params.push_back(i64); // lda, last
    auto *fty = llvm::FunctionType::get(b_.getVoidTy(), params, false);
    f_ = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
    f_->addFnAttr(llvm::Attribute::NoUnwind);
    if (!target_.cpu.empty()) f_->addFnAttr("target-cpu", target_.cpu);
    if (!target_.features.empty()) f_->addFnAttr("target-features", target_.features);
    for (unsigned i = 0; i < 3; ++i) f_->addParamAttr(i, llvm::Attribute::NoAlias);
    a_ = f_->getArg(0), bp_ = f_->getArg(1), cp_ = f_->getArg(2);
    kc_ = f_->getArg(3), ldc_ = f_->getArg(4), n_ = f_->getArg(5);
    alpha_ = f_->getArg(6), beta_ = f_->getArg(7);
    if (epi_) {
      eptrs_ = f_->getArg(8), elds_ = f_->getArg(9), erow_ = f_->getArg(10), ecol_ = f_->getArg(11);
      expr_ = std::make_unique<VectorExpr>(epi_->expr, m_, target_);
    }
    if (cfg_.a_rows) lda_ = f_->getArg(f_->arg_size() - 1);
    fma_ = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::fmuladd, {vec_});
    emit_body();
  }

private:
  llvm::BasicBlock *block(const char *name) { return llvm::BasicBlock::Create(c_, name, f_); }

  Acc zeros() { return Acc(size_t(cfg_.mr * cfg_.nv), llvm::Constant::getNullValue(vec_)); }

  // One k step at index p: acc[i][j] += A[p, i] * B[p, j..].
  Acc step(const Acc &acc, llvm::Value *p) {
    llvm::Value *brow = b_.CreateMul(p, b_.getInt64(cfg_.nr()));
    std::vector<llvm::Value *> bv(cfg_.nv);
    for (int j = 0; j < cfg_.nv; ++j) {
      llvm::Value *at = b_.CreateGEP(elt_, bp_, b_.CreateAdd(brow, b_.getInt64(j * cfg_.lanes)));
      bv[j] = b_.CreateAlignedLoad(vec_, at, vec_align_);
    }
    llvm::Value *arow = b_.CreateMul(p, b_.getInt64(cfg_.mr));
    Acc out(acc.size());
    for (int i = 0; i < cfg_.mr; ++i) {
      llvm::Value *at = cfg_.a_rows ? b_.CreateGEP(elt_, a_row_[size_t(i)], p)
                                    : b_.CreateGEP(elt_, a_, b_.CreateAdd(arow, b_.getInt64(i)));
      llvm::Value *s = b_.CreateVectorSplat(cfg_.lanes, b_.CreateAlignedLoad(elt_, at, elt_align_));
      for (int j = 0; j < cfg_.nv; ++j) out[i * cfg_.nv + j] = b_.CreateCall(fma_, {s, bv[j], acc[i * cfg_.nv + j]});
    }
    return out;
  }

  std::vector<llvm::PHINode *> acc_phis(const Acc &init, llvm::BasicBlock *from) {
    std::vector<llvm::PHINode *> phis(init.size());
    for (size_t q = 0; q < init.size(); ++q) {
      phis[q] = b_.CreatePHI(vec_, 2);
      phis[q]->addIncoming(init[q], from);
    }
    return phis;
  }

  static Acc values(const std::vector<llvm::PHINode *> &phis) { return Acc(phis.begin(), phis.end()); }

  static void add_incoming(std::vector<llvm::PHINode *> &phis, const Acc &vals, llvm::BasicBlock *from) {
    for (size_t q = 0; q < phis.size(); ++q) phis[q]->addIncoming(vals[q], from);
  }

  // A loop over p in [start, end) by `by` steps (end - start a multiple of
  // `by`, and > 0); returns the accumulators after it, in block `exit`.
  Acc loop(const Acc &init, llvm::Value *start, llvm::Value *end, int by, llvm::BasicBlock *body,
           llvm::BasicBlock *exit) {
    llvm::BasicBlock *from = b_.GetInsertBlock();
    b_.CreateBr(body);
    b_.SetInsertPoint(body);
    llvm::PHINode *p = b_.CreatePHI(b_.getInt64Ty(), 2);
    p->addIncoming(start, from);
    auto phis = acc_phis(init, from);
    Acc acc = values(phis);
    for (int u = 0; u < by; ++u) acc = step(acc, b_.CreateAdd(p, b_.getInt64(u)));
    llvm::Value *next = b_.CreateAdd(p, b_.getInt64(by));
    p->addIncoming(next, b_.GetInsertBlock());
    add_incoming(phis, acc, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpULT(next, end), body, exit);
    return acc;
  }

  // Merges accumulators arriving from two predecessors at the current block.
  Acc merge(const Acc &x, llvm::BasicBlock *bx, const Acc &y, llvm::BasicBlock *by) {
    Acc out(x.size());
    for (size_t q = 0; q < x.size(); ++q) {
      llvm::PHINode *phi = b_.CreatePHI(vec_, 2);
      phi->addIncoming(x[q], bx);
      phi->addIncoming(y[q], by);
      out[q] = phi;
    }
    return out;
  }

  void emit_body() {
    llvm::BasicBlock *entry = block("entry"), *main_pre = block("main.pre"), *main = block("main"),
                     *mid = block("mid"), *tail_pre = block("tail.pre"), *tail = block("tail"),
                     *store = block("store");
    b_.SetInsertPoint(entry);
    prefetch_c();
    a_row_.clear();
    if (cfg_.a_rows)
      for (int i = 0; i < cfg_.mr; ++i) a_row_.push_back(b_.CreateGEP(elt_, a_, b_.CreateMul(b_.getInt64(i), lda_)));
    const int u = cfg_.unroll;
    llvm::Value *kmain = b_.CreateSub(kc_, b_.CreateSRem(kc_, b_.getInt64(u)));
    const Acc zero = zeros();
    b_.CreateCondBr(b_.CreateICmpSGT(kmain, b_.getInt64(0)), main_pre, mid);

    b_.SetInsertPoint(main_pre);
    Acc after_main = loop(zero, b_.getInt64(0), kmain, u, main, mid);

    b_.SetInsertPoint(mid);
    Acc at_mid = merge(zero, entry, after_main, main);
    b_.CreateCondBr(b_.CreateICmpSLT(kmain, kc_), tail_pre, store);

    b_.SetInsertPoint(tail_pre);
    Acc after_tail = loop(at_mid, kmain, kc_, 1, tail, store);

    b_.SetInsertPoint(store);
    emit_stores(merge(at_mid, mid, after_tail, tail));
  }

  // Asks for the C tile's cache lines (for writing) before the k loop: the
  // tile is read and written after it, and a C larger than the caches (2048^2)
  // otherwise stalls each call on mr DRAM misses (~10% of a 2048^3 product).
  // Prefetches never fault, so lines past column n or the row end are harmless.
  void prefetch_c() {
    llvm::Function *pf = llvm::Intrinsic::getDeclaration(&m_, llvm::Intrinsic::prefetch, {b_.getPtrTy()});
    const int64_t row_bytes = int64_t(cfg_.nr()) * (cfg_.f64 ? 8 : 4);
    for (int i = 0; i < cfg_.mr; ++i) {
      llvm::Value *row = b_.CreateGEP(b_.getInt8Ty(), cp_, b_.CreateMul(b_.getInt64(i), b_.CreateShl(ldc_, cfg_.f64 ? 3 : 2)));
      for (int64_t off = 0; off < row_bytes + 63; off += 64) {
        llvm::Value *at = b_.CreateGEP(b_.getInt8Ty(), row, b_.getInt64(std::min(off, row_bytes - 1)));
        b_.CreateCall(pf, {at, b_.getInt32(1), b_.getInt32(3), b_.getInt32(1)});
      }
    }
  }

  llvm::Value *splat(llvm::Value *x) { return b_.CreateVectorSplat(cfg_.lanes, x); }

  // Lanes j*lanes + l < n of vector j.
  llvm::Value *lane_mask(int j) {
    std::vector<llvm::Constant *> idx;
    for (int l = 0; l < cfg_.lanes; ++l) idx.push_back(b_.getInt64(int64_t(j) * cfg_.lanes + l));
    return b_.CreateICmpSLT(llvm::ConstantVector::get(idx), splat(n_));
  }

  // Stores alpha * acc (+ beta * C) into rows i < MR, columns < n (all NR
  // columns when `full`); `with_beta` false never reads C. With an epilogue,
  // those values (stored into C only when it says so) go on to epi_block_.
  void store_tile(const Acc &scaled, bool full, bool with_beta) {
    llvm::Value *beta = splat(beta_);
    Acc final_values(scaled.size());
    for (int i = 0; i < cfg_.mr; ++i) {
      llvm::Value *row = b_.CreateGEP(elt_, cp_, b_.CreateMul(b_.getInt64(i), ldc_));
      for (int j = 0; j < cfg_.nv; ++j) {
        llvm::Value *at = b_.CreateGEP(elt_, row, b_.getInt64(int64_t(j) * cfg_.lanes));
        llvm::Value *mask = full ? nullptr : lane_mask(j);
        llvm::Value *v = scaled[i * cfg_.nv + j];
        if (with_beta) {
          llvm::Value *old = full ? static_cast<llvm::Value *>(b_.CreateAlignedLoad(vec_, at, elt_align_))
                                  : b_.CreateMaskedLoad(vec_, at, elt_align_, mask, llvm::Constant::getNullValue(vec_));
          v = b_.CreateCall(fma_, {old, beta, v});
        }
        final_values[i * cfg_.nv + j] = v;
        if (epi_ && !epi_->store_c) continue;
        if (full) b_.CreateAlignedStore(v, at, elt_align_);
        else b_.CreateMaskedStore(v, at, elt_align_, mask);
      }
    }
    if (!epi_) {
      b_.CreateRetVoid();
      return;
    }
    for (size_t q = 0; q < final_values.size(); ++q) epi_phis_[q]->addIncoming(final_values[q], b_.GetInsertBlock());
    b_.CreateBr(epi_block_);
  }

  // ---- the epilogue (epi_)
  // Dependence of a node's value on the tile position: bit 0 rows, bit 1 columns.
  std::vector<uint8_t> dependences() const {
    const KernelDesc &k = epi_->expr;
    std::vector<uint8_t> dep(k.nodes.size(), 0);
    for (size_t id = 0; id < k.nodes.size(); ++id) {
      const Node &n = k.nodes[id];
      if (n.op == KOp::Load) {
        switch (epi_->inputs.at(size_t(n.input))) {
        case Epilogue::Operand::Acc: case Epilogue::Operand::Tile: dep[id] = 3; break;
        case Epilogue::Operand::Row: dep[id] = 1; break;
        case Epilogue::Operand::Col: dep[id] = 2; break;
        case Epilogue::Operand::Scalar: dep[id] = 0; break;
        }
        continue;
      }
      for (int32_t a : n.args)
        if (a >= 0) dep[id] |= dep[size_t(a)];
    }
    return dep;
  }

  // Buffer q's element at tile row i (a constant or the rolled loop's index;
  // null: no row term), column vector j (-1: no column term).
  llvm::Value *epi_address(size_t q, llvm::Value *i, int j) {
    llvm::Value *p = b_.CreateAlignedLoad(b_.getPtrTy(), b_.CreateGEP(b_.getPtrTy(), eptrs_, b_.getInt64(int64_t(q))),
                                          llvm::Align(8));
    llvm::Value *off = b_.getInt64(0);
    if (i) {
      llvm::Value *ld = b_.CreateAlignedLoad(b_.getInt64Ty(), b_.CreateGEP(b_.getInt64Ty(), elds_, b_.getInt64(int64_t(q))),
                                             llvm::Align(8));
      off = b_.CreateMul(b_.CreateAdd(erow_, i), ld);
    }
    if (j >= 0) off = b_.CreateAdd(off, b_.CreateAdd(ecol_, b_.getInt64(int64_t(j) * cfg_.lanes)));
    return b_.CreateGEP(memory_type(buffer_dtype(q)), p, off);
  }

  DType buffer_dtype(size_t q) const {
    const KernelDesc &k = epi_->expr;
    return k.buffer(q).dtype;
  }

  // As codegen/lower_expr.cpp's memory_type: bool is one byte in memory (0 or 1).
  llvm::Type *memory_type(DType t) {
    switch (t) {
    case DType::Bool: return b_.getInt8Ty();
    case DType::Int32: return b_.getInt32Ty();
    case DType::Int64: return b_.getInt64Ty();
    case DType::Float32: return b_.getFloatTy();
    case DType::Float64: return b_.getDoubleTy();
    case DType::UInt8:
    case DType::Int8:
    case DType::Int16:
    case DType::Float16:
    case DType::BFloat16: KILN_FAIL("internal: no GEMM micro-kernel for dtype ", t);
    }
    KILN_FAIL("internal: bad dtype");
  }

  // A loaded value as the expression sees it (lower_common.cpp's load_element: bool != 0).
  llvm::Value *as_value(llvm::Value *v, DType t) {
    if (t != DType::Bool) return v;
    return b_.CreateICmpNE(v, llvm::Constant::getNullValue(v->getType()));
  }

  // Masked: one copy serves full and edge tiles (a mask of all ones costs a
  // full tile nothing measurable).
  llvm::Value *epi_vector_load(llvm::Value *at, int j, DType t) {
    llvm::Type *vt = llvm::FixedVectorType::get(memory_type(t), unsigned(cfg_.lanes));
    return as_value(b_.CreateMaskedLoad(vt, at, llvm::Align(itemsize(t)), epi_masks_[size_t(j)],
                                        llvm::Constant::getNullValue(vt)),
                    t);
  }

  llvm::Value *epi_scalar_load(llvm::Value *at, DType t) {
    return splat(as_value(b_.CreateAlignedLoad(memory_type(t), at, llvm::Align(itemsize(t))), t));
  }

  // Load node n at row i, column vector j; `acc` is C's value there.
  llvm::Value *epi_load(const Node &n, llvm::Value *i, int j, llvm::Value *acc) {
    const size_t q = size_t(n.input);
    switch (epi_->inputs.at(q)) {
    case Epilogue::Operand::Acc: return acc;
    case Epilogue::Operand::Scalar: return epi_scalar_load(epi_address(q, nullptr, -1), buffer_dtype(q));
    case Epilogue::Operand::Row: return epi_scalar_load(epi_address(q, i, -1), buffer_dtype(q));
    case Epilogue::Operand::Col: return epi_vector_load(epi_address(q, nullptr, j), j, buffer_dtype(q));
    case Epilogue::Operand::Tile: return epi_vector_load(epi_address(q, i, j), j, buffer_dtype(q));
    }
    KILN_FAIL("internal: bad epilogue operand");
  }

  // The expression at row i, column vector j into cur (node values), taking
  // the nodes `memo` holds for this (i, j) from it and adding the others.
  using Memo = std::map<std::tuple<size_t, int, int>, llvm::Value *>; // (node, row or 0, column or 0)
  void evaluate(const std::vector<uint8_t> &dep, int ikey, llvm::Value *i, int j, llvm::Value *acc, Memo &memo,
                std::vector<llvm::Value *> &cur, uint8_t only_dep_mask = 3) {
    const KernelDesc &k = epi_->expr;
    for (size_t id = 0; id < k.nodes.size(); ++id) {
      if ((dep[id] & ~only_dep_mask) != 0) continue;
      const auto key = std::make_tuple(id, dep[id] & 1 ? ikey : 0, dep[id] & 2 ? j : 0);
      auto it = memo.find(key);
      if (it != memo.end()) {
        cur[id] = it->second;
        continue;
      }
      const Node &n = k.nodes[id];
      cur[id] = n.op == KOp::Load ? epi_load(n, i, j, acc) : expr_->emit(b_, id, cur, unsigned(cfg_.lanes));
      memo[key] = cur[id];
    }
  }

  void epi_store(llvm::Value *i, int j, const std::vector<llvm::Value *> &cur) {
    const KernelDesc &k = epi_->expr;
    for (size_t o = 0; o < k.outputs.size(); ++o)
      b_.CreateMaskedStore(cur[size_t(k.outputs[o].value)], epi_address(k.inputs.size() + o, i, j), elt_align_,
                           epi_masks_[size_t(j)]);
  }

  // Nodes that vary along the rows (evaluated per vector of the tile).
  int64_t row_varying_ops(const std::vector<uint8_t> &dep) const {
    int64_t n = 0;
    for (size_t id = 0; id < dep.size(); ++id) n += (dep[id] & 1) && epi_->expr.nodes[id].op != KOp::Load;
    return n;
  }

  // Evaluates the expression on every vector (i, j) of the tile and stores
  // its outputs. Row-invariant values (a bias, batch norm's per-column scale)
  // are computed once per column vector. A long expression (gelu: ~20 nodes)
  // unrolled over all mr x nv vectors took ~4x a plain kernel's code
  // generation time (165 against 45 ms for W5's fc), so above kUnrolledOps
  // node copies the rows are a loop: the accumulators go to a stack tile
  // (L1) and each iteration evaluates one row's nv vectors.
  static constexpr int64_t kUnrolledOps = 256;
  void emit_epilogue(const Acc &acc) {
    epi_masks_.clear();
    for (int j = 0; j < cfg_.nv; ++j) epi_masks_.push_back(lane_mask(j));
    const std::vector<uint8_t> dep = dependences();
    std::vector<llvm::Value *> cur(epi_->expr.nodes.size(), nullptr);
    Memo memo;
    if (row_varying_ops(dep) * cfg_.mr * cfg_.nv <= kUnrolledOps || cfg_.mr == 1) {
      for (int i = 0; i < cfg_.mr; ++i)
        for (int j = 0; j < cfg_.nv; ++j) {
          evaluate(dep, i, b_.getInt64(i), j, acc[size_t(i * cfg_.nv + j)], memo, cur);
          epi_store(b_.getInt64(i), j, cur);
        }
      return;
    }
    // Rolled: the row-invariant nodes first, then a loop over the rows.
    for (int j = 0; j < cfg_.nv; ++j) evaluate(dep, 0, nullptr, j, nullptr, memo, cur, 2);
    llvm::Value *tile = stack_tile();
    for (size_t q = 0; q < acc.size(); ++q)
      b_.CreateAlignedStore(acc[q], b_.CreateGEP(vec_, tile, b_.getInt64(int64_t(q))), vec_align_);
    llvm::BasicBlock *pre = b_.GetInsertBlock(), *body = block("epilogue.rows"), *exit = block("epilogue.done");
    b_.CreateBr(body);
    b_.SetInsertPoint(body);
    llvm::PHINode *i = b_.CreatePHI(b_.getInt64Ty(), 2);
    i->addIncoming(b_.getInt64(0), pre);
    Memo row_memo = memo; // row-invariant values; this row's are added per iteration
    for (int j = 0; j < cfg_.nv; ++j) {
      llvm::Value *at = b_.CreateGEP(vec_, tile, b_.CreateAdd(b_.CreateMul(i, b_.getInt64(cfg_.nv)), b_.getInt64(j)));
      evaluate(dep, 1, i, j, b_.CreateAlignedLoad(vec_, at, vec_align_), row_memo, cur);
      epi_store(i, j, cur);
    }
    llvm::Value *next = b_.CreateAdd(i, b_.getInt64(1));
    i->addIncoming(next, b_.GetInsertBlock());
    b_.CreateCondBr(b_.CreateICmpULT(next, b_.getInt64(cfg_.mr)), body, exit);
    b_.SetInsertPoint(exit);
  }

  // mr x nv vectors on the stack, allocated in the entry block.
  llvm::Value *stack_tile() {
    llvm::IRBuilder<> eb(&f_->getEntryBlock(), f_->getEntryBlock().begin());
    auto *a = eb.CreateAlloca(vec_, eb.getInt64(int64_t(cfg_.mr) * cfg_.nv));
    a->setAlignment(vec_align_);
    return a;
  }

  // Four store variants (full or masked columns x beta zero or not), chosen
  // once per call: a branch per tile instead of masks on every full tile.
  void emit_stores(const Acc &acc) {
    if (epi_) { // one copy of the epilogue after the four variants (compile time), masked on the N edge
      llvm::BasicBlock *here = b_.GetInsertBlock();
      epi_block_ = block("epilogue");
      b_.SetInsertPoint(epi_block_);
      epi_phis_.clear();
      for (size_t q = 0; q < acc.size(); ++q) epi_phis_.push_back(b_.CreatePHI(vec_, 4));
      emit_epilogue(values(epi_phis_));
      b_.CreateRetVoid();
      b_.SetInsertPoint(here);
    }
    llvm::Value *alpha = splat(alpha_);
    Acc scaled(acc.size());
    for (size_t q = 0; q < acc.size(); ++q) scaled[q] = b_.CreateFMul(acc[q], alpha);
    llvm::Value *full = b_.CreateICmpSGE(n_, b_.getInt64(cfg_.nr()));
    llvm::Value *beta0 = b_.CreateFCmpOEQ(beta_, llvm::ConstantFP::get(elt_, 0.0));
    llvm::BasicBlock *full_sel = block("full"), *mask_sel = block("masked");
    b_.CreateCondBr(full, full_sel, mask_sel);
    for (bool is_full : {true, false}) {
      b_.SetInsertPoint(is_full ? full_sel : mask_sel);
      llvm::BasicBlock *no_beta = block("beta0"), *with_beta = block("beta");
      b_.CreateCondBr(beta0, no_beta, with_beta);
      b_.SetInsertPoint(no_beta);
      store_tile(scaled, is_full, false);
      b_.SetInsertPoint(with_beta);
      store_tile(scaled, is_full, true);
    }
  }

  const TileConfig &cfg_;
  llvm::LLVMContext &c_;
  llvm::Module &m_;
  llvm::IRBuilder<> b_;
  const LowerTarget &target_;
  const Epilogue *epi_ = nullptr;
  std::unique_ptr<VectorExpr> expr_;
  llvm::BasicBlock *epi_block_ = nullptr;
  std::vector<llvm::PHINode *> epi_phis_;
  std::vector<llvm::Value *> epi_masks_; // per column vector: lanes < n
  llvm::Value *eptrs_ = nullptr, *elds_ = nullptr, *erow_ = nullptr, *ecol_ = nullptr;
  llvm::Type *elt_ = nullptr;
  llvm::FixedVectorType *vec_ = nullptr;
  llvm::Align vec_align_, elt_align_;
  llvm::Function *f_ = nullptr, *fma_ = nullptr;
  llvm::Value *a_ = nullptr, *bp_ = nullptr, *cp_ = nullptr, *kc_ = nullptr, *ldc_ = nullptr, *n_ = nullptr,
              *alpha_ = nullptr, *beta_ = nullptr, *lda_ = nullptr;
  std::vector<llvm::Value *> a_row_; // a_rows: row i of A's panel, a + i * lda
};

} // namespace

std::unique_ptr<llvm::Module> build_ukernel(const TileConfig &cfg, const std::string &symbol,
                                            const LowerTarget &target, llvm::LLVMContext &ctx, const Epilogue *epi) {
  KILN_CHECK(cfg.mr >= 1 && cfg.nv >= 1 && cfg.lanes >= 1 && cfg.unroll >= 1, "gemm: invalid tile ", cfg.key());
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  if (epi) check_epilogue(cfg, *epi);
  UkernelBuilder(cfg, *m, target, epi).build(symbol);
  m->addModuleFlag(llvm::Module::Warning, kSkipOptimizerFlag, 1);
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os)) KILN_FAIL("gemm: micro-kernel ", cfg.key(), " produced invalid IR: ", os.str());
  return m;
}

std::unique_ptr<llvm::Module> build_fma_probe(int lanes, int accs, const std::string &symbol,
                                              const LowerTarget &target, llvm::LLVMContext &ctx) {
  auto m = std::make_unique<llvm::Module>(symbol, ctx);
  m->setTargetTriple(target.triple);
  m->setDataLayout(target.data_layout);
  llvm::IRBuilder<> b(ctx);
  auto *vec = llvm::FixedVectorType::get(b.getFloatTy(), lanes);
  auto *fty = llvm::FunctionType::get(b.getVoidTy(), {b.getInt64Ty(), b.getPtrTy()}, false);
  auto *f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, *m);
  f->addFnAttr(llvm::Attribute::NoUnwind);
  if (!target.cpu.empty()) f->addFnAttr("target-cpu", target.cpu);
  if (!target.features.empty()) f->addFnAttr("target-features", target.features);
  llvm::Function *fma = llvm::Intrinsic::getDeclaration(m.get(), llvm::Intrinsic::fmuladd, {vec});
  auto *entry = llvm::BasicBlock::Create(ctx, "entry", f), *body = llvm::BasicBlock::Create(ctx, "body", f),
       *exit = llvm::BasicBlock::Create(ctx, "exit", f);
  b.SetInsertPoint(entry);
  llvm::Value *io = f->getArg(1);
  llvm::Value *x = b.CreateVectorSplat(lanes, b.CreateLoad(b.getFloatTy(), io));
  llvm::Value *y = b.CreateVectorSplat(lanes, b.CreateLoad(b.getFloatTy(), b.CreateGEP(b.getFloatTy(), io, b.getInt64(1))));
  // Distinct starting values: identical chains could be merged by the optimizer.
  std::vector<llvm::Value *> init(accs);
  for (int q = 0; q < accs; ++q) init[q] = b.CreateFAdd(y, llvm::ConstantFP::get(vec, double(q)));
  b.CreateBr(body);
  b.SetInsertPoint(body);
  llvm::PHINode *i = b.CreatePHI(b.getInt64Ty(), 2);
  i->addIncoming(b.getInt64(0), entry);
  std::vector<llvm::PHINode *> acc(accs);
  std::vector<llvm::Value *> next(accs);
  for (int q = 0; q < accs; ++q) {
    acc[q] = b.CreatePHI(vec, 2);
    acc[q]->addIncoming(init[q], entry);
  }
  for (int q = 0; q < accs; ++q) next[q] = b.CreateCall(fma, {acc[q], x, y});
  llvm::Value *i1 = b.CreateAdd(i, b.getInt64(1));
  i->addIncoming(i1, body);
  for (int q = 0; q < accs; ++q) acc[q]->addIncoming(next[q], body);
  b.CreateCondBr(b.CreateICmpULT(i1, f->getArg(0)), body, exit);
  b.SetInsertPoint(exit);
  llvm::Value *sum = next[0];
  for (int q = 1; q < accs; ++q) sum = b.CreateFAdd(sum, next[q]);
  b.CreateStore(b.CreateExtractElement(sum, uint64_t(0)), io);
  b.CreateRetVoid();
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os)) KILN_FAIL("gemm: FMA probe produced invalid IR: ", os.str());
  return m;
}

ModuleBuilder ukernel_builder(const TileConfig &cfg) {
  return [cfg](const std::string &symbol, const LowerTarget &target, llvm::LLVMContext &ctx) {
    return build_ukernel(cfg, symbol, target, ctx);
  };
}

ModuleBuilder ukernel_builder(const TileConfig &cfg, const Epilogue &epi) {
  return [cfg, epi](const std::string &symbol, const LowerTarget &target, llvm::LLVMContext &ctx) {
    return build_ukernel(cfg, symbol, target, ctx, &epi);
  };
}

std::string Epilogue::key() const {
  std::string s = "epi-v4;c=" + std::to_string(int(store_c)) + ";in=";
  for (Operand o : inputs) s += char('0' + int(o));
  return s + ";" + expr.key();
}

ModuleBuilder fma_probe_builder(int lanes, int accs) {
  return [lanes, accs](const std::string &symbol, const LowerTarget &target, llvm::LLVMContext &ctx) {
    return build_fma_probe(lanes, accs, symbol, target, ctx);
  };
}

} // namespace kiln::codegen::gemm
