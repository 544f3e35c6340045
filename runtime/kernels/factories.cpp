// Factories, reproducible random numbers, and torch-style printing.
#include <atomic>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <tuple>
#include <utility>

#include "runtime/kernels/elementwise.h"
#include "runtime/random_stream.h"
#include "runtime/op_adapters.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/parallel.h"
#include "runtime/trace_hook.h"

namespace kiln {
namespace {

constexpr int64_t kGrain = 32768;

template <class T> void fill_raw(const Tensor &t, T v) {
  T *p = static_cast<T *>(t.raw_data());
  parallel_for(0, t.numel(), kGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = v;
  });
}

void fill_contiguous(const Tensor &t, const Scalar &v) {
  dispatch_storage_dtype(t.dtype(), [&]<class T>() { fill_raw<T>(t, v.to<T>()); });
}

DType dtype_or(TensorOptions o, DType fallback) { return o.has_dtype() ? o.dtype() : fallback; }

void check_size(IntArrayRef size, const char *op) {
  for (int64_t s : size) KILN_CHECK(s >= 0, op, ": negative dimension ", s, " in size ", shape_str(size));
}

// ---- counter-based random stream: element i of a draw is a pure function of
// (seed, offset + i), so results do not depend on the thread count.
std::atomic<uint64_t> g_seed{0x2545F4914F6CDD1DULL};
std::atomic<uint64_t> g_offset{0};

uint64_t mix(uint64_t z) { // splitmix64 finalizer
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}
uint64_t draw(uint64_t seed, uint64_t counter) { return mix(mix(seed) ^ counter); }
double uniform53(uint64_t bits) { return double(bits >> 11) * 0x1.0p-53; }

// Reserves `n` counters of the global stream; returns (seed, first counter).
std::pair<uint64_t, uint64_t> reserve(int64_t n) {
  uint64_t first = g_offset.fetch_add(uint64_t(n) * 2);
  return {g_seed.load(), first};
}

template <class F> void generate(const Tensor &t, F &&value_at) {
  auto [seed, first] = reserve(t.numel());
  dispatch_storage_dtype(t.dtype(), [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    parallel_for(0, t.numel(), kGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = static_cast<T>(value_at(seed, first + 2 * uint64_t(i)));
    });
  });
}

template <class T> Tensor from_values(const T *data, size_t n, TensorOptions options, DType natural) {
  Tensor t = detail::make_tensor({int64_t(n)}, dtype_or(options, natural));
  dispatch_storage_dtype(t.dtype(), [&]<class U>() {
    U *p = static_cast<U *>(t.raw_data());
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<U>(data[i]);
  });
  return t;
}

} // namespace

// ---------------------------------------------------------------- deterministic factories

Tensor full(IntArrayRef size, const Scalar &fill_value, TensorOptions options) {
  check_size(size, "full");
  // torch infers the dtype from the fill value when none is given.
  DType natural = fill_value.is_floating_point() ? kFloat32 : fill_value.type();
  DType dt = dtype_or(options, natural);
  detail::check_scalar_fits(fill_value, dt, "full");
  KILN_TRACE(Full, {}, .size = size, .value = fill_value, .dtype = dt);
  Tensor t = detail::make_result(size, dt, {}); // an arena slot in a compiled call
  fill_contiguous(t, fill_value);
  return t;
}

Tensor empty(IntArrayRef size, TensorOptions options) {
  check_size(size, "empty");
  if (detail::tracing()) return full(size, 0, dtype_or(options, kFloat32));
  return detail::make_tensor(size, dtype_or(options, kFloat32));
}
Tensor zeros(IntArrayRef size, TensorOptions options) { return full(size, 0, dtype_or(options, kFloat32)); }
Tensor ones(IntArrayRef size, TensorOptions options) { return full(size, 1, dtype_or(options, kFloat32)); }
Tensor empty_like(const Tensor &t, TensorOptions o) { return empty(t.sizes(), dtype_or(o, t.dtype())); }
Tensor zeros_like(const Tensor &t, TensorOptions o) { return zeros(t.sizes(), dtype_or(o, t.dtype())); }
Tensor ones_like(const Tensor &t, TensorOptions o) { return ones(t.sizes(), dtype_or(o, t.dtype())); }
Tensor full_like(const Tensor &t, const Scalar &v, TensorOptions o) {
  return full(t.sizes(), v, dtype_or(o, t.dtype()));
}
Tensor scalar_tensor(const Scalar &s, TensorOptions options) { return full({}, s, dtype_or(options, kFloat32)); }

