// A lone product of a graph with symbols that reads its batches, M, N and K
// from each call's operands (codegen/product_step.h).
//
// The micro-kernels depend on the tile configuration only, and kiln's GEMM
// packs A and B per call anyway when B is no captured weight, so one kernel
// set for every row count (1..mr: any M % mr) serves every size: a new
// sequence length compiles nothing. A call splits its work into (batch, column
// range) items, claimed one at a time by the threads, each a single-threaded
// gemm_strided; one item lets the GEMM split itself.
#include "codegen/product_step.h"

#include <algorithm>
#include <array>

#include <spdlog/spdlog.h>

#include "codegen/gemm/gemm.h"
#include "codegen/gemm/path.h"
#include "ir/graph.h"
#include "runtime/error.h"
#include "runtime/log.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"

namespace kiln::codegen {

namespace {

// Batch dims a product may have: the per-call offsets are unravelled on the stack.
constexpr int64_t kMaxBatchDims = 8;
// Items per thread a call aims for, so that a thread that gets its core late
// leaves its share to the others (as the epilogue steps' tiles).
constexpr int64_t kItemsPerThread = 4;

// One call's product: sizes and per-batch-dim strides (0 where an operand
// broadcasts), read from the operands.
struct Call {
  int64_t M = 0, N = 0, K = 0, nb = 1, nbd = 0;
  int64_t ars = 0, acs = 0, brs = 0, bcs = 0;
  std::array<int64_t, kMaxBatchDims> size{}, as{}, bs{};
  // Offsets of batch `i` (row-major over the batch dims) in A and B.
  std::pair<int64_t, int64_t> offsets(int64_t i) const {
    int64_t oa = 0, ob = 0;
    for (int64_t d = nbd - 1; d >= 0; --d) {
      const int64_t k = i % size[size_t(d)];
      i /= size[size_t(d)];
      oa += k * as[size_t(d)], ob += k * bs[size_t(d)];
    }
    return {oa, ob};
  }
};

class ProductStep final : public EpilogueStep {
public:
  ProductStep(const ir::Node &op, const std::vector<Tensor> &operands) : op_(op) {
    const std::string why = product_per_call_misfit(op);
    KILN_CHECK(why.empty(), "product step: %", op.result()->name(), " (", op.mnemonic(), "): ", why);
    KILN_CHECK(operands.size() >= 2, "product step: ", op.mnemonic(), " needs 2 operands, got ", operands.size());
    const ir::TensorType &r = op.result()->type();
    dtype_ = r.dtype;
    metas_.push_back(kiln::detail::make_tensor(r.shape, r.dtype, true));
    const int64_t traced_n = r.shape[r.shape.size() - 1];
    if (dtype_ == kFloat64) set_up<double>(traced_n);
    else set_up<float>(traced_n);
    kiln::log()->debug("product step: %{} ({}) reads its batches, M, N and K per call ({}, {} kernels)",
                       op.result()->name(), op.mnemonic(), ks_.config.to_string(), ks_.keep.size());
  }

  std::string_view contraction_kind() const override { return "gemm-jit"; }
  bool reads_image_size_per_call() const override { return false; }
  bool reads_every_size_per_call() const override { return true; }
  int64_t packed_weight_bytes() const override { return 0; }
  const std::vector<Tensor> &result_metas() const override { return metas_; }
  int64_t num_kernels() const override { return int64_t(ks_.keep.size()); }
  bool epilogue_in_registers() const override { return false; }
  size_t scratch_bytes() const override { return 0; }

  // The symbolic executor gives it the call's result buffer (run_into).
  std::vector<Tensor> run(const std::vector<Tensor> &) const override {
    KILN_CHECK(false, "internal: product step for ", op_.mnemonic(), " runs through run_into");
    return {};
  }

  void run_into(const std::vector<Tensor> &operands, const std::vector<Tensor> &results, void *) const override {
    KILN_CHECK(operands.size() == 2 && results.size() == 1, "product step: ", op_.mnemonic(), " takes 2 operands and 1 result, got ",
               operands.size(), " and ", results.size());
    Tensor a = operands[0], b = operands[1];
    const Tensor &c = results[0];
    const Call call = read_call(a, b, c);
    if (call.M == 0 || call.N == 0 || call.nb == 0) return;
    if (dtype_ == kFloat64) compute<double>(call, a, b, c);
    else compute<float>(call, a, b, c);
  }

private:
  template <class T> void set_up(int64_t traced_n) {
    gemm::Config config = gemm::product_config<T>(std::max<int64_t>(traced_n, 1));
    config.a_in_place = false; // A's column stride is the call's: packed
    // Every M % mr: a packed tail panel is laid out for its own row count.
    std::vector<int64_t> rows;
    for (int64_t r = 1; r <= config.mr; ++r) rows.push_back(r);
    ks_ = gemm::resolve_kernels<T>(config, rows);
  }

