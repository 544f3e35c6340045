// Shape and indexing ops: tril/triu, cat, stack, split, chunk, index_select,
// gather, embedding (libtorch semantics), and their uniform adapters.
#include <algorithm>
#include <atomic>
#include <vector>

#include "runtime/kernels/strided.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln {

namespace {

bool any_meta(const TensorList &ts) {
  for (const Tensor &t : ts)
    if (t.defined() && t.is_meta()) return true;
  return false;
}

// Rows of the last two dims: keep (i, j) when keep(j - i), zero the rest.
template <class Keep> Tensor triangle(const Tensor &x, int64_t diagonal, Keep keep) {
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x});
  if (out.is_meta() || out.numel() == 0) return out;
  kernels::copy_into(out, x);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  const int64_t nrows = out.numel() / cols;
  const int64_t grain = std::max<int64_t>(1, kernels::kGrainElems / cols);
  dispatch_dtype(x.dtype(), [&]<class T>() {
    T *p = static_cast<T *>(out.raw_data());
    parallel_for(0, nrows, grain, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const int64_t i = r % rows;
        T *row = p + r * cols;
        for (int64_t j = 0; j < cols; ++j)
          if (!keep(j - i - diagonal)) row[j] = T(0);
      }
    });
  });
  return out;
}

void check_triangle_input(const Tensor &x, const char *op) {
  detail::check_defined(x, op, "self");
  KILN_CHECK(x.dim() >= 2, op, ": input tensor must have at least 2 dimensions, got shape ", shape_str(x.sizes()));
}

} // namespace

Tensor tril(const Tensor &x, int64_t diagonal) {
  check_triangle_input(x, "tril");
  KILN_TRACE(Tril, {x}, .diagonal = diagonal);
  return triangle(x, diagonal, [](int64_t d) { return d <= 0; });
}

Tensor triu(const Tensor &x, int64_t diagonal) {
  check_triangle_input(x, "triu");
  KILN_TRACE(Triu, {x}, .diagonal = diagonal);
  return triangle(x, diagonal, [](int64_t d) { return d >= 0; });
}

// ---------------------------------------------------------------- cat, stack

namespace {

// torch's legacy rule: 1-D tensors with no elements are ignored by cat.
bool cat_skips(const Tensor &t) { return t.dim() == 1 && t.size(0) == 0; }

DType promoted_dtype(const TensorList &ts) {
  DType dt = ts[0].dtype();
  for (const Tensor &t : ts) dt = promote_types(dt, t.dtype());
  return dt;
}

void check_list(const TensorList &ts, const char *op) {
  KILN_CHECK(!ts.empty(), op, ": expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i)
    KILN_CHECK(ts[i].defined(), op, ": tensor at position ", i, " is undefined");
}

// The shape of cat's result; `ref` is the first tensor not skipped (or npos).
Dims cat_shape(const TensorList &ts, size_t ref, int64_t d) {
  const Tensor &r = ts[ref];
  Dims shape(r.sizes());
  int64_t total = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor &t = ts[i];
    if (cat_skips(t)) continue;
    KILN_CHECK(t.dim() == r.dim(), "cat: tensors must have the same number of dimensions: tensor ", ref,
               " has shape ", shape_str(r.sizes()), " but tensor ", i, " has shape ", shape_str(t.sizes()));
    for (int64_t k = 0; k < r.dim(); ++k)
      KILN_CHECK(k == d || t.size(k) == r.size(k), "cat: sizes of tensors must match except in dimension ", d,
                 ": tensor ", ref, " has shape ", shape_str(r.sizes()), " but tensor ", i, " has shape ",
                 shape_str(t.sizes()), " (mismatch in dimension ", k, ")");
    total += t.size(d);
  }
  shape[d] = total;
  return shape;
}

// The result of an op over a list: meta when any input is, else make_result's
// (the compiled executor may place it in its arena slot).
Tensor list_result(IntArrayRef shape, DType dt, const TensorList &tensors) {
  if (any_meta(tensors)) return detail::make_tensor(shape, dt, true);
  return detail::make_result(shape, dt, {});
}

} // namespace

