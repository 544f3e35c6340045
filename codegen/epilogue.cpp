// Contraction + elementwise epilogue as one plan step (see epilogue.h).
//
// The output domain D (the contraction's result shape) is viewed as nb batches
// of [M, N] matrices: dims [0, p) are batches, [p, q) fold into the rows and
// [q, R) into the columns. Every buffer the step touches (the contraction's
// operands, the epilogue's operands, the results) is described by a MatView over
// that partition; a buffer whose dims do not fold makes the build throw, and
// the group then runs eagerly. The epilogue kernel is lowered for one tile
// [mb, nc] (a scratch fusion group whose body is the epilogue with tile shapes),
// with each buffer's row/column strides baked in; per tile it gets base pointers.
#include "codegen/epilogue.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <array>
#include <memory>
#include <optional>
#include <unordered_map>

#include <spdlog/spdlog.h>

#include "codegen/gemm/gemm.h"
#include "codegen/gemm/conv.h"
#include "codegen/gemm/winograd.h"
#include "codegen/gemm/depthwise.h"
#include "codegen/gemm/path.h"
#include "codegen/gemm/versioned_pack.h"
#include "codegen/jit.h"
#include "codegen/op_lowering.h"
#include "codegen/product_step.h"
#include "passes/group_geometry.h"
#include "passes/lowering_check.h"
#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "runtime/allocator.h"
#include "runtime/error.h"
#include "runtime/kernels/linalg_internal.h"
#include "runtime/log.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/version.h"

namespace kiln::codegen {
namespace {

// A tile of C stays within L2 while the epilogue reads it: 64K elements.
constexpr int64_t kTileElems = 64 * 1024;
constexpr int64_t kJitTileElems = 256 * 1024; // f32: L2 (1 MiB)
constexpr int64_t kMaxTileRows = 256;
constexpr int64_t kMinTileCols = 64;

std::atomic<int64_t> g_jit_steps_built{0};
std::atomic<int64_t> g_register_epilogues_built{0};
std::atomic<int64_t> g_a_in_place_steps_built{0};

std::atomic<bool> &register_epilogues_flag() {
  static std::atomic<bool> flag{[] {
    const char *e = std::getenv("KILN_GEMM_EPILOGUE");
    if (!e || !*e || std::string_view(e) == "registers") return true;
    if (std::string_view(e) == "tile") return false;
    kiln::log()->warn("KILN_GEMM_EPILOGUE='{}' is not registers or tile: using registers", e);
    return true;
  }()};
  return flag;
}

// Buffers of one epilogue (a tile kernel's, or one in registers): run_tile's array.
constexpr size_t kMaxEpilogueBuffers = 64;
static_assert(kMaxEpilogueBuffers <= gemm::kMaxConvEpilogueBuffers, "a conv epilogue passes run_tile's buffers");

bool is_contraction(const ir::Node &n) {
  return n.kind() == ir::Node::Kind::Op && n.info().kind == OpKind::Contraction;
}

// Element (b, i, j) of a buffer at off[b] + i * rs + j * cs (elements), or,
// with one offset, at off[0] + b * bs + ... (a batch read per call: its
// offsets are a progression, and the batch count is the call's).
struct MatView {
  std::vector<int64_t> off;
  int64_t rs = 0, cs = 0;
  int64_t bs = 0;
  int64_t at(int64_t b) const { return off.size() == 1 ? off[0] + b * bs : off[size_t(b)]; }
  // The single-dim batch progression form of off (batches of one dim).
  void to_progression() {
    bs = off.size() > 1 ? off[1] - off[0] : 0;
    off.resize(1);
  }
};

using passes::broadcast_strides;

// The stride of dims [lo, hi) walked as one dim, or nothing when they do not nest.
std::optional<int64_t> fold(IntArrayRef sizes, const std::vector<int64_t> &st, size_t lo, size_t hi) {
  bool have = false;
  int64_t inner = 0, prev_stride = 0, prev_size = 1;
  for (size_t d = hi; d-- > lo;) {
    if (sizes[d] == 1) continue;
    if (have && st[d] != prev_stride * prev_size) return std::nullopt;
    if (!have) inner = st[d];
    have = true;
    prev_stride = st[d];
    prev_size = sizes[d];
  }
  return inner;
}

// Offsets of each batch (row-major over dims [0, p)).
std::vector<int64_t> batch_offsets(IntArrayRef sizes, const std::vector<int64_t> &st, size_t p) {
  int64_t nb = 1;
  for (size_t d = 0; d < p; ++d) nb *= sizes[d];
  std::vector<int64_t> offs(size_t(std::max<int64_t>(nb, 0)), 0);
  std::vector<int64_t> idx(p, 0);
  int64_t off = 0;
  for (int64_t b = 0; b < nb; ++b) {
    offs[size_t(b)] = off;
    for (size_t d = p; d-- > 0;) {
      if (++idx[d] < sizes[d]) {
        off += st[d];
        break;
      }
      off -= (sizes[d] - 1) * st[d];
      idx[d] = 0;
    }
  }
  return offs;
}

std::optional<MatView> mat_view(IntArrayRef sizes, const std::vector<int64_t> &st, size_t p, size_t q) {
  std::optional<int64_t> rs = fold(sizes, st, p, q), cs = fold(sizes, st, q, sizes.size());
  if (!rs || !cs) return std::nullopt;
  return MatView{batch_offsets(sizes, st, p), *rs, *cs};
}

std::vector<int64_t> contiguous_of(IntArrayRef shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t d = shape.size(); d-- > 1;) s[d - 1] = s[d] * std::max<int64_t>(shape[d], 1);
  return s;
}

// Whether `strides` lay `shape` out densely (a permutation of contiguous
// strides): every element has its own slot and the buffer has no holes.
bool dense_permutation(IntArrayRef shape, IntArrayRef strides) {
  std::vector<std::pair<int64_t, int64_t>> dims; // (stride, size) of the dims that matter
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] != 1) dims.emplace_back(strides[d], shape[d]);
  std::sort(dims.begin(), dims.end());
  int64_t expect = 1;
  for (auto [stride, size] : dims) {
    if (stride != expect) return false;
    expect *= size;
  }
  return true;
}

// A tensor of `t`'s shape with its strides (the layout pass's) or contiguous.
Tensor allocate(const ir::TensorType &t, bool meta) {
  if (!t.strides) return kiln::detail::make_tensor(t.shape, t.dtype, meta);
  KILN_CHECK(t.strides->size() == t.shape.size() && dense_permutation(t.shape, *t.strides), "epilogue: result type ",
             t.str(), " is not a dense layout");
  int64_t extent = 1;
  for (size_t d = 0; d < t.shape.size(); ++d) {
    if (t.shape[d] == 0) return kiln::detail::make_tensor(t.shape, t.dtype, meta);
    extent += (t.shape[d] - 1) * (*t.strides)[d];
  }
  Tensor base = kiln::detail::make_tensor({extent}, t.dtype, meta);
  return kiln::detail::make_view(base, t.shape, *t.strides, 0);
}

// What one epilogue kernel buffer is at run time.
struct Source {
  enum class Kind { Operand, Contraction } kind;
  size_t index = 0; // Operand: the group operand
  MatView view;
};

// One member per dtype (a step is built for one of them).
template <template <class> class X> struct ByDType {
  X<float> f32;
  X<double> f64;
  template <class T> X<T> &get() {
    if constexpr (sizeof(T) == 8) return f64;
    else return f32;
  }
  template <class T> const X<T> &get() const {
    if constexpr (sizeof(T) == 8) return f64;
    else return f32;
  }
};
template <class T> using PackedBCache = gemm::VersionedPack<gemm::PackedB<T>>;
template <class T> using ConvPackCache = gemm::VersionedPack<gemm::PackedConvWeight<T>>;
template <class T> using DwPackCache = gemm::VersionedPack<gemm::DepthwiseWeight<T>>;

std::string image_size_misfit(const ir::Node &c);

// Why conv2d `c` (in a graph with symbols) cannot read its images per call,
// or "". The batch N may be symbolic: each image is one [O, Ho * Wo] product.
// The image sizes may be too where kiln's conv takes them (image_size_misfit).
// The channels may not: the micro-kernels and the packed weight are the traced C's.
std::string images_per_call_misfit(const ir::Node &c) {
  const ir::Value *x = c.operand(0), *w = c.operands().size() > 1 ? c.operand(1) : nullptr;
  if (!x || !w || c.results().size() != 1) return "not a conv2d with an input and a weight";
  if (w->type().symbolic()) return "the weight " + w->type().str() + " is symbolic";
  if (c.operands().size() > 2 && c.operand(2) && c.operand(2)->type().symbolic()) return "the bias is symbolic";
  bool image_size = false;
  for (const ir::TensorType *t : {&x->type(), &c.result()->type()}) {
    if (t->sym.size() != 4) return "not a 4-D conv2d";
    if (!t->sym[1].is_constant()) return "the channels of " + t->str() + " are symbolic";
    image_size |= !t->sym[2].is_constant() || !t->sym[3].is_constant();
  }
  return image_size ? image_size_misfit(c) : "";
}

// Why conv2d `c` cannot read its image sizes per call, or "". kiln's conv
// takes them per call (its micro-kernels and packed weight depend on the
// channels and the window only), and the epilogue then runs in the
// micro-kernels' registers, each buffer addressed by the call's strides. The
// depthwise kernel runs its epilogue on each block through one kernel that
// reads the block's extents and channel strides per block (compile_call_kernel).
// Eager's im2col path lowers its epilogue's tiles per image width, and a
// channels-last output is not kiln's conv either.
std::string image_size_misfit(const ir::Node &c) {
  if (gemm::path() != gemm::Path::Jit) return "KILN_GEMM=blas (only kiln's conv reads its image size per call)";
  if (!register_epilogues()) return "KILN_GEMM_EPILOGUE=tile (tile kernels are lowered per image size)";
  if (c.result()->type().strides) return "a channels-last output";
  return "";
}

// Why contraction `c` (in a graph with symbols) cannot read its rows M per
// call, or "": only M may be symbolic (N, K and B are fixed, so B is packed
// once and the column tiles are the traced ones), on kiln's GEMM.
std::string rows_per_call_misfit(const ir::Node &c) {
  if (c.op() == OpId::Conv2d) return images_per_call_misfit(c);
  if (gemm::path() != gemm::Path::Jit) return "KILN_GEMM=blas (only kiln's GEMM reads M per call)";
  if (c.op() != OpId::Matmul && c.op() != OpId::Mm) return std::string(c.mnemonic()) + " (only matmul and mm)";
  if (c.operands().size() < 2 || !c.operand(0) || !c.operand(1) || c.results().size() != 1) return "not a product";
  const ir::TensorType &a = c.operand(0)->type(), &b = c.operand(1)->type(), &r = c.result()->type();
  if (b.symbolic()) return "B " + b.str() + " is symbolic (only M is read per call)";
  if (a.symbolic() && !a.sym.back().is_constant()) return "K of " + a.str() + " is symbolic";
  if (r.symbolic() && !r.sym.back().is_constant()) return "N of " + r.str() + " is symbolic";
  return "";
}

// How one buffer of a conv's register epilogue is walked in one call whose
// image size is read per call: element (image b, channel i, pixel j) at
// b * bs + i * rs + j * cs.
struct Walk {
  int64_t bs = 0, rs = 0, cs = 0;
};

