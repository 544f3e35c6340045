// Normalization and activation composites: softmax, log_softmax, layer_norm,
// batch_norm, dropout (libtorch semantics).
//
// Kernels work on a packed (contiguous) input, so a non-contiguous input costs
// one copy; the output is always contiguous. Rows are independent and split
// over kiln's pool; inner loops are written so that g++ vectorizes them.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "runtime/kernels/linalg_internal.h"
#include "runtime/kernels/nn_rowops.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/philox.h"
#include "runtime/random_stream.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {
using namespace detail::nn;

constexpr int64_t kGrainElems = 32768;

int64_t rows_grain(int64_t row_len) { return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(row_len, 1)); }

// ------------------------------------------------------------------ softmax

// Softmax along a dim that is not the innermost: x is [outer, D, inner] and the
// vector lanes run along `inner` (contiguous), `block` columns at a time. The
// block narrows as D grows so that its D x block tile, read three times, stays
// in L2 (1 MiB on these Zen 5 cores) instead of streaming from memory on every
// pass ([4096, 1024] along dim 0: 9 ms with 64 columns, 11-14 ms with 256).
template <class T> void softmax_strided(const T *x, T *y, int64_t outer, int64_t D, int64_t inner, bool log) {
  constexpr int64_t kMaxBlock = 256;
  const int64_t fit = (int64_t(1024 * 1024) / (D * int64_t(sizeof(T)))) / 16 * 16;
  const int64_t block = std::clamp<int64_t>(fit, 16, kMaxBlock);
  const int64_t nblk = (inner + block - 1) / block;
  parallel_for(0, outer * nblk, rows_grain(D * block), [&](int64_t lo, int64_t hi) {
    T mx[kMaxBlock], acc[kMaxBlock], e[kMaxBlock];
    for (int64_t t = lo; t < hi; ++t) {
      const int64_t o = t / nblk, i0 = (t % nblk) * block, w = std::min(block, inner - i0);
      const T *xb = x + o * D * inner + i0;
      T *yb = y + o * D * inner + i0;
      for (int64_t i = 0; i < w; ++i) mx[i] = -std::numeric_limits<T>::infinity(), acc[i] = T(0);
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < w; ++i) mx[i] = mx[i] > xb[d * inner + i] ? mx[i] : xb[d * inner + i];
      for (int64_t d = 0; d < D; ++d) {
        T *ed = log ? e : yb + d * inner; // softmax keeps the exponentials in y
        for (int64_t i = 0; i < w; ++i) ed[i] = xb[d * inner + i] - mx[i];
        exp_in_place(ed, w);
        for (int64_t i = 0; i < w; ++i) acc[i] += ed[i];
      }
      if (log) { // (x - max) - log(sum), as softmax_row
        log_in_place(acc, w);
        for (int64_t d = 0; d < D; ++d)
          for (int64_t i = 0; i < w; ++i) yb[d * inner + i] = (xb[d * inner + i] - mx[i]) - acc[i];
        continue;
      }
      for (int64_t i = 0; i < w; ++i) acc[i] = T(1) / acc[i];
      for (int64_t d = 0; d < D; ++d)
        for (int64_t i = 0; i < w; ++i) yb[d * inner + i] *= acc[i];
    }
  });
}

Tensor softmax_impl(const Tensor &x, int64_t dim, std::optional<DType> dtype, bool log) {
  const char *op = log ? "log_softmax" : "softmax";
  detail::check_defined(x, op, "self");
  const int64_t d = detail::wrap_dim(dim, x.dim(), op);
  if (dtype && *dtype != x.dtype()) {
    KILN_CHECK(is_floating(*dtype), op, ": dtype must be a floating-point type, got ", *dtype);
    // While tracing, the conversion is recorded as its own Cast node.
    Tensor xc = detail::tracing() ? kiln::to(x, *dtype) : packed(x, *dtype);
    return log ? log_softmax(xc, d) : softmax(xc, d);
  }
  check_floating(x, op, "self");
  if (log) {
    KILN_TRACE(LogSoftmax, KILN_NN_INPUTS(x), .dim = d);
  } else {
    KILN_TRACE(Softmax, KILN_NN_INPUTS(x), .dim = d);
  }
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  Tensor xc = packed(x);
  int64_t outer = 1, inner = 1;
  const int64_t D = x.dim() == 0 ? 1 : x.size(d);
  for (int64_t i = 0; i < d; ++i) outer *= x.size(i);
  for (int64_t i = d + 1; i < x.dim(); ++i) inner *= x.size(i);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T *xp = static_cast<const T *>(xc.raw_data());
      T *yp = static_cast<T *>(out.raw_data());
      if (inner == 1) {
        parallel_for(0, outer, rows_grain(D), [&](int64_t lo, int64_t hi) {
          for (int64_t r = lo; r < hi; ++r) softmax_row(xp + r * D, yp + r * D, D, log);
        });
      } else {
        softmax_strided(xp, yp, outer, D, inner, log);
      }
    }
  });
  return out;
}

