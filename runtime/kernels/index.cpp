// Advanced indexing with libtorch's semantics: aten::index, index_put and index_put_
// (runtime/ops.h), and the torch::indexing entry points Tensor::index and
// Tensor::index_put_ (runtime/indexing.h), which turn integers, slices, None and
// Ellipsis into views and hand the tensors to those.
//
// The index tensors (a bool mask becomes its nonzero() positions first) broadcast to
// one index shape B. The result is x's dims before the indexed ones, then B, then x's
// dims after them, when the indexed dims are adjacent; B then all of x's other dims
// otherwise (torch's rule). Elements move as bytes: every dtype takes the same loop.
// Every index is checked before anything is written.
#include "runtime/indexing.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/kernels/elementwise.h"
#include "runtime/kernels/strided.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"
#include "runtime/version.h"

namespace kiln {
namespace {

using Indices = std::vector<std::optional<Tensor>>;

// The index tensors once masks are their positions: tensors[k] indexes x's dim dims[k].
struct Plan {
  std::vector<int64_t> dims;
  std::vector<Tensor> tensors;
};

Plan plan_of(const Tensor &x, const Indices &indices, const char *op) {
  Plan p;
  int64_t d = 0;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::optional<Tensor> &e = indices[i];
    if (!e || !e->defined()) {
      ++d;
      continue;
    }
    const Tensor &t = *e;
    if (t.dtype() == kBool) {
      KILN_CHECK(t.dim() > 0, op, ": a 0-dim bool index (at index ", i, ") is not supported; use true / false in "
                 "Tensor::index, or unsqueeze the mask");
      KILN_CHECK(d + t.dim() <= x.dim(), op, ": too many indices for tensor of dimension ", x.dim(), " (shape ",
                 shape_str(x.sizes()), "): the mask at index ", i, " has ", t.dim(), " dims");
      for (int64_t j = 0; j < t.dim(); ++j)
        KILN_CHECK(t.size(j) == x.size(d + j), op, ": the shape of the mask ", shape_str(t.sizes()), " at index ", i,
                   " does not match the shape of the indexed tensor ", shape_str(x.sizes()), " at dimension ", d + j);
      Tensor nz = nonzero(t); // [n, k]: data-dependent, reported while tracing
      for (int64_t j = 0; j < t.dim(); ++j) {
        p.dims.push_back(d + j);
        p.tensors.push_back(nz.select(1, j));
      }
      d += t.dim();
      continue;
    }
    KILN_CHECK(t.dtype() == kInt64 || t.dtype() == kInt32, op,
               ": tensors used as indices must be int64, int32 or bool tensors, got ", t.dtype(), " (shape ",
               shape_str(t.sizes()), ") at index ", i);
    p.dims.push_back(d++);
    p.tensors.push_back(t);
  }
  KILN_CHECK(d <= x.dim(), op, ": too many indices for tensor of dimension ", x.dim(), " (shape ",
             shape_str(x.sizes()), "): got ", indices.size());
  KILN_CHECK(!p.tensors.empty(), op, ": expected at least one index tensor, got only None entries (self shape ",
             shape_str(x.sizes()), ")");
  return p;
}

// The result's shape and which of x's dims come before and after the index shape.
struct Geometry {
  Dims index_shape;
  std::vector<int64_t> pre, post;
  Dims out;
};

Geometry geometry(const Tensor &x, const Plan &p, const char *op) {
  Geometry g;
  for (const Tensor &t : p.tensors) g.index_shape = detail::broadcast_shapes(g.index_shape, t.sizes(), op);
  const bool adjacent = p.dims.back() - p.dims.front() + 1 == int64_t(p.dims.size());
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (std::find(p.dims.begin(), p.dims.end(), d) != p.dims.end()) continue;
    (adjacent && d < p.dims.front() ? g.pre : g.post).push_back(d);
  }
  for (int64_t d : g.pre) g.out.push_back(x.size(d));
  for (int64_t s : g.index_shape) g.out.push_back(s);
  for (int64_t d : g.post) g.out.push_back(x.size(d));
  return g;
}

// Element offsets, in t's strides, of every position over `dims` in row-major order.
std::vector<int64_t> offsets(const Tensor &t, const std::vector<int64_t> &dims) {
  std::vector<int64_t> off{0};
  for (int64_t d : dims) {
    std::vector<int64_t> next;
    next.reserve(off.size() * size_t(t.size(d)));
    for (int64_t o : off)
      for (int64_t i = 0; i < t.size(d); ++i) next.push_back(o + i * t.stride(d));
    off = std::move(next);
  }
  return off;
}