// `t`'s walk over the conv output [N, O, Ho, Wo] (`t` broadcasts to it), or
// nothing when its pixels do not fold into one dim.
std::optional<Walk> walk_of(const Tensor &t, const std::array<int64_t, 4> &D) {
  if (t.dim() > 4) return std::nullopt;
  std::array<int64_t, 4> st{};
  for (int64_t d = 0; d < 4; ++d) {
    const int64_t td = d - (4 - t.dim());
    if (td < 0 || t.size(td) == 1) continue;
    if (t.size(td) != D[size_t(d)]) return std::nullopt;
    st[size_t(d)] = t.stride(td);
  }
  Walk w{st[0], st[1], 0};
  if (D[2] > 1 && D[3] > 1 && st[2] != st[3] * D[3]) return std::nullopt;
  w.cs = D[3] > 1 ? st[3] : D[2] > 1 ? st[2] : 0;
  return w;
}

// One call of a conv whose image size is read per call: its shape and the
// walks of the register epilogue's buffers (on the stack: no allocation).
struct ConvCall {
  kiln::gemm::ConvShape shape;
  std::array<Walk, kMaxEpilogueBuffers> walks;
  size_t c_bytes = 0; // the conv output in the call's scratch (no group result), 64-byte lines
};

class Step final : public EpilogueStep {
public:
  Step(const ir::Node &group, const std::vector<Tensor> &operands, std::shared_ptr<ir::Graph> owned = nullptr,
       std::vector<const ir::Value *> outer = {}, bool rows_per_call = false)
      : owned_(std::move(owned)), group_(group), rows_per_call_(rows_per_call) {
    const ir::Graph &body = *group.body();
    outer_ = outer.empty() ? std::vector<const ir::Value *>(group.operands().begin(), group.operands().end())
                           : std::move(outer);
    analyse(body);
    for (const ir::Value *r : group.results()) metas_.push_back(allocate(r->type(), true));
    dtype_ = contraction_->result()->type().dtype;
    KILN_CHECK(dtype_ == kFloat32 || dtype_ == kFloat64, "epilogue: ", dtype_, " contraction");
    domain_ = contraction_->result()->type().shape;
    KILN_CHECK(!domain_.empty() && std::all_of(domain_.begin(), domain_.end(), [](int64_t s) { return s > 0; }),
               "epilogue: empty or scalar contraction output ", shape_str(domain_));
    if (rows_per_call_) {
      const std::string why = rows_per_call_misfit(*contraction_);
      KILN_CHECK(why.empty(), "epilogue: ", contraction_->op() == OpId::Conv2d ? "the images are" : "M is",
                 " not read per call: ", why);
    }
    if (contraction_->op() == OpId::Conv2d) {
      plan_conv(operands);
    } else {
      jit_ = gemm::path() == gemm::Path::Jit;
      plan_matmul(operands);
      if (jit_) jit_ = dtype_ == kFloat64 ? set_up_jit<double>() : set_up_jit<float>();
      KILN_CHECK(!rows_per_call_ || (jit_ && nb_ == 1), "epilogue: M is not read per call: ",
                 jit_ ? "the product has batches that B does not share" : "kiln's GEMM does not take it");
    }
    compile_kernels(operands);
    KILN_CHECK(!image_size_per_call_ ||
                   (jit_conv_ && (epilogue_.empty() || (jit_dw_ ? call_kernel_ != nullptr : in_registers_))),
               "epilogue: the image size is not read per call: ",
               !jit_conv_ ? "the conv is not on kiln's conv kernels"
               : jit_dw_  ? "the depthwise conv's epilogue has no kernel over any block"
                          : "the epilogue does not run in the micro-kernels' registers");
    kiln::log()->debug("epilogue: %{} ({}{}) as {} x [{}, {}] in tiles of [{}, {}], {} epilogue ops, {} kernels, {}{}",
                 group.result()->name(), contraction_->mnemonic(), channels_last_ ? ", channels-last" : "", nb_, M_,
                 N_, tm_, tn_, epilogue_.size(), num_kernels(), contraction_kind(),
                 jit_ && config_.a_in_place ? ", A read in place" : "");
  }

  std::string_view contraction_kind() const override {
    if (contraction_->op() == OpId::Conv2d) return jit_conv_ ? "conv-jit" : "conv";
    return jit_ ? "gemm-jit" : "blas";
  }
  int64_t packed_weight_bytes() const override { return packed_bytes_; }
  bool reads_image_size_per_call() const override { return image_size_per_call_; }

  const std::vector<Tensor> &result_metas() const override { return metas_; }
  int64_t num_kernels() const override { return int64_t(kernels_.size() + eks_.keep.size() + (call_kernel_ ? 1 : 0)); }
  bool epilogue_in_registers() const override { return in_registers_; }

  std::vector<Tensor> run(const std::vector<Tensor> &operands) const override {
    KILN_CHECK(!rows_per_call_, "internal: a step reading M per call runs through run_into");
    std::vector<Tensor> outs;
    outs.reserve(group_.results().size());
    for (const ir::Value *r : group_.results()) outs.push_back(allocate(r->type(), false));
    compute(operands, outs, nullptr);
    return outs;
  }

  // A conv output that is no group result (the epilogue reads it block by
  // block), then a conv weight that is no parameter, packed for this call.
  size_t scratch_bytes() const override { return c_scratch_bytes() + weight_scratch_bytes(); }

  void run_into(const std::vector<Tensor> &operands, const std::vector<Tensor> &results,
                void *scratch) const override {
    KILN_CHECK(results.size() == metas_.size(), "epilogue: ", results.size(), " result buffers for ",
               metas_.size(), " results");
    for (size_t i = 0; i < results.size(); ++i) {
      const Tensor &r = results[i], &m = metas_[i];
      // M read per call: any rows, contiguous as the traced metas were (the views' strides).
      if (rows_per_call_ && r.dtype() == m.dtype() && r.dim() == m.dim() &&
          (r.size(-1) == m.size(-1) || image_size_per_call_) && r.is_contiguous() && !r.is_meta() &&
          r.numel() == results[0].numel())
        continue;
      KILN_CHECK(r.dtype() == m.dtype() && r.sizes() == m.sizes() && r.strides() == m.strides() && !r.is_meta(),
                 "epilogue: result buffer ", i, " is ", r.dtype(), shape_str(r.sizes()), " strides ",
                 shape_str(r.strides()), ", expected ", m.dtype(), shape_str(m.sizes()), " strides ",
                 shape_str(m.strides()));
    }
    compute(operands, results, scratch);
  }

private:
  // A call's rows and tiles: the traced ones, or (rows_per_call_) the call's.
  struct Tiles {
    int64_t M = 0, tm = 0, tn = 0;
    int64_t images = 0; // conv2d: the batch N
  };

  void compute(const std::vector<Tensor> &operands, const std::vector<Tensor> &outs, void *scratch) const {
    const bool conv = contraction_->op() == OpId::Conv2d;
    if (image_size_per_call_) return compute_conv_call(operands, outs, scratch);
    Tiles t{M_, tm_, tn_, conv ? domain_[0] : 0};
    if (rows_per_call_ && conv) t.images = call_images(operands, outs);
    else if (rows_per_call_) t = tiles_for(call_rows(operands, outs));
    if (t.M == 0 || (conv && t.images == 0)) return;
    Tensor owned; // no caller scratch (run(), or a batch read per call), or one too small: this call's
    const size_t bytes = c_scratch_bytes(t.images) + weight_scratch_bytes();
    if (bytes > 0 && (!scratch || bytes > scratch_bytes())) {
      owned = kiln::detail::make_tensor({int64_t((bytes + 7) / 8)}, kFloat64);
      scratch = owned.raw_data();
    }
    if (dtype_ == kFloat32) run_typed<float>(operands, outs, scratch, t);
    else run_typed<double>(operands, outs, scratch, t);
  }

  // A conv whose image size is read per call: its shape from the input, the
  // results checked against it, the scratch sized for it.
  void compute_conv_call(const std::vector<Tensor> &operands, const std::vector<Tensor> &outs, void *scratch) const {
    ConvCall call;
    if (!conv_call(operands, outs, call)) return;
    Tensor owned; // no caller scratch, or one sized for the traced images: this call's
    const size_t bytes = call.c_bytes + weight_scratch_bytes();
    if (bytes > 0 && (!scratch || bytes > scratch_bytes())) {
      owned = kiln::detail::make_tensor({int64_t((bytes + 7) / 8)}, kFloat64);
      scratch = owned.raw_data();
    }
    if (dtype_ == kFloat32) run_conv<float>(operands, outs, scratch, call.shape.N, &call);
    else run_conv<double>(operands, outs, scratch, call.shape.N, &call);
  }

  // This call's conv shape (input [N, C, H, W] of the traced C; results
  // [N, O, Ho, Wo], contiguous, as conv2d's rule gives them) and its buffers'
  // walks, each checked against how the epilogue's code reads it. False when
  // the output is empty.
  bool conv_call(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs, ConvCall &call) const {
    kiln::gemm::ConvShape &s = call.shape;
    s = *jit_conv_;
    const Tensor &x = ins.at(operand_of(contraction_->operand(0)));
    KILN_CHECK(x.dim() == 4 && x.size(1) == s.C, "internal: epilogue: conv2d input ", shape_str(x.sizes()),
               " for a weight of ", s.C, " channels");
    s.N = x.size(0), s.H = x.size(2), s.W = x.size(3);
    s.Ho = (s.H + 2 * s.ph - s.dh * (s.kH - 1) - 1) / s.sh + 1;
    s.Wo = (s.W + 2 * s.pw - s.dw * (s.kW - 1) - 1) / s.sw + 1;
    const std::array<int64_t, 4> D{s.N, s.O, s.Ho, s.Wo};
    for (const Tensor &o : outs)
      KILN_CHECK(o.sizes() == IntArrayRef(D.data(), 4) && o.is_contiguous(), "internal: epilogue: conv2d result ",
                 shape_str(o.sizes()), " for the input ", shape_str(x.sizes()));
    if (s.N == 0 || s.pixels() <= 0) return false;
    // (the depthwise kernel keeps its blocks in the thread's scratch)
    call.c_bytes = c_result_ >= 0 || jit_dw_ ? 0 : round64(itemsize(dtype_) * size_t(s.N * s.O * s.pixels()));
    using O = gemm::Epilogue::Operand;
    const bool walks = in_registers_ || call_kernel_;
    size_t n = 0;
    for (size_t q = 0; q < buffer_sources_.size() && walks; ++q, ++n) {
      const Source &src = sources_[buffer_sources_[q]];
      if (src.kind == Source::Kind::Contraction) continue;
      const Tensor &t = ins.at(src.index);
      const std::optional<Walk> w = walk_of(t, D);
      KILN_CHECK(w, "internal: epilogue: operand ", src.index, " ", shape_str(t.sizes()), " strides ",
                 shape_str(t.strides()), " does not fold over ", shape_str(IntArrayRef(D.data(), 4)));
      // The code reads a Tile or Col operand's pixels at unit stride, a Row
      // or Scalar one's not at all; the channels of a Col or Scalar one not at
      // all. The call kernel's pixel strides are compiled in.
      bool as_compiled = s.pixels() == 1;
      if (call_kernel_) {
        as_compiled |= w->cs == call_inner_[q];
      } else {
        const O kind = epi_kinds_[q];
        const bool cols = kind == O::Tile || kind == O::Col;
        as_compiled |= cols ? w->cs == 1 : w->cs == 0;
      }
      KILN_CHECK(as_compiled, "internal: epilogue: operand ", src.index, " ", shape_str(t.sizes()),
                 " does not walk the pixels as its code reads them");
      call.walks[n] = *w;
    }
    for (size_t o = 0; o < kernel_outputs_.size() && walks; ++o, ++n)
      call.walks[n] = Walk{s.O * s.pixels(), s.pixels(), 1}; // contiguous, checked above
    return true;
  }