// ------------------------------------------------------------------ layer_norm

template <class T> T row_sq_dev(const T *x, int64_t n, T mean) {
  constexpr int L = kLanes<T>;
  T acc[L] = {};
  int64_t i = 0;
  for (; i + L <= n; i += L)
    for (int j = 0; j < L; ++j) acc[j] += (x[i + j] - mean) * (x[i + j] - mean);
  T s = 0;
  for (int j = 0; j < L; ++j) s += acc[j];
  for (; i < n; ++i) s += (x[i] - mean) * (x[i] - mean);
  return s;
}

// Mean, then the variance around it (two passes over a row that sits in L1:
// stable where E[x^2] - E[x]^2 cancels), then one normalizing pass.
template <class T, bool HasW, bool HasB>
void layer_norm_rows(const T *x, T *y, const T *w, const T *b, int64_t rows, int64_t n, double eps) {
  parallel_for(0, rows, rows_grain(n), [&](int64_t lo, int64_t hi) {
    for (int64_t r = lo; r < hi; ++r) {
      const T *xr = x + r * n;
      T *yr = y + r * n;
      const T mean = row_sum(xr, n) / T(n);
      const T var = row_sq_dev(xr, n, mean) / T(n);
      const T rstd = T(1) / std::sqrt(var + T(eps));
      for (int64_t i = 0; i < n; ++i) {
        T v = (xr[i] - mean) * rstd;
        if constexpr (HasW) v *= w[i];
        if constexpr (HasB) v += b[i];
        yr[i] = v;
      }
    }
  });
}

void check_param(const Tensor &p, IntArrayRef shape, DType dt, const char *op, const char *arg) {
  if (!p.defined()) return;
  KILN_CHECK(p.sizes().equals(shape), op, ": expected ", arg, " of shape ", shape_str(shape), ", got ",
             shape_str(p.sizes()));
  check_same_dtype(p, dt, op, arg, "input");
}

// ------------------------------------------------------------------ batch_norm

// Per-channel values of a 1-D tensor of length c, as double.
std::vector<double> channel_values(const Tensor &t, int64_t c, double absent) {
  std::vector<double> v(size_t(c), absent);
  if (!t.defined()) return v;
  dispatch_dtype(t.dtype(), [&]<class T>() {
    const T *p = static_cast<const T *>(t.raw_data());
    const int64_t s = t.dim() == 0 ? 0 : t.stride(0);
    for (int64_t i = 0; i < c; ++i) v[size_t(i)] = double(p[i * s]);
  });
  return v;
}

// Batch statistics per channel of x [N, C, inner] (biased variance, two passes).
template <class T>
void batch_stats(const T *x, int64_t N, int64_t C, int64_t inner, std::vector<double> &mean,
                 std::vector<double> &var) {
  const double cnt = double(N * inner);
  parallel_for(0, C, rows_grain(N * inner), [&](int64_t lo, int64_t hi) {
    for (int64_t c = lo; c < hi; ++c) {
      double s = 0, q = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) s += double(x[(n * C + c) * inner + i]);
      const double m = cnt > 0 ? s / cnt : std::numeric_limits<double>::quiet_NaN();
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < inner; ++i) {
          const double dv = double(x[(n * C + c) * inner + i]) - m;
          q += dv * dv;
        }
      mean[size_t(c)] = m;
      var[size_t(c)] = cnt > 0 ? q / cnt : std::numeric_limits<double>::quiet_NaN();
    }
  });
}
// torch's running-statistics update in training mode, in place:
// running = (1 - momentum) * running + momentum * batch statistic, where the
// variance statistic is unbiased (n / (n - 1); NaN for one value per channel,
// as torch).
template <class T>
void update_running(const Tensor &running_mean, const Tensor &running_var, const std::vector<double> &mean,
                    const std::vector<double> &var, int64_t n, double momentum) {
  const double unbias = double(n) / double(n - 1);
  auto update = [&](const Tensor &r, const std::vector<double> &stat, double scale) {
    if (!r.defined()) return;
    T *p = static_cast<T *>(r.raw_data());
    const int64_t st = r.stride(0);
    for (size_t c = 0; c < stat.size(); ++c) {
      T &v = p[int64_t(c) * st];
      v = T((1 - momentum) * double(v) + momentum * stat[c] * scale);
    }
  };
  update(running_mean, mean, 1.0);
  update(running_var, var, unbias);
}