Tensor arange(const Scalar &end, TensorOptions options) { return arange(0, end, 1, options); }

Tensor arange(const Scalar &start, const Scalar &end, const Scalar &step, TensorOptions options) {
  bool floating = start.is_floating_point() || end.is_floating_point() || step.is_floating_point();
  DType dt = dtype_or(options, floating ? kFloat32 : kInt64);
  double s = start.toDouble(), e = end.toDouble(), st = step.toDouble();
  KILN_CHECK(st != 0, "arange: step must be nonzero");
  KILN_CHECK(std::isfinite(s) && std::isfinite(e), "arange: unsupported range: ", start, " -> ", end);
  KILN_CHECK((st > 0 && e >= s) || (st < 0 && e <= s), "arange: upper bound and larger bound inconsistent with step sign (start ",
             start, ", end ", end, ", step ", step, ")");
  double count = std::ceil((e - s) / st);
  KILN_CHECK(count < double(int64_t(1) << 48), "arange: range ", start, " -> ", end, " step ", step,
             " has too many elements");
  KILN_TRACE(Arange, {}, .start = start, .end = end, .step = step, .dtype = dt);
  Tensor t = detail::make_tensor({int64_t(count)}, dt);
  dispatch_storage_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    bool exact_int = !floating;
    int64_t is = start.toLong(), ist = step.toLong();
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = exact_int ? static_cast<T>(is + i * ist) : static_cast<T>(s + double(i) * st);
  });
  return t;
}

Tensor linspace(const Scalar &start, const Scalar &end, int64_t steps, TensorOptions options) {
  KILN_CHECK(steps >= 0, "linspace: number of steps must be non-negative, got ", steps);
  DType dt = dtype_or(options, kFloat32);
  KILN_TRACE(Linspace, {}, .start = start, .end = end, .steps = steps, .dtype = dt);
  Tensor t = detail::make_tensor({steps}, dt);
  double s = start.toDouble(), e = end.toDouble();
  double step = steps > 1 ? (e - s) / double(steps - 1) : 0.0;
  int64_t half = steps / 2;
  dispatch_storage_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    // torch fills the second half from the end, so the last value is exactly `end`.
    for (int64_t i = 0; i < steps; ++i)
      p[i] = static_cast<T>(i < half ? s + step * double(i) : e - step * double(steps - 1 - i));
  });
  return t;
}

Tensor eye(int64_t n, TensorOptions options) { return eye(n, n, options); }

Tensor eye(int64_t n, int64_t m, TensorOptions options) {
  KILN_CHECK(n >= 0, "eye: n must be greater or equal to 0, got ", n);
  KILN_CHECK(m >= 0, "eye: m must be greater or equal to 0, got ", m);
  DType dt = dtype_or(options, kFloat32);
  KILN_TRACE(Eye, {}, .n = n, .m = m, .dtype = dt);
  Tensor t = full({n, m}, 0, dt);
  dispatch_storage_dtype(dt, [&]<class T>() {
    T *p = static_cast<T *>(t.raw_data());
    for (int64_t i = 0; i < std::min(n, m); ++i) p[i * m + i] = T(1);
  });
  return t;
}

Tensor sym_numel(const Tensor &x) {
  KILN_CHECK(x.defined(), "sym_numel: the tensor is undefined");
  KILN_TRACE(SymNumel, {x});
  Tensor t = detail::make_tensor({}, kInt64, x.is_meta());
  if (!t.is_meta()) *static_cast<int64_t *>(t.raw_data()) = x.numel();
  return t;
}