  // N of this call: [N, O, Ho, Wo] results, an input [N, C, H, W] of the traced
  // C, H and W (the kernels would read past a buffer of other sizes).
  int64_t call_images(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs) const {
    const int64_t n = outs.at(0).size(0);
    const Tensor &x = ins.at(operand_of(contraction_->operand(0)));
    KILN_CHECK(x.dim() == 4 && x.size(0) == n && x.size(1) == x_chw_[0] && x.size(2) == x_chw_[1] && x.size(3) == x_chw_[2],
               "internal: epilogue: conv2d input ", shape_str(x.sizes()), " for ", n, " images");
    for (const Tensor &o : outs)
      KILN_CHECK(o.dim() == 4 && o.size(0) == n && o.size(1) == domain_[1] && o.size(2) == domain_[2] &&
                     o.size(3) == domain_[3],
                 "internal: epilogue: conv2d result ", shape_str(o.sizes()), " for ", n, " images");
    for (const Source &s : sources_)
      if (s.kind == Source::Kind::Operand && s.view.bs != 0)
        KILN_CHECK(ins.at(s.index).is_contiguous() && ins.at(s.index).size(0) == n, "internal: epilogue: operand ",
                   s.index, " ", shape_str(ins.at(s.index).sizes()), " for ", n, " images");
    return n;
  }

  // M of this call (results [rows..., N], A [rows..., K]); the kernels would
  // read past a buffer of other sizes.
  int64_t call_rows(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs) const {
    const int64_t M = outs.at(0).numel() / N_;
    const Tensor &a = ins.at(operand_of(contraction_->operand(0)));
    KILN_CHECK(a.numel() == M * K_ && a.is_contiguous(), "internal: epilogue: A ", shape_str(a.sizes()), " for ", M,
               " rows of K = ", K_);
    for (const Source &s : sources_)
      if (s.kind == Source::Kind::Operand && s.view.rs != 0)
        KILN_CHECK(ins.at(s.index).is_contiguous() && ins.at(s.index).numel() >= M * (s.view.cs ? N_ : 1),
                   "internal: epilogue: operand ", s.index, " ", shape_str(ins.at(s.index).sizes()), " for ", M,
                   " rows");
    return M;
  }

  // The body: one contraction reading body inputs, then elementwise ops over its output.
  void analyse(const ir::Graph &body) {
    for (const ir::Node *n : body.nodes()) {
      if (is_contraction(*n)) {
        KILN_CHECK(!contraction_, "epilogue: the group has several contractions");
        contraction_ = n;
        continue;
      }
      KILN_CHECK(n->kind() == ir::Node::Kind::Op && n->info().kind == OpKind::Elementwise && n->results().size() == 1,
                 "epilogue: ", n->mnemonic(), " is not elementwise");
      epilogue_.push_back(n);
    }
    KILN_CHECK(contraction_, "epilogue: the group has no contraction");
    for (const ir::Node *n : epilogue_)
      KILN_CHECK(IntArrayRef(n->result()->type().shape) == IntArrayRef(contraction_->result()->type().shape), "epilogue: ", n->mnemonic(),
                 " result ", shape_str(n->result()->type().shape), " is not the contraction's output shape");
    for (size_t i = 0; i < body.inputs().size(); ++i) input_index_[body.inputs()[i]] = i;
    for (const ir::Value *v : contraction_->operands())
      KILN_CHECK(!v || input_index_.count(v), "epilogue: a contraction operand is computed inside the group");
    for (size_t i = 0; i < body.outputs().size(); ++i)
      if (body.outputs()[i] == contraction_->result()) c_result_ = int(i);
  }

  size_t operand_of(const ir::Value *body_input) const { return input_index_.at(body_input); }

  // The epilogue's sources and result views over the partition [0, p) [p, q) [q, R).
  bool plan_views(const std::vector<Tensor> &operands, size_t p, size_t q) {
    sources_.clear();
    source_values_.clear();
    source_index_.clear();
    results_.clear();
    const ir::Graph &body = *group_.body();
    std::unordered_map<const ir::Value *, bool> inside;
    for (const ir::Node *n : epilogue_) inside[n->result()] = true;
    for (const ir::Node *n : epilogue_)
      for (const ir::Value *v : n->operands()) {
        KILN_CHECK(v, "epilogue: ", n->mnemonic(), " has an absent operand");
        if (inside.count(v) || source_index_.count(v)) continue;
        Source s;
        if (v == contraction_->result()) {
          s.kind = Source::Kind::Contraction;
        } else {
          s.kind = Source::Kind::Operand;
          s.index = operand_of(v);
          const Tensor &t = operands.at(s.index);
          std::optional<MatView> mv = mat_view(domain_, broadcast_strides(t.sizes(), t.strides(), domain_), p, q);
          if (!mv) return false;
          s.view = *mv;
        }
        source_index_[v] = sources_.size();
        source_values_.push_back(v);
        sources_.push_back(std::move(s));
      }
    for (size_t i = 0; i < body.outputs().size(); ++i) {
      std::optional<MatView> mv = mat_view(domain_, std::vector<int64_t>(metas_[i].strides().begin(), metas_[i].strides().end()), p, q);
      if (!mv) return false;
      results_.push_back(*mv);
    }
    return true;
  }

  // ---- matmul, mm, bmm: [batch..., M, K] @ [batch..., K, N]
  void plan_matmul(const std::vector<Tensor> &operands) {
    const Tensor &a = operands.at(operand_of(contraction_->operand(0)));
    const Tensor &b = operands.at(operand_of(contraction_->operand(1)));
    KILN_CHECK(a.dim() >= 2 && b.dim() >= 2 && a.dtype() == dtype_ && b.dtype() == dtype_,
               "epilogue: matmul operands ", shape_str(a.sizes()), " and ", shape_str(b.sizes()));
    const size_t R = domain_.size();
    K_ = a.size(-1);
    IntArrayRef batch(domain_.data(), R - 2);
    std::vector<int64_t> ab = broadcast_strides(IntArrayRef(a.sizes().data(), size_t(a.dim() - 2)),
                                                IntArrayRef(a.strides().data(), size_t(a.dim() - 2)), batch);
    std::vector<int64_t> bb = broadcast_strides(IntArrayRef(b.sizes().data(), size_t(b.dim() - 2)),
                                                IntArrayRef(b.strides().data(), size_t(b.dim() - 2)), batch);
    // A's strides over [batch..., M, K], B's over [batch..., K, N].
    Dims asz(batch), bsz(batch);
    asz.push_back(domain_[R - 2]), asz.push_back(K_);
    bsz.push_back(K_), bsz.push_back(domain_[R - 1]);
    std::vector<int64_t> ast = ab, bst = bb;
    ast.push_back(a.stride(-2)), ast.push_back(a.stride(-1));
    bst.push_back(b.stride(-2)), bst.push_back(b.stride(-1));
    // Batches fold into the rows when B is the same matrix for all of them (x @ W).
    bool b_shared = std::all_of(bb.begin(), bb.end(), [](int64_t s) { return s == 0; });
    if (R > 2 && b_shared && fold(asz, ast, 0, R - 1) && plan_views(operands, 0, R - 1)) {
      a_ = *mat_view(asz, ast, 0, R - 1);
      b_ = MatView{{0}, b.stride(-2), b.stride(-1)};
      nb_ = 1;
    } else {
      KILN_CHECK(plan_views(operands, R - 2, R - 1), "epilogue: an operand's strides do not fold into matrices");
      a_ = *mat_view(asz, ast, R - 2, R - 1);
      b_ = *mat_view(bsz, bst, R - 2, R - 1);
      nb_ = int64_t(a_.off.size());
    }
    M_ = 1;
    for (size_t d = 0; d + 1 < R; ++d) M_ *= domain_[d];
    M_ /= nb_;
    N_ = domain_[R - 1];
    check_c_writable();
    if (jit_) {
      config_ = dtype_ == kFloat64 ? gemm::product_config<double>(N_) : gemm::product_config<float>(N_);
      granule_ = config_.nr();
    }
    choose_tiles();
  }

  // The contraction writes C with unit column stride; a result C (strided by
  // the layout pass or not) must allow that.
  void check_c_writable() {
    if (c_result_ < 0) return;
    const MatView &c = results_[size_t(c_result_)];
    KILN_CHECK(c.cs == 1 || N_ == 1, "epilogue: contraction output columns are not contiguous");
    KILN_CHECK(c.rs >= N_ || M_ == 1, "epilogue: contraction output rows overlap");
  }

  // Whole rows (up to kMaxTileRows) times a column range: B, the larger
  // operand in W4/W5, is packed once per call rather than once per row block;
  // enough tiles to keep every thread busy.
  void choose_tiles() {
    const Tiles t = tiles_for(M_);
    tm_ = t.tm, tn_ = t.tn;
  }

  Tiles tiles_for(int64_t M) const {
    // A contraction alone writing a result of its own: no epilogue wants
    // L2-hot tiles, so one tile, which kiln's GEMM splits over the threads
    // itself. 256 x 1024 tiles of 2048^3 packed each block of B once per row
    // tile, 8 times per call (gemm-2048: 0.75 -> ~0.80 of the FMA peak).
    if (jit_ && epilogue_.empty() && c_result_ >= 0 && nb_ == 1) return {M, M, N_};
    const int64_t tm = std::min(M, kMaxTileRows);
    int64_t tn = N_;
    // Columns in multiples of the JIT GEMM's panel width nr (packed B is
    // addressed by whole panels), else of 16.
    const int64_t g = granule_;
    auto round16 = [g](int64_t v) { return (v + g - 1) / g * g; };
    // C tiles up to L2's size on kiln's GEMM (A is packed once per call for
    // all column tiles: shares_a), where BLAS calls take a quarter of it.
    // Several tiles per thread, which the threads claim one at a time
    // (parallel_for_chunks): on the shared machine the pool's second thread
    // often gets a core milliseconds late, and with one fixed tile per thread
    // the call waited for it (W5's linears: the caller ran 1.5-1.85 of the two
    // tiles on average and then waited for the rest).
    const int64_t max_elems = jit_ ? kJitTileElems : kTileElems;
    const int64_t want = int64_t(std::max(1, get_num_threads())) * (jit_ ? jit_tiles_per_thread(M) : 2);
    auto items = [&] { return nb_ * ((M + tm - 1) / tm) * ((N_ + tn - 1) / tn); };
    while (tm * tn > max_elems && tn > kMinTileCols) tn = round16((tn + 1) / 2);
    while (items() < want && tn > kMinTileCols) tn = round16((tn + 1) / 2);
    return {M, tm, std::min(tn, N_)};
  }

