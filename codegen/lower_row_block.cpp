// Row reductions over short contiguous rows in blocks (see
// codegen/lower_common.h, choose_row_block in codegen/row_schedule.h).
#include "codegen/lower_common.h"

namespace kiln::codegen::lower_impl {

// ---- row blocks (see choose_row_block): short contiguous rows, such as the
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
int64_t Lowering::f32_lanes() const {
  const std::string &f = target_.features;
  if (f.find("+avx512f") != std::string::npos) return 16;
  if (f.find("+avx") != std::string::npos) return 8;
  return 4; // SSE, NEON: 128-bit vectors
}

llvm::FixedVectorType *Lowering::lane_type(llvm::Type *scalar) const {
  return llvm::FixedVectorType::get(scalar, unsigned(block_));
}

// [begin, end) counts blocks (see outer_count) of the kernel's `rows` rows:
// only the last block can be short, and its rows (rows % block_) go row by row.
void Lowering::emit_row_blocks(IRBuilder<> &b, Value *begin, Value *end, Value *rows) {
  invariant_ = row_invariant_nodes();
  Value *whole = b.CreateUDiv(rows, b.getInt64(block_), "whole");
  Value *last = b.CreateBinaryIntrinsic(llvm::Intrinsic::smin, end, whole, nullptr, "whole.end");
  emit_loop(b, begin, last, "block", [&](IRBuilder<> &bb, Value *t) {
    emit_row_block(bb, bb.CreateMul(t, bb.getInt64(block_), "block.first", true, true));
  }, LoopMD::Nest);
  if (!k_.runtime_dim0 && shape_[0] % block_ == 0) return;
  Value *has_rest = b.CreateICmpSGT(end, whole);
  Value *lo = b.CreateSelect(has_rest, b.CreateMul(whole, b.getInt64(block_)), rows);
  emit_loop(b, lo, rows, "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); }, LoopMD::Nest);
}

// Per node: the same value in every row (depends on no load that moves
// from row to row): computed once per block, not once per row.
std::vector<uint8_t> Lowering::row_invariant_nodes() const {
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
std::vector<uint8_t> Lowering::per_row_inputs_of_pass(const std::vector<int32_t> &reductions) const {
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
  for (size_t i = 0; i < seen.size(); ++i) seen[i] &= sched_.per_row[i];
  return seen;
}

// Rows [first, first + block_): the per-row values the pass reads, the
// pass (one vector accumulator per row and reduction), the shuffle tree,
// then the per-row stages and outputs.
void Lowering::emit_row_block(IRBuilder<> &b, Value *first) {
  wide_.assign(k_.nodes.size(), nullptr); // block sums are float vectors (rows are short)
  shift_.assign(k_.nodes.size(), nullptr);
  size_t rows = size_t(block_);
  std::vector<Value *> bases = row_bases(b, first);
  std::vector<std::vector<Value *>> at(rows), row(rows, std::vector<Value *>(k_.nodes.size(), nullptr));
  for (size_t r = 0; r < rows; ++r) at[r] = tile_row(b, bases, b.getInt64(int64_t(r)));
  std::vector<int32_t> reductions; // choose_row_block: all of them fold in the one pass
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (k_.nodes[i].op == KOp::Reduce) reductions.push_back(int32_t(i));
  emit_block_pass_inputs(b, reductions, at, row);
  std::vector<Value *> results = fold_row_block(b, reductions, at, row);
  if (row_block_stage_is_vector(k_, sched_)) {
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
void Lowering::emit_block_pass_inputs(IRBuilder<> &b, const std::vector<int32_t> &reductions,
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
std::vector<Value *> Lowering::fold_row_block(IRBuilder<> &b, const std::vector<int32_t> &reductions,
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
void Lowering::fold_block_chunk(IRBuilder<> &b, Value *j, Value *mask, const std::vector<int32_t> &reductions,
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
      if (!mask && red.combine == KOp::Add && vn.op == KOp::Mul && !sched_.per_row[size_t(v)]) {
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
Value *Lowering::lane_value(IRBuilder<> &b, int32_t id, Value *j, Value *mask, const std::vector<Value *> &at,
                            const std::vector<Value *> &row, std::vector<Value *> &cur, std::vector<Value *> &shared) {
  size_t i = size_t(id);
  if (cur[i]) return cur[i];
  if (invariant_[i] && shared[i]) return cur[i] = shared[i];
  const Node &n = k_.nodes[i];
  Value *v = nullptr;
  if (sched_.per_row[i]) {
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
Value *Lowering::transpose_combine(IRBuilder<> &b, const Node &red, std::vector<Value *> v) {
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
void Lowering::emit_block_stage(IRBuilder<> &b, const std::vector<Value *> &bases, std::vector<Value *> lane) {
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    const Node &n = k_.nodes[i];
    if (!sched_.per_row[i] || lane[i]) continue;
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

} // namespace kiln::codegen::lower_impl
