// torch's functions that are compositions of kiln's ops (runtime/ops.h, "composites"),
// as torch's CompositeImplicitAutograd functions are: each checks its arguments with
// its own name in the error, then calls public ops, so a traced call records those ops
// (a compiled function fuses them with their neighbours) and needs no table entry,
// lowering or kernel of its own. The formulas are torch's (aten/src/ATen/native).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "runtime/kernels/composite_internal.h"
#include "runtime/ops.h"

namespace kiln {
namespace {
using detail::broadcasts_to;
using detail::check_float;
using detail::check_not_bool;

// beta * input + alpha * product, input broadcast to the product's shape; beta = 0
// ignores input (its NaN and inf too) and alpha = 1 / beta = 1 multiply nothing, as torch's.
Tensor scaled_sum(const char *op, const Tensor &input, const Tensor &product, const Scalar &beta,
                  const Scalar &alpha) {
  KILN_CHECK(broadcasts_to(input.sizes(), product.sizes()), op, ": input of shape ", shape_str(input.sizes()),
             " does not broadcast to the product's shape ", shape_str(product.sizes()));
  Tensor p = alpha.toDouble() == 1.0 ? product : mul(product, alpha);
  if (beta.toDouble() == 0.0) return p;
  return add(p, beta.toDouble() == 1.0 ? input : mul(input, beta));
}

Tensor none_set(const Tensor &x) { return ne(x, x); } // all false: integers are never NaN or infinite
} // namespace

// ---- activations
Tensor leaky_relu(const Tensor &x, const Scalar &negative_slope) {
  check_float(x, "leaky_relu");
  return where(gt(x, 0.0), x, mul(x, negative_slope));
}

Tensor elu(const Tensor &x, const Scalar &alpha, const Scalar &scale, const Scalar &input_scale) {
  check_float(x, "elu");
  const double negcoef = alpha.toDouble() * scale.toDouble();
  return where(gt(x, 0.0), mul(x, scale), mul(expm1(mul(x, input_scale)), negcoef));
}

Tensor celu(const Tensor &x, const Scalar &alpha) {
  check_float(x, "celu");
  KILN_CHECK(alpha.toDouble() != 0.0, "celu: alpha must not be 0 (it divides the input), input shape ",
             shape_str(x.sizes()));
  return elu(x, alpha, 1.0, 1.0 / alpha.toDouble());
}

Tensor softplus(const Tensor &x, const Scalar &beta, const Scalar &threshold) {
  check_float(x, "softplus");
  Tensor bx = mul(x, beta);
  return where(gt(bx, threshold), x, div(log1p(exp(bx)), beta));
}

Tensor hardtanh(const Tensor &x, const Scalar &min_val, const Scalar &max_val) {
  check_not_bool(x, "hardtanh");
  return clamp(x, min_val, max_val);
}

Tensor threshold(const Tensor &x, const Scalar &threshold, const Scalar &value) {
  detail::check_defined(x, "threshold", "self");
  return masked_fill(x, le(x, threshold), value);
}

Tensor clamp_min(const Tensor &x, const Scalar &min) {
  detail::check_defined(x, "clamp_min", "self");
  return clamp(x, min, std::nullopt);
}

Tensor clamp_max(const Tensor &x, const Scalar &max) {
  detail::check_defined(x, "clamp_max", "self");
  return clamp(x, std::nullopt, max);
}

Tensor logit(const Tensor &x, std::optional<double> eps) {
  check_not_bool(x, "logit");
  Tensor z = eps ? clamp(x, *eps, 1.0 - *eps) : x;
  return log(div(z, 1 - z));
}

// ---- classification
Tensor isnan(const Tensor &x) {
  detail::check_defined(x, "isnan", "self");
  return ne(x, x);
}

Tensor isinf(const Tensor &x) {
  detail::check_defined(x, "isinf", "self");
  if (!x.is_floating_point()) return none_set(x);
  return eq(abs(x), std::numeric_limits<double>::infinity());
}

Tensor isposinf(const Tensor &x) {
  detail::check_defined(x, "isposinf", "self");
  if (!x.is_floating_point()) return none_set(x);
  return eq(x, std::numeric_limits<double>::infinity());
}

Tensor isneginf(const Tensor &x) {
  detail::check_defined(x, "isneginf", "self");
  if (!x.is_floating_point()) return none_set(x);
  return eq(x, -std::numeric_limits<double>::infinity());
}

Tensor isfinite(const Tensor &x) {
  detail::check_defined(x, "isfinite", "self");
  if (!x.is_floating_point()) return eq(x, x);
  return lt(abs(x), std::numeric_limits<double>::infinity());
}

Tensor nan_to_num(const Tensor &x, std::optional<double> nan, std::optional<double> posinf,
                  std::optional<double> neginf) {
  detail::check_defined(x, "nan_to_num", "self");
  if (!x.is_floating_point()) return clone(x);
  const double hi = detail::finfo_max(x.dtype());
  const double inf = std::numeric_limits<double>::infinity();
  Tensor y = masked_fill(x, ne(x, x), nan.value_or(0.0));
  y = masked_fill(y, eq(x, inf), posinf.value_or(hi));
  return masked_fill(y, eq(x, -inf), neginf.value_or(-hi));
}

// ---- reductions
Tensor any(const Tensor &x) {
  detail::check_defined(x, "any", "self");
  return gt(sum(ne(x, 0)), 0);
}

Tensor any(const Tensor &x, int64_t dim, bool keepdim) {
  detail::check_defined(x, "any", "self");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "any");
  return gt(sum(ne(x, 0), {d}, keepdim), 0);
}