  // ---- kiln's GEMM (codegen/gemm): kernels resolved here, B packed when it
  // is a captured tensor. Returns false (BLAS then runs it) when the
  // generator cannot take the contraction, logging why.
  template <class T> bool set_up_jit() {
    auto no = [&](const std::string &why) {
      kiln::log()->debug("epilogue: %{} ({}) runs on BLAS: {}", group_.result()->name(), contraction_->mnemonic(), why);
      return false;
    };
    if (a_.rs < 0 || a_.cs < 0 || b_.rs < 0 || b_.cs < 0) return no("an operand has a negative stride");
    // M read per call: A in place wherever it can be, so tails split into few kernels (row_counts).
    config_.a_in_place = a_.cs == 1 && (rows_per_call_ || tiles_share_a(config_.mr, {M_, tm_, tn_})) &&
                         gemm::a_in_place_allowed();
    try {
      ks_ = gemm::resolve_kernels<T>(config_, row_counts(config_.mr));
    } catch (const Error &e) {
      return no(std::string("kiln's GEMM cannot compile its micro-kernels: ") + e.what());
    }
    g_jit_steps_built.fetch_add(1, std::memory_order_relaxed);
    if (config_.a_in_place) g_a_in_place_steps_built.fetch_add(1, std::memory_order_relaxed);
    std::optional<Tensor> w = captured_b();
    if (!w) return true;
    if (nb_ != 1) {
      kiln::log()->debug("epilogue: %{}: B is a captured tensor with batches, not packed", group_.result()->name());
      return true;
    }
    pack_ = true;
    packed_bytes_ = packed<T>(*w)->bytes();
    return true;
  }

