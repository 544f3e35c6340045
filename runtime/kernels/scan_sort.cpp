// Scans (cumsum, cumprod, logcumsumexp), sorting (sort, argsort, topk) and the ops whose
// result shape depends on the values (nonzero, masked_select), with libtorch's semantics.
//
// Scans and sorts work line by line along `dim`; lines are independent, so they are
// split over the pool (runtime/kernels/strided.h's row loop over the other dims).
// Accumulators follow torch's CPU kernels: float32 scans accumulate in double, integer
// ones in wrapping 64-bit integers. Sorting is stable (equal values keep their order)
// and NaN compares above every number, as torch's; topk uses the same order.
#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/kernels/loops.h"
#include "runtime/kernels/strided.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

using kernels::as_line;
using kernels::for_each_line;

// dim wrapped; a 0-dim tensor takes dim 0 or -1, as torch's scans and sorts.
int64_t line_dim(const Tensor &x, int64_t dim, const char *op) {
  return detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
}

// ---------------------------------------------------------------- scans

// The accumulator of a scan over T: double for floats, wrapping uint64 for the rest.
template <class T> using ScanAcc = std::conditional_t<std::is_floating_point_v<T>, double, uint64_t>;

template <class T, class Acc> T from_acc(Acc a) {
  if constexpr (std::is_same_v<T, bool>) return a != 0;
  else if constexpr (std::is_floating_point_v<T>) return static_cast<T>(a);
  else return static_cast<T>(static_cast<int64_t>(a));
}

template <class T, class Acc> Acc to_acc(T v) {
  if constexpr (std::is_floating_point_v<T>) return static_cast<Acc>(v);
  else return static_cast<Acc>(static_cast<int64_t>(v));
}

enum class Scan { Sum, Prod, LogSumExp };

double log_add_exp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  const double hi = std::max(a, b), lo = std::min(a, b);
  if (std::isinf(hi)) return hi; // +inf absorbs everything; both -inf stay -inf
  return hi + std::log1p(std::exp(lo - hi));
}

// out (fresh, x's shape and dtype) = the scan of x along d.
template <class T> void scan_lines(const Tensor &x, int64_t d, Scan kind, const Tensor &out) {
  using Acc = ScanAcc<T>;
  const int64_t n = x.size(d), xs = x.stride(d), os = out.stride(d);
  const T *src = static_cast<const T *>(x.raw_data());
  T *dst = static_cast<T *>(out.raw_data());
  for_each_line<2>(x.sizes(), d, {x.strides(), out.strides()}, [&](const std::array<int64_t, 2> &o) {
    const T *in = src + o[0];
    T *res = dst + o[1];
    if (kind == Scan::LogSumExp) {
      double acc = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < n; ++i) {
        acc = log_add_exp(acc, double(in[i * xs]));
        res[i * os] = static_cast<T>(acc);
      }
      return;
    }
    Acc acc = kind == Scan::Sum ? Acc(0) : Acc(1);
    for (int64_t i = 0; i < n; ++i) {
      const Acc v = to_acc<T, Acc>(in[i * xs]);
      acc = kind == Scan::Sum ? Acc(acc + v) : Acc(acc * v);
      res[i * os] = from_acc<T, Acc>(acc);
    }
  });
}

