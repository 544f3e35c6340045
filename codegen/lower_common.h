// INTERNAL to codegen/lower_*.cpp: the class that lowers one KernelDesc to
// LLVM IR (lower_kernel, codegen/lower.h). One scalar expression builder
// (emit_node) serves every element type; the loop vectorizer widens the inner
// loop it is placed in. The loops around it follow one of four strategies,
// each in its own file:
//
//   lower_elementwise.cpp  no reductions: one loop over the elements (or,
//                          for a runtime layout, rows read per call)
//   lower_row_reduce.cpp   row reductions, row by row, in passes over the row
//                          (codegen/row_schedule.h)
//   lower_row_block.cpp    row reductions over short contiguous rows, a block
//                          of rows side by side in vector lanes
//   lower_tile.cpp         row reductions whose rows are columns, a tile of
//                          neighbouring rows innermost
//
// lower_common.cpp holds what they share (entry point, buffers, loops,
// addresses) and lower_kernel; lower_expr.cpp the scalar expressions.
//
//   void K(void* const* bufs)        { kiln_parallel_for(0, outer, grain, K.body, bufs); }
//   void K.body(ctx, begin, end)     { for o in [begin, end): row(o) }   (rank >= 2)
//                                    { row over i in [begin, end) }      (rank <= 1)
//   row: for j in [lo, hi): out_k[base_k + j*s_k] = expr(in_i[base_i + j*s_i] ...)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <llvm/IR/Constants.h>
#include <llvm/IR/Function.h>
#include <llvm/IR/IRBuilder.h>
#include <llvm/IR/Module.h>

#include "codegen/kernel.h"
#include "codegen/lower.h"
#include "codegen/row_schedule.h"

namespace kiln::codegen::lower_impl {

using llvm::IRBuilder;
using llvm::Value;

inline constexpr int64_t kDefaultGrain = 16384; // elements; below this a chunk is not worth a thread
// Rows evaluated in tiles (Lowering::wants_tiles) need at least this many
// neighbours in the innermost outer dim to tile at all (with fewer they go one
// by one), and a thread's chunk of them at least this many rows.
inline constexpr int64_t kMinTileRows = 16;
// A rank-1 kernel with streamed outputs is split into blocks of this many
// elements, so that every chunk starts 64-byte aligned in every output.
inline constexpr int64_t kStreamBlock = 64;
inline constexpr unsigned kStreamAlign = 64;
// Marks the load of a streamed output's pointer (see mark_streamed_stores).
inline constexpr const char *kStreamedBufferMD = "kiln.streamed";

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

// Element types (lower_expr.cpp).
llvm::Type *value_type(llvm::LLVMContext &c, DType t);
llvm::Type *memory_type(llvm::LLVMContext &c, DType t);
Value *cast_value(IRBuilder<> &b, Value *v, DType from, DType to);
Value *safe_sdiv(IRBuilder<> &b, Value *x, Value *y);

class Lowering {
public:
  Lowering(const KernelDesc &k, llvm::Module &m, const LowerTarget &t);
  void run(const std::string &symbol);
  // Node n (not a Load or Reduce) on values of `width` lanes (1: scalars), its
  // operands' values in vals: emit_node's arithmetic, with constants splat and
  // what has no vector form (float64 transcendentals, casts) done lane by lane
  // (codegen/lower_vector.h).
  Value *emit_lanes(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals, unsigned width);
  // Node `id` of the description at one element, from its operands' values
  // (`vals`, indexed by node): the element expressions of the eager kernels that
  // codegen/aot/vecmath_kernels_gen.cpp builds from the composed functions.
  Value *emit_value(IRBuilder<> &b, size_t id, const std::vector<Value *> &vals) {
    return emit_node(b, k_.nodes.at(id), vals);
  }

private:
  // ---- shared core (lower_common.cpp): shape, buffers, entry point, loops.
  size_t rank() const { return shape_.size(); }
  int64_t inner_size() const { return shape_.back(); }
  // Dims walked by the outer (parallel) loop: all but the row's (all but the
  // last one for element-wise kernels). collapse_outer_dims leaves at least one.
  size_t outer_rank() const { return rank() - row_rank_; }
  // Inner-loop runs per row: a row of several dims is walked as sub-rows of its last dim.
  int64_t sub_rows() const { return inner_size() == 0 ? 0 : row_length() / inner_size(); }
  bool blocked() const { return rank() == 1 && any_streamed_; }
  int64_t row_length() const;
  std::vector<int64_t> strides_of(size_t buf) const;
  bool rows_stay_aligned(size_t o) const;
  Value *dim0_extent(IRBuilder<> &b, Value *buffers);
  Value *runtime_extent(IRBuilder<> &b, Value *buffers, int64_t which);
  Value *outer_count(IRBuilder<> &b, Value *n0) const;
  int64_t outer_grain() const;
  void stamp(llvm::Function *f);
  llvm::FunctionType *body_type();
  void build_entry(const std::string &symbol, llvm::Function *body);
  void fence_streamed_stores(IRBuilder<> &b);
  void load_buffers(IRBuilder<> &b, llvm::Function *f);
  std::vector<Value *> row_bases(IRBuilder<> &b, Value *o);
  std::vector<Value *> offset_bases(IRBuilder<> &b, const std::vector<Value *> &bases, Value *flat, size_t from,
                                    size_t to);
  Value *element_ptr(IRBuilder<> &b, size_t buf, DType t, Value *base, Value *j);
  DType buffer_dtype(size_t buf) const;
  void set_loop_md(llvm::BranchInst *latch, LoopMD kind);
  Value *load_element(IRBuilder<> &b, const Node &n, const std::vector<Value *> &bases, Value *j);
  void store_output(IRBuilder<> &b, size_t o, const std::vector<Value *> &bases, Value *j, Value *v);

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