Tensor all(const Tensor &x) {
  detail::check_defined(x, "all", "self");
  return eq(sum(eq(x, 0)), 0);
}

Tensor all(const Tensor &x, int64_t dim, bool keepdim) {
  detail::check_defined(x, "all", "self");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "all");
  return eq(sum(eq(x, 0), {d}, keepdim), 0);
}

// torch's: the max over dims (0 where it is infinite, so that inf - inf gives no NaN)
// is subtracted before exp and added back after log.
Tensor logsumexp(const Tensor &x, IntArrayRef dim, bool keepdim) {
  detail::check_defined(x, "logsumexp", "self");
  KILN_CHECK(x.numel() > 0, "logsumexp: the input of shape ", shape_str(x.sizes()),
             " is empty (its max is undefined)");
  Tensor xf = x.is_floating_point() ? x : to(x, kFloat32);
  Tensor m = amax(xf, dim, true);
  m = masked_fill(m, eq(abs(m), std::numeric_limits<double>::infinity()), 0.0);
  Tensor r = log(sum(exp(xf - m), dim, keepdim));
  return r + (keepdim ? m : reshape(m, r.sizes()));
}

bool allclose(const Tensor &a, const Tensor &b, double rtol, double atol, bool equal_nan) {
  detail::check_defined(a, "allclose", "self");
  detail::check_defined(b, "allclose", "other");
  KILN_CHECK(a.dtype() == b.dtype(), "allclose: expected both tensors to have the same dtype, got ", a.dtype(),
             " and ", b.dtype(), " (shapes ", shape_str(a.sizes()), " and ", shape_str(b.sizes()), ")");
  KILN_CHECK(rtol >= 0 && atol >= 0, "allclose: rtol (", rtol, ") and atol (", atol, ") must be non-negative");
  Tensor close = eq(a, b);
  if (a.dtype() != kBool) {
    // torch's isclose: a finite difference within atol + rtol |b| (an infinite one is close only when equal).
    Tensor err = abs(a.to(kFloat64) - b.to(kFloat64));
    close = logical_or(close, logical_and(isfinite(err), le(err, add(mul(abs(b.to(kFloat64)), rtol), atol))));
    if (equal_nan) close = logical_or(close, logical_and(isnan(a), isnan(b)));
  }
  return all(close).item<bool>();
}

bool equal(const Tensor &a, const Tensor &b) {
  detail::check_defined(a, "equal", "self");
  detail::check_defined(b, "equal", "other");
  if (a.sizes() != b.sizes()) return false;
  return all(eq(a, b)).item<bool>();
}

