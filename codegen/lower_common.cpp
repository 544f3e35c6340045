// The shared core of the kernel lowering (see codegen/lower_common.h): the
// entry function, buffer pointers, loops and addresses every strategy uses,
// and lower_kernel, which normalizes the kernel's dims and picks the class.
#include <algorithm>

#include <llvm/Analysis/ValueTracking.h>
#include <llvm/IR/IntrinsicsX86.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/raw_ostream.h>
#include <llvm/TargetParser/Triple.h>

#include "codegen/lower_common.h"
#include "runtime/error.h"

namespace kiln::codegen::lower_impl {

Lowering::Lowering(const KernelDesc &k, llvm::Module &m, const LowerTarget &t)
    : k_(k), m_(m), c_(m.getContext()), target_(t) {
  shape_ = k.shape.empty() ? std::vector<int64_t>{1} : k.shape; // rank 0 = one element
  streamed_.assign(k.outputs.size(), 0);
  if (k.runtime_layout) { // extents and outer strides read per call; nothing streamed
    row_rank_ = 1;
    return;
  }
  if (k.runtime_dim0) { // shape_[0] is kRuntimeExtentAssumed times what collapse_dims merged into dim 0
    dim0_scale_ = shape_[0] / kRuntimeExtentAssumed;
    row_rank_ = k.has_reductions() ? size_t(k.row_rank) : 1;
    // Streamed in blocks (blocked()) only when it folds into one dim, each
    // block's start aligned; rows of a runtime count would need more.
    if (k.has_reductions() || shape_.size() != 1) return;
  }
  // An in-place output stores through its input's pointer, whose alignment
  // nobody promised, into lines the kernel has just read: never streamed.
  for (size_t o = 0; o < k.outputs.size(); ++o)
    streamed_[o] = k.stream_stores && k.aliased_input(o) < 0 && rows_stay_aligned(o);
  any_streamed_ = std::any_of(streamed_.begin(), streamed_.end(), [](uint8_t s) { return s != 0; });
  row_rank_ = k.has_reductions() ? size_t(k.row_rank) : 1;
}

void Lowering::run(const std::string &symbol) {
  std::string name = symbol + ".body";
  llvm::Function *body = k_.has_reductions() ? build_row_body(name) : build_body(name);
  build_entry(symbol, body);
}

int64_t Lowering::row_length() const {
  int64_t n = 1;
  for (size_t d = outer_rank(); d < rank(); ++d) n *= shape_[d];
  return n;
}

std::vector<int64_t> Lowering::strides_of(size_t buf) const {
  return k_.shape.empty() ? std::vector<int64_t>{0} : k_.buffer(buf).strides;
}

// Whether output o's rows start where its element 0 does, modulo 64 bytes
// (given rank-1 blocks of kStreamBlock): then, with a 64-byte aligned
// element 0, LLVM can prove the vector stores of the row aligned, which
// non-temporal vector stores need. Per-row outputs are single stores: never.
bool Lowering::rows_stay_aligned(size_t o) const {
  std::vector<int64_t> st = strides_of(k_.inputs.size() + o);
  if (st.back() != 1) return false;
  int64_t size = int64_t(itemsize(k_.outputs[o].buffer.dtype));
  return std::all_of(st.begin(), st.end() - 1, [&](int64_t s) { return s * size % kStreamAlign == 0; });
}

// The extent of (collapsed) dim 0: shape_[0], or for a runtime dim 0 the
// call's extent times the dims collapse_dims merged into it.
Value *Lowering::dim0_extent(IRBuilder<> &b, Value *buffers) {
  if (!k_.runtime_dim0) return b.getInt64(shape_[0]);
  Value *n = runtime_extent(b, buffers, 0);
  return dim0_scale_ == 1 ? n : b.CreateMul(n, b.getInt64(dim0_scale_), "dim0", true, true);
}

// Entry `which` of the call's extents (0: dim 0's, 1: a runtime row's length).
Value *Lowering::runtime_extent(IRBuilder<> &b, Value *buffers, int64_t which) {
  auto *ptr = llvm::PointerType::getUnqual(c_);
  Value *slot = b.CreateConstInBoundsGEP1_64(ptr, buffers, k_.num_buffers());
  Value *extents = b.CreateLoad(ptr, slot, "extents");
  return b.CreateLoad(b.getInt64Ty(), b.CreateConstInBoundsGEP1_64(b.getInt64Ty(), extents, uint64_t(which)),
                      which == 0 ? "extent" : "row.length");
}

// Iterations of the parallel loop, given dim 0's extent n0.
Value *Lowering::outer_count(IRBuilder<> &b, Value *n0) const {
  auto ceil_div = [&](int64_t d) { return b.CreateUDiv(b.CreateAdd(n0, b.getInt64(d - 1)), b.getInt64(d)); };
  if (blocked()) return ceil_div(kStreamBlock);
  if (block_ > 0) return ceil_div(block_); // row blocks: outer_rank() == 1
  if (rank() == 1) return n0;
  Value *n = n0;
  for (size_t d = 1; d < outer_rank(); ++d) n = b.CreateMul(n, b.getInt64(shape_[d]));
  return n;
}

int64_t Lowering::outer_grain() const {
  int64_t grain = k_.grain > 0 ? k_.grain : kDefaultGrain;
  if (blocked()) return (grain + kStreamBlock - 1) / kStreamBlock;
  if (rank() == 1) return grain;
  int64_t rows = std::max<int64_t>(1, grain / std::max<int64_t>(1, row_length()));
  if (block_ > 0) return (rows + block_ - 1) / block_; // in blocks
  return tiled_ ? std::max<int64_t>(rows, kMinTileRows) : rows; // tiles want neighbouring rows together
}

void Lowering::stamp(llvm::Function *f) {
  f->addFnAttr(llvm::Attribute::NoUnwind);
  if (!target_.cpu.empty()) f->addFnAttr("target-cpu", target_.cpu);
  if (!target_.features.empty()) f->addFnAttr("target-features", target_.features);
}

llvm::FunctionType *Lowering::body_type() {
  auto *i64 = llvm::Type::getInt64Ty(c_);
  auto *ptr = llvm::PointerType::getUnqual(c_);
  return llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {ptr, i64, i64}, false);
}

