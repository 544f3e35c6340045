// Tensor: a reference-counted view (sizes, strides, offset) of shared storage.
// The API follows libtorch's at::Tensor: names, argument order and semantics.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/scalar.h"

namespace kiln {

inline constexpr int kMaxDims = 16;

// A non-owning list of int64 (torch's IntArrayRef). Built from a braced list,
// a std::vector or a single integer; valid for the duration of the call.
class IntArrayRef {
public:
  constexpr IntArrayRef() = default;
  constexpr IntArrayRef(const int64_t *data, size_t n) : data_(data), size_(n) {}
#if defined(__GNUC__) && !defined(__clang__) // a GCC-only warning; clang has no such group
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winit-list-lifetime" // the list outlives the call, as torch's IntArrayRef
#endif
  IntArrayRef(std::initializer_list<int64_t> il) : data_(il.begin()), size_(il.size()) {}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
  IntArrayRef(const std::vector<int64_t> &v) : data_(v.data()), size_(v.size()) {}
  IntArrayRef(const int64_t &one) : data_(&one), size_(1) {}

  const int64_t *begin() const { return data_; }
  const int64_t *end() const { return data_ + size_; }
  const int64_t *data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  int64_t operator[](size_t i) const { return data_[i]; }
  int64_t front() const { return data_[0]; }
  int64_t back() const { return data_[size_ - 1]; }
  std::vector<int64_t> vec() const { return {begin(), end()}; }
  bool equals(IntArrayRef o) const;
  bool operator==(IntArrayRef o) const { return equals(o); }

private:
  const int64_t *data_ = nullptr;
  size_t size_ = 0;
};

// "[2, 3]": the form shapes take in every message and in the IR.
std::string shape_str(IntArrayRef s);
std::ostream &operator<<(std::ostream &os, IntArrayRef s);

// A fixed-capacity dims vector; tensors have at most kMaxDims dimensions, so
// sizes and strides never allocate.
class Dims {
public:
  Dims() = default;
  // Inline: every result a tensor op makes copies its shape through here.
  Dims(IntArrayRef r) { assign(r); }
  Dims(std::initializer_list<int64_t> il) : Dims(IntArrayRef(il)) {}
  // In place: `d = Dims(r)` builds a temporary with narrow stores and copies
  // it with wide loads right after, which stalls on every tensor made.
  void assign(IntArrayRef r) {
    if (r.size() > size_t(kMaxDims)) [[unlikely]]
      fail_too_many(r.size());
    for (size_t i = 0; i < r.size(); ++i) v_[i] = r[i];
    n_ = r.size();
  }
  int64_t *begin() { return v_; }
  int64_t *end() { return v_ + n_; }
  const int64_t *begin() const { return v_; }
  const int64_t *end() const { return v_ + n_; }
  int64_t *data() { return v_; }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t &operator[](size_t i) { return v_[i]; }
  int64_t operator[](size_t i) const { return v_[i]; }
  void push_back(int64_t x);
  void resize(size_t n, int64_t fill = 0);
  void insert(size_t pos, int64_t x);
  void erase(size_t pos);
  operator IntArrayRef() const { return {v_, n_}; }
  std::vector<int64_t> vec() const { return {v_, v_ + n_}; }

private:
  [[noreturn]] static void fail_too_many(size_t n);
  int64_t v_[kMaxDims];
  size_t n_ = 0;
};

// Intrusive reference counting for Storage and TensorImpl.
template <class T> class Ref {
public:
  Ref() = default;
  explicit Ref(T *p) : p_(p) {} // adopts a fresh object (refcount 1)
  Ref(const Ref &o) : p_(o.p_) { retain(); }
  Ref(Ref &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  Ref &operator=(Ref o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }
  // (The test inline, the release maybe not: a moved-from handle, which every
  // move leaves, then costs no call.)
  ~Ref() {
    if (p_) release();
  }
  T *get() const { return p_; }
  T *operator->() const { return p_; }
  T &operator*() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }
  bool operator==(const Ref &o) const { return p_ == o.p_; }

private:
  void retain() {
    if (p_) p_->refcount_.fetch_add(1, std::memory_order_relaxed);
  }
  void release() {
    if (p_ && p_->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
  }
  T *p_ = nullptr;
};

// A block of memory shared by all views of it. Owning storage comes from the
// caching allocator (64-byte aligned); from_blob storage borrows user memory.
// Storages (tensor data buffers) allocated by the calling thread so far: a
// test counts what one call allocates with it (thread-local: no contention,
// other threads' work does not show up). Borrowed storage does not count.
uint64_t thread_storage_allocations();

class Storage {
public:
  using Deleter = void (*)(void *data, void *ctx);
  static Ref<Storage> allocate(size_t nbytes);
  static Ref<Storage> borrow(void *data, size_t nbytes, Deleter deleter = nullptr, void *ctx = nullptr);
  ~Storage();
  Storage(const Storage &) = delete;
  Storage &operator=(const Storage &) = delete;

  void *data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  int use_count() const { return refcount_.load(std::memory_order_relaxed); }

  // Tensor metadata objects come from the allocator's per-thread cache: a small
  // op's fixed cost is dominated by creating its result.
  static void *operator new(size_t n);
  static void operator delete(void *p, size_t n);

private:
  template <class T> friend class Ref;
  Storage() = default;
  static constexpr size_t kInlineBytes = 64;
  std::atomic<int> refcount_{1};
  void *data_ = nullptr;
  size_t nbytes_ = 0;
  bool owned_ = false;
  Deleter deleter_ = nullptr;
  void *ctx_ = nullptr;
  // Data of at most kInlineBytes lives here: no separate allocation for scalars.
  alignas(64) unsigned char inline_[kInlineBytes];
};

// A tensor's autograd state (runtime/autograd.h); null until it takes part.
struct AutogradMeta;

// What the tracer attaches to a tensor it is following (frontend/ owns the type).
struct TraceInfo {
  virtual ~TraceInfo() = default;
};

class TensorImpl {
public:
  TensorImpl() = default;
  TensorImpl(const TensorImpl &) = delete;
  TensorImpl &operator=(const TensorImpl &) = delete;

  DType dtype = kFloat32;
  // A meta tensor has shape, dtype and strides but no storage: ops run on meta
  // tensors compute their result's metadata and nothing else (tracing, shape rules).
  bool is_meta = false;
  // A 0-dim tensor made from a C++ number (torch's "wrapped number"): it takes part
  // in type promotion only by category, as a Python scalar does in torch.
  bool wrapped_number = false;
  Dims sizes;
  Dims strides;
  int64_t numel = 1;
  int64_t storage_offset = 0; // in elements
  Ref<Storage> storage;
  std::shared_ptr<TraceInfo> trace;           // set while a tracer follows this tensor
  std::shared_ptr<AutogradMeta> autograd_meta; // runtime/autograd.h
  // Set on a view op's result: the tensor it views, the first of a chain of
  // views. An in-place update of the view with autograd gives that tensor its
  // new history (CopySlices, runtime/autograd.cpp), as torch's _base.
  Ref<TensorImpl> view_base;

  void refresh_numel();

  static void *operator new(size_t n);
  static void operator delete(void *p, size_t n);

private:
  template <class T> friend class Ref;
  std::atomic<int> refcount_{1};
};

class Tensor;
namespace autograd {
class Node; // runtime/autograd.h
}
namespace indexing {
class TensorIndex; // runtime/indexing.h
}

namespace detail {
[[noreturn]] void fail_accessor_index(int64_t index, int64_t size);
void check_accessor(const Tensor &t, DType dtype, size_t rank);
} // namespace detail

// Element access through strides (Tensor::accessor<T, N>(), torch's TensorAccessor): a[i] is
// the (N-1)-dim accessor at index i of the first dim, and for N == 1 the element itself.
// Each index is checked against its size. Valid while the tensor it came from lives.
template <class T, size_t N> class TensorAccessor {
public:
  TensorAccessor(T *data, const int64_t *sizes, const int64_t *strides)
      : data_(data), sizes_(sizes), strides_(strides) {}
  decltype(auto) operator[](int64_t i) const {
    if (i < 0 || i >= sizes_[0]) [[unlikely]]
      detail::fail_accessor_index(i, sizes_[0]);
    if constexpr (N == 1) return data_[i * strides_[0]];
    else return TensorAccessor<T, N - 1>(data_ + i * strides_[0], sizes_ + 1, strides_ + 1);
  }
  int64_t size(size_t d) const { return sizes_[d]; }
  int64_t stride(size_t d) const { return strides_[d]; }
  T *data() const { return data_; }

private:
  T *data_;
  const int64_t *sizes_;
  const int64_t *strides_;
};

// A 4-D tensor's memory layout (torch's at::MemoryFormat): Contiguous is
// row-major NCHW; ChannelsLast keeps the NCHW shape with NHWC strides
// (H*W*C, 1, W*C, C), so each pixel's channels are adjacent.
enum class MemoryFormat { Contiguous, ChannelsLast };
using TensorList = std::vector<Tensor>;

// dtype (and later device/requires_grad) for factories: torch::TensorOptions.
class TensorOptions {
public:
  TensorOptions() = default;
  TensorOptions(DType d) : dtype_(d), has_dtype_(true) {}
  TensorOptions dtype(DType d) const { return TensorOptions(d); }
  DType dtype() const { return dtype_; }
  bool has_dtype() const { return has_dtype_; }

private:
  DType dtype_ = kFloat32;
  bool has_dtype_ = false;
};

class Tensor {
public:
  Tensor() = default; // undefined, as torch's Tensor()
  explicit Tensor(Ref<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- metadata
  bool defined() const { return bool(impl_); }
  IntArrayRef sizes() const { return impl().sizes; }
  IntArrayRef strides() const { return impl().strides; }
  int64_t size(int64_t dim) const;
  int64_t stride(int64_t dim) const;
  int64_t dim() const { return static_cast<int64_t>(impl().sizes.size()); }
  int64_t ndimension() const { return dim(); }
  int64_t numel() const { return impl().numel; }
  DType dtype() const { return impl().dtype; }
  DType scalar_type() const { return impl().dtype; }
  size_t element_size() const { return itemsize(dtype()); }
  size_t nbytes() const { return numel() * element_size(); }
  int64_t storage_offset() const { return impl().storage_offset; }
  bool is_contiguous() const; // (inline, below: guards call it on every compiled call)
  // ChannelsLast: 4-D with NHWC strides (size-1 dims may have any stride).
  bool is_contiguous(MemoryFormat format) const;
  bool is_meta() const { return impl().is_meta; }
  bool is_floating_point() const { return is_floating(dtype()); }
  bool is_same(const Tensor &o) const { return impl_ == o.impl_; }
  // True when both share one storage (views of each other).
  bool is_alias_of(const Tensor &o) const;
  TensorOptions options() const { return TensorOptions(dtype()); }

  // ---- data access (throws TraceError on a meta tensor, Error on a dtype mismatch)
  template <class T> T *data_ptr() const;
  void *data_ptr() const;
  void *raw_data() const; // data_ptr() without the dtype check; first element
  template <class T> T item() const;
  Scalar item() const;

  // ---- element indexing: x[i] is x.select(0, i)
  Tensor operator[](int64_t index) const;

  // ---- views (no copy)
  Tensor view(IntArrayRef shape) const;
  Tensor reshape(IntArrayRef shape) const;
  Tensor transpose(int64_t dim0, int64_t dim1) const;
  Tensor t() const;
  Tensor permute(IntArrayRef dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim = 0, std::optional<int64_t> start = std::nullopt,
               std::optional<int64_t> end = std::nullopt, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor expand(IntArrayRef size) const;
  Tensor expand_as(const Tensor &other) const;
  Tensor view_as(const Tensor &other) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor as_strided(IntArrayRef size, IntArrayRef stride, std::optional<int64_t> storage_offset = std::nullopt) const;
  Tensor contiguous() const;
  Tensor contiguous(MemoryFormat format) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor &copy_(const Tensor &src);
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(IntArrayRef split_sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;
  Tensor index_select(int64_t dim, const Tensor &index) const;
  Tensor gather(int64_t dim, const Tensor &index) const;
  Tensor tril(int64_t diagonal = 0) const;
  Tensor triu(int64_t diagonal = 0) const;

  // ---- unary
  Tensor neg() const;
  Tensor abs() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor erf() const;
  Tensor reciprocal() const;
  Tensor square() const;
  Tensor floor() const;
  Tensor ceil() const;
  Tensor round() const;
  Tensor sign() const;
  Tensor logical_not() const;

  // ---- binary
  Tensor add(const Tensor &other, const Scalar &alpha = 1) const;
  Tensor add(const Scalar &other, const Scalar &alpha = 1) const;
  Tensor sub(const Tensor &other, const Scalar &alpha = 1) const;
  Tensor sub(const Scalar &other, const Scalar &alpha = 1) const;
  Tensor mul(const Tensor &other) const;
  Tensor mul(const Scalar &other) const;
  Tensor div(const Tensor &other) const;
  Tensor div(const Scalar &other) const;
  Tensor pow(const Tensor &exponent) const;
  Tensor pow(const Scalar &exponent) const;
  Tensor maximum(const Tensor &other) const;
  Tensor minimum(const Tensor &other) const;
  Tensor remainder(const Tensor &other) const;
  Tensor remainder(const Scalar &other) const;
  Tensor atan2(const Tensor &other) const;
  Tensor hypot(const Tensor &other) const;
  Tensor fmod(const Tensor &other) const;
  Tensor fmod(const Scalar &other) const;
  Tensor copysign(const Tensor &other) const;
  Tensor copysign(const Scalar &other) const;
  Tensor eq(const Tensor &other) const;
  Tensor eq(const Scalar &other) const;
  Tensor ne(const Tensor &other) const;
  Tensor ne(const Scalar &other) const;
  Tensor lt(const Tensor &other) const;
  Tensor lt(const Scalar &other) const;
  Tensor le(const Tensor &other) const;
  Tensor le(const Scalar &other) const;
  Tensor gt(const Tensor &other) const;
  Tensor gt(const Scalar &other) const;
  Tensor ge(const Tensor &other) const;
  Tensor ge(const Scalar &other) const;
  Tensor logical_and(const Tensor &other) const;
  Tensor logical_or(const Tensor &other) const;
  Tensor clamp(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt) const;
  Tensor masked_fill(const Tensor &mask, const Scalar &value) const;
  Tensor lerp(const Tensor &end, const Scalar &weight) const;
  Tensor lerp(const Tensor &end, const Tensor &weight) const;

  // ---- in-place
  Tensor &add_(const Tensor &other, const Scalar &alpha = 1);
  Tensor &add_(const Scalar &other, const Scalar &alpha = 1);
  Tensor &sub_(const Tensor &other, const Scalar &alpha = 1);
  Tensor &sub_(const Scalar &other, const Scalar &alpha = 1);
  Tensor &mul_(const Tensor &other);
  Tensor &mul_(const Scalar &other);
  Tensor &div_(const Tensor &other);
  Tensor &div_(const Scalar &other);
  Tensor &atan2_(const Tensor &other);
  Tensor &hypot_(const Tensor &other);
  Tensor &fmod_(const Tensor &other);
  Tensor &fmod_(const Scalar &other);
  Tensor &copysign_(const Tensor &other);
  Tensor &copysign_(const Scalar &other);
  Tensor &clamp_(std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
  Tensor &relu_();
  Tensor &zero_();
  Tensor &fill_(const Scalar &value);

  // ---- the composites and newer unary ops (runtime/ops.h), as methods
  Tensor exp2() const;
  Tensor log2() const;
  Tensor log10() const;
  Tensor tan() const;
  Tensor asin() const;
  Tensor acos() const;
  Tensor atan() const;
  Tensor sinh() const;
  Tensor cosh() const;
  Tensor asinh() const;
  Tensor acosh() const;
  Tensor atanh() const;
  Tensor isnan() const;
  Tensor isinf() const;
  Tensor isfinite() const;
  Tensor clamp_min(const Scalar &min) const;
  Tensor clamp_max(const Scalar &max) const;
  Tensor logit(std::optional<double> eps = std::nullopt) const;
  Tensor nan_to_num(std::optional<double> nan = 0.0, std::optional<double> posinf = std::nullopt,
                    std::optional<double> neginf = std::nullopt) const;
  Tensor any() const;
  Tensor any(int64_t dim, bool keepdim = false) const;
  Tensor all() const;
  Tensor all(int64_t dim, bool keepdim = false) const;
  Tensor logsumexp(IntArrayRef dim, bool keepdim = false) const;
  Tensor outer(const Tensor &other) const;
  Tensor diff(int64_t n = 1, int64_t dim = -1) const;
  std::vector<Tensor> unbind(int64_t dim = 0) const;
  Tensor movedim(IntArrayRef source, IntArrayRef destination) const;
  Tensor unflatten(int64_t dim, IntArrayRef sizes) const;
  Tensor repeat(IntArrayRef repeats) const;
  Tensor tile(IntArrayRef reps) const;
  Tensor roll(IntArrayRef shifts, IntArrayRef dims = {}) const;
  bool allclose(const Tensor &other, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false) const;
  bool equal(const Tensor &other) const;
  Tensor trunc() const;
  Tensor frac() const;
  Tensor repeat_interleave(int64_t repeats, std::optional<int64_t> dim = std::nullopt) const;
  Tensor repeat_interleave(const Tensor &repeats, std::optional<int64_t> dim = std::nullopt) const;
  // Every window of `size` elements along `dimension`, `step` apart, as a new last dim (a view).
  Tensor unfold(int64_t dimension, int64_t size, int64_t step) const;
  // Tensors like this one (its dtype unless given), and this one in other's dtype.
  Tensor new_empty(IntArrayRef size, std::optional<DType> dtype = std::nullopt) const;
  Tensor new_zeros(IntArrayRef size, std::optional<DType> dtype = std::nullopt) const;
  Tensor new_ones(IntArrayRef size, std::optional<DType> dtype = std::nullopt) const;
  Tensor new_full(IntArrayRef size, const Scalar &fill_value, std::optional<DType> dtype = std::nullopt) const;
  Tensor type_as(const Tensor &other) const;
  // In place: self = f(self) (torch's x.exp_(), ...); an Error when f's result dtype is
  // not self's (exp_ of an integer tensor), as torch's.
  Tensor &neg_();
  Tensor &abs_();
  Tensor &exp_();
  Tensor &log_();
  Tensor &sqrt_();
  Tensor &rsqrt_();
  Tensor &sin_();
  Tensor &cos_();
  Tensor &tanh_();
  Tensor &sigmoid_();
  Tensor &reciprocal_();
  Tensor &floor_();
  Tensor &ceil_();
  Tensor &round_();
  Tensor &square_();
  Tensor &trunc_();
  Tensor &frac_();
  Tensor &tan_();
  Tensor &asin_();
  Tensor &acos_();
  Tensor &atan_();
  Tensor &sinh_();
  Tensor &cosh_();
  Tensor &asinh_();
  Tensor &acosh_();
  Tensor &atanh_();
  Tensor &log2_();
  Tensor &log10_();
  Tensor &log1p_();
  Tensor &expm1_();
  Tensor &exp2_();
  Tensor &erf_();
  Tensor &masked_fill_(const Tensor &mask, const Scalar &value);
  // torch::indexing (runtime/indexing.h): x.index({Slice(1, None), idx, None, Ellipsis, 0})
  // and x.index_put_({mask}, 0.0).
  Tensor index(const std::vector<indexing::TensorIndex> &indices) const;
  Tensor &index_put_(const std::vector<indexing::TensorIndex> &indices, const Tensor &values);
  Tensor &index_put_(const std::vector<indexing::TensorIndex> &indices, const Scalar &value);

  // ---- reductions
  Tensor sum(std::optional<DType> dtype = std::nullopt) const;
  Tensor sum(IntArrayRef dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor mean(std::optional<DType> dtype = std::nullopt) const;
  Tensor mean(IntArrayRef dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor prod(std::optional<DType> dtype = std::nullopt) const;
  Tensor prod(int64_t dim, bool keepdim = false, std::optional<DType> dtype = std::nullopt) const;
  Tensor amax(IntArrayRef dim = {}, bool keepdim = false) const;
  Tensor amin(IntArrayRef dim = {}, bool keepdim = false) const;
  Tensor max() const;
  std::tuple<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;
  Tensor min() const;
  std::tuple<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor argmin(std::optional<int64_t> dim = std::nullopt, bool keepdim = false) const;
  Tensor var(IntArrayRef dim = {}, std::optional<double> correction = std::nullopt, bool keepdim = false) const;
  Tensor std(IntArrayRef dim = {}, std::optional<double> correction = std::nullopt, bool keepdim = false) const;
  Tensor norm(const Scalar &p = 2, IntArrayRef dim = {}, bool keepdim = false) const;

  // ---- scans, sorting and scatter (runtime/ops.h), random fills, element access
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor cumprod(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor logcumsumexp(int64_t dim) const;
  std::tuple<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false) const;
  std::tuple<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor scatter(int64_t dim, const Tensor &index, const Tensor &src) const;
  Tensor scatter(int64_t dim, const Tensor &index, const Scalar &value) const;
  Tensor scatter_add(int64_t dim, const Tensor &index, const Tensor &src) const;
  Tensor scatter_reduce(int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                        bool include_self = true) const;
  Tensor index_add(int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha = 1) const;
  Tensor nonzero() const;
  Tensor masked_select(const Tensor &mask) const;
  // In place: self = the out-of-place result (its dtype must be self's).
  Tensor &cumsum_(int64_t dim);
  Tensor &scatter_(int64_t dim, const Tensor &index, const Tensor &src);
  Tensor &scatter_(int64_t dim, const Tensor &index, const Scalar &value);
  Tensor &scatter_add_(int64_t dim, const Tensor &index, const Tensor &src);
  Tensor &scatter_reduce_(int64_t dim, const Tensor &index, const Tensor &src, const std::string &reduce,
                          bool include_self = true);
  Tensor &index_add_(int64_t dim, const Tensor &index, const Tensor &source, const Scalar &alpha = 1);
  // Random fills of a floating tensor, from the generator manual_seed sets.
  Tensor &normal_(double mean = 0, double std = 1);
  Tensor &uniform_(double from = 0, double to = 1);
  Tensor &bernoulli_(double p = 0.5);
  Tensor &bernoulli_(const Tensor &p);
  // torch's t.accessor<float, 2>()[i][j]: element access through the strides, for loops over a
  // CPU tensor. Checks the dtype and rank once, and each index against its size. Writes through
  // it are seen by compiled functions that captured the tensor (its version is bumped here).
  template <class T, size_t N> TensorAccessor<T, N> accessor() const;

  // ---- nn / linear algebra
  Tensor softmax(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor log_softmax(int64_t dim, std::optional<DType> dtype = std::nullopt) const;
  Tensor matmul(const Tensor &other) const;
  Tensor mm(const Tensor &mat2) const;
  Tensor bmm(const Tensor &mat2) const;

  // ---- autograd (runtime/autograd.h), libtorch's names and semantics
  // Only floating tensors can require grad; only a leaf's flag can be changed.
  Tensor &requires_grad_(bool requires_grad = true);
  void set_requires_grad(bool requires_grad);
  // True for a leaf that requires grad and for any result computed from one with grad mode on.
  bool requires_grad() const;
  bool is_leaf() const;
  // The accumulated gradient (undefined until a backward reaches this tensor).
  const Tensor &grad() const;
  Tensor &mutable_grad() const;
  // d(this)/d(leaves) accumulated into each leaf's grad(); `gradient` may be left
  // out for a one-element tensor. retain_graph defaults to create_graph.
  void backward(const Tensor &gradient = {}, std::optional<bool> retain_graph = std::nullopt,
                bool create_graph = false, const std::vector<Tensor> &inputs = {}) const;
  // The same values (a view) without history: requires_grad() is false.
  Tensor detach() const;
  Tensor &detach_();
  // A non-leaf keeps the gradient backward computes for it in grad().
  void retain_grad() const;
  bool retains_grad() const;
  // The node that computed this tensor (name() is torch's, "MulBackward0"); null for a leaf.
  std::shared_ptr<autograd::Node> grad_fn() const;
  uint32_t output_nr() const;
  // How many in-place ops have written this tensor's memory (torch's _version).
  int64_t _version() const;

  // Inline (with the error out of line): every accessor goes through it.
  TensorImpl &impl() const {
    if (!impl_) [[unlikely]]
      fail_undefined();
    return *impl_;
  }
  TensorImpl *unsafeGetTensorImpl() const { return impl_.get(); }
  const Ref<TensorImpl> &impl_ref() const { return impl_; }

private:
  [[noreturn]] static void fail_undefined();
  [[noreturn]] static void fail_meta_data();
  Ref<TensorImpl> impl_;
};

// Inline: compiled calls read every input's address and compare storages on
// each call, where a call into the library would cost more than the work.
inline bool Tensor::is_alias_of(const Tensor &o) const {
  return defined() && o.defined() && impl().storage && impl().storage == o.impl().storage;
}

inline void *Tensor::raw_data() const {
  const TensorImpl &t = impl();
  if (t.is_meta) [[unlikely]]
    fail_meta_data();
  return static_cast<char *>(t.storage->data()) + t.storage_offset * int64_t(itemsize(t.dtype));
}

// ---- Tensor operators (torch semantics)
Tensor operator+(const Tensor &a, const Tensor &b);
Tensor operator-(const Tensor &a, const Tensor &b);
Tensor operator*(const Tensor &a, const Tensor &b);
Tensor operator/(const Tensor &a, const Tensor &b);
Tensor operator+(const Tensor &a, const Scalar &b);
Tensor operator-(const Tensor &a, const Scalar &b);
Tensor operator*(const Tensor &a, const Scalar &b);
Tensor operator/(const Tensor &a, const Scalar &b);
Tensor operator+(const Scalar &a, const Tensor &b);
Tensor operator-(const Scalar &a, const Tensor &b);
Tensor operator*(const Scalar &a, const Tensor &b);
Tensor operator/(const Scalar &a, const Tensor &b);
Tensor operator-(const Tensor &a);
Tensor operator==(const Tensor &a, const Tensor &b);
Tensor operator!=(const Tensor &a, const Tensor &b);
Tensor operator<(const Tensor &a, const Tensor &b);
Tensor operator<=(const Tensor &a, const Tensor &b);
Tensor operator>(const Tensor &a, const Tensor &b);
Tensor operator>=(const Tensor &a, const Tensor &b);
Tensor operator==(const Tensor &a, const Scalar &b);
Tensor operator!=(const Tensor &a, const Scalar &b);
Tensor operator<(const Tensor &a, const Scalar &b);
Tensor operator<=(const Tensor &a, const Scalar &b);
Tensor operator>(const Tensor &a, const Scalar &b);
Tensor operator>=(const Tensor &a, const Scalar &b);
Tensor &operator+=(Tensor &a, const Tensor &b);
Tensor &operator-=(Tensor &a, const Tensor &b);
Tensor &operator*=(Tensor &a, const Tensor &b);
Tensor &operator/=(Tensor &a, const Tensor &b);
Tensor &operator+=(Tensor &a, const Scalar &b);
Tensor &operator-=(Tensor &a, const Scalar &b);
Tensor &operator*=(Tensor &a, const Scalar &b);
Tensor &operator/=(Tensor &a, const Scalar &b);

// Prints in torch's format (values, then "[ CPUFloatType{2,3} ]").
std::ostream &operator<<(std::ostream &os, const Tensor &t);

// ---- helpers for kernels and ops (not user API, but stable)
namespace detail {
// Row-major contiguity of a tensor's metadata (size-1 dims may have any stride).
inline bool is_contiguous(const TensorImpl &t) {
  if (t.numel <= 1) return true;
  int64_t expected = 1;
  for (size_t i = t.sizes.size(); i-- > 0;) {
    if (t.sizes[i] == 1) continue;
    if (t.strides[i] != expected) return false;
    expected *= t.sizes[i];
  }
  return true;
}
} // namespace detail

inline bool Tensor::is_contiguous() const { return detail::is_contiguous(impl()); }

namespace detail {
// NHWC strides (H*W*C, 1, W*C, C) of a 4-D NCHW shape.
Dims channels_last_strides(IntArrayRef sizes);
// Wrap dim into [0, ndim); `op` and `arg` name the caller in the error message.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char *op, const char *arg = "dim");
// Contiguous strides for `sizes`.
Dims contiguous_strides(IntArrayRef sizes);
// numel of `sizes`, checking each size is >= 0 and the product fits in int64.
int64_t checked_numel(IntArrayRef sizes, const char *op);
// A fresh contiguous tensor; meta when `meta` is true (no storage).
Tensor make_tensor(IntArrayRef sizes, DType dtype, bool meta = false);
// make_tensor for a shape checked before (a compiled plan's output, checked
// when the plan was built): `strides` are contiguous_strides(sizes) and `numel`
// their product, both precomputed, so nothing is checked or derived per call.
Tensor make_checked_tensor(const Dims &sizes, const Dims &strides, int64_t numel, DType dtype);
// A view sharing `base`'s storage with new metadata (meta if base is meta).
Tensor make_view(const Tensor &base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
// The same for a view op's result (view, slice, select, ...): it also
// remembers the tensor it views (TensorImpl::view_base).
Tensor make_view_of(const Tensor &base, IntArrayRef sizes, IntArrayRef strides, int64_t storage_offset);
// The result tensor of an op: meta if any input is meta. Kernels return it
// straight away when it is meta (that is the op's shape rule at work).
Tensor make_result(IntArrayRef sizes, DType dtype, std::initializer_list<const Tensor *> inputs);
// Whether t's elements occupy numel distinct, gap-free slots of its storage
// (torch's is_non_overlapping_and_dense): some permutation of contiguous.
bool is_non_overlapping_and_dense(const TensorImpl &t);
// The strides of an elementwise result of `sizes` computed from `inputs`
// (torch's TensorIterator rule): contiguous when every input is; the inputs'
// strides when they all have the result's shape and the same non-overlapping,
// dense strides; otherwise a dense layout whose dim order follows the inputs'
// strides (the first input that orders two dims decides; broadcast dims,
// stride 0, do not take part). False (and `strides` untouched) for contiguous.
bool elementwise_strides(IntArrayRef sizes, std::initializer_list<const Tensor *> inputs, Dims &strides);
// make_result with the layout of elementwise_strides: `x + 1` of a transposed
// x is transposed too, as in torch.
Tensor make_elementwise_result(IntArrayRef sizes, DType dtype, std::initializer_list<const Tensor *> inputs);
bool any_meta(std::initializer_list<const Tensor *> inputs);
// make_result with `strides` (a dense layout of `sizes`; null = contiguous).
Tensor make_strided_result(IntArrayRef sizes, const Dims *strides, DType dtype,
                           std::initializer_list<const Tensor *> inputs);
// Lets the compiled executor give an eager op's result memory it owns (an
// arena slot) without an out= variant of every op: while a ResultPlacement is
// alive on this thread, the first make_result of exactly `nbytes` bytes of
// `dtype` returns a tensor over `data` (in the op's layout) instead of allocating. Nested
// placements (one per result of a multi-result op) are tried innermost first,
// each used once. The memory must stay valid as long as the result is used
// (the caller's job).
class ResultPlacement {
public:
  ResultPlacement(void *data, size_t nbytes, DType dtype);
  ~ResultPlacement();
  ResultPlacement(const ResultPlacement &) = delete;
  ResultPlacement &operator=(const ResultPlacement &) = delete;

private:
  friend Tensor make_strided_result(IntArrayRef, const Dims *, DType, std::initializer_list<const Tensor *>);
  void *data_;
  size_t nbytes_;
  DType dtype_;
  ResultPlacement *prev_;
};
// A 0-dim wrapped-number tensor holding `s` (int64, float64 or bool).
Tensor wrap_scalar(const Scalar &s);
// Broadcast shapes with numpy rules; `op` names the caller in the error.
Dims broadcast_shapes(IntArrayRef a, IntArrayRef b, const char *op);
// torch.result_type over tensors (wrapped numbers and 0-dim tensors participate by category).
DType result_type(std::initializer_list<const Tensor *> inputs);
// Throws "<op>: <arg> is an undefined tensor" when !t.defined().
void check_defined(const Tensor &t, const char *op, const char *arg);
} // namespace detail

// ---- implementation of the header-only accessors
template <class T> T *Tensor::data_ptr() const {
  KILN_CHECK(dtype() == dtype_of<T>, "data_ptr: tensor has dtype ", dtype(), " but was read as ", dtype_of<T>);
  return static_cast<T *>(data_ptr());
}

template <class T, size_t N> TensorAccessor<T, N> Tensor::accessor() const {
  static_assert(N > 0, "accessor: a 0-dim tensor's element is item<T>()");
  detail::check_accessor(*this, dtype_of<std::remove_const_t<T>>, N);
  T *p = static_cast<T *>(data_ptr());
  return TensorAccessor<T, N>(p, impl().sizes.data(), impl().strides.data());
}

template <class T> T Tensor::item() const {
  Scalar s = item();
  return s.to<T>();
}

} // namespace kiln