Tensor cat(const TensorList &tensors, int64_t dim) {
  check_list(tensors, "cat");
  for (size_t i = 0; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].dim() > 0, "cat: zero-dimensional tensor (at position ", i, ") cannot be concatenated");
  const DType dt = promoted_dtype(tensors);
  size_t ref = 0;
  while (ref < tensors.size() && cat_skips(tensors[ref])) ++ref;
  if (ref == tensors.size()) { // every input skipped: torch returns an empty 1-D tensor
    KILN_TRACE(Cat, tensors, .dim = dim);
    return detail::make_tensor({0}, dt, any_meta(tensors));
  }
  const int64_t d = detail::wrap_dim(dim, tensors[ref].dim(), "cat");
  Dims shape = cat_shape(tensors, ref, d);
  KILN_TRACE(Cat, tensors, .dim = d);
  Tensor out = list_result(shape, dt, tensors);
  if (out.is_meta()) return out;
  int64_t offset = 0;
  for (const Tensor &t : tensors) {
    if (cat_skips(t)) continue;
    kernels::copy_into(kernels::narrow_view(out, d, offset, t.size(d)), t);
    offset += t.size(d);
  }
  return out;
}

Tensor stack(const TensorList &tensors, int64_t dim) {
  check_list(tensors, "stack");
  const Tensor &first = tensors[0];
  for (size_t i = 1; i < tensors.size(); ++i)
    KILN_CHECK(tensors[i].sizes() == first.sizes(), "stack: expects each tensor to be equal size, but got ",
               shape_str(first.sizes()), " at entry 0 and ", shape_str(tensors[i].sizes()), " at entry ", i);
  const int64_t d = detail::wrap_dim(dim, first.dim() + 1, "stack");
  Dims shape(first.sizes());
  shape.insert(d, int64_t(tensors.size()));
  const DType dt = promoted_dtype(tensors);
  KILN_TRACE(Stack, tensors, .dim = d);
  Tensor out = list_result(shape, dt, tensors);
  if (out.is_meta()) return out;
  // Entry i goes to out.select(d, i): drop dim d from out's metadata.
  Dims sz(out.sizes()), st(out.strides());
  const int64_t step = st[d];
  sz.erase(d);
  st.erase(d);
  for (size_t i = 0; i < tensors.size(); ++i)
    kernels::copy_into(detail::make_view(out, sz, st, int64_t(i) * step), tensors[i]);
  return out;
}

// ---------------------------------------------------------------- split, chunk

namespace {

int64_t split_dim(const Tensor &x, int64_t dim, const char *op) {
  detail::check_defined(x, op, "self");
  KILN_CHECK(x.dim() > 0, op, ": expects at least a 1-dimensional tensor");
  return detail::wrap_dim(dim, x.dim(), op);
}

// Views of consecutive pieces of dim d (sizes already validated).
std::vector<Tensor> split_views(const Tensor &x, const std::vector<int64_t> &sizes, int64_t d) {
  KILN_TRACE(Split, {x}, .split_sizes = sizes, .dim = d);
  std::vector<Tensor> out;
  out.reserve(sizes.size());
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(kernels::narrow_view(x, d, start, s));
    start += s;
  }
  return out;
}

// torch.split(split_size): pieces of split_size, the last one smaller.
std::vector<int64_t> sizes_for_split(int64_t n, int64_t split_size, const Tensor &x, int64_t d) {
  KILN_CHECK(split_size >= 0, "split: split_size must be non-negative, got ", split_size);
  KILN_CHECK(split_size > 0 || n == 0, "split: split_size can only be 0 if dimension size is 0, but got dimension ",
             d, " of size ", n, " (shape ", shape_str(x.sizes()), ")");
  // Written so that no intermediate overflows for any split_size.
  const int64_t pieces = (n == 0 || split_size == 0) ? 1 : (n - 1) / split_size + 1;
  std::vector<int64_t> sizes(size_t(pieces), split_size);
  sizes.back() = n - split_size * (pieces - 1);
  return sizes;
}

} // namespace

std::vector<Tensor> split(const Tensor &x, int64_t split_size, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  return split_views(x, sizes_for_split(x.size(d), split_size, x, d), d);
}