Tensor scan(const Tensor &x, int64_t dim, std::optional<DType> dtype, Scan kind, const char *op) {
  detail::check_defined(x, op, "self");
  const int64_t d = line_dim(x, dim, op);
  // A float16 / bfloat16 dtype: the input converted first, as torch does.
  if (dtype && is_reduced_float(*dtype) && x.dtype() != *dtype) return scan(to(x, *dtype), d, std::nullopt, kind, op);
  if (kind == Scan::LogSumExp)
    KILN_CHECK(x.is_floating_point(), op, ": expected a floating-point input, got ", x.dtype(), " (shape ",
               shape_str(x.sizes()), ")");
  // torch: integer and bool inputs accumulate (and return) in int64 unless a dtype is given.
  const DType dt = dtype ? *dtype : (x.is_floating_point() ? x.dtype() : kInt64);
  if (kind == Scan::Sum) {
    KILN_TRACE(Cumsum, {x}, .dim = d, .dtype = dtype);
  } else if (kind == Scan::Prod) {
    KILN_TRACE(Cumprod, {x}, .dim = d, .dtype = dtype);
  } else {
    KILN_TRACE(Logcumsumexp, {x}, .dim = d);
  }
  Tensor out = detail::make_result(x.sizes(), dt, {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  Tensor src = x.dtype() == dt ? x : x.to(dt);
  dispatch_dtype(dt, [&]<class T>() { scan_lines<T>(as_line(src), d, kind, as_line(out)); });
  return out;
}

// ---------------------------------------------------------------- sorting

// The order sort and topk use: ascending with NaN above every number (`desc` flips
// it); ties are broken by position, so std::sort and std::partial_sort are stable.
template <class T> struct Order {
  bool desc;
  bool operator()(const std::pair<T, int64_t> &a, const std::pair<T, int64_t> &b) const {
    if constexpr (std::is_floating_point_v<T>) {
      const bool an = std::isnan(a.first), bn = std::isnan(b.first);
      if (an != bn) return desc ? an : bn;
      if (an) return a.second < b.second;
    }
    if (a.first != b.first) return desc ? b.first < a.first : a.first < b.first;
    return a.second < b.second;
  }
};

// For every line along d: the first k elements in Order (all n when k == n).
template <class T>
void sort_lines(const Tensor &x, int64_t d, int64_t k, bool desc, const Tensor &values, const Tensor &indices) {
  const int64_t n = x.size(d), xs = x.stride(d), vs = values.stride(d), is = indices.stride(d);
  const T *src = static_cast<const T *>(x.raw_data());
  T *vdst = static_cast<T *>(values.raw_data());
  int64_t *idst = static_cast<int64_t *>(indices.raw_data());
  for_each_line<3>(x.sizes(), d, {x.strides(), values.strides(), indices.strides()},
                   [&](const std::array<int64_t, 3> &o) {
                     // One buffer per thread, reused across lines and calls.
                     thread_local std::vector<std::pair<T, int64_t>> buf;
                     buf.resize(size_t(n));
                     for (int64_t i = 0; i < n; ++i) buf[size_t(i)] = {src[o[0] + i * xs], i};
                     if (k == n) std::sort(buf.begin(), buf.end(), Order<T>{desc});
                     else std::partial_sort(buf.begin(), buf.begin() + k, buf.end(), Order<T>{desc});
                     for (int64_t i = 0; i < k; ++i) {
                       vdst[o[1] + i * vs] = buf[size_t(i)].first;
                       idst[o[2] + i * is] = buf[size_t(i)].second;
                     }
                   });
}

// values and indices (fresh, contiguous, x's shape with k along d) of x's first k in Order.
void run_sort(const Tensor &x, int64_t d, int64_t k, bool desc, const Tensor &values, const Tensor &indices) {
  if (values.numel() == 0) return;
  Tensor xl = as_line(x);
  Dims shape(xl.sizes());
  shape[size_t(d)] = k;
  // The line loop walks x's shape; the results' strides along d step through their k slots.
  Dims vst(detail::contiguous_strides(shape)), ist(vst);
  Tensor v = detail::make_view(values, xl.sizes(), vst, values.storage_offset());
  Tensor i = detail::make_view(indices, xl.sizes(), ist, indices.storage_offset());
  dispatch_dtype(x.dtype(), [&]<class T>() { sort_lines<T>(xl, d, k, desc, v, i); });
}

// ---------------------------------------------------------------- data-dependent shapes

// Reports a traced call (whose tensors are meta) as item() is: the tracer throws.
void refuse_meta(const Tensor &t, const char *op) {
  if (!t.is_meta()) return;
  if (detail::trace_hooks().data_read) detail::trace_hooks().data_read(op);
  throw TraceError(detail::concat(op, ": the result's shape depends on the values; a meta tensor has none"));
}

template <class T> bool nonzero_value(T v) {
  if constexpr (std::is_same_v<T, bool>) return v;
  else return v != T(0);
}

} // namespace

Tensor cumsum(const Tensor &x, int64_t dim, std::optional<DType> dtype) {
  return scan(x, dim, dtype, Scan::Sum, "cumsum");
}
Tensor cumprod(const Tensor &x, int64_t dim, std::optional<DType> dtype) {
  return scan(x, dim, dtype, Scan::Prod, "cumprod");
}
Tensor logcumsumexp(const Tensor &x, int64_t dim) { return scan(x, dim, std::nullopt, Scan::LogSumExp, "logcumsumexp"); }

std::tuple<Tensor, Tensor> sort(const Tensor &x, int64_t dim, bool descending) {
  detail::check_defined(x, "sort", "self");
  const int64_t d = line_dim(x, dim, "sort");
  KILN_TRACE(Sort, {x}, .dim = d, .descending = descending);
  Tensor values = detail::make_result(x.sizes(), x.dtype(), {&x});
  Tensor indices = detail::make_result(x.sizes(), kInt64, {&x});
  if (values.is_meta()) return {values, indices};
  run_sort(x, d, x.dim() > 0 ? x.size(d) : 1, descending, values, indices);
  return {values, indices};
}

// Always stable: `stable` only chooses what torch would guarantee.
std::tuple<Tensor, Tensor> sort(const Tensor &x, std::optional<bool> stable, int64_t dim, bool descending) {
  (void)stable;
  return sort(x, dim, descending);
}

Tensor argsort(const Tensor &x, int64_t dim, bool descending) { return std::get<1>(sort(x, dim, descending)); }

std::tuple<Tensor, Tensor> topk(const Tensor &x, int64_t k, int64_t dim, bool largest, bool sorted) {
  detail::check_defined(x, "topk", "self");
  const int64_t d = line_dim(x, dim, "topk");
  const int64_t n = x.dim() > 0 ? x.size(d) : 1;
  KILN_CHECK(k >= 0 && k <= n, "topk: k (", k, ") is out of range for dimension ", d, " of size ", n, " (self shape ",
             shape_str(x.sizes()), ")");
  KILN_TRACE(Topk, {x}, .k = k, .dim = d, .largest = largest, .sorted = sorted);
  // A 0-dim self gives a 0-dim result, or [0] for k = 0.
  Dims shape(x.sizes());
  if (x.dim() > 0) shape[size_t(d)] = k;
  else if (k == 0) shape = Dims{0};
  Tensor values = detail::make_result(shape, x.dtype(), {&x});
  Tensor indices = detail::make_result(shape, kInt64, {&x});
  if (values.is_meta()) return {values, indices};
  run_sort(x, d, k, largest, values, indices);
  return {values, indices};
}

Tensor nonzero(const Tensor &x) {
  detail::check_defined(x, "nonzero", "self");
  refuse_meta(x, "nonzero");
  Tensor xc = x.contiguous();
  const int64_t n = xc.numel(), nd = x.dim();
  int64_t count = 0;
  dispatch_storage_dtype(x.dtype(), [&]<class T>() {
    const T *p = static_cast<const T *>(xc.raw_data());
    for (int64_t i = 0; i < n; ++i) count += nonzero_value(p[i]);
  });
  Tensor out = detail::make_tensor({count, nd}, kInt64);
  if (count == 0 || nd == 0) return out;
  int64_t *o = static_cast<int64_t *>(out.raw_data());
  dispatch_storage_dtype(x.dtype(), [&]<class T>() {
    const T *p = static_cast<const T *>(xc.raw_data());
    std::vector<int64_t> idx(size_t(nd), 0); // the row-major odometer of element i
    for (int64_t i = 0; i < n; ++i) {
      if (nonzero_value(p[i])) o = std::copy(idx.begin(), idx.end(), o);
      for (int64_t k = nd - 1; k >= 0; --k) {
        if (++idx[size_t(k)] < x.size(k)) break;
        idx[size_t(k)] = 0;
      }
    }
  });
  return out;
}

Tensor masked_select(const Tensor &x, const Tensor &mask) {
  detail::check_defined(x, "masked_select", "self");
  detail::check_defined(mask, "masked_select", "mask");
  KILN_CHECK(mask.dtype() == kBool, "masked_select: expected a bool mask, got ", mask.dtype(), " (shape ",
             shape_str(mask.sizes()), ")");
  const Dims shape = detail::broadcast_shapes(x.sizes(), mask.sizes(), "masked_select");
  refuse_meta(x, "masked_select");
  refuse_meta(mask, "masked_select");
  Tensor xc = x.expand(shape).contiguous(), mc = mask.expand(shape).contiguous();
  const bool *m = static_cast<const bool *>(mc.raw_data());
  const int64_t n = mc.numel();
  const int64_t count = std::count(m, m + n, true);
  Tensor out = detail::make_tensor({count}, x.dtype());
  dispatch_storage_dtype(x.dtype(), [&]<class T>() {
    const T *p = static_cast<const T *>(xc.raw_data());
    T *o = static_cast<T *>(out.raw_data());
    for (int64_t i = 0; i < n; ++i)
      if (m[i]) *o++ = p[i];
  });
  return out;
}

// ---------------------------------------------------------------- random

Tensor bernoulli(const Tensor &p) {
  detail::check_defined(p, "bernoulli", "p");
  KILN_CHECK(p.is_floating_point(), "bernoulli: expected a floating-point p, got ", p.dtype(), " (shape ",
             shape_str(p.sizes()), ")");
  if (!p.is_meta())
    KILN_CHECK(all(logical_and(ge(p, 0.0), le(p, 1.0))).item<bool>(), "bernoulli: expected all values of p in [0, 1]");
  return lt(rand(p.sizes(), p.dtype()), p).to(p.dtype());
}

Tensor bernoulli(const Tensor &x, double p) {
  detail::check_defined(x, "bernoulli", "self");
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli: expected p in [0, 1], got ", p);
  KILN_CHECK(x.is_floating_point(), "bernoulli: expected a floating-point self, got ", x.dtype());
  return lt(rand(x.sizes(), kFloat64), p).to(x.dtype());
}

Tensor normal(double mean, double std, IntArrayRef size, TensorOptions options) {
  KILN_CHECK(std >= 0, "normal: expected std >= 0.0, got ", std);
  return randn(size, options) * std + mean;
}

// ---------------------------------------------------------------- methods

Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const { return kiln::cumsum(*this, dim, dtype); }
Tensor Tensor::cumprod(int64_t dim, std::optional<DType> dtype) const { return kiln::cumprod(*this, dim, dtype); }
Tensor Tensor::logcumsumexp(int64_t dim) const { return kiln::logcumsumexp(*this, dim); }
std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending) const {
  return kiln::sort(*this, dim, descending);
}
Tensor Tensor::argsort(int64_t dim, bool descending) const { return kiln::argsort(*this, dim, descending); }
std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return kiln::topk(*this, k, dim, largest, sorted);
}
Tensor Tensor::nonzero() const { return kiln::nonzero(*this); }
Tensor Tensor::masked_select(const Tensor &mask) const { return kiln::masked_select(*this, mask); }
Tensor &Tensor::cumsum_(int64_t dim) { return copy_(kiln::cumsum(*this, dim, dtype())); }