  // B's value when it is a captured tensor (parameter or constant), or views
  // of one, whose memory only ops write (not from_blob memory): the views
  // replayed on the live tensor. Nothing otherwise.
  std::optional<Tensor> captured_b() const {
    std::vector<const ir::Node *> chain;
    const ir::Value *u = outer_.at(operand_of(contraction_->operand(1)));
    while (u && u->kind() == ir::Value::Kind::Result) {
      const ir::Node *p = u->producer();
      if (p->kind() != ir::Node::Kind::Op || p->info().kind != OpKind::View || p->operands().size() != 1 ||
          ir::alias_source(*p, u->result_index()) != p->operand(0))
        return std::nullopt;
      chain.push_back(p);
      u = p->operand(0);
    }
    if (!u || (u->kind() != ir::Value::Kind::Param && u->kind() != ir::Value::Kind::Const)) return std::nullopt;
    Tensor t = u->tensor();
    if (!t.defined() || t.is_meta() || kiln::detail::is_borrowed(t)) return std::nullopt;
    const Tensor root = t;
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) t = run_op((*it)->op(), {t}, (*it)->attrs()).at(0);
    if (!t.is_alias_of(root) || t.dim() != 2 || t.size(0) != K_ || t.size(1) != N_) return std::nullopt;
    return t;
  }

  // The packed B (a captured tensor, codegen/gemm/versioned_pack.h): packed
  // again first when the tensor was written in place (its version moved) or B
  // now lives elsewhere (the captured tensor was rebound). No lock unless packing.
  template <class T> typename PackedBCache<T>::Ref packed(const Tensor &b) const {
    return b_packs_.template get<T>().get(b, [&](const Tensor &w) {
      const auto t0 = std::chrono::steady_clock::now();
      gemm::PackedB<T> pb = gemm::pack_b_strided<T>(K_, N_, static_cast<const T *>(w.raw_data()), b_.rs, b_.cs, ks_.config);
      kiln::log()->debug("epilogue: %{}: packed B [{}, {}] (version {}) in {:.2f} ms", group_.result()->name(), K_, N_,
                         tensor_version(w),
                         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      return pb;
    });
  }

  // Whether every column tile of a call reads the same rows of A: kiln's
  // GEMM, one batch, several column tiles, row tiles that start on micro-tile
  // rows. Where A is row-major the micro-kernels then read it in place
  // (gemm::Config::a_in_place), else it is packed once per call for all tiles.
  bool tiles_share_a(int mr, const Tiles &t) const {
    const int64_t rows = (t.M + t.tm - 1) / t.tm, cols = (N_ + t.tn - 1) / t.tn;
    return jit_ && nb_ == 1 && cols > 1 && (rows == 1 || t.tm % mr == 0);
  }

  // The row counts of the products the micro-kernels run: the traced tiles'
  // (full and tail), or every M % mr when M is read per call.
  std::vector<int64_t> row_counts(int mr) const {
    if (!rows_per_call_) return {tm_, M_ % tm_};
    std::vector<int64_t> rows{mr};
    // A read in place: a tail runs as power-of-two kernels (gemm::KernelSet::covers),
    // log2(mr) + 1 kernels per set instead of mr.
    for (int64_t r = 1; r < mr; ++r)
      if (!config_.a_in_place || (r & (r - 1)) == 0) rows.push_back(r);
    return rows;
  }

  // Whether a call packs A once for its tiles (gemm::pack_a_shared): tiles
  // that share A, kernels that do not read it in place, and A within the
  // shared scratch's bound.
  template <class T> bool shares_a(const Tiles &t) const {
    return tiles_share_a(ks_.config.mr, t) && !ks_.config.a_in_place &&
           t.M * K_ * int64_t(sizeof(T)) <= gemm::kSharedABytes;
  }

  // Tiles per thread on kiln's GEMM: 4, or 2 when op(A) (read from L2 again
  // by every column tile, for every k block) is over half of L2.
  int64_t jit_tiles_per_thread(int64_t M) const { return M * K_ * int64_t(itemsize(dtype_)) <= (int64_t(512) << 10) ? 4 : 2; }

  // ---- conv2d: one image = one [O, Ho * Wo] tile
  // A conv whose result type is channels-last (the layout pass's decision)
  // computes C in NHWC; its epilogue tiles are then [pixels, O] (see compile_tile).
  void plan_conv(const std::vector<Tensor> &operands) {
    KILN_CHECK(domain_.size() == 4, "epilogue: conv2d output is not 4-D");
    const std::optional<Dims> &cst = contraction_->result()->type().strides;
    channels_last_ = cst && IntArrayRef(*cst) == IntArrayRef(kiln::detail::channels_last_strides(domain_));
    KILN_CHECK(!cst || channels_last_, "epilogue: a conv2d output strided other than channels-last");
    KILN_CHECK(c_result_ < 0 || group_.results()[size_t(c_result_)]->type().strides.has_value() == channels_last_,
               "epilogue: the conv2d group result's layout differs from the conv's");
    KILN_CHECK(plan_views(operands, 1, 2), "epilogue: an operand's strides do not fold into [C, H*W] images");
    nb_ = domain_[0];
    M_ = domain_[1];
    N_ = domain_[2] * domain_[3];
    tm_ = M_;
    const Tensor &w = operands.at(operand_of(contraction_->operand(1)));
    KILN_CHECK(w.dim() == 4, "epilogue: conv2d weight ", shape_str(w.sizes()));
    block_rows_ = kiln::detail::nn::conv2d_block_rows(w.sizes(), domain_[2], domain_[3]);
    tn_ = block_rows_ * domain_[3];
    c_full_ = MatView{batch_offsets(domain_, contiguous_of(domain_), 1), N_, 1};
    if (channels_last_) {
      const Dims cl = kiln::detail::channels_last_strides(domain_);
      c_full_ = MatView{batch_offsets(domain_, std::vector<int64_t>(cl.begin(), cl.end()), 1), 1, M_};
    }
    const Tensor &x = operands.at(operand_of(contraction_->operand(0)));
    KILN_CHECK(x.dim() == 4, "epilogue: conv2d input ", shape_str(x.sizes()));
    x_chw_ = {x.size(1), x.size(2), x.size(3)};
    for (const ir::TensorType *t : {&contraction_->operand(0)->type(), &contraction_->result()->type()})
      image_size_per_call_ |= rows_per_call_ && t->sym.size() == 4 && (!t->sym[2].is_constant() || !t->sym[3].is_constant());
    if (rows_per_call_) { // images read per call: offsets b * (a batch stride)
      for (Source &s : sources_)
        if (s.kind == Source::Kind::Operand) s.view.to_progression();
      for (MatView &r : results_) r.to_progression();
      c_full_.to_progression();
    }
    plan_jit_conv(operands);
  }

  // kiln's implicit-GEMM conv (codegen/gemm/conv.h), or its depthwise kernel
  // (codegen/gemm/depthwise.h), under KILN_GEMM=jit when one covers this conv;
  // else eager's conv2d_into (im2col + OpenBLAS, or the direct depthwise
  // kernel), with the reason logged.
  void plan_jit_conv(const std::vector<Tensor> &operands) {
    const std::string why = jit_conv_refusal(operands);
    if (!why.empty()) {
      kiln::log()->debug("epilogue: %{} conv2d runs eager's conv kernel: {}", group_.result()->name(), why);
      return;
    }
    const ir::Value *w = outer_.at(operand_of(contraction_->operand(1))); // the program graph's value
    const bool cached = w->kind() == ir::Value::Kind::Param || w->kind() == ir::Value::Kind::Const;
    if (jit_dw_) return plan_jit_depthwise(cached ? w->tensor() : Tensor(), cached);
    try {
      if (dtype_ == kFloat32) build_jit_conv<float>(cached ? w->tensor() : Tensor(), cached);
      else build_jit_conv<double>(cached ? w->tensor() : Tensor(), cached);
    } catch (const Error &e) { // a micro-kernel that does not compile: the BLAS path
      jit_conv_.reset();
      kiln::log()->debug("epilogue: %{} conv2d runs im2col + BLAS: {}", group_.result()->name(), e.what());
      return;
    }
    // The epilogue's tiles are the conv's blocks of pixels (compile_kernels).
    jit_block_pixels_ = dtype_ == kFloat32 ? kiln::gemm::conv_block_pixels<float>(*jit_conv_)
                                           : kiln::gemm::conv_block_pixels<double>(*jit_conv_);
    tn_ = std::min(jit_block_pixels_, N_);
    const kiln::gemm::Config c = dtype_ == kFloat32 ? kiln::gemm::conv_config<float>(*jit_conv_)
                                                    : kiln::gemm::conv_config<double>(*jit_conv_);
    kiln::log()->debug("epilogue: %{} conv2d through kiln's implicit GEMM (codegen/gemm/conv.h){}: {}, {}, weight {}",
                       group_.result()->name(),
                       kiln::gemm::winograd_shape(*jit_conv_, c.nr()) ? ", Winograd F(2x2, 3x3)" : "",
                       jit_conv_->str(), c.to_string(),
                       cached ? "packed once per version" : "packed per call into its scratch (not a parameter)");
  }

  // Why kiln's conv does not take this conv2d, or "".
  std::string jit_conv_refusal(const std::vector<Tensor> &operands) {
    if (kiln::gemm::path() != kiln::gemm::Path::Jit) return "KILN_GEMM=blas";
    if (channels_last_) return "channels-last output (the micro-kernels store pixel rows of NCHW)";
    const ir::Node &cv = *contraction_;
    const Tensor &x = operands.at(operand_of(cv.operand(0)));
    const Tensor &w = operands.at(operand_of(cv.operand(1)));
    if (x.dim() != 4 || w.dim() != 4 || x.dtype() != dtype_ || w.dtype() != dtype_) return "not a 4-D conv";
    if (x.size(3) > 1 && x.stride(3) != 1) return "input rows not contiguous (a channels-last input)";
    if (cv.operand(2)) {
      const Tensor &b = operands.at(operand_of(cv.operand(2)));
      if (b.dim() != 1 || b.dtype() != dtype_ || (b.size(0) > 1 && b.stride(0) != 1)) return "a strided bias";
    }
    attrs::Conv2d a{cv};
    auto pick = [](const auto &v, size_t i) { return v.size() == 2 ? v[i] : v[0]; };
    kiln::gemm::ConvShape s;
    s.N = x.size(0), s.C = x.size(1), s.H = x.size(2), s.W = x.size(3);
    s.O = w.size(0), s.kH = w.size(2), s.kW = w.size(3), s.groups = a.groups();
    s.Ho = domain_[2], s.Wo = domain_[3];
    s.sh = pick(a.stride(), 0), s.sw = pick(a.stride(), 1), s.ph = pick(a.padding(), 0);
    s.pw = pick(a.padding(), 1), s.dh = pick(a.dilation(), 0), s.dw = pick(a.dilation(), 1);
    if (s.groups < 1 || w.size(1) * s.groups != s.C) return "weight and groups do not match the input";
    if (kiln::gemm::is_depthwise(s)) return depthwise_refusal(s);
    if (std::optional<std::string> why = kiln::gemm::conv_unsupported(s)) return *why;
    jit_conv_ = s;
    return "";
  }

  // Compiles the micro-kernels now; packs a parameter's (live) weight now too,
  // so that the first call finds it done.
  template <class T> void build_jit_conv(const Tensor &w, bool cached) {
    conv_kernels_.template get<T>() = kiln::gemm::conv_kernels<T>(*jit_conv_);
    conv_weight_bytes_ = conv_kernels_.template get<T>().bytes();
    conv_cached_ = cached;
    if (!cached || !w.defined() || w.is_meta()) return;
    conv_pack<T>(w);
    packed_bytes_ = conv_weight_bytes_;
  }

  // A parameter's packed conv weight, packed again when it moved (as packed()).
  template <class T> typename ConvPackCache<T>::Ref conv_pack(const Tensor &w) const {
    return conv_packs_.template get<T>().get(w, [&](const Tensor &w) {
      const std::array<int64_t, 4> ws = strides4(w);
      return *kiln::gemm::pack_conv_weight<T>(*jit_conv_, static_cast<const T *>(w.raw_data()), ws.data());
    });
  }

  // ---- depthwise (groups == C): kiln's direct kernel (codegen/gemm/depthwise.h),
  // the epilogue per [channels, rows] block while it is in L1.
  std::string depthwise_refusal(const kiln::gemm::ConvShape &s) {
    if (std::optional<std::string> why = kiln::gemm::depthwise_unsupported(s))
      return "depthwise, eager's direct kernel: " + *why;
    jit_dw_ = true;
    jit_conv_ = s;
    return "";
  }

  void plan_jit_depthwise(const Tensor &w, bool cached) {
    const kiln::gemm::ConvShape &s = *jit_conv_;
    dw_blocking_ = dtype_ == kFloat32 ? kiln::gemm::depthwise_blocking<float>(s) : kiln::gemm::depthwise_blocking<double>(s);
    tm_ = dw_blocking_.channels; // the epilogue's tiles are the kernel's blocks (compile_kernels)
    tn_ = dw_blocking_.rows * s.Wo;
    conv_weight_bytes_ = s.O * s.kH * s.kW * int64_t(itemsize(dtype_));
    conv_cached_ = cached;
    if (cached && w.defined() && !w.is_meta()) {
      if (dtype_ == kFloat32) dw_pack<float>(w);
      else dw_pack<double>(w);
      packed_bytes_ = conv_weight_bytes_;
    }
    kiln::log()->debug("epilogue: %{} conv2d through kiln's depthwise kernel (codegen/gemm/depthwise.h): {}, blocks of "
                       "{} channels x {} rows, epilogue per block, weight {}",
                       group_.result()->name(), s.str(), dw_blocking_.channels, dw_blocking_.rows,
                       cached ? "prepared once per version" : "prepared per call into its scratch (not a parameter)");
  }

  template <class T> typename DwPackCache<T>::Ref dw_pack(const Tensor &w) const {
    return dw_packs_.template get<T>().get(w, [&](const Tensor &w) {
      const std::array<int64_t, 4> ws = strides4(w);
      return *kiln::gemm::pack_depthwise_weight<T>(*jit_conv_, static_cast<const T *>(w.raw_data()), ws.data());
    });
  }

  // Into the result C, or (C no result) each block into the thread's scratch,
  // the epilogue run on it there.
  // `call`: a lone depthwise conv whose image size is read per call (its
  // blocks chosen for it; a size the kernel does not cover runs eager's).
  template <class T>
  void run_jit_depthwise(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs, void *scratch,
                         int64_t images, const ConvCall *call = nullptr) const {
    const ir::Node &cv = *contraction_;
    auto in = [&](size_t i) { return cv.operand(i) ? ins[operand_of(cv.operand(i))] : Tensor(); };
    const Tensor x = in(0), w = in(1), b = in(2);
    if (call && kiln::gemm::depthwise_unsupported(call->shape))
      return run_eager_depthwise<T>(*call, x, w, b, ins, outs);
    struct Ctx {
      const Step *self;
      const std::vector<Tensor> *ins, *outs;
      const ConvCall *call;
    } ctx{this, &ins, &outs, call};
    auto after = [](void *p, int64_t image, int64_t c0, int64_t nc, int64_t p0, int64_t np, void *block, int64_t ldc) {
      auto *x = static_cast<Ctx *>(p);
      if (x->call) return x->self->template run_call_block<T>(*x->call, image, c0, nc, p0, np, block, ldc, *x->ins, *x->outs);
      x->self->template run_tile<T>(image, c0, p0, nc, np, static_cast<T *>(block), *x->ins, *x->outs);
    };
    std::optional<typename DwPackCache<T>::Ref> cached;
    kiln::gemm::DepthwiseWeight<T> per_call; // a weight that is no parameter: prepared into the call's scratch
    const kiln::gemm::DepthwiseWeight<T> *pw = &per_call;
    const std::array<int64_t, 4> ws = strides4(w), xs = strides4(x);
    if (conv_cached_) {
      cached.emplace(dw_pack<T>(w));
      pw = &**cached;
    } else {
      T *dst = reinterpret_cast<T *>(static_cast<char *>(scratch) + c_scratch_bytes(images));
      per_call = kiln::gemm::pack_depthwise_weight_into<T>(*jit_conv_, static_cast<const T *>(w.raw_data()), ws.data(), dst);
    }
    const kiln::gemm::ConvShape shape = call ? call->shape : conv_shape(images);
    kiln::gemm::depthwise_conv2d<T>(shape, static_cast<const T *>(x.raw_data()), xs.data(), *pw,
                                    b.defined() ? static_cast<const T *>(b.raw_data()) : nullptr,
                                    c_result_ >= 0 ? static_cast<T *>(outs[size_t(c_result_)].raw_data()) : nullptr,
                                    epilogue_.empty() ? nullptr : +after, &ctx,
                                    call ? kiln::gemm::depthwise_blocking<T>(shape) : dw_blocking_);
  }

  // A call size the depthwise kernel does not cover: eager's conv kernel into
  // the conv's result (or a buffer of this call), then the epilogue over each
  // image as one block.
  template <class T>
  void run_eager_depthwise(const ConvCall &call, const Tensor &x, const Tensor &w, const Tensor &b,
                           const std::vector<Tensor> &ins, const std::vector<Tensor> &outs) const {
    const attrs::Conv2d a{*contraction_};
    const kiln::gemm::ConvShape &s = call.shape;
    const Tensor y = c_result_ >= 0 ? outs[size_t(c_result_)]
                                    : kiln::detail::make_tensor({s.N, s.O, s.Ho, s.Wo}, dtype_);
    kiln::detail::nn::conv2d_into(x, w, b, a.stride(), a.padding(), a.dilation(), a.groups(), y,
                                  kiln::detail::nn::conv2d_block_rows(w.sizes(), s.Ho, s.Wo), nullptr, nullptr);
    if (epilogue_.empty()) return;
    const int64_t P = s.pixels();
    for (int64_t i = 0; i < s.N; ++i)
      run_call_block<T>(call, i, 0, s.O, 0, P, static_cast<T *>(y.raw_data()) + i * s.O * P, P, ins, outs);
  }

  // The epilogue of block [c0, c0 + nc) x [p0, p0 + np) of `image` (channel
  // c0 + i's pixels at block + i * ldc) through the call kernel: each buffer
  // at the block's corner, by the call's walks.
  template <class T>
  void run_call_block(const ConvCall &call, int64_t image, int64_t c0, int64_t nc, int64_t p0, int64_t np,
                      const void *block, int64_t ldc, const std::vector<Tensor> &ins,
                      const std::vector<Tensor> &outs) const {
    void *bufs[kMaxEpilogueBuffers + 1];
    int64_t words[2 + 2 * kMaxEpilogueBuffers];
    words[0] = nc, words[1] = np;
    size_t n = 0;
    auto put = [&](const void *p, int64_t rs, int64_t cs) {
      bufs[n] = const_cast<void *>(p);
      words[2 + 2 * n] = rs, words[3 + 2 * n] = cs;
      ++n;
    };
    for (size_t q = 0; q < buffer_sources_.size(); ++q) {
      const Source &src = sources_[buffer_sources_[q]];
      const Walk &w = call.walks[n];
      if (src.kind == Source::Kind::Contraction) {
        put(block, ldc, 1);
        continue;
      }
      const Tensor &t = ins[src.index];
      put(static_cast<const char *>(t.raw_data()) + (image * w.bs + c0 * w.rs + p0 * w.cs) * int64_t(itemsize(t.dtype())),
          w.rs, call_inner_[n]);
    }
    for (size_t o : kernel_outputs_) {
      const Walk &w = call.walks[n];
      const Tensor &t = outs[o];
      put(static_cast<const char *>(t.raw_data()) + (image * w.bs + c0 * w.rs + p0 * w.cs) * int64_t(itemsize(t.dtype())),
          w.rs, w.cs);
    }
    bufs[n] = words;
    call_kernel_->run(bufs);
  }

  static std::array<int64_t, 4> strides4(const Tensor &t) {
    return {t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
  }

  // The C buffer's view: a result, a per-call buffer (conv) or a tile scratch.
  MatView c_view() const {
    if (c_result_ >= 0) return results_[size_t(c_result_)];
    if (contraction_->op() == OpId::Conv2d && !jit_dw_) return c_full_;
    return MatView{{0}, tn_, 1}; // depthwise: its block in the thread's scratch
  }

  // ---- kernels: one per distinct tile shape
  struct TileKernel {
    int64_t mb, nc;
    std::shared_ptr<const CompiledKernel> kernel;
  };

  void compile_kernels(const std::vector<Tensor> &operands) {
    kernel_outputs_.clear();
    for (size_t i = 0; i < group_.body()->outputs().size(); ++i)
      if (int(i) != c_result_) kernel_outputs_.push_back(i);
    if (epilogue_.empty()) return;
    if (jit_dw_ && image_size_per_call_) return compile_call_kernel(operands);
    const bool own_kernels = jit_ || jit_conv_; // kiln's GEMM or conv: micro-kernels with epilogue variants
    if (own_kernels && !register_epilogues()) {
      kiln::log()->debug("epilogue: %{}: the epilogue runs as a second pass over each C tile: register epilogues "
                         "are off (KILN_GEMM_EPILOGUE=tile)", group_.result()->name());
    } else if (own_kernels) {
      const std::string why = dtype_ == kFloat64 ? set_up_registers<double>(operands) : set_up_registers<float>(operands);
      if (why.empty()) return;
      kiln::log()->debug("epilogue: %{}: the epilogue runs as a second pass over each C tile, not in the "
                         "micro-kernel's registers: {}", group_.result()->name(), why);
    }
    // Tile kernels are lowered per tile shape, and M % tm_ changes per call (a
    // conv's tiles are blocks of one image: the same for any batch).
    KILN_CHECK(!rows_per_call_ || contraction_->op() == OpId::Conv2d, "epilogue: M is not read per call: the "
               "epilogue does not run in the micro-kernel's registers");
    for (int64_t mb : {tm_, M_ % tm_})
      for (int64_t nc : {tn_, N_ % tn_})
        if (mb > 0 && nc > 0 && !find_kernel(mb, nc)) kernels_.push_back({mb, nc, compile_tile(operands, mb, nc)});
  }

  // ---- the epilogue in the micro-kernels' registers (kiln's GEMM, matmul
  // family, and kiln's conv): the tile kernel's expression (same lowering,
  // same constants folded), its buffers addressed per micro-tile. In the
  // conv's GEMM (per group out[O/g, pixels] = W_g @ col) the rows are output
  // channels and the columns an image's pixels (plan_conv's partition): a
  // per-channel operand is a Row one, an NCHW residual a Tile one. Returns
  // why not, or "".
  template <class T> std::string set_up_registers(const std::vector<Tensor> &operands) {
    const bool conv = contraction_->op() == OpId::Conv2d;
    const int64_t K = conv ? jit_conv_->K() : K_;
    if (K == 0) return "K = 0 (no micro-kernel runs)";
    gemm::Epilogue epi;
    try {
      epi.expr = tile_desc(operands, tm_, tn_);
    } catch (const Error &e) {
      return std::string("the epilogue does not lower: ") + e.what();
    }
    KernelDesc &k = epi.expr;
    if (k.has_reductions()) return "it has a reduction";
    for (size_t b = 0; b < k.num_buffers(); ++b) {
      const DType t = k.buffer(b).dtype;
      if (!lowered_dtype(t)) return std::string("a ") + std::string(kiln::name(t)) + " buffer";
    }
    if (k.num_buffers() > kMaxEpilogueBuffers) return "too many buffers";
    for (int32_t a : k.output_aliases_input)
      if (a >= 0) return "an output overwrites an input in place";
    for (size_t q = 0; q < k.inputs.size(); ++q) {
      const Source &s = sources_[buffer_sources_[q]];
      if (s.kind == Source::Kind::Contraction) {
        epi.inputs.push_back(gemm::Epilogue::Operand::Acc);
        continue;
      }
      std::optional<gemm::Epilogue::Operand> kind = operand_kind(s.view);
      if (!kind) return "an operand's columns are neither contiguous nor broadcast";
      epi.inputs.push_back(*kind);
    }
    for (size_t o = 0; o < kernel_outputs_.size(); ++o) {
      if (k.outputs[o].buffer.dtype != dtype_)
        return std::string("a ") + std::string(kiln::name(k.outputs[o].buffer.dtype)) + " result";
      const MatView &r = results_[kernel_outputs_[o]];
      if (r.cs != 1 && N_ > 1) return "a result's columns are not contiguous";
    }
    // Canonical: the code depends on the expression and the operand kinds only.
    k.shape = {1, 1};
    for (BufferSpec &b : k.inputs) b.strides = {0, 0};
    for (OutputSpec &o : k.outputs) o.buffer.strides = {0, 0};
    k.grain = 0, k.stream_stores = false, k.output_aliases_input.clear();
    epi.store_c = c_result_ >= 0;
    // The conv's micro-kernels run a group's O/g rows: full tiles and its tail.
    const gemm::Config &config = conv ? conv_kernels_.template get<T>().config : ks_.config;
    const std::vector<int64_t> rows = conv ? std::vector<int64_t>{jit_conv_->Og()} : row_counts(config.mr);
    try {
      eks_ = gemm::resolve_epilogue_kernels<T>(config, epi, rows);
    } catch (const Error &e) {
      return std::string("its micro-kernel variant does not compile: ") + e.what();
    }
    in_registers_ = true;
    epi_kinds_ = epi.inputs;
    g_register_epilogues_built.fetch_add(1, std::memory_order_relaxed);
    static const char *const kKinds[] = {"acc", "scalar", "row", "col", "tile"};
    std::string kinds;
    for (gemm::Epilogue::Operand o : epi.inputs) kinds += std::string(kinds.empty() ? "" : ",") + kKinds[int(o)];
    kiln::log()->debug("epilogue: %{}: the epilogue ({} nodes, inputs {}, {} outputs{}) runs in the micro-kernel's "
                       "registers on the last k block", group_.result()->name(), k.nodes.size(), kinds,
                       k.outputs.size(), epi.store_c ? ", C stored too" : "");
    return "";
  }

  // How a buffer with view `v` is addressed from C's (i, j), or nothing when
  // its columns are strided (a transposed residual).
  std::optional<gemm::Epilogue::Operand> operand_kind(const MatView &v) const {
    using O = gemm::Epilogue::Operand;
    const bool rows = v.rs != 0 && M_ > 1, cols = v.cs != 0 && N_ > 1;
    if (cols && v.cs != 1) return std::nullopt;
    if (rows) return cols ? O::Tile : O::Row;
    return cols ? O::Col : O::Scalar;
  }

  const CompiledKernel *find_kernel(int64_t mb, int64_t nc) const {
    for (const TileKernel &k : kernels_)
      if (k.mb == mb && k.nc == nc) return k.kernel.get();
    return nullptr;
  }

  std::shared_ptr<const CompiledKernel> compile_tile(const std::vector<Tensor> &operands, int64_t mb, int64_t nc) {
    // Default grain: tiles run inside a parallel region (the kernel's own
    // parallel_for is then serial); a lone tile or image on the calling thread
    // still spreads over the pool.
    return Jit::current().compile(tile_desc(operands, mb, nc));
  }

  // A depthwise conv whose image size is read per call: its blocks' extents
  // change with the image width, so one kernel serves every block [channels,
  // pixels], reading the extents and each buffer's channel stride per block
  // (KernelDesc::runtime_layout). The pixel strides (1, or 0 for a
  // per-channel operand) are compiled in and checked per call (conv_call).
  void compile_call_kernel(const std::vector<Tensor> &operands) {
    KILN_CHECK(!channels_last_, "epilogue: a channels-last depthwise conv does not read its image size per call");
    KernelDesc d = tile_desc(operands, tm_, tn_);
    KILN_CHECK(d.num_buffers() <= kMaxEpilogueBuffers, "epilogue: ", d.num_buffers(), " buffers (at most ",
               kMaxEpilogueBuffers, ")");
    // lower_group merges the dims of a contiguous block (one of whole
    // images); a call's blocks need not be, so both dims stay.
    d.shape = {tm_, tn_};
    const MatView c = c_view();
    for (size_t q = 0; q < buffer_sources_.size(); ++q) {
      const Source &s = sources_[buffer_sources_[q]];
      const MatView &mv = s.kind == Source::Kind::Contraction ? c : s.view;
      d.inputs.at(q).strides = {mv.rs, mv.cs};
    }
    for (size_t k = 0; k < kernel_outputs_.size(); ++k)
      d.outputs.at(k).buffer.strides = {results_[kernel_outputs_[k]].rs, results_[kernel_outputs_[k]].cs};
    d.row_rank = 1;
    d.runtime_layout = true;
    d.validate();
    call_inner_.clear();
    for (size_t b = 0; b < d.num_buffers(); ++b) call_inner_.push_back(d.buffer(b).strides.back());
    call_kernel_ = Jit::current().compile(d);
  }

  // The epilogue's kernel for one tile [mb, nc]; sets buffer_sources_.
  KernelDesc tile_desc(const std::vector<Tensor> &operands, int64_t mb, int64_t nc) {
    ir::Graph g("epilogue");
    std::vector<ir::Value *> ops;
    std::vector<Tensor> metas;
    const MatView c = c_view();
    for (size_t i = 0; i < sources_.size(); ++i) {
      const Source &s = sources_[i];
      const ir::Value *v = source_values_[i];
      if (s.kind == Source::Kind::Operand && group_.operand(s.index)->kind() == ir::Value::Kind::Const &&
          operands.at(s.index).numel() == 1) {
        ops.push_back(g.add_const(group_.operand(s.index)->tensor())); // folded into the kernel
        metas.push_back(group_.operand(s.index)->tensor());
        continue;
      }
      const MatView &mv = s.kind == Source::Kind::Contraction ? c : s.view;
      const auto [rs, cs] = tile_strides(mv);
      const auto [tr, tc] = tile_shape(mb, nc);
      int64_t rows = rs == 0 ? 1 : tr, cols = cs == 0 ? 1 : tc;
      DType t = v->type().dtype;
      ops.push_back(g.add_input(ir::TensorType{t, {rows, cols}, std::nullopt}));
      metas.push_back(kiln::detail::make_view(kiln::detail::make_tensor({0}, t, true), {rows, cols}, {rs, cs}, 0));
    }
    const ir::Graph &body = *group_.body();
    const auto [tr, tc] = tile_shape(mb, nc);
    std::vector<ir::TensorType> types;
    for (size_t o : kernel_outputs_) types.push_back({body.outputs()[o]->type().dtype, {tr, tc}, std::nullopt});
    ir::Node *tile = g.create_group(ops, types);
    ir::Graph &tb = *tile->body();
    std::unordered_map<const ir::Value *, ir::Value *> map;
    for (size_t i = 0; i < sources_.size(); ++i) map[source_values_[i]] = tb.inputs()[i];
    for (const ir::Node *n : epilogue_) {
      std::vector<ir::Value *> args;
      for (const ir::Value *v : n->operands()) args.push_back(map.at(v));
      ir::TensorType t{n->result()->type().dtype, {tr, tc}, std::nullopt};
      map[n->result()] = tb.create(n->op(), args, n->attrs(), {t})->result();
    }
    std::vector<ir::Value *> outs;
    for (size_t o : kernel_outputs_) outs.push_back(map.at(body.outputs()[o]));
    tb.set_outputs(outs);

    std::vector<size_t> buffers;
    KernelDesc desc = lower_group(*tile, metas, buffers);
    for (size_t k = 0; k < kernel_outputs_.size(); ++k) {
      const auto [rs, cs] = tile_strides(results_[kernel_outputs_[k]]);
      desc.outputs[k].buffer.strides = {rs, cs};
    }
    buffer_sources_ = buffers;
    return desc;
  }

  // The kernel's tile is [mb, nc] over (rows, cols) of the partition, or for a
  // channels-last conv its transpose [nc pixels, mb channels]: the epilogue is
  // elementwise, so the walk order is free, and the NHWC C tile then has
  // contiguous rows; per-channel vectors (bn, bias) become last-dim broadcasts
  // and an NCHW operand or result (the residual x, the graph output) is read or
  // written through its strides.
  std::pair<int64_t, int64_t> tile_shape(int64_t mb, int64_t nc) const {
    return channels_last_ ? std::pair{nc, mb} : std::pair{mb, nc};
  }
  std::pair<int64_t, int64_t> tile_strides(const MatView &mv) const {
    return channels_last_ ? std::pair{mv.cs, mv.rs} : std::pair{mv.rs, mv.cs};
  }

  // ---- run
  // Pointers of tile (b, r0, c0) into bufs: the kernel's inputs, then outputs.
  template <class T>
  void run_tile(int64_t b, int64_t r0, int64_t c0, int64_t mb, int64_t nc, T *c, const std::vector<Tensor> &ins,
                const std::vector<Tensor> &outs) const {
    const CompiledKernel *k = find_kernel(mb, nc);
    if (!k) return;
    void *bufs[64];
    size_t n = 0;
    for (size_t i : buffer_sources_) {
      const Source &s = sources_[i];
      if (s.kind == Source::Kind::Contraction) {
        bufs[n++] = c;
        continue;
      }
      const Tensor &t = ins[s.index];
      int64_t off = s.view.at(b) + r0 * s.view.rs + c0 * s.view.cs;
      bufs[n++] = static_cast<char *>(t.raw_data()) + off * int64_t(itemsize(t.dtype()));
    }
    for (size_t o : kernel_outputs_) {
      const MatView &r = results_[o];
      const Tensor &t = outs[o];
      int64_t off = r.at(b) + r0 * r.rs + c0 * r.cs;
      bufs[n++] = static_cast<char *>(t.raw_data()) + off * int64_t(itemsize(t.dtype()));
    }
    k->run(bufs);
  }

  // The register epilogue's buffers at tile (b, r0, c0): run_tile's pointers,
  // with each buffer's row stride; the contraction's value needs none.
  void epilogue_pointers(int64_t b, int64_t r0, int64_t c0, const std::vector<Tensor> &ins,
                         const std::vector<Tensor> &outs, const void **ptrs, int64_t *lds, size_t nbuf) const {
    size_t n = 0;
    for (size_t i : buffer_sources_) {
      const Source &s = sources_[i];
      if (s.kind == Source::Kind::Contraction) {
        ptrs[n] = nullptr, lds[n++] = 0;
        continue;
      }
      const Tensor &t = ins[s.index];
      const int64_t off = s.view.at(b) + r0 * s.view.rs + c0 * s.view.cs;
      ptrs[n] = static_cast<const char *>(t.raw_data()) + off * int64_t(itemsize(t.dtype()));
      lds[n++] = s.view.rs;
    }
    for (size_t o : kernel_outputs_) {
      const MatView &r = results_[o];
      const Tensor &t = outs[o];
      const int64_t off = r.at(b) + r0 * r.rs + c0 * r.cs;
      ptrs[n] = static_cast<char *>(t.raw_data()) + off * int64_t(itemsize(t.dtype()));
      lds[n++] = r.rs;
    }
    KILN_CHECK(n == nbuf, "internal: epilogue buffers ", n, " != ", nbuf);
  }

  // epilogue_pointers for a conv whose image size is read per call: the walks
  // of `call`, at (image, channel 0, pixel p0).
  void call_epilogue_pointers(const ConvCall &call, int64_t image, int64_t p0, const std::vector<Tensor> &ins,
                              const std::vector<Tensor> &outs, const void **ptrs, int64_t *lds) const {
    size_t n = 0;
    auto at = [&](const Tensor &t) {
      const Walk &w = call.walks[n];
      ptrs[n] = static_cast<const char *>(t.raw_data()) + (image * w.bs + p0 * w.cs) * int64_t(itemsize(t.dtype()));
      lds[n++] = w.rs;
    };
    for (size_t i : buffer_sources_) {
      const Source &s = sources_[i];
      if (s.kind == Source::Kind::Contraction) {
        ptrs[n] = nullptr, lds[n++] = 0;
        continue;
      }
      at(ins[s.index]);
    }
    for (size_t o : kernel_outputs_) at(outs[o]);
  }

  template <class T>
  void run_typed(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs, void *scratch, const Tiles &t) const {
    if (contraction_->op() == OpId::Conv2d) return run_conv<T>(ins, outs, scratch, t.images);
    const T *A = static_cast<const T *>(ins[operand_of(contraction_->operand(0))].raw_data());
    const T *B = static_cast<const T *>(ins[operand_of(contraction_->operand(1))].raw_data());
    T *C = c_result_ >= 0 ? static_cast<T *>(outs[size_t(c_result_)].raw_data()) : nullptr;
    const int64_t M = t.M, tm = t.tm, tn = t.tn, rt = (M + tm - 1) / tm, ct = (N_ + tn - 1) / tn;
    const MatView c = C ? c_view() : MatView{{0}, tn, 1}; // a tile in the thread's scratch: this call's tn
    std::optional<typename PackedBCache<T>::Ref> pw;
    if (pack_) pw.emplace(packed<T>(ins[operand_of(contraction_->operand(1))]));
    int threads = 0;
    // Column tiles of the same rows read the same A: pack it once per call,
    // split over the threads, rather than once per tile (per thread).
    gemm::PackedARef<T> ap;
    if (shares_a<T>(t)) ap = {gemm::pack_a_shared<T>(M, K_, A + a_.off[0], a_.rs, a_.cs, ks_.config, 0), M, 0};
    const size_t nbuf = in_registers_ ? buffer_sources_.size() + kernel_outputs_.size() : 0;
    auto work = [&](int64_t lo, int64_t hi) {
      std::array<const void *, kMaxEpilogueBuffers> eptrs;
      std::array<int64_t, kMaxEpilogueBuffers> elds;
      const gemm::EpilogueArgs ea{eptrs.data(), elds.data(), &eks_};
      const gemm::EpilogueArgs *epi = in_registers_ ? &ea : nullptr;
      // A tile of C that is no result lives in the running thread's reusable scratch.
      T *tile = C ? nullptr : static_cast<T *>(thread_scratch(ScratchSlot::GemmTile, size_t(tm * tn) * sizeof(T)));
      for (int64_t it = lo; it < hi; ++it) {
        const int64_t b = it / (rt * ct), ti = it / ct % rt, tj = it % ct;
        const int64_t r0 = ti * tm, c0 = tj * tn, mb = std::min(tm, M - r0), nc = std::min(tn, N_ - c0);
        T *ct_ptr = C ? C + c.at(b) + r0 * c.rs + c0 : tile;
        const int64_t ldc = mb == 1 ? std::max<int64_t>(nc, c.rs) : c.rs;
        const T *a = A + a_.at(b) + r0 * a_.rs;
        const gemm::PackedARef<T> apt{ap.data, ap.M, r0};
        if (epi) epilogue_pointers(b, r0, c0, ins, outs, eptrs.data(), elds.data(), nbuf);
        if (pw) // one tile on the calling thread: the GEMM itself may split (threads 0)
          gemm::gemm_packed_cols<T>(mb, T(1), a, a_.rs, a_.cs, **pw, c0, nc, T(0), ct_ptr, ldc, ks_, threads, apt, epi);
        else if (jit_)
          gemm::gemm_strided<T>(mb, nc, K_, T(1), a, a_.rs, a_.cs, B + b_.at(b) + c0 * b_.cs, b_.rs, b_.cs,
                                T(0), ct_ptr, ldc, ks_, threads, apt, epi);
        else
          kiln::detail::nn::gemm<T>(mb, nc, K_, T(1), a, a_.rs, a_.cs, B + b_.at(b) + c0 * b_.cs, b_.rs,
                                    b_.cs, T(0), ct_ptr, ldc);
        if (!epi) run_tile<T>(b, r0, c0, mb, nc, ct_ptr, ins, outs);
      }
    };
    const int64_t n = nb_ * rt * ct;
    if (n > 1 && get_num_threads() > 1 && !in_parallel_region()) {
      threads = 1;
      if (jit_) parallel_for_chunks(0, n, 1, work); // tiles claimed one at a time (choose_tiles)
      else parallel_for(0, n, 1, work);
      return;
    }
    work(0, n);
  }

  static size_t round64(size_t n) { return (n + 63) / 64 * 64; }
  // For `images` images (the traced batch unless read per call).
  size_t c_scratch_bytes(int64_t images) const {
    if (contraction_->op() != OpId::Conv2d || c_result_ >= 0 || jit_dw_) return 0;
    size_t n = itemsize(dtype_) * size_t(images);
    for (size_t d = 1; d < domain_.size(); ++d) n *= size_t(domain_[d]);
    return round64(n);
  }
  size_t c_scratch_bytes() const { return c_scratch_bytes(domain_.empty() ? 0 : domain_[0]); }
  size_t weight_scratch_bytes() const { return jit_conv_ && !conv_cached_ ? round64(size_t(conv_weight_bytes_)) : 0; }

  // The conv output C: a result, else the call's scratch. A channels-last C
  // is the same bytes viewed with NHWC strides.
  Tensor conv_output(const std::vector<Tensor> &outs, void *scratch, int64_t images, const ConvCall *call) const {
    if (c_result_ >= 0) return outs[size_t(c_result_)];
    Dims shape = domain_;
    shape[0] = images;
    if (call) shape[2] = call->shape.Ho, shape[3] = call->shape.Wo;
    Tensor c = from_blob(scratch, IntArrayRef(shape), TensorOptions(dtype_));
    if (!channels_last_) return c;
    return kiln::detail::make_view(c, shape, kiln::detail::channels_last_strides(shape), 0);
  }

  // The conv's shape with this call's batch.
  kiln::gemm::ConvShape conv_shape(int64_t images) const {
    kiln::gemm::ConvShape s = *jit_conv_;
    s.N = images;
    return s;
  }

  // The conv through codegen/gemm/conv.h into C (NCHW), `after` per block.
  // `call`: a conv whose image size is read per call (its shape, its blocks chosen for it).
  template <class T>
  void run_jit_conv(const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &C,
                    kiln::detail::nn::BlockCallback after, void *ctx, void *scratch,
                    int64_t images, const gemm::ConvEpilogue *epi = nullptr, const ConvCall *call = nullptr) const {
    std::optional<typename ConvPackCache<T>::Ref> cached;
    kiln::gemm::PackedConvWeight<T> per_call; // a weight that is no parameter: packed into the call's scratch
    const kiln::gemm::PackedConvWeight<T> *pw = &per_call;
    if (conv_cached_) {
      cached.emplace(conv_pack<T>(w));
      pw = &**cached;
    } else {
      const size_t c_bytes = call ? call->c_bytes : c_scratch_bytes(images);
      T *dst = reinterpret_cast<T *>(static_cast<char *>(scratch) + c_bytes);
      per_call = kiln::gemm::pack_conv_weight_into<T>(conv_kernels_.template get<T>(),
                                                      static_cast<const T *>(w.raw_data()), strides4(w).data(), dst);
    }
    const std::array<int64_t, 4> xs = strides4(x);
    kiln::gemm::conv2d<T>(call ? call->shape : conv_shape(images), static_cast<const T *>(x.raw_data()), xs.data(),
                          *pw, b.defined() ? static_cast<const T *>(b.raw_data()) : nullptr,
                          static_cast<T *>(C.raw_data()), after, ctx, call ? 0 : jit_block_pixels_, 0, epi);
  }

  template <class T>
  void run_conv(const std::vector<Tensor> &ins, const std::vector<Tensor> &outs, void *scratch, int64_t images,
                const ConvCall *call = nullptr) const {
    if (jit_dw_) return run_jit_depthwise<T>(ins, outs, scratch, images, call);
    const ir::Node &cv = *contraction_;
    auto in = [&](size_t i) { return cv.operand(i) ? ins[operand_of(cv.operand(i))] : Tensor(); };
    Tensor C = conv_output(outs, scratch, images, call);
    struct Ctx {
      const Step *self;
      T *c;
      const std::vector<Tensor> *ins;
      const std::vector<Tensor> *outs;
      const ConvCall *call;
    } ctx{this, static_cast<T *>(C.raw_data()), &ins, &outs, call};
    auto after = [](void *p, int64_t image, int64_t p0, int64_t np) {
      auto *x = static_cast<Ctx *>(p);
      const Step &s = *x->self;
      s.run_tile<T>(image, 0, p0, s.M_, np, x->c + s.c_full_.at(image) + p0 * s.c_full_.cs, *x->ins,
                    *x->outs);
    };
    if (jit_conv_ && in_registers_) {
      auto pointers = [](void *p, int64_t image, int64_t p0, const void **ptrs, int64_t *lds) {
        auto *x = static_cast<Ctx *>(p);
        const Step &s = *x->self;
        if (x->call) return s.call_epilogue_pointers(*x->call, image, p0, *x->ins, *x->outs, ptrs, lds);
        s.epilogue_pointers(image, 0, p0, *x->ins, *x->outs, ptrs, lds,
                            s.buffer_sources_.size() + s.kernel_outputs_.size());
      };
      const gemm::ConvEpilogue epi{&eks_, buffer_sources_.size() + kernel_outputs_.size(), +pointers, &ctx};
      return run_jit_conv<T>(in(0), in(1), in(2), C, nullptr, nullptr, scratch, images, &epi, call);
    }
    if (call) return run_jit_conv<T>(in(0), in(1), in(2), C, nullptr, nullptr, scratch, images, nullptr, call);
    if (jit_conv_)
      return run_jit_conv<T>(in(0), in(1), in(2), C, epilogue_.empty() ? nullptr : +after, &ctx, scratch, images);
    attrs::Conv2d a{cv};
    kiln::detail::nn::conv2d_into(in(0), in(1), in(2), a.stride(), a.padding(), a.dilation(),
                                  a.groups(), C, block_rows_, epilogue_.empty() ? nullptr : +after, &ctx);
  }

  std::shared_ptr<ir::Graph> owned_; // a lone contraction's wrapper group (build_lone)
  const ir::Node &group_;
  const bool rows_per_call_; // M (rows of the product) read from each call's operands (issue 17)
  bool image_size_per_call_ = false; // conv2d: H, W (and N) read per call too (compute_conv_call)
  std::vector<gemm::Epilogue::Operand> epi_kinds_; // the register epilogue's inputs: how its code reads each
  std::vector<const ir::Value *> outer_; // per group operand: the program graph's value
  const ir::Node *contraction_ = nullptr;
  std::vector<const ir::Node *> epilogue_;
  std::unordered_map<const ir::Value *, size_t> input_index_;
  int c_result_ = -1; // the group result that is the contraction's output, if any
  DType dtype_ = kFloat32;
  Dims domain_;
  std::vector<Tensor> metas_;

  std::vector<Source> sources_;
  std::vector<const ir::Value *> source_values_;
  std::unordered_map<const ir::Value *, size_t> source_index_;
  std::vector<MatView> results_;
  MatView a_, b_, c_full_;
  int64_t nb_ = 1, M_ = 0, N_ = 0, K_ = 0, tm_ = 0, tn_ = 0;
  int64_t block_rows_ = 1; // conv2d: output rows per block
  std::array<int64_t, 3> x_chw_{}; // conv2d: the input's C, H, W
  bool channels_last_ = false; // conv2d computing C in NHWC
  std::optional<kiln::gemm::ConvShape> jit_conv_; // conv2d through codegen/gemm/conv.h
  bool conv_cached_ = false;                      // the weight is a parameter: packed once per version
  int64_t conv_weight_bytes_ = 0;                 // its packing's size
  ByDType<kiln::gemm::PackedConvWeight> conv_kernels_; // its config and micro-kernels (no panels)
  ByDType<ConvPackCache> conv_packs_;                  // the parameter's packing
  int64_t jit_block_pixels_ = 0;                  // its pixels per block (= tn_, the epilogue's tile)
  bool jit_dw_ = false;                           // jit_conv_ is depthwise: codegen/gemm/depthwise.h
  std::shared_ptr<const CompiledKernel> call_kernel_; // depthwise over image sizes read per call: any block
  std::vector<int64_t> call_inner_;                   // its buffers' pixel strides, compiled in
  kiln::gemm::DwBlocking dw_blocking_;            // its blocks (= [tm_, tn_], the epilogue's tiles)
  ByDType<DwPackCache> dw_packs_;                 // the parameter's taps

  std::vector<size_t> kernel_outputs_; // body outputs the kernel stores
  std::vector<size_t> buffer_sources_; // kernel input buffer -> sources_ index
  std::vector<TileKernel> kernels_;

  // kiln's GEMM (set_up_jit)
  bool jit_ = false, pack_ = false;
  bool in_registers_ = false; // the epilogue runs in the micro-kernels (set_up_registers)
  gemm::KernelSet eks_;       // their epilogue variants
  int64_t granule_ = 16;
  gemm::Config config_; // kiln's GEMM tile for this N (gemm::product_config)
  gemm::KernelSet ks_;
  int64_t packed_bytes_ = 0;
  ByDType<PackedBCache> b_packs_; // B when pack_
};

// The layout pass's question (passes/lowering_check.h): kiln's conv and its
// depthwise kernel store NCHW pixel rows and read NCHW input rows, so a conv
// they take would run on eager's kernel in a channels-last chain. A chain of
// three 3x3 64 -> 64 convs on [4, 64, 56, 56] ran 1.14x eager channels-last
// (eager's kernel, the measured cost model's choice) against 2.1x NCHW.
std::string conv_layout_misfit(const ir::Node &cv) {
  if (kiln::gemm::path() != kiln::gemm::Path::Jit || cv.kind() != ir::Node::Kind::Op || cv.op() != OpId::Conv2d ||
      cv.results().size() != 1 || cv.operands().size() < 2)
    return "";
  const Dims &x = cv.operand(0)->type().shape, &w = cv.operand(1)->type().shape, &y = cv.result()->type().shape;
  const DType dt = cv.result()->type().dtype;
  if (x.size() != 4 || w.size() != 4 || y.size() != 4 || (dt != kFloat32 && dt != kFloat64)) return "";
  attrs::Conv2d a{cv};
  auto pick = [](const auto &v, size_t i) { return v.size() == 2 ? v[i] : v[0]; };
  kiln::gemm::ConvShape s;
  s.N = x[0], s.C = x[1], s.H = x[2], s.W = x[3];
  s.O = w[0], s.kH = w[2], s.kW = w[3], s.groups = a.groups();
  s.Ho = y[2], s.Wo = y[3];
  s.sh = pick(a.stride(), 0), s.sw = pick(a.stride(), 1), s.ph = pick(a.padding(), 0);
  s.pw = pick(a.padding(), 1), s.dh = pick(a.dilation(), 0), s.dw = pick(a.dilation(), 1);
  if (s.groups < 1 || w[1] * s.groups != s.C) return "";
  if (kiln::gemm::is_depthwise(s))
    return kiln::gemm::depthwise_unsupported(s) ? "" : "kiln's depthwise conv runs NCHW only";
  return kiln::gemm::conv_unsupported(s) ? "" : "kiln's conv runs NCHW only (channels-last runs eager's conv kernel)";
}

// Registered while libkiln loads, before any pass can run.
[[maybe_unused]] const bool registered_with_layout = (passes::register_conv_layout_misfit(&conv_layout_misfit), true);
[[maybe_unused]] const bool registered_with_fuse =
    (passes::register_symbolic_contraction_misfit(&codegen::symbolic_contraction_misfit), true);

} // namespace