// The same update while tracing, as ops the graph records: the in-place ops on
// the running tensors become write-backs, and the statistics are spelled as
// decompose spells batch_norm's (mean with keepdim, mean of squared
// deviations), so cse shares them with the normalization.
void trace_running_stats_update(const Tensor &x, const Tensor &running_mean, const Tensor &running_var,
                                double momentum) {
  if (!running_mean.defined() && !running_var.defined()) return;
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (d != 1) dims.push_back(d);
  const int64_t C = x.size(1);
  const int64_t cshape[1] = {C};
  Tensor m = mean(x, dims, /*keepdim=*/true);
  if (running_mean.defined()) {
    Tensor r = running_mean;
    r.mul_(1 - momentum).add_(m.reshape(IntArrayRef(cshape, 1)) * momentum);
  }
  if (running_var.defined()) {
    Tensor c = x - m;
    Tensor v = mean(c * c, dims, /*keepdim=*/true);
    Tensor r = running_var;
    // The count as a traced op, so that a graph over symbolic sizes scales by the call's.
    Tensor n = sym_numel(x).to(kFloat64) / double(std::max<int64_t>(C, 1));
    r.mul_(1 - momentum).add_(v.reshape(IntArrayRef(cshape, 1)) * (n * momentum / (n - 1)));
  }
}
} // namespace

Tensor softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(x, dim, dtype, false);
}

Tensor log_softmax(const Tensor &x, int64_t dim, std::optional<DType> dtype) {
  return softmax_impl(x, dim, dtype, true);
}

Tensor layer_norm(const Tensor &x, IntArrayRef normalized_shape, const Tensor &weight, const Tensor &bias,
                  double eps) {
  detail::check_defined(x, "layer_norm", "input");
  const int64_t nd = int64_t(normalized_shape.size());
  KILN_CHECK(nd >= 1, "layer_norm: normalized_shape must have at least one dimension, got []");
  bool match = x.dim() >= nd;
  for (int64_t i = 0; match && i < nd; ++i) match = x.size(x.dim() - nd + i) == normalized_shape[size_t(i)];
  KILN_CHECK(match, "layer_norm: given normalized_shape=", shape_str(normalized_shape),
             ", expected input with shape [*, ", shape_str(normalized_shape).substr(1), ", but got input of size ",
             shape_str(x.sizes()));
  check_floating(x, "layer_norm", "input");
  check_param(weight, normalized_shape, x.dtype(), "layer_norm", "weight");
  check_param(bias, normalized_shape, x.dtype(), "layer_norm", "bias");
  KILN_TRACE(LayerNorm, KILN_NN_INPUTS(x, weight, bias), .normalized_shape = normalized_shape, .eps = eps);
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x, &weight, &bias});
  if (out.is_meta() || out.numel() == 0) return out;
  int64_t n = 1, rows = 1;
  for (int64_t s : normalized_shape) n *= s;
  for (int64_t i = 0; i < x.dim() - nd; ++i) rows *= x.size(i);
  Tensor xc = packed(x), wc = weight.defined() ? packed(weight) : Tensor(),
         bc = bias.defined() ? packed(bias) : Tensor();
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T *xp = static_cast<const T *>(xc.raw_data());
      T *yp = static_cast<T *>(out.raw_data());
      const T *wp = wc.defined() ? static_cast<const T *>(wc.raw_data()) : nullptr;
      const T *bp = bc.defined() ? static_cast<const T *>(bc.raw_data()) : nullptr;
      if (wp && bp) layer_norm_rows<T, true, true>(xp, yp, wp, bp, rows, n, eps);
      else if (wp) layer_norm_rows<T, true, false>(xp, yp, wp, bp, rows, n, eps);
      else if (bp) layer_norm_rows<T, false, true>(xp, yp, wp, bp, rows, n, eps);
      else layer_norm_rows<T, false, false>(xp, yp, wp, bp, rows, n, eps);
    }
  });
  return out;
}

