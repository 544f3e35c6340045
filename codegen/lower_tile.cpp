// Row reductions whose rows are columns, in tiles of neighbouring rows (see
// codegen/lower_common.h). When an input's rows run across memory
// (row stride != 1) while neighbouring rows are neighbours in memory (outer
// stride 1) -- batch-norm statistics of an [N, C] input, or of channels-last
// NCHW -- walking one row at a time touches a cache line per element and
// never vectorizes. Instead kTileRows rows advance together: every loop over
// a row's elements gets an innermost loop over the tile's rows, contiguous
// in memory and vectorized, with per-row values (accumulators included) in
// small arrays of one element per row. The same passes and stages as
// emit_row, in the same order per row; no scratch rows (a schedule without them).
//
// With several outer dims (x.permute(0, 2, 1).sum(-1): rows [B, C] whose
// elements are C apart), the tile's rows are neighbours along the innermost
// outer dim, and a tile never crosses from one index of the dims before it
// to the next (emit_tiles). Walking such a row down memory instead (the
// vectorizer gathers) ran 5x slower than eager, and a contiguous copy first
// 10x.
#include "codegen/lower_common.h"

namespace kiln::codegen::lower_impl {

namespace {

// Rows evaluated side by side when rows are columns (see wants_tiles): enough
// for several vectors of the widest ISA, small enough for L1 (one element per
// row per per-row value).
constexpr int64_t kTileRows = 64;
// (With several outer dims, tiles span only the innermost one: below
// kMinTileRows rows there, rows go one by one.)

} // namespace

bool Lowering::wants_tiles() const { return wants_row_tiles(k_); }

} // namespace kiln::codegen::lower_impl

namespace kiln::codegen {

bool wants_row_tiles(const KernelDesc &k) {
  const size_t rank = k.shape.size(), row = size_t(std::max<int32_t>(k.row_rank, 1));
  if (rank < 2 || row >= rank) return false;
  const size_t outer = rank - row, d = outer - 1; // the tile's dim: the innermost outer dim
  const int64_t min_rows = outer == 1 ? 2 : lower_impl::kMinTileRows;
  if (k.shape[d] < min_rows || k.shape.back() < 2) return false;
  for (const BufferSpec &in : k.inputs)
    if (in.strides[d] == 1 && in.strides.back() != 0 && in.strides.back() != 1) return true;
  return false;
}

} // namespace kiln::codegen

