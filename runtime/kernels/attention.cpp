// scaled_dot_product_attention: softmax(q k^T * scale + mask) v, per batch.
//
// Each batch's [L, S] score matrix is produced by one GEMM (k read as a
// transposed view, no copy), masked and softmaxed row by row, then multiplied by
// v with a second GEMM straight into the output. Batches run in parallel, each
// on one thread; a single batch's GEMMs split over kiln's threads (gemm_blas).
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/kernels/linalg_internal.h"
#include "runtime/kernels/nn_rowops.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {
using namespace detail::nn;

IntArrayRef batch_of(const Tensor &t) { return IntArrayRef(t.sizes().data(), size_t(t.dim() - 2)); }

// Strides of t (whose shape broadcasts to `shape`) aligned with `shape`, 0 where broadcast.
Dims aligned_strides(const Tensor &t, IntArrayRef shape) {
  Dims st;
  st.resize(shape.size(), 0);
  const int64_t off = int64_t(shape.size()) - t.dim();
  for (int64_t d = 0; d < t.dim(); ++d) st[size_t(off + d)] = t.size(d) == 1 ? 0 : t.stride(d);
  return st;
}

// Offset of batch b (row-major over `batch`) for the given aligned strides.
int64_t batch_offset(int64_t b, IntArrayRef batch, const Dims &st) {
  int64_t off = 0;
  for (size_t d = batch.size(); d-- > 0;) {
    off += (b % batch[d]) * st[d];
    b /= batch[d];
  }
  return off;
}

using detail::broadcasts_to;

struct SdpaPlan {
  Dims batch;
  int64_t L = 0, S = 0, E = 0, Ev = 0;
  Dims qs, ks, vs, ms; // aligned strides over batch + [rows, cols]
  double scale = 1;
  bool causal = false;
};

template <class T>
void sdpa_batch(const SdpaPlan &pl, int64_t b, const T *q, const T *k, const T *v, const Tensor &mask, T *out,
                T *scores) {
  const size_t nb = pl.batch.size();
  const T *qb = q + batch_offset(b, pl.batch, pl.qs);
  const T *kb = k + batch_offset(b, pl.batch, pl.ks);
  const T *vb = v + batch_offset(b, pl.batch, pl.vs);
  const int64_t L = pl.L, S = pl.S;
  // scores[i, j] = scale * sum_e q[i, e] * k[j, e]  (B = k^T: strides swapped)
  gemm<T>(L, S, pl.E, T(pl.scale), qb, pl.qs[nb], pl.qs[nb + 1], kb, pl.ks[nb + 1], pl.ks[nb], T(0), scores, S);
  const T ninf = -std::numeric_limits<T>::infinity();
  if (mask.defined()) {
    const int64_t mo = batch_offset(b, pl.batch, pl.ms), mr = pl.ms[nb], mc = pl.ms[nb + 1];
    if (mask.dtype() == kBool) {
      const bool *mp = static_cast<const bool *>(mask.raw_data()) + mo;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j)
          if (!mp[i * mr + j * mc]) scores[i * S + j] = ninf;
    } else {
      const T *mp = static_cast<const T *>(mask.raw_data()) + mo;
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) scores[i * S + j] += mp[i * mr + j * mc];
    }
  }
  if (pl.causal) // keep j <= i (top-left aligned, as torch's tril of ones(L, S))
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i + 1; j < S; ++j) scores[i * S + j] = ninf;
  for (int64_t i = 0; i < L; ++i) softmax_row(scores + i * S, scores + i * S, S, false, /*safe=*/true);
  gemm<T>(L, pl.Ev, S, T(1), scores, S, 1, vb, pl.vs[nb], pl.vs[nb + 1], T(0), out + b * L * pl.Ev, pl.Ev);
}

template <class T> void sdpa_run(const SdpaPlan &pl, const Tensor &q, const Tensor &k, const Tensor &v,
                                 const Tensor &mask, const Tensor &out) {
  int64_t nbatch = 1;
  for (int64_t s : pl.batch) nbatch *= s;
  const T *qp = static_cast<const T *>(q.raw_data());
  const T *kp = static_cast<const T *>(k.raw_data());
  const T *vp = static_cast<const T *>(v.raw_data());
  T *op = static_cast<T *>(out.raw_data());
  auto run = [&](int64_t lo, int64_t hi) {
    std::vector<T> scores(size_t(pl.L * pl.S)); // one buffer per chunk
    for (int64_t b = lo; b < hi; ++b) sdpa_batch(pl, b, qp, kp, vp, mask, op, scores.data());
  };
  const int64_t work = std::max<int64_t>(1, pl.L * pl.S * (pl.E + pl.Ev));
  if (batch_parallel(nbatch, work)) {
    parallel_for(0, nbatch, std::max<int64_t>(1, (int64_t(1) << 18) / work), run);
    return;
  }
  run(0, nbatch);
}

