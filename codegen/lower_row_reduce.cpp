// Row reductions, row by row (see codegen/lower_common.h and
// codegen/row_schedule.h): per row, the schedule's stages and passes over the row.
#include <algorithm>

#include "codegen/lower_common.h"

namespace kiln::codegen::lower_impl {

namespace {

// Per-row scratch of a reduction kernel lives on the stack of the thread running
// a chunk (kiln's pool threads and a main thread have megabytes). Beyond this,
// expensive values are recomputed instead: 64K float32 rows keep two scratch rows.
constexpr int64_t kMaxScratchBytes = 512 * 1024;
constexpr int64_t kMaxPrefetchBytes = 64 * 1024; // per buffer row, see prefetch_next_row

} // namespace

// ---- row reductions (see codegen/row_schedule.h): rank >= 2 here, the last dim
// is the row. body(ctx, begin, end): for each row o in [begin, end), the stages
// and passes of the schedule.
llvm::Function *Lowering::build_row_body(const std::string &name) {
  // A runtime row takes no row blocks (their sizes are the row's); its passes
  // loop to the call's length (emit_runtime_rows), or, for rows that run down
  // columns (a mean over the sequence of [s0, s1, D]), its tiles' passes do.
  tiled_ = wants_tiles();
  sched_ = schedule_rows(k_, tiled_ ? 0 : kMaxScratchBytes);
  centering_ = reductions_used_by_reductions();
  auto *f = llvm::Function::Create(body_type(), llvm::Function::InternalLinkage, name, m_);
  stamp(f);
  IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
  load_buffers(b, f);
  if (k_.runtime_row) {
    row_len_ = runtime_extent(b, f->getArg(0), 1);
    // A mean's 1 / L: once per chunk, rounded to each constant's type as the
    // static kernel's constant is (exact_mean scales the double sum by the double).
    inverse_len_f64_ = b.CreateFDiv(llvm::ConstantFP::get(b_double(), 1.0), b.CreateUIToFP(row_len_, b_double()), "inv.len");
    inverse_len_.assign(k_.nodes.size(), nullptr);
    for (size_t i = 0; i < k_.nodes.size(); ++i)
      if (k_.nodes[i].inverse_row_length)
        inverse_len_[i] = b.CreateFPTrunc(inverse_len_f64_, value_type(c_, k_.nodes[i].dtype));
    if (tiled_) {
      allocate_tile(b);
      emit_tiles(b, f->getArg(1), f->getArg(2));
    } else {
      emit_runtime_rows(b, f);
    }
    b.CreateRetVoid();
    return f;
  }
  if (tiled_) {
    allocate_tile(b);
    emit_tiles(b, f->getArg(1), f->getArg(2));
    fence_streamed_stores(b);
    b.CreateRetVoid();
    return f;
  }
  allocate_scratch(b, f);
  block_ = choose_row_block(k_, sched_, f32_lanes()); // (never with tiles: their rows are strided)
  if (block_ > 0) {
    emit_row_blocks(b, f->getArg(1), f->getArg(2), dim0_extent(b, f->getArg(0)));
  } else {
    emit_loop(b, f->getArg(1), f->getArg(2), "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); }, LoopMD::Nest);
  }
  fence_streamed_stores(b);
  b.CreateRetVoid();
  return f;
}

// The rows of a runtime row's chunk, row by row. The schedule chosen at the
// assumed length keeps scratch rows (softmax's exps, computed once instead of
// twice) when the call's rows fit the scratch budget: then they are allocas of
// the call's length. Longer rows run the schedule that keeps none.
void Lowering::emit_runtime_rows(IRBuilder<> &b, llvm::Function *f) {
  auto rows = [&](IRBuilder<> &lb) {
    emit_loop(lb, f->getArg(1), f->getArg(2), "o", [&](IRBuilder<> &rb, Value *o) { emit_row(rb, o); }, LoopMD::Nest);
  };
  const RowSchedule with = sched_, without = schedule_rows(k_, 0);
  scratch_.assign(k_.nodes.size(), nullptr);
  if (with.scratch_bytes == 0) {
    rows(b);
    return;
  }
  const int64_t per_element = with.scratch_bytes / row_length(); // (row_length() is the assumed length here)
  auto *fits = llvm::BasicBlock::Create(c_, "scratch.fits", f), *long_rows = llvm::BasicBlock::Create(c_, "scratch.none", f),
       *done = llvm::BasicBlock::Create(c_, "rows.done", f);
  b.CreateCondBr(b.CreateICmpULE(row_len_, b.getInt64(kMaxScratchBytes / per_element)), fits, long_rows);
  b.SetInsertPoint(fits);
  f->addFnAttr("probe-stack", "inline-asm");
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    if (!sched_.materialized(int32_t(i))) continue;
    auto *a = b.CreateAlloca(value_type(c_, k_.nodes[i].dtype), row_len_, "scratch");
    a->setAlignment(llvm::Align(64));
    scratch_[i] = a;
  }
  rows(b);
  b.CreateBr(done);
  b.SetInsertPoint(long_rows);
  sched_ = without;
  scratch_.assign(k_.nodes.size(), nullptr);
  rows(b);
  b.CreateBr(done);
  b.SetInsertPoint(done);
}

// Static allocas in the entry block: one row per materialized node, reused by
// every row of the chunk. Probed, so that an overflow faults on the guard page.
void Lowering::allocate_scratch(IRBuilder<> &b, llvm::Function *f) {
  scratch_.assign(k_.nodes.size(), nullptr);
  if (sched_.scratch_bytes == 0) return;
  f->addFnAttr("probe-stack", "inline-asm");
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    if (!sched_.materialized(int32_t(i))) continue;
    auto *a = b.CreateAlloca(value_type(c_, k_.nodes[i].dtype), b.getInt64(row_length()), "scratch");
    a->setAlignment(llvm::Align(64));
    scratch_[i] = a;
  }
}

