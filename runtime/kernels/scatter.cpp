// scatter, scatter_add, scatter_reduce and index_add, with libtorch's semantics, and
// their in-place forms.
//
// Each result is a copy of self that the scattered values are then written into.
// Work goes line by line along `dim`: an index line (or a source line, for index_add)
// writes only into the result line with the same coordinates outside dim, so lines
// run in parallel and each line's writes keep their order (a repeated index keeps the
// last write, and sums add in index order: the results do not depend on threads).
// Every index is checked before anything is written.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "runtime/int_math.h"
#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/strided.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

using kernels::as_line;
using kernels::for_each_line;

enum class Reduce { Replace, Sum, Prod, Mean, Amax, Amin };

Reduce parse_reduce(const std::string &r, const char *op) {
  if (r == "sum") return Reduce::Sum;
  if (r == "prod") return Reduce::Prod;
  if (r == "mean") return Reduce::Mean;
  if (r == "amax") return Reduce::Amax;
  if (r == "amin") return Reduce::Amin;
  KILN_FAIL(op, ": reduce argument must be one of sum, prod, mean, amax, amin, got '", r, "'");
}

void check_index_dtype(const Tensor &index, const char *op) {
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": expected index of dtype int64 (or int32), got ",
             index.dtype(), " (shape ", shape_str(index.sizes()), ")");
}

// Throws naming the first index outside [0, n) found (any one, when several are).
void check_index_range(const Tensor &index, int64_t n, int64_t d, const Tensor &self, const char *op) {
  std::atomic<bool> ok{true};
  std::atomic<int64_t> bad{0};
  dispatch_dtype(index.dtype(), [&]<class I>() {
    if constexpr (std::is_same_v<I, int64_t> || std::is_same_v<I, int32_t>) {
      const I *ip = static_cast<const I *>(index.raw_data());
      kernels::for_each_row<1>(index.sizes(), {index.strides()},
                               [&](const std::array<int64_t, 1> &off, int64_t len, const std::array<int64_t, 1> &st) {
                                 for (int64_t i = 0; i < len; ++i) {
                                   const int64_t v = int64_t(ip[off[0] + i * st[0]]);
                                   if (v >= 0 && v < n) continue;
                                   bad.store(v, std::memory_order_relaxed);
                                   ok.store(false, std::memory_order_relaxed);
                                 }
                               });
    }
  });
  KILN_CHECK(ok.load(), op, ": index ", bad.load(), " is out of bounds for dimension ", d, " with size ", n,
             " (self shape ", shape_str(self.sizes()), ")");
}

// torch's scatter_shape_check: index, self and src have one rank; index is no larger than
// src anywhere, nor than self outside dim.
void check_scatter_shapes(const Tensor &x, int64_t d, const Tensor &index, const Tensor &src, const char *op) {
  const int64_t xd = std::max<int64_t>(x.dim(), 1), id = std::max<int64_t>(index.dim(), 1),
                sd = std::max<int64_t>(src.dim(), 1);
  KILN_CHECK(xd == id && id == sd, op, ": index ", shape_str(index.sizes()), ", self ", shape_str(x.sizes()), " and src ",
             shape_str(src.sizes()), " must have the same number of dimensions");
  for (int64_t k = 0; k < index.dim(); ++k) {
    KILN_CHECK(index.size(k) <= src.size(k), op, ": expected index ", shape_str(index.sizes()),
               " to be no larger than src ", shape_str(src.sizes()), " at dimension ", k);
    KILN_CHECK(k == d || index.size(k) <= x.size(k), op, ": expected index ", shape_str(index.sizes()),
               " to be no larger than self ", shape_str(x.sizes()), " apart from dimension ", d);
  }
}

// Integers add and multiply in their unsigned type: wrapping, as torch's, not undefined.
template <class T> struct Wrapping { using type = T; };
template <> struct Wrapping<int32_t> { using type = uint32_t; };
template <> struct Wrapping<int64_t> { using type = uint64_t; };
template <class T> using W = typename Wrapping<T>::type;

template <class T> bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// The value `r` starts from where include_self is false.
template <class T> T identity(Reduce r) {
  if (r == Reduce::Prod) return T(1);
  if (r == Reduce::Amax) return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                                     : std::numeric_limits<T>::lowest();
  if (r == Reduce::Amin) return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity()
                                                                     : std::numeric_limits<T>::max();
  return T(0);
}

// acc `r` v, integers wrapping as torch's int64 arithmetic; amax/amin propagate NaN.
template <class T> T combine(Reduce r, T acc, T v) {
  switch (r) {
  case Reduce::Replace: return v;
  case Reduce::Sum:
  case Reduce::Mean:
    if constexpr (std::is_same_v<T, bool>) return acc || v;
    else return T(W<T>(acc) + W<T>(v));
  case Reduce::Prod:
    if constexpr (std::is_same_v<T, bool>) return acc && v;
    else return T(W<T>(acc) * W<T>(v));
  case Reduce::Amax: return (is_nan(v) || v > acc) ? v : acc;
  case Reduce::Amin: return (is_nan(v) || v < acc) ? v : acc;
  }
  return v;
}