bool is_epilogue_group(const ir::Node &group) {
  if (group.kind() != ir::Node::Kind::FusionGroup || !group.body()) return false;
  int contractions = 0;
  for (const ir::Node *n : group.body()->nodes()) contractions += is_contraction(*n);
  return contractions == 1;
}

std::shared_ptr<const EpilogueStep> EpilogueStep::build(const ir::Node &group, const std::vector<Tensor> &operands) {
  return std::make_shared<Step>(group, operands);
}

namespace {
std::shared_ptr<const EpilogueStep> lone_step(const ir::Node &op, const std::vector<Tensor> &operands, bool rows_per_call) {
  KILN_CHECK(op.kind() == ir::Node::Kind::Op &&
                 (op.op() == OpId::Matmul || op.op() == OpId::Mm || op.op() == OpId::Bmm || op.op() == OpId::Conv2d) &&
                 op.results().size() == 1,
             "contraction step: ", op.mnemonic(), " is not a matmul, mm, bmm or conv2d");
  if (op.op() != OpId::Conv2d)
    for (const ir::Value *v : op.operands())
      KILN_CHECK(v && v->type().shape.size() >= 2, "gemm step: ", op.mnemonic(), " has an operand of fewer than 2 dims");
  // The wrapper group's operands are op's present ones, in order: an absent
  // one (conv2d's bias) may only trail them, so that operand i of the step
  // is still operand i of the node when the executor passes them.
  auto g = std::make_shared<ir::Graph>("contraction");
  std::vector<ir::Value *> ins;
  std::vector<const ir::Value *> outer;
  for (size_t i = 0; i < op.operands().size(); ++i) {
    const ir::Value *v = op.operand(i);
    if (!v) continue;
    KILN_CHECK(outer.size() == i, "contraction step: ", op.mnemonic(), " has a present operand after an absent one");
    ins.push_back(g->add_input(v->type()));
    outer.push_back(v);
  }
  ir::Node *group = g->create_group(ins, {op.result()->type()});
  ir::Graph &body = *group->body();
  std::vector<ir::Value *> args(body.inputs().begin(), body.inputs().end());
  args.resize(op.operands().size(), nullptr);
  body.set_outputs({body.create(op.op(), args, op.attrs(), {op.result()->type()})->result()});
  return std::make_shared<Step>(*group, operands, g, std::move(outer), rows_per_call);
}
} // namespace

