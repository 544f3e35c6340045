// Tensor core: storage, metadata, views (no copies) and the shared helpers.
#include "runtime/tensor.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "runtime/allocator.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"
#include "runtime/version.h"
#include "runtime/view_internal.h"

namespace kiln {

// ---------------------------------------------------------------- IntArrayRef, Dims

bool IntArrayRef::equals(IntArrayRef o) const {
  return size_ == o.size_ && std::equal(begin(), end(), o.begin());
}

std::string shape_str(IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(s[i]);
  }
  return out + "]";
}

std::ostream &operator<<(std::ostream &os, IntArrayRef s) { return os << shape_str(s); }

void Dims::fail_too_many(size_t n) { KILN_FAIL("tensors have at most ", kMaxDims, " dimensions, got ", n); }

void Dims::push_back(int64_t x) {
  KILN_CHECK(n_ < size_t(kMaxDims), "tensors have at most ", kMaxDims, " dimensions");
  v_[n_++] = x;
}

void Dims::resize(size_t n, int64_t fill) {
  KILN_CHECK(n <= size_t(kMaxDims), "tensors have at most ", kMaxDims, " dimensions, got ", n);
  for (size_t i = n_; i < n; ++i) v_[i] = fill;
  n_ = n;
}

void Dims::insert(size_t pos, int64_t x) {
  KILN_CHECK(n_ < size_t(kMaxDims), "tensors have at most ", kMaxDims, " dimensions");
  for (size_t i = n_; i > pos; --i) v_[i] = v_[i - 1];
  v_[pos] = x;
  ++n_;
}

void Dims::erase(size_t pos) {
  for (size_t i = pos; i + 1 < n_; ++i) v_[i] = v_[i + 1];
  --n_;
}

// ---------------------------------------------------------------- Storage

void *Storage::operator new(size_t n) { return cached_alloc(n); }
void Storage::operator delete(void *p, size_t n) { cached_free(p, n); }
void *TensorImpl::operator new(size_t n) { return cached_alloc(n); }
void TensorImpl::operator delete(void *p, size_t n) { cached_free(p, n); }

namespace {
thread_local uint64_t t_storage_allocations = 0;
}

uint64_t thread_storage_allocations() { return t_storage_allocations; }

Ref<Storage> Storage::allocate(size_t nbytes) {
  ++t_storage_allocations;
  auto *s = new Storage;
  Ref<Storage> ref(s);
  s->nbytes_ = nbytes;
  if (nbytes <= kInlineBytes) {
    s->data_ = s->inline_;
    return ref;
  }
  s->data_ = cached_alloc(nbytes);
  s->owned_ = true;
  return ref;
}

Ref<Storage> Storage::borrow(void *data, size_t nbytes, Deleter deleter, void *ctx) {
  auto *s = new Storage;
  s->data_ = data;
  s->nbytes_ = nbytes;
  s->deleter_ = deleter;
  s->ctx_ = ctx;
  detail::note_borrowed(s);
  return Ref<Storage>(s);
}

Storage::~Storage() {
  detail::forget_version(this); // the address may hold another storage next
  if (owned_) cached_free(data_, nbytes_);
  else if (deleter_) deleter_(data_, ctx_);
}

void TensorImpl::refresh_numel() {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  numel = n;
}

// ---------------------------------------------------------------- detail helpers

namespace detail {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char *op, const char *arg) {
  int64_t lo = ndim > 0 ? -ndim : -1, hi = ndim > 0 ? ndim - 1 : 0;
  KILN_CHECK(dim >= lo && dim <= hi, op, ": ", arg, " ", dim, " is out of range for a tensor with ", ndim,
             " dimensions (expected [", lo, ", ", hi, "])");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Dims channels_last_strides(IntArrayRef sizes) {
  KILN_CHECK(sizes.size() == 4, "channels_last: expected a 4-D [N, C, H, W] shape, got ", shape_str(sizes));
  const int64_t c = std::max<int64_t>(sizes[1], 1), h = std::max<int64_t>(sizes[2], 1),
                w = std::max<int64_t>(sizes[3], 1);
  Dims s;
  for (int64_t v : {h * w * c, int64_t(1), w * c, c}) s.push_back(v);
  return s;
}

Dims contiguous_strides(IntArrayRef sizes) {
  Dims st;
  st.resize(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
  return st;
}

int64_t checked_numel(IntArrayRef sizes, const char *op) {
  int64_t n = 1;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, op, ": negative size ", s, " in shape ", shape_str(sizes));
    // (No division: every tensor made passes here.)
    KILN_CHECK(!__builtin_mul_overflow(n, s, &n), op, ": shape ", shape_str(sizes), " has too many elements");
  }
  return n;
}