// ---- linear algebra
Tensor outer(const Tensor &a, const Tensor &b) {
  detail::check_defined(a, "outer", "self");
  detail::check_defined(b, "outer", "vec2");
  KILN_CHECK(a.dim() == 1 && b.dim() == 1, "outer: expected 1-D tensors, got self of shape ",
             shape_str(a.sizes()), " and vec2 of shape ", shape_str(b.sizes()));
  return unsqueeze(a, 1) * b;
}

Tensor baddbmm(const Tensor &input, const Tensor &batch1, const Tensor &batch2, const Scalar &beta,
               const Scalar &alpha) {
  detail::check_defined(input, "baddbmm", "input");
  return scaled_sum("baddbmm", input, bmm(batch1, batch2), beta, alpha);
}

Tensor addbmm(const Tensor &input, const Tensor &batch1, const Tensor &batch2, const Scalar &beta,
              const Scalar &alpha) {
  detail::check_defined(input, "addbmm", "input");
  return scaled_sum("addbmm", input, sum(bmm(batch1, batch2), {0}), beta, alpha);
}

Tensor diff(const Tensor &x, int64_t n, int64_t dim) {
  detail::check_defined(x, "diff", "self");
  KILN_CHECK(x.dim() >= 1, "diff: expects a tensor of at least one dimension, got shape ", shape_str(x.sizes()));
  KILN_CHECK(n >= 0, "diff: n must be non-negative, got ", n);
  const int64_t d = detail::wrap_dim(dim, x.dim(), "diff");
  Tensor r = x;
  for (int64_t i = 0; i < n && r.size(d) > 0; ++i) {
    const int64_t len = r.size(d) - 1;
    Tensor hi = narrow(r, d, 1, len), lo = narrow(r, d, 0, len);
    r = r.dtype() == kBool ? ne(hi, lo) : hi - lo; // bool: torch's logical_xor
  }
  return r;
}

// ---- movement
std::vector<Tensor> unbind(const Tensor &x, int64_t dim) {
  detail::check_defined(x, "unbind", "self");
  KILN_CHECK(x.dim() >= 1, "unbind: expects a tensor of at least one dimension, got shape ", shape_str(x.sizes()));
  const int64_t d = detail::wrap_dim(dim, x.dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < x.size(d); ++i) out.push_back(select(x, d, i));
  return out;
}

Tensor movedim(const Tensor &x, IntArrayRef source, IntArrayRef destination) {
  detail::check_defined(x, "movedim", "self");
  KILN_CHECK(source.size() == destination.size(), "movedim: source (", shape_str(source), ") and destination (",
             shape_str(destination), ") must have the same number of dims");
  const int64_t nd = x.dim();
  std::vector<int64_t> order(size_t(nd), -1);
  std::vector<bool> src_used(size_t(nd), false);
  for (size_t i = 0; i < source.size(); ++i) {
    const int64_t s = detail::wrap_dim(source[i], nd, "movedim", "source");
    const int64_t t = detail::wrap_dim(destination[i], nd, "movedim", "destination");
    KILN_CHECK(!src_used[size_t(s)], "movedim: repeated dim ", source[i], " in source ", shape_str(source));
    KILN_CHECK(order[size_t(t)] < 0, "movedim: repeated dim ", destination[i], " in destination ",
               shape_str(destination));
    src_used[size_t(s)] = true;
    order[size_t(t)] = s;
  }
  int64_t next = 0; // the other dims keep their order in the free slots
  for (int64_t &o : order) {
    if (o >= 0) continue;
    while (src_used[size_t(next)]) ++next;
    o = next++;
  }
  return permute(x, order);
}