void Lowering::emit_row(IRBuilder<> &b, Value *o) {
  wide_.assign(k_.nodes.size(), nullptr);
  shift_.assign(k_.nodes.size(), nullptr);
  std::vector<Value *> bases = row_bases(b, o);
  std::vector<Value *> row(k_.nodes.size(), nullptr); // per-row values known so far
  emit_stage(b, 0, bases, row);
  for (int p = 0; p < sched_.passes; ++p) {
    emit_pass(b, p, bases, row);
    if (p == 0 && sched_.passes >= 2 && row_rank_ == 1) {
      prefetch_next_row(b, o, false);
      if (!sched_.transcendental) prefetch_next_row(b, o, true);
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
void Lowering::prefetch_next_row(IRBuilder<> &b, Value *o, bool outputs) {
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
    // (A runtime row's first kMaxPrefetchBytes are prefetched, whatever its length.)
    if (st.back() == 1 && moves && (row_len_ || bytes <= kMaxPrefetchBytes) && !in_place && !nt)
      streamed.emplace_back(i, i >= k_.inputs.size());
  }
  if (streamed.empty()) return;
  // Past the last row this addresses beyond the buffer: harmless for a
  // prefetch, and the GEPs are not inbounds.
  std::vector<Value *> next = row_bases(b, b.CreateAdd(o, b.getInt64(1)));
  for (auto [i, write] : streamed) {
    Value *start = b.CreateGEP(memory_type(c_, buffer_dtype(i)), bufs_[i], next[i]);
    const int64_t size = int64_t(itemsize(buffer_dtype(i)));
    Value *lines = b.getInt64(inner_size() * size / 64 + 1); // +1: unaligned rows
    if (row_len_) {
      Value *n = b.CreateAdd(b.CreateUDiv(b.CreateMul(row_len_, b.getInt64(size)), b.getInt64(64)), b.getInt64(1));
      lines = b.CreateBinaryIntrinsic(llvm::Intrinsic::umin, n, b.getInt64(kMaxPrefetchBytes / 64));
    }
    // A runtime count of lines is walked 8 at a time (up to 7 lines past the
    // row: a prefetch never faults): a constant count unrolls whole, and a
    // loop of one prefetch per line cost W2's runtime row a few percent.
    const int64_t unroll = row_len_ ? 8 : 1;
    if (unroll > 1) lines = b.CreateUDiv(b.CreateAdd(lines, b.getInt64(unroll - 1)), b.getInt64(unroll));
    emit_loop(b, b.getInt64(0), lines, "prefetch", [&](IRBuilder<> &lb, Value *group) {
      for (int64_t u = 0; u < unroll; ++u) {
        Value *line = lb.CreateAdd(lb.CreateMul(group, lb.getInt64(unroll)), lb.getInt64(u));
        Value *p = lb.CreateGEP(lb.getInt8Ty(), start, lb.CreateMul(line, lb.getInt64(64)));
        lb.CreateIntrinsic(llvm::Intrinsic::prefetch, {p->getType()},
                           {p, lb.getInt32(write), lb.getInt32(2), lb.getInt32(1)}); // L2, data
      }
    });
  }
}

// Per-row values of level `s` (reductions of level s are already in `row`),
// then the per-row outputs that only needed those.
void Lowering::emit_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, std::vector<Value *> &row) {
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    const Node &n = k_.nodes[i];
    if (!sched_.per_row[i] || sched_.level[i] != s || n.op == KOp::Reduce) continue;
    if (row[i]) continue; // a row block computed it before its pass
    row[i] = n.op == KOp::Load ? load_element(b, n, bases, b.getInt64(0)) : emit_row_node(b, n, row, wide_);
  }
  for (size_t o = 0; o < k_.outputs.size(); ++o) {
    int32_t v = k_.outputs[o].value;
    if (sched_.output_pass[o] < 0 && sched_.level[v] == s) store_output(b, o, bases, b.getInt64(0), row[v]);
  }
}