namespace kiln::codegen::lower_impl {

// Float32 sums of a tile accumulate in double, one per row (tile_wide_):
// each row is a sequential sum, which in float32 lost 1.5e-4 (relative)
// over 16384 elements; the double adds run across the tile's rows, vectorized.
bool Lowering::tile_sums_wide(const Node &n) const {
  return n.op == KOp::Reduce && n.combine == KOp::Add && n.dtype == DType::Float32;
}

void Lowering::allocate_tile(IRBuilder<> &b) {
  tile_.assign(k_.nodes.size(), nullptr);
  tile_wide_.assign(k_.nodes.size(), nullptr);
  auto array = [&](llvm::Type *ty) {
    auto *a = b.CreateAlloca(ty, b.getInt64(kTileRows), "tile");
    a->setAlignment(llvm::Align(64));
    return a;
  };
  for (size_t i = 0; i < k_.nodes.size(); ++i) {
    if (!sched_.per_row[i]) continue;
    tile_[i] = array(value_type(c_, k_.nodes[i].dtype));
    if (tile_sums_wide(k_.nodes[i])) tile_wide_[i] = array(b_double());
  }
}

// Tiles of rows [begin, end): with one outer dim, runs of kTileRows rows;
// with several, the same within each index of the dims before the tile's.
void Lowering::emit_tiles(IRBuilder<> &b, Value *begin, Value *end) {
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
void Lowering::emit_tile_run(IRBuilder<> &b, Value *begin, Value *end) {
  Value *count = b.CreateSub(end, begin);
  Value *tiles = b.CreateUDiv(b.CreateAdd(count, b.getInt64(kTileRows - 1)), b.getInt64(kTileRows));
  emit_loop(b, b.getInt64(0), tiles, "tile", [&](IRBuilder<> &tb, Value *t) {
    Value *first = tb.CreateAdd(begin, tb.CreateMul(t, tb.getInt64(kTileRows)));
    Value *left = tb.CreateSub(end, first);
    Value *n = tb.CreateSelect(tb.CreateICmpSLT(left, tb.getInt64(kTileRows)), left, tb.getInt64(kTileRows));
    emit_tile(tb, first, n);
  }, LoopMD::Nest);
}

void Lowering::emit_tile(IRBuilder<> &b, Value *first, Value *n) {
  std::vector<Value *> bases = row_bases(b, first);
  known_.assign(k_.nodes.size(), 0);
  emit_tile_stage(b, 0, bases, n);
  for (int p = 0; p < sched_.passes; ++p) {
    emit_tile_pass(b, p, bases, n);
    emit_tile_stage(b, p + 1, bases, n);
  }
}

// Row r of the tile: bases moved along the tile's dim.
std::vector<Value *> Lowering::tile_row(IRBuilder<> &b, const std::vector<Value *> &bases, Value *r) {
  std::vector<Value *> out = bases;
  for (size_t buf = 0; buf < k_.num_buffers(); ++buf) {
    int32_t alias = buf < k_.inputs.size() ? -1 : k_.aliased_input(buf - k_.inputs.size());
    int64_t s = strides_of(buf)[tile_dim()];
    if (alias >= 0) out[buf] = out[size_t(alias)]; // one address expression, as offset_bases
    else if (s != 0) out[buf] = b.CreateAdd(bases[buf], b.CreateMul(r, b.getInt64(s)));
  }
  return out;
}

Value *Lowering::tile_slot(IRBuilder<> &b, size_t node, Value *r) {
  return b.CreateInBoundsGEP(value_type(c_, k_.nodes[node].dtype), tile_[node], r);
}

Value *Lowering::tile_wide_slot(IRBuilder<> &b, size_t node, Value *r) {
  return b.CreateInBoundsGEP(b_double(), tile_wide_[node], r);
}

// The per-row values known so far, for row r.
std::vector<Value *> Lowering::load_known(IRBuilder<> &b, Value *r) {
  std::vector<Value *> cur(k_.nodes.size(), nullptr);
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (known_[i]) cur[i] = b.CreateLoad(value_type(c_, k_.nodes[i].dtype), tile_slot(b, i, r));
  return cur;
}

// The double sums known so far (see exact_mean), for row r.
std::vector<Value *> Lowering::load_known_wide(IRBuilder<> &b, Value *r) {
  std::vector<Value *> wide(k_.nodes.size(), nullptr);
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (known_[i] && tile_wide_[i]) wide[i] = b.CreateLoad(b_double(), tile_wide_slot(b, i, r));
  return wide;
}

// emit_stage for every row of the tile.
void Lowering::emit_tile_stage(IRBuilder<> &b, int s, const std::vector<Value *> &bases, Value *n) {
  std::vector<size_t> nodes, outs;
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (sched_.per_row[i] && sched_.level[i] == s && k_.nodes[i].op != KOp::Reduce) nodes.push_back(i);
  for (size_t o = 0; o < k_.outputs.size(); ++o)
    if (sched_.output_pass[o] < 0 && sched_.level[k_.outputs[o].value] == s) outs.push_back(o);
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
void Lowering::emit_tile_pass(IRBuilder<> &b, int p, const std::vector<Value *> &bases, Value *n) {
  std::vector<int32_t> reductions;
  for (size_t i = 0; i < k_.nodes.size(); ++i)
    if (k_.nodes[i].op == KOp::Reduce && sched_.level[k_.nodes[i].args[0]] == p) reductions.push_back(int32_t(i));
  auto over_rows = [&](const char *name, auto &&body) { emit_loop(b, b.getInt64(0), n, name, body); };
  over_rows("init.r", [&](IRBuilder<> &lb, Value *r) {
    for (int32_t red : reductions) {
      if (tile_wide_[size_t(red)]) lb.CreateStore(wide_identity(), tile_wide_slot(lb, size_t(red), r));
      else lb.CreateStore(reduce_identity(k_.nodes[red]), tile_slot(lb, size_t(red), r));
    }
  });
  if (row_len_ || row_length() > 0) {
    // A runtime row (of one dim): one sub-row of the call's length.
    Value *subs = b.getInt64(row_len_ ? 1 : sub_rows());
    emit_loop(b, b.getInt64(0), subs, "sub", [&](IRBuilder<> &sb, Value *rr) {
      std::vector<Value *> sub = offset_bases(sb, bases, rr, outer_rank(), rank() - 1);
      Value *len = row_len_ ? row_len_ : sb.getInt64(inner_size());
      emit_loop(sb, sb.getInt64(0), len, "j", [&](IRBuilder<> &jb, Value *j) {
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
            if (sched_.output_pass[o] == p)
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

} // namespace kiln::codegen::lower_impl