// The allocator only sees a byte count; the shape and dtype tell the user
// which tensor did not fit.
static Ref<Storage> allocate_for(IntArrayRef sizes, int64_t n, DType dtype) {
  size_t bytes = size_t(n) * itemsize(dtype);
  try {
    return Storage::allocate(bytes);
  } catch (const Error &e) {
    KILN_FAIL("cannot allocate a ", dtype, " tensor of shape ", shape_str(sizes), " (", bytes, " bytes): ", e.what());
  }
}

// contiguous_strides written in place: a Dims returned by value and copied
// is read back with wide loads right after its narrow stores, which stalls.
static void set_contiguous_strides(Dims &st, IntArrayRef sizes) {
  st.resize(sizes.size());
  int64_t acc = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    st[i] = acc;
    acc *= std::max<int64_t>(sizes[i], 1);
  }
}

Tensor make_tensor(IntArrayRef sizes, DType dtype, bool meta) {
  int64_t n = checked_numel(sizes, "empty");
  // n * itemsize <= 2^60 without a division (every result passes here): with
  // n <= 2^60 first, the product of at most 8 cannot overflow.
  constexpr uint64_t kMaxBytes = uint64_t(1) << 60;
  KILN_CHECK(uint64_t(n) <= kMaxBytes && uint64_t(n) * itemsize(dtype) <= kMaxBytes, "empty: shape ",
             shape_str(sizes), " of ", dtype, " is too large to allocate");
  auto *impl = new TensorImpl;
  Ref<TensorImpl> ref(impl);
  impl->dtype = dtype;
  impl->is_meta = meta;
  impl->sizes.assign(sizes);
  set_contiguous_strides(impl->strides, sizes);
  impl->numel = n;
  if (!meta) impl->storage = allocate_for(sizes, n, dtype);
  return Tensor(std::move(ref));
}

Tensor make_checked_tensor(const Dims &sizes, const Dims &strides, int64_t numel, DType dtype) {
  auto *impl = new TensorImpl;
  Ref<TensorImpl> ref(impl);
  impl->dtype = dtype;
  impl->sizes = sizes;
  impl->strides = strides;
  impl->numel = numel;
  impl->storage = allocate_for(sizes, numel, dtype);
  return Tensor(std::move(ref));
}

Tensor make_view(const Tensor &base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset) {
  // An expand can ask for any sizes: their product must still fit int64 (refresh_numel below).
  checked_numel(sizes, "view");
  auto *impl = new TensorImpl;
  Ref<TensorImpl> ref(impl);
  const TensorImpl &b = base.impl();
  impl->dtype = b.dtype;
  impl->is_meta = b.is_meta;
  impl->sizes.assign(sizes);
  impl->strides.assign(strides);
  impl->storage_offset = storage_offset;
  impl->storage = b.storage;
  impl->refresh_numel();
  return Tensor(std::move(ref));
}

Tensor make_view_of(const Tensor &base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset) {
  Tensor v = make_view(base, sizes, strides, storage_offset);
  const TensorImpl &b = base.impl();
  v.impl().view_base = b.view_base ? b.view_base : base.impl_ref();
  return v;
}

bool any_meta(std::initializer_list<const Tensor *> inputs) {
  for (const Tensor *t : inputs)
    if (t && t->defined() && t->is_meta()) return true;
  return false;
}

namespace {
thread_local ResultPlacement *t_placement = nullptr;
}

ResultPlacement::ResultPlacement(void *data, size_t nbytes, DType dtype)
    : data_(data), nbytes_(nbytes), dtype_(dtype), prev_(t_placement) {
  t_placement = this;
}

ResultPlacement::~ResultPlacement() { t_placement = prev_; }