// For each position of the index shape, the offset (in t's strides) its indices pick;
// an index outside [-size, size) throws before anything is read or written.
std::vector<int64_t> index_offsets(const Tensor &t, const Plan &p, const Dims &shape, const char *op) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<int64_t> off(size_t(n), 0);
  for (size_t k = 0; k < p.tensors.size(); ++k) {
    const int64_t d = p.dims[k], size = t.size(d), stride = t.stride(d);
    Tensor ix = p.tensors[k].to(kInt64).expand(shape).contiguous();
    const int64_t *ip = static_cast<const int64_t *>(ix.raw_data());
    for (int64_t i = 0; i < n; ++i) {
      int64_t v = ip[i];
      KILN_CHECK(v >= -size && v < size, op, ": index ", v, " is out of bounds for dimension ", d, " with size ", size,
                 " (self shape ", shape_str(t.sizes()), ")");
      off[size_t(i)] += (v < 0 ? v + size : v) * stride;
    }
  }
  return off;
}

// The three offset lists of one indexing: result element (p, b, q) in row-major order is
// element base + pre[p] + index[b] + post[q] of the indexed tensor.
struct Walk {
  std::vector<int64_t> pre, index, post;
};

Walk walk_of(const Tensor &t, const Plan &p, const Geometry &g, const char *op) {
  return {offsets(t, g.pre), index_offsets(t, p, g.index_shape, op), offsets(t, g.post)};
}

template <class E> void gather_as(void *dst, const void *src, const Walk &w) {
  E *o = static_cast<E *>(dst);
  const E *s = static_cast<const E *>(src);
  for (int64_t a : w.pre)
    for (int64_t b : w.index) {
      const E *base = s + a + b;
      for (int64_t q : w.post) *o++ = base[q];
    }
}

// Calls f.template operator()<E>() with E an unsigned integer of the dtype's size.
template <class F> void by_item_size(DType dt, F f) {
  switch (itemsize(dt)) {
  case 1: return f.template operator()<uint8_t>();
  case 2: return f.template operator()<uint16_t>();
  case 4: return f.template operator()<uint32_t>();
  case 8: return f.template operator()<uint64_t>();
  }
  KILN_FAIL("internal: no element type of ", itemsize(dt), " bytes");
}

// Writes values (contiguous, in the result's row-major order) at the walk's places in
// dst; accumulate adds them instead, in that order (repeated indices add up).
template <class T> void put(const Tensor &dst, const Tensor &values, const Walk &w, bool accumulate) {
  T *d = static_cast<T *>(dst.raw_data());
  const T *v = static_cast<const T *>(values.raw_data());
  for (int64_t a : w.pre)
    for (int64_t b : w.index) {
      T *base = d + a + b;
      for (int64_t q : w.post) {
        if (!accumulate) base[q] = *v;
        else if constexpr (std::is_same_v<T, bool>) base[q] = base[q] || *v;
        else base[q] = T(base[q] + *v);
        ++v;
      }
    }
}

std::vector<Tensor> operands(const Tensor &first, const Tensor *second, const Plan &p) {
  std::vector<Tensor> in{first};
  if (second) in.push_back(*second);
  in.insert(in.end(), p.tensors.begin(), p.tensors.end());
  return in;
}

// index_put's checks: values has self's dtype and broadcasts to the indexing result.
void check_values(const Tensor &x, const Tensor &values, const Geometry &g, const char *op) {
  detail::check_defined(values, op, "values");
  KILN_CHECK(values.dtype() == x.dtype(), op, ": index_put requires the source and destination dtypes to match, got ",
             x.dtype(), " for the destination and ", values.dtype(), " for the source");
  IntArrayRef v = values.sizes(), to = g.out;
  bool fits = v.size() <= to.size();
  for (size_t i = 1; fits && i <= v.size(); ++i) fits = v[v.size() - i] == 1 || v[v.size() - i] == to[to.size() - i];
  KILN_CHECK(fits, op, ": shape mismatch: value tensor of shape ",
             shape_str(values.sizes()), " cannot be broadcast to indexing result of shape ", shape_str(g.out));
}

// index_put's plan, after its checks.
struct Put {
  Plan p;
  Geometry g;
};

Put prepare_put(const Tensor &x, const Indices &indices, const Tensor &values, const char *op) {
  detail::check_defined(x, op, "self");
  Put u{plan_of(x, indices, op), {}};
  u.g = geometry(x, u.p, op);
  check_values(x, values, u.g, op);
  return u;
}

// Writes values (broadcast to the indexing result's shape) at the walk's places in dst,
// from a copy when they share dst's memory: no element is read after it was written.
void put_values(const Tensor &dst, const Tensor &values, const Walk &w, const Dims &shape, bool accumulate) {
  Tensor v = values.expand(shape).contiguous();
  if (v.is_alias_of(dst)) v = v.clone();
  dispatch_dtype(dst.dtype(), [&]<class T>() { put<T>(dst, v, w, accumulate); });
}