Tensor unflatten(const Tensor &x, int64_t dim, IntArrayRef sizes) {
  detail::check_defined(x, "unflatten", "self");
  KILN_CHECK(!sizes.empty(), "unflatten: sizes must be non-empty (input shape ", shape_str(x.sizes()), ")");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(x.dim(), 1), "unflatten");
  KILN_CHECK(x.dim() >= 1, "unflatten: expects a tensor of at least one dimension, got shape ", shape_str(x.sizes()));
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().begin() + d);
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == -1) {
      KILN_CHECK(infer < 0, "unflatten: only one dim may be -1 in sizes ", shape_str(sizes));
      infer = int64_t(shape.size());
      shape.push_back(1);
      continue;
    }
    KILN_CHECK(sizes[i] >= 0, "unflatten: invalid size ", sizes[i], " in sizes ", shape_str(sizes));
    known *= sizes[i];
    shape.push_back(sizes[i]);
  }
  if (infer >= 0) {
    KILN_CHECK(known != 0 && x.size(d) % known == 0, "unflatten: sizes ", shape_str(sizes), " do not divide dim ", d,
               " of size ", x.size(d), " (input shape ", shape_str(x.sizes()), ")");
    shape[size_t(infer)] = x.size(d) / known;
  } else {
    KILN_CHECK(known == x.size(d), "unflatten: sizes ", shape_str(sizes), " multiply to ", known, ", not to dim ", d,
               "'s size ", x.size(d), " (input shape ", shape_str(x.sizes()), ")");
  }
  shape.insert(shape.end(), x.sizes().begin() + d + 1, x.sizes().end());
  return view(x, shape);
}

// x tiled: [1, s0, 1, s1, ...] expanded to [r0, s0, r1, s1, ...], then merged pairwise.
Tensor repeat(const Tensor &x, IntArrayRef repeats) {
  detail::check_defined(x, "repeat", "self");
  KILN_CHECK(int64_t(repeats.size()) >= x.dim(), "repeat: the number of repeats (", repeats.size(),
             ") cannot be smaller than the tensor's number of dims (shape ", shape_str(x.sizes()), ")");
  for (int64_t r : repeats) KILN_CHECK(r >= 0, "repeat: repeats ", shape_str(repeats), " must be non-negative");
  const size_t lead = repeats.size() - size_t(x.dim());
  std::vector<int64_t> pairs, expanded, merged;
  for (size_t i = 0; i < repeats.size(); ++i) {
    const int64_t s = i < lead ? 1 : x.size(int64_t(i - lead));
    pairs.insert(pairs.end(), {1, s});
    expanded.insert(expanded.end(), {repeats[i], s});
    merged.push_back(repeats[i] * s);
  }
  return reshape(expand(reshape(x, pairs), expanded), merged);
}

Tensor tile(const Tensor &x, IntArrayRef reps) {
  detail::check_defined(x, "tile", "self");
  std::vector<int64_t> r(reps.begin(), reps.end());
  if (int64_t(r.size()) < x.dim()) r.insert(r.begin(), size_t(x.dim()) - r.size(), 1);
  return repeat(x, r);
}

Tensor roll(const Tensor &x, IntArrayRef shifts, IntArrayRef dims) {
  detail::check_defined(x, "roll", "self");
  if (dims.empty()) {
    KILN_CHECK(shifts.size() == 1, "roll: without dims, shifts must be one value, got ", shape_str(shifts));
    return view(roll(flatten(x), shifts, {0}), x.sizes());
  }
  KILN_CHECK(shifts.size() == dims.size(), "roll: shifts ", shape_str(shifts), " and dims ", shape_str(dims),
             " must have the same length");
  Tensor r = x;
  for (size_t i = 0; i < dims.size(); ++i) {
    const int64_t d = detail::wrap_dim(dims[i], x.dim(), "roll");
    const int64_t len = r.size(d);
    if (len == 0) continue;
    const int64_t s = ((shifts[i] % len) + len) % len;
    if (s == 0) continue;
    r = cat({narrow(r, d, len - s, s), narrow(r, d, 0, len - s)}, d);
  }
  return r;
}

// ---- methods
namespace {
// self = f(self), refused when f's result dtype is not self's (torch: "result type
// Float can't be cast to the desired output type Long").
Tensor &inplace(Tensor &self, const char *op, Tensor (*f)(const Tensor &)) {
  detail::check_defined(self, op, "self");
  Tensor r = f(self);
  KILN_CHECK(r.dtype() == self.dtype(), op, ": the result type ", r.dtype(), " cannot be cast to self's type ",
             self.dtype(), " (shape ", shape_str(self.sizes()), ")");
  return self.copy_(r);
}
} // namespace