// ---------------------------------------------------------------- random

namespace detail {
std::pair<uint64_t, uint64_t> reserve_random_stream(int64_t n) { return reserve(n); }

namespace {
thread_local int64_t t_traced_draws = 0;
// The compiled call running on this thread, if its trace drew random numbers.
thread_local bool t_block_active = false;
thread_local uint64_t t_block_seed = 0, t_block_first = 0;
} // namespace

int64_t count_traced_random_draws(int64_t n) {
  const int64_t before = t_traced_draws;
  t_traced_draws += n;
  return before;
}

int64_t take_traced_random_draws() { return std::exchange(t_traced_draws, 0); }

RandomBlock::RandomBlock(int64_t draws)
    : active_(t_block_active), saved_seed_(t_block_seed), saved_first_(t_block_first) {
  std::tie(t_block_seed, t_block_first) = reserve(draws);
  t_block_active = true;
}

RandomBlock::~RandomBlock() {
  t_block_active = active_;
  t_block_seed = saved_seed_;
  t_block_first = saved_first_;
}

std::pair<uint64_t, uint64_t> random_stream_at(int64_t offset, int64_t n) {
  // reserve(n) moves the counter by 2n: a block's op at `offset` starts where
  // eager's reservation for it would.
  if (!t_block_active || offset < 0) return reserve(n);
  return {t_block_seed, t_block_first + 2 * uint64_t(offset)};
}
} // namespace detail

void manual_seed(uint64_t seed) {
  g_seed.store(seed);
  g_offset.store(0);
}

Tensor randn(IntArrayRef size, TensorOptions options) {
  check_size(size, "randn");
  DType dt = dtype_or(options, kFloat32);
  KILN_CHECK(is_floating(dt), "randn: expected a floating dtype, got ", dt);
  Tensor t = detail::make_tensor(size, dt);
  generate(t, [](uint64_t seed, uint64_t c) {
    // Box-Muller on two independent uniforms; u1 in (0, 1] so log is finite.
    double u1 = 1.0 - uniform53(draw(seed, c)), u2 = uniform53(draw(seed, c + 1));
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  });
  return t;
}

Tensor rand(IntArrayRef size, TensorOptions options) {
  check_size(size, "rand");
  DType dt = dtype_or(options, kFloat32);
  KILN_CHECK(is_floating(dt), "rand: expected a floating dtype, got ", dt);
  Tensor t = detail::make_tensor(size, dt);
  if (dt == kFloat32) // 24 random bits so that rounding never yields 1.0f
    generate(t, [](uint64_t seed, uint64_t c) { return double(draw(seed, c) >> 40) * 0x1.0p-24; });
  else
    generate(t, [](uint64_t seed, uint64_t c) { return uniform53(draw(seed, c)); });
  return t;
}

Tensor randint(int64_t low, int64_t high, IntArrayRef size, TensorOptions options) {
  check_size(size, "randint");
  KILN_CHECK(high > low, "randint: expected low < high, but got low=", low, " and high=", high);
  DType dt = dtype_or(options, kInt64);
  Tensor t = detail::make_tensor(size, dt);
  uint64_t range = uint64_t(high) - uint64_t(low);
  generate(t, [=](uint64_t seed, uint64_t c) { return low + int64_t(draw(seed, c) % range); });
  return t;
}

Tensor randint(int64_t high, IntArrayRef size, TensorOptions options) { return randint(0, high, size, options); }
Tensor randn_like(const Tensor &t, TensorOptions o) { return randn(t.sizes(), dtype_or(o, t.dtype())); }
Tensor rand_like(const Tensor &t, TensorOptions o) { return rand(t.sizes(), dtype_or(o, t.dtype())); }

// ---------------------------------------------------------------- from user data

Tensor from_blob(void *data, IntArrayRef sizes, TensorOptions options) {
  return from_blob(data, sizes, detail::contiguous_strides(sizes), options);
}