// The torch::indexing list applied as views: the view, and the tensor entries (with their
// dims in the view) for index / index_put_.
struct Sliced {
  Tensor view;
  Indices tensors; // one entry per leading dim of view; nullopt where no tensor indexes
  bool any_tensor = false;
};

// How many of self's dims an entry consumes.
int64_t consumed(const indexing::TensorIndex &e) {
  if (e.is_integer() || e.is_slice()) return 1;
  if (e.is_tensor()) return e.tensor().defined() && e.tensor().dtype() == kBool ? std::max<int64_t>(e.tensor().dim(), 1) : 1;
  return 0;
}

Sliced apply_slicing(const Tensor &self, const std::vector<indexing::TensorIndex> &indices, const char *op) {
  detail::check_defined(self, op, "self");
  int64_t specified = 0;
  bool ellipsis = false;
  for (const indexing::TensorIndex &e : indices) {
    specified += consumed(e);
    KILN_CHECK(!(e.is_ellipsis() && ellipsis), op, ": an index can only have a single ellipsis ('...')");
    ellipsis |= e.is_ellipsis();
  }
  KILN_CHECK(specified <= self.dim(), op, ": too many indices for tensor of dimension ", self.dim(), " (shape ",
             shape_str(self.sizes()), "): the index list takes ", specified, " dims");
  Sliced s{self, {}, false};
  int64_t d = 0; // the view's dim the next entry applies to
  auto place = [&](int64_t dim, Tensor t) {
    if (int64_t(s.tensors.size()) <= dim) s.tensors.resize(size_t(dim + 1));
    s.tensors[size_t(dim)] = std::move(t);
    s.any_tensor = true;
  };
  for (const indexing::TensorIndex &e : indices) {
    if (e.is_integer()) {
      s.view = s.view.select(d, e.integer()); // select checks the range
    } else if (e.is_slice()) {
      const indexing::Slice &sl = e.slice();
      int64_t step = sl.step.value_or(1);
      KILN_CHECK(step > 0, op, ": slice step must be positive, got ", step);
      s.view = s.view.slice(d++, sl.start, sl.stop, step);
    } else if (e.is_none()) {
      s.view = s.view.unsqueeze(d++);
    } else if (e.is_ellipsis()) {
      d += self.dim() - specified;
    } else if (e.is_boolean()) {
      // torch: true adds a dim of size 1, false one of size 0 (an index of one / no zeros).
      s.view = s.view.unsqueeze(d);
      place(d++, e.boolean() ? zeros({1}, TensorOptions().dtype(kInt64)) : zeros({0}, TensorOptions().dtype(kInt64)));
    } else {
      const Tensor &t = e.tensor();
      detail::check_defined(t, op, "index tensor");
      place(d, t);
      d += t.dtype() == kBool ? std::max<int64_t>(t.dim(), 1) : 1;
    }
  }
  return s;
}

} // namespace

Tensor index(const Tensor &x, const std::vector<std::optional<Tensor>> &indices) {
  const char *op = "index";
  detail::check_defined(x, op, "self");
  Plan p = plan_of(x, indices, op);
  Geometry g = geometry(x, p, op);
  KILN_TRACE(Index, operands(x, nullptr, p), .dims = p.dims);
  Tensor out = detail::make_result(g.out, x.dtype(), {&x, &p.tensors.front()});
  if (out.is_meta()) return out;
  Walk w = walk_of(x, p, g, op); // checks every index, also when the result is empty
  if (out.numel() == 0) return out;
  by_item_size(x.dtype(), [&]<class E>() { gather_as<E>(out.raw_data(), x.raw_data(), w); });
  return out;
}

Tensor index_put(const Tensor &x, const std::vector<std::optional<Tensor>> &indices, const Tensor &values,
                 bool accumulate) {
  const char *op = "index_put";
  Put u = prepare_put(x, indices, values, op);
  KILN_TRACE(IndexPut, operands(x, &values, u.p), .dims = u.p.dims, .accumulate = accumulate);
  Tensor out = detail::make_result(x.sizes(), x.dtype(), {&x, &values, &u.p.tensors.front()});
  if (out.is_meta()) return out;
  if (out.numel() > 0) kernels::copy_into(out, x);
  put_values(out, values, walk_of(out, u.p, u.g, op), u.g.out, accumulate);
  return out;
}

Tensor &index_put_(Tensor &self, const std::vector<std::optional<Tensor>> &indices, const Tensor &values,
                   bool accumulate) {
  const char *op = "index_put_";
  Put u = prepare_put(self, indices, values, op);
  detail::check_no_internal_overlap(self, op);
  KILN_TRACE_INPLACE(self, IndexPut, operands(self, &values, u.p), .dims = u.p.dims, .accumulate = accumulate);
  if (detail::any_meta({&self, &values})) return self;
  Walk w = walk_of(self, u.p, u.g, op); // every index checked before the first write
  detail::bump_version(self);
  put_values(self, values, w, u.g.out, accumulate);
  return self;
}