Tensor Tensor::exp2() const { return kiln::exp2(*this); }
Tensor Tensor::log2() const { return kiln::log2(*this); }
Tensor Tensor::log10() const { return kiln::log10(*this); }
Tensor Tensor::tan() const { return kiln::tan(*this); }
Tensor Tensor::asin() const { return kiln::asin(*this); }
Tensor Tensor::acos() const { return kiln::acos(*this); }
Tensor Tensor::atan() const { return kiln::atan(*this); }
Tensor Tensor::sinh() const { return kiln::sinh(*this); }
Tensor Tensor::cosh() const { return kiln::cosh(*this); }
Tensor Tensor::asinh() const { return kiln::asinh(*this); }
Tensor Tensor::acosh() const { return kiln::acosh(*this); }
Tensor Tensor::atanh() const { return kiln::atanh(*this); }
Tensor Tensor::isnan() const { return kiln::isnan(*this); }
Tensor Tensor::isinf() const { return kiln::isinf(*this); }
Tensor Tensor::isfinite() const { return kiln::isfinite(*this); }
Tensor Tensor::clamp_min(const Scalar &min) const { return kiln::clamp_min(*this, min); }
Tensor Tensor::clamp_max(const Scalar &max) const { return kiln::clamp_max(*this, max); }
Tensor Tensor::logit(std::optional<double> eps) const { return kiln::logit(*this, eps); }
Tensor Tensor::nan_to_num(std::optional<double> nan, std::optional<double> posinf,
                          std::optional<double> neginf) const {
  return kiln::nan_to_num(*this, nan, posinf, neginf);
}
Tensor Tensor::any() const { return kiln::any(*this); }
Tensor Tensor::any(int64_t dim, bool keepdim) const { return kiln::any(*this, dim, keepdim); }
Tensor Tensor::all() const { return kiln::all(*this); }
Tensor Tensor::all(int64_t dim, bool keepdim) const { return kiln::all(*this, dim, keepdim); }
Tensor Tensor::logsumexp(IntArrayRef dim, bool keepdim) const { return kiln::logsumexp(*this, dim, keepdim); }
Tensor Tensor::outer(const Tensor &other) const { return kiln::outer(*this, other); }
Tensor Tensor::diff(int64_t n, int64_t dim) const { return kiln::diff(*this, n, dim); }
std::vector<Tensor> Tensor::unbind(int64_t dim) const { return kiln::unbind(*this, dim); }
Tensor Tensor::movedim(IntArrayRef source, IntArrayRef destination) const {
  return kiln::movedim(*this, source, destination);
}
Tensor Tensor::unflatten(int64_t dim, IntArrayRef sizes) const { return kiln::unflatten(*this, dim, sizes); }
Tensor Tensor::repeat(IntArrayRef repeats) const { return kiln::repeat(*this, repeats); }
Tensor Tensor::tile(IntArrayRef reps) const { return kiln::tile(*this, reps); }
Tensor Tensor::roll(IntArrayRef shifts, IntArrayRef dims) const { return kiln::roll(*this, shifts, dims); }
bool Tensor::allclose(const Tensor &other, double rtol, double atol, bool equal_nan) const {
  return kiln::allclose(*this, other, rtol, atol, equal_nan);
}
bool Tensor::equal(const Tensor &other) const { return kiln::equal(*this, other); }

Tensor Tensor::new_empty(IntArrayRef size, std::optional<DType> dtype) const {
  return kiln::empty(size, dtype.value_or(this->dtype()));
}
Tensor Tensor::new_zeros(IntArrayRef size, std::optional<DType> dtype) const {
  return kiln::zeros(size, dtype.value_or(this->dtype()));
}
Tensor Tensor::new_ones(IntArrayRef size, std::optional<DType> dtype) const {
  return kiln::ones(size, dtype.value_or(this->dtype()));
}
Tensor Tensor::new_full(IntArrayRef size, const Scalar &fill_value, std::optional<DType> dtype) const {
  return kiln::full(size, fill_value, dtype.value_or(this->dtype()));
}
Tensor Tensor::type_as(const Tensor &other) const {
  detail::check_defined(other, "type_as", "other");
  return kiln::to(*this, other.dtype());
}