Tensor &Tensor::normal_(double mean, double std) {
  detail::check_defined(*this, "normal_", "self");
  KILN_CHECK(is_floating_point(), "normal_: expected a floating-point tensor, got ", dtype());
  KILN_CHECK(std >= 0, "normal_: expected std >= 0.0, got ", std);
  return copy_(kiln::randn(sizes(), dtype()) * std + mean);
}
Tensor &Tensor::uniform_(double from, double to) {
  detail::check_defined(*this, "uniform_", "self");
  KILN_CHECK(is_floating_point(), "uniform_: expected a floating-point tensor, got ", dtype());
  KILN_CHECK(from <= to, "uniform_: expected from <= to, got from=", from, " > to=", to);
  return copy_(kiln::rand(sizes(), dtype()) * (to - from) + from);
}
Tensor &Tensor::bernoulli_(double p) {
  detail::check_defined(*this, "bernoulli_", "self");
  KILN_CHECK(p >= 0 && p <= 1, "bernoulli_: expected p in [0, 1], got ", p);
  return copy_(kiln::lt(kiln::rand(sizes(), kFloat64), p));
}
Tensor &Tensor::bernoulli_(const Tensor &p) {
  detail::check_defined(*this, "bernoulli_", "self");
  detail::check_defined(p, "bernoulli_", "p");
  KILN_CHECK(detail::broadcasts_to(p.sizes(), sizes()), "bernoulli_: p of shape ", shape_str(p.sizes()),
             " does not broadcast to self's shape ", shape_str(sizes()));
  return copy_(kiln::bernoulli(p.expand(sizes())));
}