  // The call's sizes and strides; bad operands get an error naming the op.
  Call read_call(Tensor &a, Tensor &b, const Tensor &c) const {
    auto bad = [&](const std::string &what) {
      return kiln::detail::concat(op_.mnemonic(), ": ", what, " (A ", shape_str(a.sizes()), ", B ", shape_str(b.sizes()),
                                  ", result ", shape_str(c.sizes()), ")");
    };
    KILN_CHECK(a.dtype() == dtype_ && b.dtype() == dtype_ && c.dtype() == dtype_, bad("operands of another dtype"));
    KILN_CHECK(a.dim() >= 2 && b.dim() >= 2 && c.dim() == std::max(a.dim(), b.dim()), bad("operand ranks"));
    KILN_CHECK(!c.is_meta() && c.is_contiguous(), bad("the result is not a contiguous buffer"));
    // gemm_strided reads non-negative strides (eager's views give those; anything else is copied).
    auto nonneg = [](const Tensor &t) {
      for (int64_t d = 0; d < t.dim(); ++d)
        if (t.stride(d) < 0) return false;
      return true;
    };
    if (!nonneg(a)) a = a.contiguous();
    if (!nonneg(b)) b = b.contiguous();
    Call k;
    k.M = a.size(-2), k.K = a.size(-1), k.N = b.size(-1);
    KILN_CHECK(b.size(-2) == k.K, bad("A's columns are not B's rows"));
    KILN_CHECK(c.size(-2) == k.M && c.size(-1) == k.N, bad("the result is not [M, N]"));
    k.ars = a.stride(-2), k.acs = a.stride(-1), k.brs = b.stride(-2), k.bcs = b.stride(-1);
    k.nbd = c.dim() - 2;
    KILN_CHECK(k.nbd <= kMaxBatchDims, bad("more than 8 batch dims"));
    for (int64_t d = 0; d < k.nbd; ++d) {
      const int64_t n = c.size(d), da = d - (c.dim() - a.dim()), db = d - (c.dim() - b.dim());
      const int64_t sa = da >= 0 ? a.size(da) : 1, sb = db >= 0 ? b.size(db) : 1;
      KILN_CHECK((sa == n || sa == 1) && (sb == n || sb == 1), bad("batch dims that do not broadcast to the result's"));
      k.size[size_t(d)] = n;
      k.as[size_t(d)] = sa == 1 ? 0 : a.stride(da);
      k.bs[size_t(d)] = sb == 1 ? 0 : b.stride(db);
      k.nb *= n;
    }
    return k;
  }

  template <class T> void compute(const Call &k, const Tensor &a, const Tensor &b, const Tensor &c) const {
    const T *A = static_cast<const T *>(a.raw_data()), *B = static_cast<const T *>(b.raw_data());
    T *C = static_cast<T *>(c.raw_data());
    const int threads = std::max(1, get_num_threads());
    const bool parallel = threads > 1 && !in_parallel_region();
    // Column ranges of whole panels until there are enough items for the threads.
    const int64_t nr = ks_.config.nr(), panels = (k.N + nr - 1) / nr;
    int64_t per = panels; // panels per item
    while (parallel && k.nb * ((panels + per - 1) / per) < threads * kItemsPerThread && per > 1) per = (per + 1) / 2;
    const int64_t tn = per * nr, ct = (k.N + tn - 1) / tn, items = k.nb * ct;
    auto one = [&](int64_t it, int gemm_threads) {
      const int64_t bi = it / ct, c0 = (it % ct) * tn, nc = std::min(tn, k.N - c0);
      const auto [oa, ob] = k.offsets(bi);
      gemm::gemm_strided<T>(k.M, nc, k.K, T(1), A + oa, k.ars, k.acs, B + ob + c0 * k.bcs, k.brs, k.bcs, T(0),
                            C + bi * k.M * k.N + c0, k.N, ks_, gemm_threads);
    };
    if (items == 1 || !parallel) {
      for (int64_t it = 0; it < items; ++it) one(it, items == 1 ? 0 : 1);
      return;
    }
    parallel_for_chunks(0, items, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t it = lo; it < hi; ++it) one(it, 1);
    });
  }

  const ir::Node &op_;
  DType dtype_ = kFloat32;
  std::vector<Tensor> metas_;
  gemm::KernelSet ks_;
};

} // namespace

std::string product_per_call_misfit(const ir::Node &op) {
  if (gemm::path() != gemm::Path::Jit) return "KILN_GEMM=blas (only kiln's GEMM reads its sizes per call)";
  if (op.kind() != ir::Node::Kind::Op || (op.op() != OpId::Matmul && op.op() != OpId::Mm && op.op() != OpId::Bmm))
    return std::string(op.mnemonic()) + " (only a lone matmul, mm or bmm)";
  if (op.operands().size() != 2 || !op.operand(0) || !op.operand(1) || op.results().size() != 1) return "not a product";
  const ir::TensorType &a = op.operand(0)->type(), &b = op.operand(1)->type(), &r = op.result()->type();
  if (a.shape.size() < 2 || b.shape.size() < 2) return "an operand of fewer than 2 dims";
  if (r.dtype != kFloat32 && r.dtype != kFloat64) return "a " + std::string(name(r.dtype)) + " product";
  if (a.dtype != r.dtype || b.dtype != r.dtype) return "operands of mixed dtypes";
  if (int64_t(r.shape.size()) - 2 > kMaxBatchDims) return "more than 8 batch dims";
  return "";
}

std::shared_ptr<const EpilogueStep> build_product_per_call(const ir::Node &op, const std::vector<Tensor> &operands) {
  return std::make_shared<ProductStep>(op, operands);
}

} // namespace kiln::codegen