  // emit_carried_loop for a count that may be 0 (a runtime row's): `values`
  // pass through unchanged when it is.
  template <class Body>
  void emit_carried_loop_from_zero(IRBuilder<> &b, Value *count, const std::string &name, std::vector<Value *> &values,
                                   Body &&body, LoopMD md = LoopMD::None) {
    if (auto *c = llvm::dyn_cast<llvm::ConstantInt>(count)) {
      if (c->getSExtValue() > 0) emit_carried_loop(b, count, name, values, body, md);
      return;
    }
    llvm::Function *f = b.GetInsertBlock()->getParent();
    llvm::BasicBlock *pre = b.GetInsertBlock();
    auto *run = llvm::BasicBlock::Create(c_, name + ".run", f);
    auto *join = llvm::BasicBlock::Create(c_, name + ".join", f);
    b.CreateCondBr(b.CreateICmpSGT(count, b.getInt64(0)), run, join);
    b.SetInsertPoint(run);
    const std::vector<Value *> before = values;
    emit_carried_loop(b, count, name, values, body, md);
    llvm::BasicBlock *after = b.GetInsertBlock();
    b.CreateBr(join);
    b.SetInsertPoint(join);
    for (size_t a = 0; a < values.size(); ++a) {
      llvm::PHINode *phi = b.CreatePHI(values[a]->getType(), 2, "acc.join");
      phi->addIncoming(before[a], pre);
      phi->addIncoming(values[a], after);
      values[a] = phi;
    }
  }

  // ---- scalar expressions (lower_expr.cpp): one node at one element.
  Value *reduce_identity(const Node &r);
  Value *combine(IRBuilder<> &b, const Node &r, Value *acc, Value *x);
  Value *finish(IRBuilder<> &b, const Node &r, Value *acc);
  // A call of host function kLibmSymbolPrefix + name: x -> T, or (x, y) -> T when y is given.
  Value *libm(IRBuilder<> &b, const char *name, Value *x, Value *y = nullptr);
  // y: the second operand of the binary libm list's functions (nullptr for the others).
  Value *transcendental(IRBuilder<> &b, KOp op, DType t, Value *x, Value *y = nullptr);
  Value *constant(const Node &n);
  Value *compare(IRBuilder<> &b, KOp op, DType t, Value *x, Value *y);
  bool divides_by_row_statistic(const Node &n) const;
  Value *emit_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals);