void detail::fail_accessor_index(int64_t index, int64_t size) {
  KILN_FAIL("accessor: index ", index, " is out of range for a dimension of size ", size);
}
void detail::check_accessor(const Tensor &t, DType dtype, size_t rank) {
  check_defined(t, "accessor", "self");
  KILN_CHECK(t.dtype() == dtype, "accessor: tensor has dtype ", t.dtype(), " but was read as ", dtype);
  KILN_CHECK(t.dim() == int64_t(rank), "accessor: expected a ", rank, "-dim tensor, got shape ", shape_str(t.sizes()));
}

// ---------------------------------------------------------------- uniform adapters

namespace adapters {

std::vector<Tensor> Cumsum(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Cumsum at{a};
  return {cumsum(in.at(0), at.dim(), at.dtype())};
}
std::vector<Tensor> Cumprod(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Cumprod at{a};
  return {cumprod(in.at(0), at.dim(), at.dtype())};
}
std::vector<Tensor> Logcumsumexp(const std::vector<Tensor> &in, const Attrs &a) {
  return {logcumsumexp(in.at(0), attrs::Logcumsumexp{a}.dim())};
}
std::vector<Tensor> Sort(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Sort at{a};
  auto [values, indices] = sort(in.at(0), at.dim(), at.descending());
  return {values, indices};
}
std::vector<Tensor> Topk(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Topk at{a};
  auto [values, indices] = topk(in.at(0), at.k(), at.dim(), at.largest(), at.sorted());
  return {values, indices};
}

} // namespace adapters
} // namespace kiln