Tensor &Tensor::neg_() { return inplace(*this, "neg_", kiln::neg); }
Tensor &Tensor::abs_() { return inplace(*this, "abs_", kiln::abs); }
Tensor &Tensor::exp_() { return inplace(*this, "exp_", kiln::exp); }
Tensor &Tensor::log_() { return inplace(*this, "log_", kiln::log); }
Tensor &Tensor::sqrt_() { return inplace(*this, "sqrt_", kiln::sqrt); }
Tensor &Tensor::rsqrt_() { return inplace(*this, "rsqrt_", kiln::rsqrt); }
Tensor &Tensor::sin_() { return inplace(*this, "sin_", kiln::sin); }
Tensor &Tensor::cos_() { return inplace(*this, "cos_", kiln::cos); }
Tensor &Tensor::tanh_() { return inplace(*this, "tanh_", kiln::tanh); }
Tensor &Tensor::sigmoid_() { return inplace(*this, "sigmoid_", kiln::sigmoid); }
Tensor &Tensor::reciprocal_() { return inplace(*this, "reciprocal_", kiln::reciprocal); }
Tensor &Tensor::floor_() { return inplace(*this, "floor_", kiln::floor); }
Tensor &Tensor::ceil_() { return inplace(*this, "ceil_", kiln::ceil); }
Tensor &Tensor::round_() { return inplace(*this, "round_", kiln::round); }
Tensor &Tensor::square_() { return inplace(*this, "square_", kiln::square); }
Tensor &Tensor::trunc_() { return inplace(*this, "trunc_", kiln::trunc); }
Tensor &Tensor::frac_() { return inplace(*this, "frac_", kiln::frac); }
Tensor &Tensor::tan_() { return inplace(*this, "tan_", kiln::tan); }
Tensor &Tensor::asin_() { return inplace(*this, "asin_", kiln::asin); }
Tensor &Tensor::acos_() { return inplace(*this, "acos_", kiln::acos); }
Tensor &Tensor::atan_() { return inplace(*this, "atan_", kiln::atan); }
Tensor &Tensor::sinh_() { return inplace(*this, "sinh_", kiln::sinh); }
Tensor &Tensor::cosh_() { return inplace(*this, "cosh_", kiln::cosh); }
Tensor &Tensor::asinh_() { return inplace(*this, "asinh_", kiln::asinh); }
Tensor &Tensor::acosh_() { return inplace(*this, "acosh_", kiln::acosh); }
Tensor &Tensor::atanh_() { return inplace(*this, "atanh_", kiln::atanh); }
Tensor &Tensor::log2_() { return inplace(*this, "log2_", kiln::log2); }
Tensor &Tensor::log10_() { return inplace(*this, "log10_", kiln::log10); }
Tensor &Tensor::log1p_() { return inplace(*this, "log1p_", kiln::log1p); }
Tensor &Tensor::expm1_() { return inplace(*this, "expm1_", kiln::expm1); }
Tensor &Tensor::exp2_() { return inplace(*this, "exp2_", kiln::exp2); }
Tensor &Tensor::erf_() { return inplace(*this, "erf_", kiln::erf); }
Tensor &Tensor::masked_fill_(const Tensor &mask, const Scalar &value) {
  detail::check_defined(*this, "masked_fill_", "self");
  detail::check_defined(mask, "masked_fill_", "mask");
  KILN_CHECK(broadcasts_to(mask.sizes(), sizes()), "masked_fill_: mask of shape ", shape_str(mask.sizes()),
             " does not broadcast to self's shape ", shape_str(sizes()));
  return copy_(kiln::masked_fill(*this, mask, value));
}

} // namespace kiln