Tensor from_blob(void *data, IntArrayRef sizes, IntArrayRef strides, TensorOptions options) {
  KILN_CHECK(data || detail::checked_numel(sizes, "from_blob") == 0, "from_blob: data is a null pointer");
  KILN_CHECK(sizes.size() == strides.size(), "from_blob: sizes ", shape_str(sizes), " and strides ",
             shape_str(strides), " have different lengths");
  DType dt = dtype_or(options, kFloat32);
  int64_t extent = 1; // elements spanned
  for (size_t i = 0; i < sizes.size(); ++i) {
    KILN_CHECK(sizes[i] >= 0 && strides[i] >= 0, "from_blob: negative size or stride in ", shape_str(sizes),
               " / ", shape_str(strides));
    if (sizes[i] == 0) extent = 0;
    if (extent) extent += (sizes[i] - 1) * strides[i];
  }
  auto storage = Storage::borrow(data, size_t(extent) * itemsize(dt));
  auto *impl = new TensorImpl;
  Ref<TensorImpl> ref(impl);
  impl->dtype = dt;
  impl->sizes = Dims(sizes);
  impl->strides = Dims(strides);
  impl->storage = std::move(storage);
  impl->refresh_numel();
  return Tensor(std::move(ref));
}

Tensor tensor(const std::vector<float> &v, TensorOptions o) { return from_values(v.data(), v.size(), o, kFloat32); }
Tensor tensor(const std::vector<double> &v, TensorOptions o) { return from_values(v.data(), v.size(), o, kFloat64); }
Tensor tensor(const std::vector<int64_t> &v, TensorOptions o) { return from_values(v.data(), v.size(), o, kInt64); }
Tensor tensor(const std::vector<int32_t> &v, TensorOptions o) { return from_values(v.data(), v.size(), o, kInt32); }
Tensor tensor(const std::vector<bool> &v, TensorOptions o) {
  std::vector<uint8_t> bytes(v.begin(), v.end());
  return from_values(bytes.data(), bytes.size(), o, kBool);
}
Tensor tensor(std::initializer_list<float> v, TensorOptions o) { return from_values(v.begin(), v.size(), o, kFloat32); }
Tensor tensor(std::initializer_list<double> v, TensorOptions o) { return from_values(v.begin(), v.size(), o, kFloat64); }
Tensor tensor(std::initializer_list<int64_t> v, TensorOptions o) { return from_values(v.begin(), v.size(), o, kInt64); }
Tensor tensor(std::initializer_list<int> v, TensorOptions o) { return from_values(v.begin(), v.size(), o, kInt64); }

// ---------------------------------------------------------------- printing (torch's format)

namespace {

const char *type_name(DType t) {
  switch (t) {
  case kBool: return "CPUBoolType";
  case kUInt8: return "CPUByteType";
  case kInt8: return "CPUCharType";
  case kInt16: return "CPUShortType";
  case kInt32: return "CPUIntType";
  case kInt64: return "CPULongType";
  case kFloat32: return "CPUFloatType";
  case kFloat64: return "CPUDoubleType";
  case kFloat16: return "CPUHalfType";
  case kBFloat16: return "CPUBFloat16Type";
  }
  return "?";
}

// Reads element `flat` (row-major index) through strides as a double.
double element(const Tensor &t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t s = t.sizes()[d];
    off += (flat % s) * t.strides()[d];
    flat /= s;
  }
  return dispatch_storage_dtype(t.dtype(), [&]<class T>() { return double(static_cast<const T *>(t.raw_data())[off]); });
}

// torch's formatter: integers when every value is integral, otherwise fixed with
// 4 decimals, or scientific when the range is very wide; one width for all.
struct Format {
  bool integral = true, sci = false;
  int width = 1;
  std::string operator()(double v) const {
    std::ostringstream os;
    if (std::isnan(v)) os << "nan";
    else if (std::isinf(v)) os << (v < 0 ? "-inf" : "inf");
    else if (integral) os << std::fixed << std::setprecision(0) << v;
    else if (sci) os << std::scientific << std::setprecision(4) << v;
    else os << std::fixed << std::setprecision(4) << v;
    return os.str();
  }
};