std::shared_ptr<const EpilogueStep> EpilogueStep::build_lone(const ir::Node &op, const std::vector<Tensor> &operands) {
  return lone_step(op, operands, false);
}

std::shared_ptr<const EpilogueStep> EpilogueStep::build_rows_per_call(const ir::Node &node,
                                                                      const std::vector<Tensor> &operands) {
  if (node.kind() == ir::Node::Kind::FusionGroup) return std::make_shared<Step>(node, operands, nullptr,
                                                                               std::vector<const ir::Value *>{}, true);
  try {
    return lone_step(node, operands, true);
  } catch (const Error &e) {
    // Not M alone: a product reading every size per call, when kiln's GEMM takes it.
    if (!product_per_call_misfit(node).empty()) throw;
    kiln::log()->debug("epilogue: %{} ({}) reads every size per call: {}", node.result()->name(), node.mnemonic(), e.what());
    return build_product_per_call(node, operands);
  }
}

std::string symbolic_contraction_misfit(const ir::Node &c) {
  if (c.op() != OpId::Conv2d && !register_epilogues())
    return "KILN_GEMM_EPILOGUE=tile (its tile kernels are lowered per M)";
  return rows_per_call_misfit(c);
}

int64_t gemm_jit_steps_built() { return g_jit_steps_built.load(std::memory_order_relaxed); }

void set_register_epilogues(bool enabled) { register_epilogues_flag().store(enabled); }
bool register_epilogues() { return register_epilogues_flag().load(); }

int64_t register_epilogues_built() { return g_register_epilogues_built.load(std::memory_order_relaxed); }

int64_t a_in_place_steps_built() { return g_a_in_place_steps_built.load(std::memory_order_relaxed); }

} // namespace kiln::codegen