void Lowering::build_entry(const std::string &symbol, llvm::Function *body) {
  auto *ptr = llvm::PointerType::getUnqual(c_);
  auto *i64 = llvm::Type::getInt64Ty(c_);
  auto *fty = llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {ptr}, false);
  auto *f = llvm::Function::Create(fty, llvm::Function::ExternalLinkage, symbol, m_);
  stamp(f);
  auto *pfty = llvm::FunctionType::get(llvm::Type::getVoidTy(c_), {i64, i64, i64, ptr, ptr}, false);
  llvm::FunctionCallee pfor = m_.getOrInsertFunction(kParallelForSymbol, pfty);
  IRBuilder<> b(llvm::BasicBlock::Create(c_, "entry", f));
  if (k_.runtime_layout) { // rows of dims 0..rank-2; a chunk of about kDefaultGrain elements
    const std::vector<Value *> words = load_layout(b, f->getArg(0));
    Value *rows = words[0];
    for (size_t d = 1; d + 1 < rank(); ++d) rows = b.CreateMul(rows, words[d]);
    Value *inner = b.CreateBinaryIntrinsic(llvm::Intrinsic::umax, words[rank() - 1], b.getInt64(1));
    Value *grain = b.CreateUDiv(b.getInt64(k_.grain > 0 ? k_.grain : kDefaultGrain), inner);
    grain = b.CreateBinaryIntrinsic(llvm::Intrinsic::umax, grain, b.getInt64(1), nullptr, "grain");
    b.CreateCall(pfor, {b.getInt64(0), rows, grain, body, f->getArg(0)});
    b.CreateRetVoid();
    return;
  }
  Value *count = outer_count(b, dim0_extent(b, f->getArg(0)));
  Value *grain = b.getInt64(outer_grain());
  if (k_.runtime_row) { // rows per chunk from the call's length, as outer_grain from the static one
    Value *len = b.CreateBinaryIntrinsic(llvm::Intrinsic::umax, runtime_extent(b, f->getArg(0), 1), b.getInt64(1));
    grain = b.CreateUDiv(b.getInt64(k_.grain > 0 ? k_.grain : kDefaultGrain), len);
    grain = b.CreateBinaryIntrinsic(llvm::Intrinsic::umax, grain, b.getInt64(tiled_ ? kMinTileRows : 1), nullptr, "grain");
  }
  b.CreateCall(pfor, {b.getInt64(0), count, grain, body, f->getArg(0)});
  b.CreateRetVoid();
}

// Non-temporal stores are weakly ordered: without a fence, the thread that
// joins this chunk (the pool's done counter is a locked RMW, which x86 does
// order them by, but the C++ model says nothing about them) could read stale
// lines. One sfence per chunk, on the thread that stored.
void Lowering::fence_streamed_stores(IRBuilder<> &b) {
  if (!any_streamed_) return;
  llvm::Triple triple(target_.triple);
  if (triple.isX86()) b.CreateIntrinsic(llvm::Intrinsic::x86_sse_sfence, {}, {});
  else b.CreateFence(llvm::AtomicOrdering::SequentiallyConsistent);
}