std::vector<Tensor> split(const Tensor &x, IntArrayRef split_sizes, int64_t dim) {
  const int64_t d = split_dim(x, dim, "split");
  int64_t sum = 0;
  for (int64_t s : split_sizes) {
    KILN_CHECK(s >= 0, "split: split_sizes ", shape_str(split_sizes), " contain the negative size ", s);
    sum = s > x.size(d) - sum ? x.size(d) + 1 : sum + s; // saturates past the dim size: no overflow
  }
  KILN_CHECK(sum == x.size(d), "split: split_sizes ", shape_str(split_sizes), " must sum exactly to ", x.size(d),
             " (the size of dimension ", d, " of the input of shape ", shape_str(x.sizes()), ")");
  return split_views(x, split_sizes.vec(), d);
}

std::vector<Tensor> chunk(const Tensor &x, int64_t chunks, int64_t dim) {
  const int64_t d = split_dim(x, dim, "chunk");
  KILN_CHECK(chunks > 0, "chunk: expects `chunks` to be greater than 0, got ", chunks);
  const int64_t n = x.size(d);
  const int64_t size = n == 0 ? 0 : (n - 1) / chunks + 1; // ceil(n / chunks) without overflow
  // An empty dim keeps the number of chunks (torch splits it into `chunks` empty pieces).
  if (size == 0) return split_views(x, std::vector<int64_t>(size_t(chunks), 0), d);
  return split_views(x, sizes_for_split(n, size, x, d), d);
}

// ---------------------------------------------------------------- index_select, embedding

namespace {

void check_index_dtype(const Tensor &index, const char *op, const char *arg) {
  KILN_CHECK(index.dtype() == kInt64 || index.dtype() == kInt32, op, ": expected ", arg,
             " of dtype int32 or int64, got ", index.dtype());
}

// The index values in logical order, each checked against [0, limit).
std::vector<int64_t> read_indices(const Tensor &index, int64_t limit, const char *op, int64_t dim) {
  std::vector<int64_t> out(size_t(index.numel()));
  if (out.empty()) return out;
  const Dims cst = detail::contiguous_strides(index.sizes());
  if (index.dtype() == kInt32)
    kernels::copy_rows(static_cast<const int32_t *>(index.raw_data()), index.strides(), out.data(), cst, index.sizes());
  else
    kernels::copy_rows(static_cast<const int64_t *>(index.raw_data()), index.strides(), out.data(), cst, index.sizes());
  for (int64_t v : out)
    KILN_CHECK(v >= 0 && v < limit, op, ": index ", v, " is out of range for dimension ", dim, " of size ", limit);
  return out;
}

// out.select(d, k) = x.select(d, idx[k]) for every k. x is split into the dims
// before d (outer), d, and the dims after d (inner); work goes over outer x k so
// that a dim-last select reads each source row once instead of walking columns.
void select_along(const Tensor &x, int64_t d, const std::vector<int64_t> &idx, const Tensor &out) {
  const int64_t K = int64_t(idx.size());
  const int64_t xstep = x.strides()[d], ostep = out.strides()[d];
  Dims osz, oxs, oos, isz, ixs, ios;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i == d) continue;
    Dims &sz = i < d ? osz : isz, &xs = i < d ? oxs : ixs, &os = i < d ? oos : ios;
    sz.push_back(x.sizes()[i]);
    xs.push_back(x.strides()[i]);
    os.push_back(out.strides()[i]);
  }
  int64_t outer = 1, inner = 1;
  for (int64_t s : osz) outer *= s;
  for (int64_t s : isz) inner *= s;
  // Source and result offsets of outer row o.
  auto outer_offsets = [&](int64_t o, int64_t &xo, int64_t &oo) {
    xo = oo = 0;
    for (size_t j = osz.size(); j-- > 0;) {
      const int64_t i = o % osz[j];
      o /= osz[j];
      xo += i * oxs[j];
      oo += i * oos[j];
    }
  };
  dispatch_dtype(x.dtype(), [&]<class T>() {
    const T *src = static_cast<const T *>(x.raw_data());
    T *dst = static_cast<T *>(out.raw_data());
    if (inner == 1) { // one element per (o, k): a tight loop over k per outer row
      parallel_for(0, outer, std::max<int64_t>(1, kernels::kGrainElems / K), [&](int64_t b, int64_t e) {
        for (int64_t o = b; o < e; ++o) {
          int64_t xo, oo;
          outer_offsets(o, xo, oo);
          for (int64_t k = 0; k < K; ++k) dst[oo + k * ostep] = src[xo + idx[size_t(k)] * xstep];
        }
      });
      return;
    }
    // One slab of `inner` elements per (o, k); inside a pool task the copy stays serial.
    parallel_for(0, outer * K, std::max<int64_t>(1, kernels::kGrainElems / inner), [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const int64_t o = u / K, k = u % K;
        int64_t xo, oo;
        outer_offsets(o, xo, oo);
        kernels::copy_rows(src + xo + idx[size_t(k)] * xstep, ixs, dst + oo + k * ostep, ios, isz);
      }
    });
  });
}

} // namespace