namespace {
void check_batch_norm(const Tensor &x, const Tensor &weight, const Tensor &bias, const Tensor &running_mean,
                      const Tensor &running_var, bool training) {
  detail::check_defined(x, "batch_norm", "input");
  KILN_CHECK(x.dim() >= 2, "batch_norm: expected input with at least 2 dimensions [N, C, *], got shape ",
             shape_str(x.sizes()));
  check_floating(x, "batch_norm", "input");
  const int64_t cshape[1] = {x.size(1)};
  check_param(weight, IntArrayRef(cshape, 1), x.dtype(), "batch_norm", "weight");
  check_param(bias, IntArrayRef(cshape, 1), x.dtype(), "batch_norm", "bias");
  check_param(running_mean, IntArrayRef(cshape, 1), x.dtype(), "batch_norm", "running_mean");
  check_param(running_var, IntArrayRef(cshape, 1), x.dtype(), "batch_norm", "running_var");
  KILN_CHECK(training || (running_mean.defined() && running_var.defined()),
             "batch_norm: running_mean and running_var must be defined in evaluation mode (training=false)");
}

// The normalization; in training mode with `update_running_stats` also torch's
// in-place update of the running statistics.
Tensor batch_norm_forward(const Tensor &x, const Tensor &weight, const Tensor &bias, const Tensor &running_mean,
                          const Tensor &running_var, bool training, double momentum, double eps,
                          bool update_running_stats) {
  check_batch_norm(x, weight, bias, running_mean, running_var, training);
  const int64_t C = x.size(1);
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x, &weight, &bias, &running_mean, &running_var});
  if (out.is_meta() || out.numel() == 0) return out;
  const int64_t N = x.size(0), inner = x.numel() / std::max<int64_t>(N * C, 1);
  Tensor xc = packed(x);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) {
      const T *xp = static_cast<const T *>(xc.raw_data());
      T *yp = static_cast<T *>(out.raw_data());
      std::vector<double> mean, var;
      if (training) {
        mean.assign(size_t(C), 0);
        var.assign(size_t(C), 0);
        batch_stats(xp, N, C, inner, mean, var);
        if (update_running_stats) update_running<T>(running_mean, running_var, mean, var, N * inner, momentum);
      } else {
        mean = channel_values(running_mean, C, 0);
        var = channel_values(running_var, C, 1);
      }
      const std::vector<double> w = channel_values(weight, C, 1), b = channel_values(bias, C, 0);
      // y = x * scale + shift with scale = w / sqrt(var + eps), shift = b - mean * scale.
      std::vector<T> scale(static_cast<size_t>(C)), shift(static_cast<size_t>(C));
      for (size_t c = 0; c < size_t(C); ++c) {
        const double s = w[c] / std::sqrt(var[c] + eps);
        scale[c] = T(s);
        shift[c] = T(b[c] - mean[c] * s);
      }
      parallel_for(0, N * C, rows_grain(inner), [&](int64_t lo, int64_t hi) {
        for (int64_t r = lo; r < hi; ++r) {
          const T s = scale[size_t(r % C)], h = shift[size_t(r % C)];
          const T *xr = xp + r * inner;
          T *yr = yp + r * inner;
          for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * s + h;
        }
      });
    }
  });
  return out;
}
} // namespace

Tensor batch_norm(const Tensor &x, const Tensor &weight, const Tensor &bias, const Tensor &running_mean,
                  const Tensor &running_var, bool training, double momentum, double eps) {
  if (detail::autograd_wants(KILN_NN_INPUTS(x, weight, bias))) [[unlikely]] {
    // Autograd: the forward (and the running statistics' update) without it,
    // traced or not, then one node. In training mode the node keeps no running
    // statistics: the update just wrote them, and the formula reads the batch's.
    Tensor out;
    {
      NoGradGuard off;
      out = batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps);
    }
    std::vector<Tensor> outs{out};
    const attrs::BatchNormArgs a{.training = training, .momentum = momentum, .eps = eps};
    detail::record_op(OpId::BatchNorm,
                      {x, weight, bias, training ? Tensor() : running_mean, training ? Tensor() : running_var},
                      a.to_attrs(), outs);
    return outs[0];
  }
  if (detail::tracing()) [[unlikely]] {
    check_batch_norm(x, weight, bias, running_mean, running_var, training);
    const attrs::BatchNormArgs a{.training = training, .momentum = momentum, .eps = eps};
    Tensor out = detail::trace_op(OpId::BatchNorm, KILN_NN_INPUTS(x, weight, bias, running_mean, running_var),
                                  a.to_attrs());
    if (training) trace_running_stats_update(x, running_mean, running_var, momentum);
    return out;
  }
  if (detail::any_reduced_float(KILN_NN_INPUTS(x, weight, bias, running_mean, running_var))) [[unlikely]] {
    // In float32, as torch's kernel computes; the running statistics are updated in their own dtype.
    auto wide = [](const Tensor &t) { return detail::reduced_float_operand(t) ? to(t, kFloat32) : t; };
    Tensor mean = wide(running_mean), var = wide(running_var);
    Tensor out = batch_norm(wide(x), wide(weight), wide(bias), mean, var, training, momentum, eps);
    if (training) {
      Tensor m = running_mean, v = running_var;
      if (m.defined() && !m.is_same(mean)) copy_(m, mean);
      if (v.defined() && !v.is_same(var)) copy_(v, var);
    }
    return to(out, x.dtype());
  }
  return batch_norm_forward(x, weight, bias, running_mean, running_var, training, momentum, eps,
                            /*update_running_stats=*/training);
}