void check_sdpa_operand(const Tensor &t, const char *arg, DType dt) {
  detail::check_defined(t, "scaled_dot_product_attention", arg);
  KILN_CHECK(t.dim() >= 2, "scaled_dot_product_attention: expected ", arg,
             " to have at least 2 dimensions [..., L, E], got shape ", shape_str(t.sizes()));
  check_floating(t, "scaled_dot_product_attention", arg);
  check_same_dtype(t, dt, "scaled_dot_product_attention", arg, "query");
}
} // namespace

Tensor scaled_dot_product_attention(const Tensor &query, const Tensor &key, const Tensor &value,
                                    const Tensor &attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  const char *op = "scaled_dot_product_attention";
  detail::check_defined(query, op, "query");
  check_sdpa_operand(query, "query", query.dtype());
  check_sdpa_operand(key, "key", query.dtype());
  check_sdpa_operand(value, "value", query.dtype());
  SdpaPlan pl;
  pl.L = query.size(-2);
  pl.E = query.size(-1);
  pl.S = key.size(-2);
  pl.Ev = value.size(-1);
  KILN_CHECK(key.size(-1) == pl.E, op, ": query ", shape_str(query.sizes()), " and key ", shape_str(key.sizes()),
             " must have the same embedding size (last dim)");
  KILN_CHECK(value.size(-2) == pl.S, op, ": key ", shape_str(key.sizes()), " and value ",
             shape_str(value.sizes()), " must have the same sequence length (dim -2)");
  pl.batch = detail::broadcast_shapes(detail::broadcast_shapes(batch_of(query), batch_of(key), op),
                                      batch_of(value), op);
  KILN_CHECK(dropout_p == 0.0, op, ": dropout_p must be 0 (kiln has no training yet), got ", dropout_p);
  KILN_CHECK(!(is_causal && attn_mask.defined()), op,
             ": explicit attn_mask should not be set when is_causal=True");
  Dims scores_shape = pl.batch;
  scores_shape.push_back(pl.L);
  scores_shape.push_back(pl.S);
  if (attn_mask.defined()) {
    KILN_CHECK(attn_mask.dtype() == kBool || attn_mask.dtype() == query.dtype(), op,
               ": expected attn_mask dtype to be bool or to match query dtype ", query.dtype(), ", got ",
               attn_mask.dtype());
    KILN_CHECK(broadcasts_to(attn_mask.sizes(), scores_shape), op, ": attn_mask of shape ", shape_str(attn_mask.sizes()),
               " cannot be broadcast to the attention weights' shape ", shape_str(scores_shape));
  }
  if (scale) KILN_CHECK(std::isfinite(*scale), op, ": scale must be finite, got ", *scale);
  if (detail::tracing() || detail::any_reduced_float(KILN_NN_INPUTS(query, key, value, attn_mask)) ||
      detail::autograd_wants(KILN_NN_INPUTS(query, key, value, attn_mask))) [[unlikely]] {
    // KILN_TRACE spelled out: AttrValue's optional<T> constructor (and a braced
    // Attrs list holding one) trips GCC 12 -Wmaybe-uninitialized false positives.
    Attrs attrs;
    attrs.emplace_back(dropout_p);
    attrs.emplace_back(is_causal);
    if (scale)
      attrs.emplace_back(*scale);
    else
      attrs.emplace_back(); // none
    return detail::trace_op(OpId::Sdpa, KILN_NN_INPUTS(query, key, value, attn_mask), attrs);
  }

  Dims out_shape = pl.batch;
  out_shape.push_back(pl.L);
  out_shape.push_back(pl.Ev);
  Tensor out = detail::make_result(out_shape, query.dtype(), {&query, &key, &value, &attn_mask});
  if (out.is_meta() || out.numel() == 0) return out;
  Dims qshape = pl.batch, kshape = pl.batch, vshape = pl.batch;
  for (int64_t s : {pl.L, pl.E}) qshape.push_back(s);
  for (int64_t s : {pl.S, pl.E}) kshape.push_back(s);
  for (int64_t s : {pl.S, pl.Ev}) vshape.push_back(s);
  pl.qs = aligned_strides(query, qshape);
  pl.ks = aligned_strides(key, kshape);
  pl.vs = aligned_strides(value, vshape);
  if (attn_mask.defined()) pl.ms = aligned_strides(attn_mask, scores_shape);
  // The two matrix dims keep their strides even when of size 1.
  const size_t nb = pl.batch.size();
  pl.qs[nb] = query.stride(-2), pl.qs[nb + 1] = query.stride(-1);
  pl.ks[nb] = key.stride(-2), pl.ks[nb + 1] = key.stride(-1);
  pl.vs[nb] = value.stride(-2), pl.vs[nb + 1] = value.stride(-1);
  pl.scale = scale ? *scale : 1.0 / std::sqrt(double(pl.E));
  pl.causal = is_causal;
  dispatch_dtype(query.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) sdpa_run<T>(pl, query, key, value, attn_mask, out);
  });
  return out;
}

namespace adapters {
std::vector<Tensor> Sdpa(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Sdpa at{a};
  check_num_inputs(in, 4, "scaled_dot_product_attention");
  return {scaled_dot_product_attention(in[0], in[1], in[2], in[3], at.dropout_p(), at.is_causal(),
                                       at.scale())};
}
} // namespace adapters

} // namespace kiln