Tensor index_select(const Tensor &x, int64_t dim, const Tensor &index) {
  detail::check_defined(x, "index_select", "self");
  detail::check_defined(index, "index_select", "index");
  const int64_t d = detail::wrap_dim(dim, x.dim(), "index_select");
  KILN_CHECK(index.dim() <= 1, "index_select: index is supposed to be a vector, got shape ", shape_str(index.sizes()));
  check_index_dtype(index, "index_select", "index");
  KILN_CHECK(x.dim() > 0 || index.numel() == 1, "index_select: index to a 0-dim tensor can have only 1 value, got ",
             index.numel());
  KILN_TRACE(IndexSelect, (std::vector<Tensor>{x, index}), .dim = d); // parenthesized: the braces hold a comma
  Dims shape(x.sizes());
  if (x.dim() > 0) shape[d] = index.numel();
  Tensor out = detail::make_result(shape, x.dtype(), {&x, &index});
  if (out.is_meta()) return out;
  // A 0-dim input (and its 0-dim result) behave as 1-element vectors.
  const bool scalar = x.dim() == 0;
  Tensor xv = scalar ? detail::make_view(x, {1}, {1}, x.storage_offset()) : x;
  std::vector<int64_t> idx = read_indices(index, xv.size(d), "index_select", d);
  if (out.numel() == 0) return out;
  select_along(xv, d, idx, scalar ? detail::make_view(out, {1}, {1}, out.storage_offset()) : out);
  return out;
}

Tensor embedding(const Tensor &weight, const Tensor &indices) {
  detail::check_defined(weight, "embedding", "weight");
  detail::check_defined(indices, "embedding", "indices");
  KILN_CHECK(weight.dim() == 2, "embedding: weight must be 2-D, got shape ", shape_str(weight.sizes()));
  check_index_dtype(indices, "embedding", "indices");
  KILN_TRACE(Embedding, (std::vector<Tensor>{weight, indices}));
  Dims shape(indices.sizes());
  shape.push_back(weight.size(1));
  Tensor out = detail::make_result(shape, weight.dtype(), {&weight, &indices});
  if (out.is_meta()) return out;
  std::vector<int64_t> idx = read_indices(indices, weight.size(0), "embedding", 0);
  if (out.numel() == 0) return out;
  // Rows of the result, one per index in logical order.
  const int64_t dim = weight.size(1);
  select_along(weight, 0, idx, detail::make_view(out, {int64_t(idx.size()), dim}, {dim, 1}, out.storage_offset()));
  return out;
}

// ---------------------------------------------------------------- gather

namespace {

// torch's gather_shape_check: same rank; index no larger than self except in dim.
void check_gather_shapes(const Tensor &x, int64_t d, const Tensor &index) {
  const int64_t xd = std::max<int64_t>(x.dim(), 1), id = std::max<int64_t>(index.dim(), 1);
  KILN_CHECK(xd == id, "gather: index ", shape_str(index.sizes()), " must have the same number of dimensions as self ",
             shape_str(x.sizes()));
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k == d) continue;
    KILN_CHECK(index.size(k) <= x.size(k), "gather: size does not match at dimension ", k, ": expected index ",
               shape_str(index.sizes()), " to be no larger than self ", shape_str(x.sizes()), " apart from dimension ",
               d);
  }
}