// out (a copy of self) gets src scattered along d through index with `r`.
template <class T, class I>
void scatter_lines(const Tensor &out, int64_t d, const Tensor &index, const Tensor &src, Reduce r, bool include_self) {
  const int64_t n = index.size(d), on = out.size(d);
  const int64_t os = out.stride(d), is = index.stride(d), ss = src.stride(d);
  T *dst = static_cast<T *>(out.raw_data());
  const I *ip = static_cast<const I *>(index.raw_data());
  const T *sp = static_cast<const T *>(src.raw_data());
  for_each_line<3>(index.sizes(), d, {out.strides(), index.strides(), src.strides()}, [&](const std::array<int64_t, 3> &o) {
    T *line = dst + o[0];
    const I *idx = ip + o[1];
    const T *vals = sp + o[2];
    if (!include_self)
      for (int64_t i = 0; i < n; ++i) line[int64_t(idx[i * is]) * os] = identity<T>(r);
    if (r != Reduce::Mean) {
      for (int64_t i = 0; i < n; ++i) {
        T &slot = line[int64_t(idx[i * is]) * os];
        slot = combine(r, slot, vals[i * ss]);
      }
      return;
    }
    // mean: the sum, then divided by the count of values there (self's own counted when included).
    thread_local std::vector<int64_t> count;
    count.assign(size_t(on), 0);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t j = int64_t(idx[i * is]);
      line[j * os] = combine(Reduce::Sum, line[j * os], vals[i * ss]);
      ++count[size_t(j)];
    }
    for (int64_t j = 0; j < on; ++j) {
      if (count[size_t(j)] == 0) continue;
      const int64_t c = count[size_t(j)] + (include_self ? 1 : 0);
      if constexpr (std::is_floating_point_v<T>) line[j * os] = line[j * os] / T(c);
      else if constexpr (!std::is_same_v<T, bool>) line[j * os] = div_floor(line[j * os], T(c)); // torch rounds down
    }
  });
}

// A copy of x in a fresh contiguous tensor (the result every op here writes into).
Tensor copy_of(const Tensor &x, std::initializer_list<const Tensor *> inputs) {
  Tensor out = detail::make_result(x.sizes(), x.dtype(), inputs);
  if (!out.is_meta() && out.numel() > 0) kernels::copy_into(out, x);
  return out;
}

Tensor scatter_impl(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src, Reduce r, bool include_self,
                    const std::string &reduce_name, const char *op) {
  detail::check_defined(x, op, "self");
  detail::check_defined(index, op, "index");
  detail::check_defined(src, op, "src");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  check_index_dtype(index, op);
  KILN_CHECK(src.dtype() == x.dtype(), op, ": expected self and src to have one dtype, got ", x.dtype(), " and ",
             src.dtype());
  KILN_CHECK(!(x.dtype() == kBool && r == Reduce::Mean), op, ": reduce 'mean' is not supported on bool tensors");
  const bool empty = index.numel() == 0;
  if (!empty) check_scatter_shapes(x, d, index, src, op);
  if (r == Reduce::Replace) {
    KILN_TRACE(Scatter, (std::vector<Tensor>{x, index, src}), .dim = d);
  } else {
    KILN_TRACE(ScatterReduce, (std::vector<Tensor>{x, index, src}), .dim = d, .reduce = reduce_name,
               .include_self = include_self);
  }
  Tensor out = copy_of(x, {&x, &index, &src});
  if (out.is_meta() || empty) return out;
  Tensor ol = as_line(out), il = as_line(index), sl = as_line(src);
  check_index_range(il, ol.size(d), d, x, op);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if (index.dtype() == kInt32) scatter_lines<T, int32_t>(ol, d, il, sl, r, include_self);
    else scatter_lines<T, int64_t>(ol, d, il, sl, r, include_self);
  });
  return out;
}

// out.select(d, index[k]) += alpha * source.select(d, k), line by line.
template <class T>
void index_add_lines(const Tensor &out, int64_t d, const std::vector<int64_t> &idx, const Tensor &source, T alpha) {
  const int64_t os = out.stride(d), ss = source.stride(d);
  T *dst = static_cast<T *>(out.raw_data());
  const T *sp = static_cast<const T *>(source.raw_data());
  for_each_line<2>(source.sizes(), d, {out.strides(), source.strides()}, [&](const std::array<int64_t, 2> &o) {
    T *line = dst + o[0];
    const T *vals = sp + o[1];
    for (size_t k = 0; k < idx.size(); ++k) {
      T &slot = line[idx[k] * os];
      slot = T(W<T>(slot) + W<T>(alpha) * W<T>(vals[int64_t(k) * ss]));
    }
  });
}

} // namespace

Tensor scatter(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src) {
  return scatter_impl(x, dim, index, src, Reduce::Replace, true, "", "scatter");
}

Tensor scatter(const Tensor &x, int64_t dim, const Tensor &index, const Scalar &value) {
  detail::check_defined(x, "scatter", "self");
  detail::check_defined(index, "scatter", "index");
  detail::check_scalar_fits(value, x.dtype(), "scatter");
  return scatter(x, dim, index, full(index.sizes(), value, x.dtype()));
}