Tensor make_strided_result(IntArrayRef sizes, const Dims *strides, DType dtype,
                           std::initializer_list<const Tensor *> inputs) {
  bool meta = any_meta(inputs);
  ResultPlacement *p = meta ? nullptr : t_placement;
  if (p) {
    const int64_t n = checked_numel(sizes, "empty");
    const size_t nbytes = size_t(n) * itemsize(dtype);
    while (p && !(p->data_ && p->dtype_ == dtype && p->nbytes_ == nbytes)) p = p->prev_;
  }
  if (!p) {
    Tensor t = make_tensor(sizes, dtype, meta);
    if (strides) t.impl().strides = *strides; // a dense layout: the same numel elements
    return t;
  }
  auto *impl = new TensorImpl;
  Ref<TensorImpl> ref(impl);
  impl->dtype = dtype;
  impl->sizes.assign(sizes);
  if (strides) impl->strides = *strides;
  else set_contiguous_strides(impl->strides, sizes);
  impl->refresh_numel();
  impl->storage = Storage::borrow(p->data_, p->nbytes_);
  p->data_ = nullptr; // once: later results of the op allocate
  return Tensor(std::move(ref));
}

Tensor make_result(IntArrayRef sizes, DType dtype, std::initializer_list<const Tensor *> inputs) {
  return make_strided_result(sizes, nullptr, dtype, inputs);
}

bool is_non_overlapping_and_dense(const TensorImpl &t) {
  if (is_contiguous(t)) return true;
  const size_t n = t.sizes.size();
  // Dims by stride, innermost first (insertion sort: n <= kMaxDims); size-1 dims do not matter.
  size_t order[kMaxDims];
  size_t k = 0;
  for (size_t d = 0; d < n; ++d) {
    if (t.sizes[d] == 1) continue;
    size_t j = k++;
    for (; j > 0 && t.strides[order[j - 1]] > t.strides[d]; --j) order[j] = order[j - 1];
    order[j] = d;
  }
  int64_t expected = 1;
  for (size_t i = 0; i < k; ++i) {
    if (t.strides[order[i]] != expected) return false;
    expected *= t.sizes[order[i]];
  }
  return true;
}

namespace {

// Broadcast stride of `t` along result dim d of a rank-n result: 0 where t
// has no such dim or broadcasts along it (size 1 against a larger size).
inline int64_t broadcast_stride(const TensorImpl &t, IntArrayRef sizes, size_t d) {
  const size_t n = sizes.size(), r = t.sizes.size();
  if (d + r < n) return 0;
  const size_t td = d + r - n;
  return t.sizes[td] == 1 && sizes[d] != 1 ? 0 : t.strides[td];
}

// torch's TensorIterator::reorder_dimensions, comparing dims a (inner) and b
// (outer): 1 when b should be inner to a, -1 when a stays inner, 0 when no
// input decides.
int should_swap(IntArrayRef sizes, std::initializer_list<const Tensor *> inputs, size_t a, size_t b) {
  for (const Tensor *t : inputs) {
    if (!t || !t->defined()) continue;
    const TensorImpl &ti = t->impl();
    const int64_t sa = broadcast_stride(ti, sizes, a), sb = broadcast_stride(ti, sizes, b);
    if (sa == 0 || sb == 0) continue;
    if (sa < sb) return -1;
    if (sa > sb) return 1;
    if (sizes[a] > sizes[b]) return 1; // equal strides: the smaller dim goes inside
  }
  return 0;
}

bool same_dims(IntArrayRef a, IntArrayRef b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i]) return false;
  return true;
}

} // namespace