// One walk over the row: folds the reductions of pass p (vector partial sums:
// the combines carry `reassoc`, nothing else does), writes scratch rows and
// element-wise outputs. The row length is a constant, so an empty row
// simply has no loop. A row of several dims is walked as sub-rows of its last
// dim, the accumulators carried from one to the next.
void Lowering::emit_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, std::vector<Value *> &row) {
  std::vector<int32_t> reductions;
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (k_.nodes[i].op == KOp::Reduce && sched_.level[k_.nodes[i].args[0]] == p)
      reductions.push_back(int32_t(i));
  std::vector<Value *> acc;
  for (int32_t r : reductions) {
    const Node &red = k_.nodes[size_t(r)];
    acc.push_back(accum_of(red) == Accum::Plain ? reduce_identity(red) : wide_identity());
    // (A runtime row has at least one element: size 0 specializes.)
    if (accum_of(red) == Accum::Shifted && (row_len_ || row_length() > 0)) shift_[size_t(r)] = row_shift(b, red, bases);
  }
  std::vector<int> nan_flag = add_nan_flags(b, reductions, acc);
  if (!row_len_ && row_length() == 0) {
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

Lowering::Accum Lowering::accum_of(const Node &r) const {
  if (r.op != KOp::Reduce || r.combine != KOp::Add || !is_floating(r.dtype)) return Accum::Plain;
  bool loaded = k_.nodes[size_t(r.args[0])].op == KOp::Load;
  bool centers = !centering_.empty() && centering_[size_t(&r - k_.nodes.data())];
  return r.dtype == DType::Float32 && loaded && centers ? Accum::Shifted : Accum::Blocked;
}

// Per node: a reduction whose result the operand of another reduction uses.
std::vector<uint8_t> Lowering::reductions_used_by_reductions() const {
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
Value *Lowering::row_shift(IRBuilder<> &b, const Node &r, const std::vector<Value *> &bases) {
  Value *first = load_element(b, k_.nodes[size_t(r.args[0])], bases, b.getInt64(0));
  Value *small = b.CreateFCmpOLT(b.CreateUnaryIntrinsic(llvm::Intrinsic::fabs, first),
                                 llvm::ConstantFP::get(first->getType(), 0x1p100));
  return b.CreateSelect(small, first, llvm::ConstantFP::get(first->getType(), 0.0), "shift");
}

// A row's run of the last dim (emit_sub_row) in blocks of kSumBlock when some
// float sum is Shifted or Blocked; `acc` and the result hold those sums in double.
std::vector<Value *> Lowering::emit_sub_row_blocks(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                                   const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                                                   std::vector<Value *> acc, const std::vector<Value *> &row) {
  bool blocked = std::any_of(reductions.begin(), reductions.end(),
                             [&](int32_t r) { return accum_of(k_.nodes[size_t(r)]) != Accum::Plain; });
  if (row_len_) { // row_rank 1: the run is the row
    // Every pass, summing or not, walks whole blocks of kSumBlock, then the
    // rest: a loop of a constant count vectorizes without the remainder code a
    // runtime count brings (W2's [4096, 1024] softmax: the runtime row went from
    // ~1.12x the static kernel's time to ~1.07x, kiln_bench_runtime_extent).
    auto run = [&](IRBuilder<> &rb, Value *lo, Value *count, const std::vector<Value *> &a) {
      return blocked ? emit_sum_block(rb, p, bases, first, lo, count, reductions, nan_flag, a, row)
                     : emit_sub_row(rb, p, bases, first, lo, count, reductions, nan_flag, a, row);
    };
    Value *full = b.CreateUDiv(row_len_, b.getInt64(kSumBlock), "blocks");
    Value *done = b.CreateMul(full, b.getInt64(kSumBlock), "blocks.end", true, true);
    emit_carried_loop_from_zero(b, full, "block", acc, [&](IRBuilder<> &lb, Value *c, std::vector<Value *> &a) {
      a = run(lb, lb.CreateMul(c, lb.getInt64(kSumBlock), "block.lo", true, true), lb.getInt64(kSumBlock), a);
    }, LoopMD::Nest);
    return run(b, done, b.CreateSub(row_len_, done, "block.rest", true, true), acc);
  }
  int64_t n = inner_size();
  if (!blocked) return emit_sub_row(b, p, bases, first, b.getInt64(0), b.getInt64(n), reductions, nan_flag, acc, row);
  int64_t full = n / kSumBlock, rest = n % kSumBlock;
  if (full == 1) {
    acc = emit_sum_block(b, p, bases, first, b.getInt64(0), b.getInt64(kSumBlock), reductions, nan_flag, acc, row);
  } else if (full > 1) {
    emit_carried_loop(b, b.getInt64(full), "sumblock", acc, [&](IRBuilder<> &lb, Value *c, std::vector<Value *> &a) {
      Value *lo = lb.CreateMul(c, lb.getInt64(kSumBlock), "sumblock.lo", true, true);
      a = emit_sum_block(lb, p, bases, first, lo, lb.getInt64(kSumBlock), reductions, nan_flag, a, row);
    }, LoopMD::Nest);
  }
  if (rest > 0)
    acc = emit_sum_block(b, p, bases, first, b.getInt64(full * kSumBlock), b.getInt64(rest), reductions, nan_flag, acc,
                         row);
  return acc;
}

// Elements [lo, lo + count) of the run: Shifted and Blocked sums start from
// their identity and their block total is added to the double in `acc`.
std::vector<Value *> Lowering::emit_sum_block(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                              Value *lo, Value *count, const std::vector<int32_t> &reductions,
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
Value *Lowering::exact_mean(IRBuilder<> &b, const Node &n, const std::vector<Value *> &wide) {
  if (n.op != KOp::Mul || n.dtype != DType::Float32 || wide.empty()) return nullptr;
  for (int s = 0; s < 2; ++s) {
    int32_t sum = n.args[s], scale = n.args[1 - s];
    const Node &c = k_.nodes[size_t(scale)];
    if (!wide[size_t(sum)] || c.op != KOp::Const) continue;
    // The kernel holds 1 / L rounded to float32 (2.5e-8 off for L = 1000,
    // enough to move the mean of a constant row by an ulp): use 1 / L itself,
    // the call's in a runtime row.
    Value *factor = nullptr;
    if (row_len_) {
      factor = c.inverse_row_length ? inverse_len_f64_ : llvm::ConstantFP::get(b_double(), c.fvalue);
    } else {
      double f = c.fvalue, inverse = 1.0 / double(k_.row_length());
      factor = llvm::ConstantFP::get(b_double(), f == double(float(inverse)) ? inverse : f);
    }
    Value *total = b.CreateFAdd(wide[size_t(sum)], llvm::ConstantFP::get(b_double(), 0.0)); // -0 -> +0, see finish
    Value *m = b.CreateFMul(total, factor);
    return b.CreateFPTrunc(m, value_type(c_, n.dtype));
  }
  return nullptr;
}

// emit_node for a per-row value (see exact_mean).
Value *Lowering::emit_row_node(IRBuilder<> &b, const Node &n, const std::vector<Value *> &vals,
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
bool Lowering::folds_ignoring_nan(const Node &r) {
  return is_floating(r.dtype) && (r.combine == KOp::Max || r.combine == KOp::Min);
}

// Appends a false NaN flag to `acc` for each reduction that folds ignoring
// NaNs; returns, per reduction, the index of its flag in `acc` (-1: none).
std::vector<int> Lowering::add_nan_flags(IRBuilder<> &b, const std::vector<int32_t> &reductions, std::vector<Value *> &acc) {
  std::vector<int> flag(reductions.size(), -1);
  for (size_t i = 0; i < reductions.size(); ++i) {
    if (!folds_ignoring_nan(k_.nodes[reductions[i]])) continue;
    flag[i] = int(acc.size());
    acc.push_back(b.getFalse());
  }
  return flag;
}

// acc[i] and, with a flag, acc[flag] after element value x.
void Lowering::fold(IRBuilder<> &b, const Node &r, int flag, std::vector<Value *> &acc, size_t i, Value *x) {
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

void Lowering::finish_pass(IRBuilder<> &b, const std::vector<int32_t> &reductions, const std::vector<int> &nan_flag,
                           const std::vector<Value *> &acc, std::vector<Value *> &row) {
  for (size_t a = 0; a < reductions.size(); ++a) {
    const Node &r = k_.nodes[reductions[a]];
    Value *sum = acc[a];
    if (Value *k = shift_[size_t(reductions[a])]) // + L * K (exact in double, see Accum)
      sum = b.CreateFAdd(sum, b.CreateFMul(widen(b, k), row_len_ ? b.CreateSIToFP(row_len_, b_double())
                                                               : llvm::ConstantFP::get(b_double(), double(row_length()))));
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

// The inner loop of pass p over elements [lo, lo + count) of one run of the
// last dim, from `bases`; `first` is the run's first element within the row
// (its scratch index; null = 0). Returns the accumulators of `reductions`
// after it (not finished).
std::vector<Value *> Lowering::emit_sub_row(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *first,
                                            Value *lo, Value *count, const std::vector<int32_t> &reductions,
                                            const std::vector<int> &nan_flag, std::vector<Value *> acc,
                                            const std::vector<Value *> &row) {
  emit_carried_loop_from_zero(b, count, "pass" + std::to_string(p), acc,
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
                        if (sched_.output_pass[o] == p)
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
Value *Lowering::element_value(IRBuilder<> &b, int32_t id, int p, const std::vector<Value *> &bases, Value *j, Value *slot,
                               std::vector<Value *> &cur) {
  if (cur[id]) return cur[id];
  const Node &n = k_.nodes[id];
  llvm::Type *ty = value_type(c_, n.dtype);
  int home = sched_.scratch_pass[id];
  if (home >= 0 && home < p) return cur[id] = b.CreateLoad(ty, b.CreateInBoundsGEP(ty, scratch_[id], slot));
  for (int a = 0; a < op_arity(n.op); ++a) element_value(b, n.args[a], p, bases, j, slot, cur);
  cur[id] = n.op == KOp::Load ? load_element(b, n, bases, j) : emit_node(b, n, cur);
  if (home == p) b.CreateStore(cur[id], b.CreateInBoundsGEP(ty, scratch_[id], slot));
  return cur[id];
}

} // namespace kiln::codegen::lower_impl