Format make_format(const Tensor &t) {
  Format f;
  double lo = INFINITY, hi = 0;
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = element(t, i);
    if (!std::isfinite(v)) continue;
    if (v != std::floor(v)) f.integral = false;
    double a = std::fabs(v);
    if (a > 0) lo = std::min(lo, a);
    hi = std::max(hi, a);
  }
  if (!f.integral && hi > 0 && (hi / lo > 1000 || hi > 1e8 || lo < 1e-4)) f.sci = true;
  // Widest magnitude plus one column for the sign, as torch.
  for (int64_t i = 0; i < t.numel(); ++i) f.width = std::max<int>(f.width, int(f(std::fabs(element(t, i))).size()) + 1);
  return f;
}

void print_matrix(std::ostream &os, const Tensor &m, const Format &f, int64_t base, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) os << (c ? " " : "") << std::setw(f.width) << f(element(m, base + r * cols + c));
    os << "\n";
  }
}

} // namespace

std::ostream &operator<<(std::ostream &os, const Tensor &t) {
  if (!t.defined()) return os << "[ Tensor (undefined) ]";
  if (t.is_meta()) {
    if (detail::tracing() && detail::trace_hooks().data_read) detail::trace_hooks().data_read("operator<<");
    return os << "[ meta " << type_name(t.dtype()) << shape_str(t.sizes()) << " ]";
  }
  std::ostringstream shape;
  for (int64_t i = 0; i < t.dim(); ++i) shape << (i ? "," : "") << t.sizes()[i];
  Format f = make_format(t);
  if (t.dim() == 0) {
    os << f(element(t, 0)) << "\n";
  } else if (t.numel() > 0) {
    int64_t cols = t.dim() >= 2 ? t.sizes()[t.dim() - 1] : 1;
    int64_t rows = t.dim() >= 2 ? t.sizes()[t.dim() - 2] : t.sizes()[0];
    int64_t mats = t.numel() / (rows * cols);
    for (int64_t k = 0; k < mats; ++k) {
      if (t.dim() > 2) { // "(i,j,.,.) = " header as torch
        os << "(";
        int64_t rest = k;
        std::vector<int64_t> idx(size_t(t.dim() - 2));
        for (int64_t d = t.dim() - 3; d >= 0; --d) {
          idx[size_t(d)] = rest % t.sizes()[d];
          rest /= t.sizes()[d];
        }
        for (int64_t v : idx) os << v + 1 << ",";
        os << ".,.) = \n";
      }
      print_matrix(os, t, f, k * rows * cols, rows, cols);
      if (t.dim() > 2 && k + 1 < mats) os << "\n";
    }
  }
  return os << "[ " << type_name(t.dtype()) << "{" << shape.str() << "} ]";
}

// ---------------------------------------------------------------- uniform adapters

namespace adapters {
std::vector<Tensor> Full(const std::vector<Tensor> &, const Attrs &a) {
  attrs::Full at{a};
  return {full(at.size(), at.value(), at.dtype())};
}
std::vector<Tensor> Arange(const std::vector<Tensor> &, const Attrs &a) {
  attrs::Arange at{a};
  return {arange(at.start(), at.end(), at.step(), at.dtype())};
}
std::vector<Tensor> Linspace(const std::vector<Tensor> &, const Attrs &a) {
  attrs::Linspace at{a};
  return {linspace(at.start(), at.end(), at.steps(), at.dtype())};
}
std::vector<Tensor> SymNumel(const std::vector<Tensor> &in, const Attrs &) { return {sym_numel(in[0])}; }
std::vector<Tensor> Eye(const std::vector<Tensor> &, const Attrs &a) {
  attrs::Eye at{a};
  return {eye(at.n(), at.m(), at.dtype())};
}
} // namespace adapters

} // namespace kiln