bool elementwise_strides(IntArrayRef sizes, std::initializer_list<const Tensor *> inputs, Dims &strides) {
  const size_t n = sizes.size();
  if (n <= 1) return false;
  // Contiguous inputs (the common case, and every 0-dim or 1-element one) give a contiguous result.
  bool all_contiguous = true;
  for (const Tensor *t : inputs)
    if (t && t->defined() && !is_contiguous(t->impl())) all_contiguous = false;
  if (all_contiguous) return false;
  bool same_layout = true;
  const TensorImpl *first = nullptr;
  for (const Tensor *t : inputs) {
    if (!t || !t->defined()) continue;
    const TensorImpl &ti = t->impl();
    if (!first) first = &ti;
    same_layout &= same_dims(ti.sizes, sizes) && same_dims(ti.strides, first->strides);
  }
  // Same shape, same non-overlapping dense strides: the result takes them.
  if (same_layout && is_non_overlapping_and_dense(*first)) {
    strides = first->strides;
    return true;
  }
  // perm[0] is the innermost dim; start from row-major and let the inputs reorder it.
  size_t perm[kMaxDims];
  for (size_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  for (size_t i = 1; i < n; ++i) {
    size_t d1 = i;
    for (size_t d0 = i; d0-- > 0;) {
      int c = should_swap(sizes, inputs, perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  strides.resize(n);
  int64_t acc = 1;
  for (size_t i = 0; i < n; ++i) {
    strides[perm[i]] = acc;
    acc *= std::max<int64_t>(sizes[perm[i]], 1);
  }
  return !same_dims(strides, contiguous_strides(sizes));
}

Tensor make_elementwise_result(IntArrayRef sizes, DType dtype, std::initializer_list<const Tensor *> inputs) {
  Dims strides;
  if (!elementwise_strides(sizes, inputs, strides)) return make_result(sizes, dtype, inputs);
  return make_strided_result(sizes, &strides, dtype, inputs);
}

Tensor wrap_scalar(const Scalar &s) {
  Tensor t = make_tensor({}, s.type());
  dispatch_dtype(s.type(), [&]<class T>() { *static_cast<T *>(t.raw_data()) = s.to<T>(); });
  t.impl().wrapped_number = true;
  return t;
}

Dims broadcast_shapes(IntArrayRef a, IntArrayRef b, const char *op) {
  size_t n = std::max(a.size(), b.size());
  Dims out;
  out.resize(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(x == y || x == 1 || y == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " are not broadcastable");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

namespace {
// torch's combine_categories: a lower tier only counts when it is of a higher
// category (bool < integer < floating) than the tier above it.
std::optional<DType> combine_categories(std::optional<DType> higher, std::optional<DType> lower) {
  if (!higher) return lower;
  if (!lower || is_floating(*higher)) return higher;
  if (*higher == kBool || is_floating(*lower)) return promote_types(*higher, *lower);
  return higher;
}
} // namespace

// torch.result_type: tiers are tensors with dims, 0-dim tensors, wrapped numbers
// (a wrapped float counts as the default dtype, float32).
DType result_type(std::initializer_list<const Tensor *> inputs) {
  std::optional<DType> tier[3];
  for (const Tensor *t : inputs) {
    if (!t || !t->defined()) continue;
    const TensorImpl &impl = t->impl();
    int k = impl.wrapped_number ? 2 : (impl.sizes.empty() ? 1 : 0);
    DType cur = impl.wrapped_number && is_floating(impl.dtype) ? kFloat32 : impl.dtype;
    tier[k] = tier[k] ? promote_types(*tier[k], cur) : cur;
  }
  return combine_categories(tier[0], combine_categories(tier[1], tier[2])).value_or(kFloat32);
}

void check_defined(const Tensor &t, const char *op, const char *arg) {
  KILN_CHECK(t.defined(), op, ": ", arg, " is an undefined tensor");
}

} // namespace detail

// ---------------------------------------------------------------- Tensor accessors

void Tensor::fail_undefined() { KILN_FAIL("cannot use an undefined tensor (default-constructed kiln::Tensor)"); }

void Tensor::fail_meta_data() {
  if (detail::trace_hooks().data_read) detail::trace_hooks().data_read("data_ptr");
  throw TraceError("data_ptr: a meta tensor has no data");
}

int64_t Tensor::size(int64_t d) const { return impl().sizes[detail::wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return impl().strides[detail::wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous(MemoryFormat format) const {
  if (format == MemoryFormat::Contiguous) return is_contiguous();
  const TensorImpl &t = impl();
  if (t.sizes.size() != 4) return false;
  if (t.numel <= 1) return true;
  const Dims want = detail::channels_last_strides(t.sizes);
  for (size_t d = 0; d < 4; ++d)
    if (t.sizes[d] != 1 && t.strides[d] != want[d]) return false;
  return true;
}

// A writable pointer: what is written through it must reach compiled
// functions' values derived from this tensor (runtime/version.h).
void *Tensor::data_ptr() const {
  void *p = raw_data();
  detail::bump_version(*this);
  return p;
}

Scalar Tensor::item() const {
  const TensorImpl &t = impl();
  if (t.is_meta) {
    if (detail::trace_hooks().data_read) detail::trace_hooks().data_read("item");
    throw TraceError("item: a meta tensor has no data");
  }
  KILN_CHECK(t.numel == 1, "item: a tensor with ", t.numel, " elements (shape ", shape_str(t.sizes),
             ") cannot be converted to a Scalar");
  return dispatch_storage_dtype(t.dtype, [&]<class T>() {
    if constexpr (is_reduced_float_v<T>) return Scalar(double(float(*static_cast<T *>(raw_data()))));
    else return Scalar(*static_cast<T *>(raw_data()));
  });
}

Tensor Tensor::operator[](int64_t index) const { return kiln::select(*this, 0, index); }

// ---------------------------------------------------------------- views

namespace {

// Infers a -1 in `shape` from numel; checks the product.
Dims infer_shape(IntArrayRef shape, int64_t numel, const char *op, IntArrayRef from) {
  Dims out(shape);
  int64_t known = 1, infer = -1;
  bool overflow = false, zero = false; // a huge shape (from a graph's attribute) must not overflow
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      KILN_CHECK(infer < 0, op, ": only one dimension can be inferred (-1) in shape ", shape_str(shape));
      infer = int64_t(i);
      continue;
    }
    KILN_CHECK(out[i] >= 0, op, ": invalid size ", out[i], " in shape ", shape_str(shape));
    zero |= out[i] == 0;
    overflow |= __builtin_mul_overflow(known, out[i], &known);
  }
  if (zero) known = 0;
  KILN_CHECK(zero || !overflow, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel,
             " (shape ", shape_str(from), ")");
  if (infer >= 0) {
    KILN_CHECK(known != 0 && numel % known == 0, op, ": shape ", shape_str(shape),
               " is invalid for input of size ", numel, " (shape ", shape_str(from), ")");
    out[infer] = numel / known;
    known *= out[infer];
  }
  KILN_CHECK(known == numel, op, ": shape ", shape_str(shape), " is invalid for input of size ", numel,
             " (shape ", shape_str(from), ")");
  return out;
}

// Strides for viewing (sizes, strides) as `shape` without a copy, if possible
// (torch's computeStride): merge contiguous chunks of old dims, split them anew.
std::optional<Dims> view_strides(IntArrayRef sizes, IntArrayRef strides, IntArrayRef shape) {
  Dims out;
  out.resize(shape.size());
  int64_t numel = 1;
  for (int64_t s : sizes) numel *= s;
  if (numel == 0 || sizes.empty()) return detail::contiguous_strides(shape);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = strides.empty() ? 1 : strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

} // namespace

Tensor view(const Tensor &x, IntArrayRef shape) {
  detail::check_defined(x, "view", "self");
  Dims s = infer_shape(shape, x.numel(), "view", x.sizes());
  auto st = view_strides(x.sizes(), x.strides(), s);
  KILN_CHECK(st, "view: size ", shape_str(s), " is not compatible with input of shape ", shape_str(x.sizes()),
             " and strides ", shape_str(x.strides()), " (use reshape instead)");
  KILN_TRACE(View, {x}, .shape = IntArrayRef(s)); // after the stride check, so tracing reports what eager does
  return detail::make_view_of(x, s, *st, x.storage_offset());
}

Tensor reshape(const Tensor &x, IntArrayRef shape) {
  detail::check_defined(x, "reshape", "self");
  Dims s = infer_shape(shape, x.numel(), "reshape", x.sizes());
  KILN_TRACE(Reshape, {x}, .shape = IntArrayRef(s));
  if (auto st = view_strides(x.sizes(), x.strides(), s)) return detail::make_view_of(x, s, *st, x.storage_offset());
  Tensor c = contiguous(x);
  return detail::make_view(c, s, detail::contiguous_strides(s), c.storage_offset());
}

Tensor transpose(const Tensor &x, int64_t dim0, int64_t dim1) {
  detail::check_defined(x, "transpose", "self");
  int64_t n = x.dim();
  int64_t a = detail::wrap_dim(dim0, n, "transpose", "dim0"), b = detail::wrap_dim(dim1, n, "transpose", "dim1");
  KILN_TRACE(Transpose, {x}, .dim0 = a, .dim1 = b);
  if (n == 0) return detail::make_view_of(x, x.sizes(), x.strides(), x.storage_offset());
  Dims sz(x.sizes()), st(x.strides());
  std::swap(sz[a], sz[b]);
  std::swap(st[a], st[b]);
  return detail::make_view_of(x, sz, st, x.storage_offset());
}

Tensor t(const Tensor &x) {
  detail::check_defined(x, "t", "self");
  KILN_CHECK(x.dim() <= 2, "t: expects a tensor with <= 2 dimensions, but self is ", x.dim(), "-D (shape ",
             shape_str(x.sizes()), ")");
  if (x.dim() < 2) return transpose(x, 0, 0);
  return transpose(x, 0, 1);
}

Tensor permute(const Tensor &x, IntArrayRef dims) {
  detail::check_defined(x, "permute", "self");
  int64_t n = x.dim();
  KILN_CHECK(int64_t(dims.size()) == n, "permute: number of dims ", dims.size(),
             " does not match the tensor's ", n, " dimensions (shape ", shape_str(x.sizes()), ")");
  Dims d, sz, st;
  bool seen[kMaxDims] = {};
  for (int64_t v : dims) {
    int64_t w = detail::wrap_dim(v, n, "permute", "dims");
    KILN_CHECK(!seen[w], "permute: dim ", w, " appears more than once in ", shape_str(dims));
    seen[w] = true;
    d.push_back(w);
    sz.push_back(x.sizes()[w]);
    st.push_back(x.strides()[w]);
  }
  KILN_TRACE(Permute, {x}, .dims = IntArrayRef(d));
  return detail::make_view_of(x, sz, st, x.storage_offset());
}

Tensor slice(const Tensor &x, int64_t dim, std::optional<int64_t> start_opt, std::optional<int64_t> end_opt,
             int64_t step) {
  detail::check_defined(x, "slice", "self");
  KILN_CHECK(x.dim() > 0, "slice: cannot slice a 0-dim tensor");
  int64_t d = detail::wrap_dim(dim, x.dim(), "slice");
  KILN_CHECK(step > 0, "slice: step must be positive, got ", step);
  int64_t len = x.sizes()[d];
  int64_t start = start_opt.value_or(0), end = end_opt.value_or(len);
  if (start < 0) start += len;
  if (end < 0) end += len;
  start = std::clamp<int64_t>(start, 0, len);
  end = std::clamp<int64_t>(end, start, len);
  KILN_TRACE(Slice, {x}, .dim = d, .start = start, .end = end, .step = step);
  Dims sz(x.sizes()), st(x.strides());
  sz[d] = end == start ? 0 : (end - start - 1) / step + 1; // no overflow for a huge step
  if (sz[d] > 1) st[d] *= step;                             // step < len here
  return detail::make_view_of(x, sz, st, x.storage_offset() + start * x.strides()[d]);
}

Tensor narrow(const Tensor &x, int64_t dim, int64_t start, int64_t length) {
  detail::check_defined(x, "narrow", "self");
  KILN_CHECK(x.dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t d = detail::wrap_dim(dim, x.dim(), "narrow");
  int64_t len = x.sizes()[d];
  if (start < 0) start += len;
  KILN_CHECK(start >= 0 && length >= 0 && start + length <= len, "narrow: start ", start, " and length ", length,
             " are out of range for dimension ", d, " of size ", len, " (shape ", shape_str(x.sizes()), ")");
  return slice(x, d, start, start + length, 1);
}

Tensor select(const Tensor &x, int64_t dim, int64_t index) {
  detail::check_defined(x, "select", "self");
  KILN_CHECK(x.dim() > 0, "select: cannot select on a 0-dim tensor");
  int64_t d = detail::wrap_dim(dim, x.dim(), "select");
  int64_t len = x.sizes()[d];
  KILN_CHECK(index >= -len && index < len, "select: index ", index, " is out of range for dimension ", d,
             " of size ", len, " (shape ", shape_str(x.sizes()), ")");
  if (index < 0) index += len;
  KILN_TRACE(Select, {x}, .dim = d, .index = index);
  Dims sz(x.sizes()), st(x.strides());
  int64_t off = x.storage_offset() + index * x.strides()[size_t(d)];
  sz.erase(d);
  st.erase(d);
  return detail::make_view_of(x, sz, st, off);
}

Tensor unsqueeze(const Tensor &x, int64_t dim) {
  detail::check_defined(x, "unsqueeze", "self");
  int64_t d = detail::wrap_dim(dim, x.dim() + 1, "unsqueeze");
  KILN_TRACE(Unsqueeze, {x}, .dim = d);
  Dims sz(x.sizes()), st(x.strides());
  int64_t stride = d < x.dim() ? sz[d] * st[d] : 1;
  sz.insert(d, 1);
  st.insert(d, stride);
  return detail::make_view_of(x, sz, st, x.storage_offset());
}

namespace {
Tensor squeeze_dims(const Tensor &x, const Dims &dims) {
  KILN_TRACE(Squeeze, {x}, .dims = IntArrayRef(dims));
  Dims sz, st;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (std::find(dims.begin(), dims.end(), i) != dims.end()) continue;
    sz.push_back(x.sizes()[i]);
    st.push_back(x.strides()[i]);
  }
  return detail::make_view_of(x, sz, st, x.storage_offset());
}
} // namespace

Tensor detail::squeeze_dims(const Tensor &x, IntArrayRef dims) {
  detail::check_defined(x, "squeeze", "self");
  Dims keep;
  bool seen[kMaxDims] = {};
  for (int64_t v : dims) {
    int64_t d = detail::wrap_dim(v, x.dim(), "squeeze", "dims");
    KILN_CHECK(!seen[d], "squeeze: dim ", d, " appears more than once in ", shape_str(dims));
    seen[d] = true;
    if (x.dim() > 0 && x.sizes()[d] == 1) keep.push_back(d);
  }
  std::sort(keep.begin(), keep.end());
  return kiln::squeeze_dims(x, keep);
}

Tensor squeeze(const Tensor &x) {
  detail::check_defined(x, "squeeze", "self");
  Dims dims;
  for (int64_t i = 0; i < x.dim(); ++i)
    if (x.sizes()[i] == 1) dims.push_back(i);
  return squeeze_dims(x, dims);
}

Tensor squeeze(const Tensor &x, int64_t dim) {
  detail::check_defined(x, "squeeze", "self");
  int64_t d = detail::wrap_dim(dim, x.dim(), "squeeze");
  Dims dims;
  if (x.dim() > 0 && x.sizes()[d] == 1) dims.push_back(d);
  return squeeze_dims(x, dims);
}

Tensor expand(const Tensor &x, IntArrayRef size) {
  detail::check_defined(x, "expand", "self");
  int64_t n = int64_t(size.size()), xd = x.dim();
  KILN_CHECK(n >= xd, "expand: the number of sizes provided (", n,
             ") must be greater or equal to the number of dimensions in the tensor (", xd, ")");
  Dims sz, st;
  sz.resize(n);
  st.resize(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - xd);
    int64_t want = size[i];
    if (j < 0) {
      KILN_CHECK(want >= 0, "expand: size ", want, " is invalid for a new leading dimension in ", shape_str(size));
      sz[i] = want;
      st[i] = 0;
      continue;
    }
    int64_t have = x.sizes()[j];
    if (want == -1) want = have;
    KILN_CHECK(have == want || have == 1, "expand: the expanded size of the tensor (", want,
               ") must match the existing size (", have, ") at non-singleton dimension ", i, ".  Target sizes: ",
               shape_str(size), ".  Tensor sizes: ", shape_str(x.sizes()));
    sz[i] = want;
    st[i] = have == want ? x.strides()[j] : 0;
  }
  // A view has no memory to fail on, so an element count that overflows int64
  // must be caught here (numel would wrap and later copies read out of bounds).
  detail::checked_numel(sz, "expand");
  KILN_TRACE(Expand, {x}, .shape = IntArrayRef(sz));
  return detail::make_view_of(x, sz, st, x.storage_offset());
}

Tensor flatten(const Tensor &x, int64_t start_dim, int64_t end_dim) {
  detail::check_defined(x, "flatten", "self");
  if (x.dim() == 0) return reshape(x, {1});
  int64_t s = detail::wrap_dim(start_dim, x.dim(), "flatten", "start_dim");
  int64_t e = detail::wrap_dim(end_dim, x.dim(), "flatten", "end_dim");
  KILN_CHECK(s <= e, "flatten: start_dim ", s, " cannot come after end_dim ", e);
  if (s == e) return x;
  Dims shape;
  int64_t merged = 1;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < s || i > e) {
      shape.push_back(x.sizes()[i]);
      continue;
    }
    merged *= x.sizes()[i];
    if (i == e) shape.push_back(merged);
  }
  return reshape(x, shape);
}

Tensor as_strided(const Tensor &x, IntArrayRef size, IntArrayRef stride, std::optional<int64_t> storage_offset) {
  detail::check_defined(x, "as_strided", "self");
  KILN_CHECK(size.size() == stride.size(), "as_strided: size ", shape_str(size), " and stride ", shape_str(stride),
             " have different lengths");
  int64_t off = storage_offset.value_or(x.storage_offset());
  KILN_CHECK(off >= 0, "as_strided: negative storage_offset ", off);
  int64_t last = off;
  bool empty = false, overflow = false;
  for (size_t i = 0; i < size.size(); ++i) {
    KILN_CHECK(size[i] >= 0, "as_strided: negative size ", size[i], " in ", shape_str(size));
    KILN_CHECK(stride[i] >= 0, "as_strided: negative stride ", stride[i], " in ", shape_str(stride));
    if (size[i] == 0) {
      empty = true;
      continue;
    }
    // Checked: a wrapped offset would pass the bounds check below and read anywhere.
    int64_t span = 0;
    overflow |= __builtin_mul_overflow(size[i] - 1, stride[i], &span);
    overflow |= __builtin_add_overflow(last, span, &last);
  }
  detail::checked_numel(size, "as_strided");
  KILN_CHECK(empty || !overflow, "as_strided: size ", shape_str(size), ", stride ", shape_str(stride),
             " and storage_offset ", off, " reach past the largest addressable element");
  if (!x.is_meta() && !empty) {
    int64_t capacity = int64_t(x.impl().storage->nbytes() / x.element_size());
    KILN_CHECK(last < capacity, "as_strided: size ", shape_str(size), ", stride ", shape_str(stride),
               " and storage_offset ", off, " reach element ", last, " but the storage holds only ", capacity);
  }
  KILN_TRACE(AsStrided, {x}, .size = size, .stride = stride, .storage_offset = off);
  return detail::make_view_of(x, size, stride, off);
}

// ---------------------------------------------------------------- Tensor methods that are views

Tensor Tensor::view(IntArrayRef shape) const { return kiln::view(*this, shape); }
Tensor Tensor::reshape(IntArrayRef shape) const { return kiln::reshape(*this, shape); }
Tensor Tensor::transpose(int64_t d0, int64_t d1) const { return kiln::transpose(*this, d0, d1); }
Tensor Tensor::t() const { return kiln::t(*this); }
Tensor Tensor::permute(IntArrayRef dims) const { return kiln::permute(*this, dims); }
Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  return kiln::narrow(*this, dim, start, length);
}
Tensor Tensor::slice(int64_t dim, std::optional<int64_t> start, std::optional<int64_t> end, int64_t step) const {
  return kiln::slice(*this, dim, start, end, step);
}
Tensor Tensor::select(int64_t dim, int64_t index) const { return kiln::select(*this, dim, index); }
Tensor Tensor::unsqueeze(int64_t dim) const { return kiln::unsqueeze(*this, dim); }
Tensor Tensor::squeeze() const { return kiln::squeeze(*this); }
Tensor Tensor::squeeze(int64_t dim) const { return kiln::squeeze(*this, dim); }
Tensor Tensor::expand(IntArrayRef size) const { return kiln::expand(*this, size); }
Tensor Tensor::expand_as(const Tensor &o) const { return kiln::expand(*this, o.sizes()); }
Tensor Tensor::view_as(const Tensor &o) const { return kiln::view(*this, o.sizes()); }
Tensor Tensor::flatten(int64_t s, int64_t e) const { return kiln::flatten(*this, s, e); }
Tensor Tensor::as_strided(IntArrayRef size, IntArrayRef stride, std::optional<int64_t> off) const {
  return kiln::as_strided(*this, size, stride, off);
}

} // namespace kiln