// ---------------------------------------------------------------- torch::indexing

namespace {
Tensor strip_leading_ones(const Tensor &v) {
  int64_t lead = 0;
  while (lead < v.dim() && v.size(lead) == 1) ++lead;
  if (lead == 0) return v;
  return v.reshape(IntArrayRef(v.sizes().data() + lead, size_t(v.dim() - lead)));
}
} // namespace

namespace indexing {
TensorIndex::TensorIndex(const char *s) : v_(EllipsisIndexType{}) {
  KILN_CHECK(s && std::string(s) == "...", "TensorIndex: expected \"...\" (Ellipsis), got \"", s ? s : "(null)", "\"");
}
} // namespace indexing

Tensor Tensor::index(const std::vector<indexing::TensorIndex> &indices) const {
  Sliced s = apply_slicing(*this, indices, "index");
  if (!s.any_tensor) return s.view;
  return kiln::index(s.view, s.tensors);
}

Tensor &Tensor::index_put_(const std::vector<indexing::TensorIndex> &indices, const Tensor &values_in) {
  const char *op = "index_put_";
  detail::check_defined(values_in, op, "values");
  // torch's set_item strips values' leading size-1 dims first (numpy's rule), so a
  // [1, 1, 3] value fills a [3] selection.
  const Tensor values = strip_leading_ones(values_in);
  Sliced s = apply_slicing(*this, indices, op);
  if (!s.any_tensor) {
    s.view.copy_(values);
    return *this;
  }
  // One value through one mask that covers the dims it stands in: torch's
  // where(mask, value, x), which traces and fuses where the nonzero() form cannot.
  const std::optional<Tensor> *mask = nullptr;
  int64_t mask_dim = 0, entries = 0;
  for (size_t i = 0; i < s.tensors.size(); ++i)
    if (s.tensors[i]) {
      ++entries;
      mask = &s.tensors[i];
      mask_dim = int64_t(i);
    }
  const bool where_form = entries == 1 && (*mask)->dtype() == kBool && (*mask)->dim() > 0 && values.numel() == 1 &&
                          values.dim() <= 1 && values.dtype() == dtype() &&
                          mask_dim + (*mask)->dim() <= s.view.dim();
  if (where_form) {
    const Tensor &m = **mask;
    bool fits = true;
    for (int64_t j = 0; j < m.dim(); ++j) fits &= m.size(j) == s.view.size(mask_dim + j);
    if (fits) {
      Dims aligned = m.sizes();
      aligned.resize(size_t(s.view.dim() - mask_dim), 1); // trailing dims broadcast
      s.view.copy_(where(m.reshape(aligned), values.reshape({}), s.view));
      return *this;
    }
  }
  Tensor view = s.view;
  kiln::index_put_(view, s.tensors, values);
  return *this;
}

Tensor &Tensor::index_put_(const std::vector<indexing::TensorIndex> &indices, const Scalar &v) {
  detail::check_defined(*this, "index_put_", "self");
  detail::check_scalar_fits(v, dtype(), "index_put_");
  return index_put_(indices, full({}, v, TensorOptions().dtype(dtype())));
}

// ---------------------------------------------------------------- adapters

namespace adapters {
namespace {
// The optional-tensor list of an Index / IndexPut node: tensors placed at their dims.
Indices placed(const std::vector<Tensor> &in, size_t first, const std::vector<int64_t> &dims, const char *op) {
  KILN_CHECK(in.size() == first + dims.size(), op, ": expected ", first + dims.size(), " inputs for dims ",
             shape_str(dims), ", got ", in.size());
  Indices out;
  for (size_t k = 0; k < dims.size(); ++k) {
    KILN_CHECK(dims[k] >= 0 && dims[k] < 64 && (k == 0 || dims[k] > dims[k - 1]), op,
               ": dims must be increasing and within the tensor, got ", shape_str(dims));
    out.resize(size_t(dims[k] + 1));
    out[size_t(dims[k])] = in[first + k];
  }
  return out;
}
} // namespace

std::vector<Tensor> Index(const std::vector<Tensor> &in, const Attrs &a) {
  KILN_CHECK(!in.empty(), "index: expected inputs");
  return {index(in[0], placed(in, 1, attrs::Index{a}.dims(), "index"))};
}
std::vector<Tensor> IndexPut(const std::vector<Tensor> &in, const Attrs &a) {
  KILN_CHECK(in.size() >= 2, "index_put: expected inputs");
  attrs::IndexPut at{a};
  return {index_put(in[0], placed(in, 2, at.dims(), "index_put"), in[1], at.accumulate())};
}
} // namespace adapters

} // namespace kiln