// The buffer pointers, loaded once per chunk. An output written in place
// takes its input's pointer (its own slot is not read): with one pointer,
// LLVM sees that element j's loads and store touch the same address, where
// two pointers would need a runtime overlap check that in-place data fails.
void Lowering::load_buffers(IRBuilder<> &b, llvm::Function *f) {
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

// Element offset of row `o`'s first element in every buffer (dims 0..outer_rank()-1).
std::vector<Value *> Lowering::row_bases(IRBuilder<> &b, Value *o) {
  std::vector<Value *> zero(k_.num_buffers(), b.getInt64(0));
  return offset_bases(b, zero, o, 0, outer_rank());
}

// `bases` moved to the point whose flat index over dims [from, to) is `flat`.
std::vector<Value *> Lowering::offset_bases(IRBuilder<> &b, const std::vector<Value *> &bases, Value *flat, size_t from,
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
    for (size_t d = from; d < to; ++d) {
      if (st[d] == 0) continue;
      // A runtime row: a row-major buffer steps its outer dims by multiples of
      // the call's row length (of the assumed length shape_.back() here).
      if (row_len_ && d < outer_rank() && (k_.row_strided.at(buf) >> d & 1)) {
        const int64_t times = st[d] / shape_.back();
        Value *step = times == 1 ? row_len_ : b.CreateMul(row_len_, b.getInt64(times), "", true, true);
        base = b.CreateAdd(base, b.CreateMul(idx[d - from], step));
        continue;
      }
      base = b.CreateAdd(base, b.CreateMul(idx[d - from], b.getInt64(st[d])));
    }
    out.push_back(base);
  }
  return out;
}

Value *Lowering::element_ptr(IRBuilder<> &b, size_t buf, DType t, Value *base, Value *j) {
  int64_t s = strides_of(buf).back();
  Value *off = s == 0 ? base : b.CreateAdd(base, b.CreateMul(j, b.getInt64(s)));
  return b.CreateInBoundsGEP(memory_type(c_, t), bufs_[buf], off);
}

DType Lowering::buffer_dtype(size_t buf) const {
  return k_.buffer(buf).dtype;
}

// Loop metadata on a loop's latch (LoopMD).
void Lowering::set_loop_md(llvm::BranchInst *latch, LoopMD kind) {
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

Value *Lowering::load_element(IRBuilder<> &b, const Node &n, const std::vector<Value *> &bases, Value *j) {
  Value *v = b.CreateLoad(memory_type(c_, n.dtype), element_ptr(b, n.input, n.dtype, bases[n.input], j));
  return n.dtype == DType::Bool ? b.CreateICmpNE(v, b.getInt8(0)) : v;
}

void Lowering::store_output(IRBuilder<> &b, size_t o, const std::vector<Value *> &bases, Value *j, Value *v) {
  const OutputSpec &out = k_.outputs[o];
  size_t buf = k_.inputs.size() + o;
  if (out.buffer.dtype == DType::Bool) v = b.CreateZExt(v, b.getInt8Ty());
  b.CreateStore(v, element_ptr(b, buf, out.buffer.dtype, bases[buf], j));
}

} // namespace kiln::codegen::lower_impl

namespace kiln::codegen {
namespace {

using lower_impl::Lowering;
using lower_impl::kStreamedBufferMD;

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
    return d.buffer(b).strides;
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
  // The code is the same for every traced extent; and at this size dim 0 is
  // never dropped as a size-1 dim. So for a runtime row's traced length.
  if (shared.runtime_dim0) shared.shape[0] = kRuntimeExtentAssumed;
  if (shared.runtime_row) {
    KernelDesc assumed = shared.at_row_length(kRuntimeRowAssumed);
    assumed.runtime_row = true; // (at_row_length turned it off; the flags stay for the lowering)
    assumed.row_strided = shared.row_strided;
    shared = std::move(assumed);
  }
  // A runtime layout's dims were collapsed for every size (lower_symbolic_group);
  // the traced sizes must not merge more.
  // A runtime row's outer dims stay as they are: its row_strided masks name them.
  KernelDesc simple = shared.runtime_layout || shared.runtime_row ? shared
                      : desc.has_reductions()                     ? collapse_outer_dims(shared)
                                                                  : collapse_dims(shared);
  Lowering(simple, *m, target).run(symbol);
  std::string problems;
  llvm::raw_string_ostream os(problems);
  if (llvm::verifyModule(*m, &os)) KILN_FAIL("codegen: kernel ", symbol, " produced invalid IR: ", os.str());
  return m;
}

} // namespace kiln::codegen