  // ---- element-wise kernels (lower_elementwise.cpp).
  llvm::Function *build_body(const std::string &name);
  // A runtime layout (KernelDesc::runtime_layout): the call's extents and
  // strides, loaded once per chunk, and each row's element offsets from them.
  llvm::Function *build_layout_body(const std::string &name);
  std::vector<Value *> load_layout(IRBuilder<> &b, Value *buffers);
  std::vector<Value *> layout_row_bases(IRBuilder<> &b, const std::vector<Value *> &words, Value *o);
  void emit_element(IRBuilder<> &b, const std::vector<Value *> &bases, Value *j);

  // ---- row reductions, row by row (lower_row_reduce.cpp).
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
  Value *wide_identity() { return llvm::ConstantFP::getNegativeZero(b_double()); }
  llvm::Type *b_double() { return llvm::Type::getDoubleTy(c_); }
  Value *widen(IRBuilder<> &b, Value *v) { return v->getType()->isDoubleTy() ? v : b.CreateFPExt(v, b_double()); }
  llvm::Function *build_row_body(const std::string &name);
  void allocate_scratch(IRBuilder<> &b, llvm::Function *f);
  void emit_row(IRBuilder<> &b, Value *o);
  void emit_runtime_rows(IRBuilder<> &b, llvm::Function *f);
  void prefetch_next_row(IRBuilder<> &b, Value *o, bool outputs);
  void emit_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, std::vector<Value *> &row);
  void emit_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, std::vector<Value *> &row);
  Accum accum_of(const Node &r) const;
  std::vector<uint8_t> reductions_used_by_reductions() const;
  Value *row_shift(IRBuilder<> &b, const Node &r, const std::vector<Value *> &bases);
  std::vector<Value *> emit_sub_row_blocks(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                           const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                                           std::vector<Value *> acc, const std::vector<Value *> &row);
  std::vector<Value *> emit_sum_block(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                      Value *lo, Value *count, const std::vector<int32_t> &reductions,
                                      const std::vector<int> &nan_flag, const std::vector<Value *> &acc,
                                      const std::vector<Value *> &row);
  Value *exact_mean(IRBuilder<> &b, const Node &n, const std::vector<Value *> &wide);
  Value *emit_row_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals,
                       const std::vector<Value *> &wide);
  static bool folds_ignoring_nan(const Node &r);
  std::vector<int> add_nan_flags(IRBuilder<> &b, const std::vector<int32_t> &reductions, std::vector<Value *> &acc);
  void fold(IRBuilder<> &b, const Node &r, int flag, std::vector<Value *> &acc, size_t i, Value *x);
  void finish_pass(IRBuilder<> &b, const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                   const std::vector<Value *> &acc, std::vector<Value *> &row);
  std::vector<Value *> emit_sub_row(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                    Value *lo, Value *count, const std::vector<int32_t> &reductions,
                                    const std::vector<int> &nan_flag, std::vector<Value *> acc,
                                    const std::vector<Value *> &row);
  Value *element_value(IRBuilder<> &b, int32_t id, int p, const std::vector<Value *> &bases, Value *j, Value *slot,
                       std::vector<Value *> &cur);

  // ---- row blocks (lower_row_block.cpp).
  int64_t f32_lanes() const;
  llvm::FixedVectorType *lane_type(llvm::Type *scalar) const;
  void emit_row_blocks(IRBuilder<> &b, Value *begin, Value *end, Value *rows);
  std::vector<uint8_t> row_invariant_nodes() const;
  std::vector<uint8_t> per_row_inputs_of_pass(const std::vector<int32_t> &reductions) const;
  void emit_row_block(IRBuilder<> &b, Value *first);
  void emit_block_pass_inputs(IRBuilder<> &b, const std::vector<int32_t> &reductions,
                              const std::vector<std::vector<Value *>> &at, std::vector<std::vector<Value *>> &row);
  std::vector<Value *> fold_row_block(IRBuilder<> &b, const std::vector<int32_t> &reductions,
                                      const std::vector<std::vector<Value *>> &at,
                                      const std::vector<std::vector<Value *>> &row);
  void fold_block_chunk(IRBuilder<> &b, Value *j, Value *mask, const std::vector<int32_t> &reductions,
                        const std::vector<std::vector<Value *>> &at, const std::vector<std::vector<Value *>> &row,
                        std::vector<Value *> &acc);
  Value *lane_value(IRBuilder<> &b, int32_t id, Value *j, Value *mask, const std::vector<Value *> &at,
                    const std::vector<Value *> &row, std::vector<Value *> &cur, std::vector<Value *> &shared);
  Value *transpose_combine(IRBuilder<> &b, const Node &red, std::vector<Value *> v);
  void emit_block_stage(IRBuilder<> &b, const std::vector<Value *> &bases, std::vector<Value *> lane);

  // ---- tiles: rows that are columns (lower_tile.cpp).
  size_t tile_dim() const { return outer_rank() - 1; }
  bool wants_tiles() const;
  bool tile_sums_wide(const Node &n) const;
  void allocate_tile(IRBuilder<> &b);
  void emit_tiles(IRBuilder<> &b, Value *begin, Value *end);
  void emit_tile_run(IRBuilder<> &b, Value *begin, Value *end);
  void emit_tile(IRBuilder<> &b, Value *first, Value *n);
  std::vector<Value *> tile_row(IRBuilder<> &b, const std::vector<Value *> &bases, Value *r);
  Value *tile_slot(IRBuilder<> &b, size_t node, Value *r);
  Value *tile_wide_slot(IRBuilder<> &b, size_t node, Value *r);
  std::vector<Value *> load_known(IRBuilder<> &b, Value *r);
  std::vector<Value *> load_known_wide(IRBuilder<> &b, Value *r);
  void emit_tile_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, Value *n);
  void emit_tile_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *n);

  const KernelDesc &k_;
  llvm::Module &m_;
  llvm::LLVMContext &c_;
  const LowerTarget &target_;
  std::vector<int64_t> shape_;
  size_t row_rank_ = 1;            // dims of a row (kernels with reductions), see collapse_outer_dims
  std::vector<Value *> bufs_;
  std::vector<uint8_t> streamed_; // per output: stored non-temporally
  bool any_streamed_ = false;
  RowSchedule sched_;                   // kernels with reductions only
  bool tiled_ = false;             // rows evaluated in tiles (see wants_tiles)
  std::vector<Value *> tile_;      // tiles: per per-row node, its value for each row of the tile
  std::vector<uint8_t> known_;     // tiles: per node, whether tile_ holds it already
  std::vector<Value *> scratch_;   // per node: its scratch row, or null
  std::vector<Value *> wide_;      // row by row: per Shifted/Blocked sum, its double total in this row (Accum)
  std::vector<Value *> shift_;     // row by row: per Shifted sum, its K in this row (Accum)
  std::vector<uint8_t> centering_; // per node: reductions_used_by_reductions()
  std::vector<Value *> tile_wide_; // tiles: per float32 sum, its double accumulator per row of the tile
  int64_t dim0_scale_ = 1;         // runtime dim 0: elements of collapsed dim 0 per unit of the call's extent
  Value *row_len_ = nullptr;       // runtime row: the call's row length, loaded in the body's entry
  Value *inverse_len_f64_ = nullptr; // runtime row: 1.0 / row_len_ in double (a mean's exact scale)
  std::vector<Value *> inverse_len_; // runtime row: per Node::inverse_row_length node, 1 / L in its type
  int64_t block_ = 0;              // rows per row block (see choose_row_block), 0 = row by row
  std::vector<uint8_t> invariant_; // row blocks: per node, the same in every row
};

} // namespace kiln::codegen::lower_impl