Tensor scatter_add(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src) {
  return scatter_impl(x, dim, index, src, Reduce::Sum, true, "sum", "scatter_add");
}

Tensor scatter_reduce(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                      bool include_self) {
  return scatter_impl(x, dim, index, src, parse_reduce(reduce, "scatter_reduce"), include_self, reduce,
                      "scatter_reduce");
}

Tensor index_add(const Tensor &x, int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha) {
  const char *op = "index_add";
  detail::check_defined(x, op, "self");
  detail::check_defined(index, op, "index");
  detail::check_defined(source, op, "source");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), op);
  check_index_dtype(index, op);
  KILN_CHECK(index.dim() <= 1, op, ": index must be 0-D or 1-D, got shape ", shape_str(index.sizes()));
  KILN_CHECK(x.dtype() != kBool, op, ": not supported on bool tensors (self shape ", shape_str(x.sizes()), ")");
  KILN_CHECK(source.dtype() == x.dtype(), op, ": self (", x.dtype(), ") and source (", source.dtype(),
             ") must have the same dtype");
  KILN_CHECK(std::max<int64_t>(source.dim(), 1) == std::max<int64_t>(x.dim(), 1), op, ": source ",
             shape_str(source.sizes()), " and self ", shape_str(x.sizes()), " must have the same number of dimensions");
  const int64_t src_n = source.dim() > 0 ? source.size(d) : 1;
  KILN_CHECK(index.numel() == src_n, op, ": the number of indices (", index.numel(), ") must equal source's size (",
             src_n, ") along dimension ", d);
  for (int64_t k = 0; k < x.dim(); ++k)
    KILN_CHECK(k == d || source.size(k) == x.size(k), op, ": source ", shape_str(source.sizes()), " and self ",
               shape_str(x.sizes()), " differ at dimension ", k, " (only dimension ", d, " may differ)");
  KILN_CHECK(x.is_floating_point() || !alpha.is_floating_point(), op,
             ": for integral self, alpha must not be a floating-point number, got ", alpha);
  KILN_TRACE(IndexAdd, (std::vector<Tensor>{x, index, source}), .dim = d, .alpha = alpha);
  Tensor out = copy_of(x, {&x, &index, &source});
  if (out.is_meta() || index.numel() == 0) return out;
  Tensor ol = as_line(out), sl = as_line(source);
  check_index_range(index, ol.size(d), d, x, op);
  Tensor ic = index.to(kInt64).contiguous();
  const int64_t *ip = static_cast<const int64_t *>(ic.raw_data());
  const std::vector<int64_t> idx(ip, ip + ic.numel());
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if constexpr (!std::is_same_v<T, bool>) index_add_lines<T>(ol, d, idx, sl, alpha.to<T>());
  });
  return out;
}

// ---------------------------------------------------------------- methods

Tensor Tensor::scatter(int64_t dim, const Tensor &index, const Tensor &src) const {
  return kiln::scatter(*this, dim, index, src);
}
Tensor Tensor::scatter(int64_t dim, const Tensor &index, const Scalar &value) const {
  return kiln::scatter(*this, dim, index, value);
}
Tensor Tensor::scatter_add(int64_t dim, const Tensor &index, const Tensor &src) const {
  return kiln::scatter_add(*this, dim, index, src);
}
Tensor Tensor::scatter_reduce(int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                              bool include_self) const {
  return kiln::scatter_reduce(*this, dim, index, src, reduce, include_self);
}
Tensor Tensor::index_add(int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha) const {
  return kiln::index_add(*this, dim, index, source, alpha);
}
Tensor &Tensor::scatter_(int64_t dim, const Tensor &index, const Tensor &src) {
  return copy_(kiln::scatter(*this, dim, index, src));
}
Tensor &Tensor::scatter_(int64_t dim, const Tensor &index, const Scalar &value) {
  return copy_(kiln::scatter(*this, dim, index, value));
}
Tensor &Tensor::scatter_add_(int64_t dim, const Tensor &index, const Tensor &src) {
  return copy_(kiln::scatter_add(*this, dim, index, src));
}
Tensor &Tensor::scatter_reduce_(int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                                bool include_self) {
  return copy_(kiln::scatter_reduce(*this, dim, index, src, reduce, include_self));
}
Tensor &Tensor::index_add_(int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha) {
  return copy_(kiln::index_add(*this, dim, index, source, alpha));
}

// ---------------------------------------------------------------- uniform adapters

namespace adapters {

std::vector<Tensor> Scatter(const std::vector<Tensor> &in, const Attrs &a) {
  return {scatter(in.at(0), attrs::Scatter{a}.dim(), in.at(1), in.at(2))};
}
std::vector<Tensor> ScatterReduce(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::ScatterReduce at{a};
  return {scatter_reduce(in.at(0), at.dim(), in.at(1), in.at(2), at.reduce(), at.include_self())};
}
std::vector<Tensor> IndexAdd(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::IndexAdd at{a};
  return {index_add(in.at(0), at.dim(), in.at(1), in.at(2), at.alpha())};
}

} // namespace adapters
} // namespace kiln