template <class T, class I> void gather_kernel(const Tensor &x, int64_t d, const Tensor &index, const Tensor &out) {
  const int64_t n = x.dim() > 0 ? x.size(d) : 1;
  const int64_t dstride = x.dim() > 0 ? x.stride(d) : 0;
  // Bounds first, so nothing is written when an index is bad.
  const I *ip = static_cast<const I *>(index.raw_data());
  std::atomic<bool> ok{true};
  std::atomic<int64_t> bad{0};
  kernels::for_each_row<1>(index.sizes(), {index.strides()},
                           [&](const std::array<int64_t, 1> &off, int64_t len, const std::array<int64_t, 1> &st) {
                             for (int64_t i = 0; i < len; ++i) {
                               int64_t v = ip[off[0] + i * st[0]];
                               if (v >= 0 && v < n) continue;
                               bad.store(v, std::memory_order_relaxed); // any one bad value is reported
                               ok.store(false, std::memory_order_relaxed);
                             }
                           });
  KILN_CHECK(ok.load(), "gather: index ", bad.load(), " is out of bounds for dimension ", d, " with size ", n, " (self shape ",
             shape_str(x.sizes()), ")");
  // Source strides: x's strides outside d, 0 along d (the index supplies that offset).
  // A 0-dim self with a 1-D index: the source never moves.
  Dims xst = x.dim() > 0 ? Dims(x.strides()) : Dims();
  if (x.dim() > 0) xst[d] = 0;
  else xst.resize(size_t(index.dim()), 0);
  const T *src = static_cast<const T *>(x.raw_data());
  T *dst = static_cast<T *>(out.raw_data());
  kernels::for_each_row<3>(
      out.sizes(), {out.strides(), index.strides(), IntArrayRef(xst)},
      [&](const std::array<int64_t, 3> &off, int64_t len, const std::array<int64_t, 3> &st) {
        for (int64_t i = 0; i < len; ++i)
          dst[off[0] + i * st[0]] = src[off[2] + i * st[2] + int64_t(ip[off[1] + i * st[1]]) * dstride];
      });
}

} // namespace

Tensor gather(const Tensor &x, int64_t dim, const Tensor &index) {
  detail::check_defined(x, "gather", "self");
  detail::check_defined(index, "gather", "index");
  const int64_t d = detail::wrap_dim(dim, x.dim(), "gather");
  const bool empty = index.numel() == 0;
  if (!empty) {
    check_index_dtype(index, "gather", "index");
    check_gather_shapes(x, d, index);
  }
  KILN_TRACE(Gather, (std::vector<Tensor>{x, index}), .dim = d);
  Tensor out = detail::make_result(index.sizes(), x.dtype(), {&x, &index});
  if (out.is_meta() || empty) return out;
  dispatch_dtype(x.dtype(), [&]<class T>() {
    if (index.dtype() == kInt32) gather_kernel<T, int32_t>(x, d, index, out);
    else gather_kernel<T, int64_t>(x, d, index, out);
  });
  return out;
}

// ---------------------------------------------------------------- uniform adapters

namespace adapters {

std::vector<Tensor> Tril(const std::vector<Tensor> &in, const Attrs &a) { return {tril(in.at(0), attrs::Tril{a}.diagonal())}; }
std::vector<Tensor> Triu(const std::vector<Tensor> &in, const Attrs &a) { return {triu(in.at(0), attrs::Triu{a}.diagonal())}; }
std::vector<Tensor> Cat(const std::vector<Tensor> &in, const Attrs &a) { return {cat(in, attrs::Cat{a}.dim())}; }
std::vector<Tensor> Stack(const std::vector<Tensor> &in, const Attrs &a) { return {stack(in, attrs::Stack{a}.dim())}; }
std::vector<Tensor> Split(const std::vector<Tensor> &in, const Attrs &a) {
  attrs::Split at{a};
  return split(in.at(0), IntArrayRef(at.split_sizes()), at.dim());
}
std::vector<Tensor> IndexSelect(const std::vector<Tensor> &in, const Attrs &a) {
  return {index_select(in.at(0), attrs::IndexSelect{a}.dim(), in.at(1))};
}
std::vector<Tensor> Gather(const std::vector<Tensor> &in, const Attrs &a) {
  return {gather(in.at(0), attrs::Gather{a}.dim(), in.at(1))};
}
std::vector<Tensor> Embedding(const std::vector<Tensor> &in, const Attrs &) { return {embedding(in.at(0), in.at(1))}; }

} // namespace adapters

} // namespace kiln