Tensor dropout_mask(const Tensor &x, double p, int64_t offset) {
  detail::check_defined(x, "dropout_mask", "input");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout_mask: probability has to be between 0 and 1, but got ", p);
  KILN_TRACE(DropoutMask, KILN_INPUTS(x), .p = p, .offset = offset);
  Tensor mask = detail::make_result(x.sizes(), kBool, {&x});
  if (x.is_meta()) return mask; // a shape rule's run draws nothing
  const int64_t n = mask.numel();
  const auto [seed, stream] = detail::random_stream_at(offset, n);
  bool *m = mask.data_ptr<bool>();
  // Element i is uniform_at(seed, stream, i): one Philox block serves 4 elements.
  parallel_for(0, n, 4096, [&, seed = seed, stream = stream](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi;) {
      const philox::Counter c = philox::block_at(seed, stream, uint64_t(i) / 4);
      for (int64_t k = i % 4; k < 4 && i < hi; ++k, ++i) m[i] = double(philox::unit_float(c[size_t(k)])) >= p;
    }
  });
  return mask;
}

Tensor dropout(const Tensor &x, double p, bool train) {
  detail::check_defined(x, "dropout", "input");
  KILN_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got ", p);
  if (train && p > 0.0) {
    KILN_CHECK(x.is_floating_point(), "dropout: expected a floating input in training mode, got ", x.dtype());
    if (p == 1.0) return x * 0.0; // torch: every element dropped (NaN * 0 stays NaN, as torch's)
    // torch's input * (mask / (1 - p)), in table ops, so autograd and the
    // in-float32 rule of reduced floats apply as to any product. Traced, the
    // mask is a node of its own that draws in every compiled call.
    const int64_t offset = detail::tracing() ? detail::count_traced_random_draws(x.numel()) : -1;
    return x * (to(dropout_mask(x, p, offset), x.dtype()) / (1.0 - p));
  }
  KILN_TRACE(Dropout, KILN_INPUTS(x), .p = p, .train = train);
  return x; // identity in evaluation mode, as torch (the same tensor, no copy)
}

// ------------------------------------------------------------------ adapters

namespace adapters {
std::vector<Tensor> Softmax(const std::vector<Tensor> &in, const Attrs &a) {
  check_num_inputs(in, 1, "softmax");
  return {softmax(in[0], attrs::Softmax{a}.dim())};
}
std::vector<Tensor> LogSoftmax(const std::vector<Tensor> &in, const Attrs &a) {
  check_num_inputs(in, 1, "log_softmax");
  return {log_softmax(in[0], attrs::LogSoftmax{a}.dim())};
}
std::vector<Tensor> LayerNorm(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::LayerNorm at{a};
  check_num_inputs(in, 3, "layer_norm");
  return {layer_norm(in[0], at.normalized_shape(), in[1], in[2], at.eps())};
}
std::vector<Tensor> BatchNorm(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::BatchNorm at{a};
  check_num_inputs(in, 5, "batch_norm");
  // A graph's batch_norm node only normalizes: the running-statistics update
  // was traced as separate ops with write-backs (see batch_norm).
  return {batch_norm_forward(in[0], in[1], in[2], in[3], in[4], at.training(), at.momentum(),
                                         at.eps(), /*update_running_stats=*/false)};
}
std::vector<Tensor> Dropout(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Dropout at{a};
  check_num_inputs(in, 1, "dropout");
  return {dropout(in[0], at.p(), at.train())};
}
std::vector<Tensor> DropoutMask(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::DropoutMask at{a};
  check_num_inputs(in, 1, "dropout_mask");
  return {dropout_mask(in[0], at.p(), at.offset())};
}
} // namespace adapters

} // namespace kiln
