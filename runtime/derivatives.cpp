// One derivative per op (see derivatives.h). Each formula is a function of the
// saved values and the results' gradients, written in kiln ops, as torch's
// derivatives.yaml writes them in ATen ops. Broadcasting is undone by the engine
// (sum_to), so a formula may return a gradient in the broadcast shape.
#include "runtime/derivatives.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <tuple>

#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/op_attrs.h"
#include "runtime/ops.h"
#include "runtime/trace_hook.h"

namespace kiln::autograd::detail {

Tensor sum_to(const Tensor &grad, IntArrayRef sizes) {
  const int64_t lead = grad.dim() - int64_t(sizes.size());
  KILN_CHECK(lead >= 0, "autograd: internal: a gradient of shape ", shape_str(grad.sizes()),
             " cannot be summed to ", shape_str(sizes));
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < lead; ++d) dims.push_back(d);
  for (size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] == 1 && grad.size(lead + int64_t(d)) != 1) dims.push_back(lead + int64_t(d));
  Tensor g = dims.empty() ? grad : sum(grad, dims, /*keepdim=*/true);
  if (lead > 0 || g.sizes() != sizes) g = g.reshape(sizes);
  return g;
}

namespace {

using Grads = std::vector<Tensor>;
using DimList = std::vector<int64_t>;
constexpr double kLn2 = 0.69314718055994530942;
constexpr double kLn10 = 2.30258509299404568402;

DimList dims_of(IntArrayRef s) { return s.vec(); }

// The reduced dims of a reduction over `dims` of a rank-n tensor (empty = all), sorted.
DimList reduced_dims(IntArrayRef dims, int64_t n, const char *op) {
  DimList out;
  if (dims.empty()) {
    for (int64_t d = 0; d < n; ++d) out.push_back(d);
    return out;
  }
  for (int64_t d : dims) out.push_back(kiln::detail::wrap_dim(d, std::max<int64_t>(n, 1), op));
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  if (n == 0) out.clear();
  return out;
}

// A reduction's result gradient back in the input's rank (keepdim form).
Tensor unreduce(const Tensor &g, const DimList &dims, bool keepdim) {
  if (keepdim) return g;
  Tensor out = g;
  for (int64_t d : dims) out = out.unsqueeze(d);
  return out;
}

int64_t count_of(IntArrayRef sizes, const DimList &dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= sizes[d];
  return n;
}

// ---- unary elementwise: x = in(0), y = out(0), g = grad(0)

Grads d_neg(const GradCtx &c) { return {neg(c.grad())}; }
Grads d_abs(const GradCtx &c) { return {c.grad() * sign(c.in(0))}; }
Grads d_exp(const GradCtx &c) { return {c.grad() * c.out()}; }
Grads d_exp2(const GradCtx &c) { return {c.grad() * c.out() * kLn2}; }
Grads d_log(const GradCtx &c) { return {c.grad() / c.in(0)}; }
Grads d_log1p(const GradCtx &c) { return {c.grad() / (c.in(0) + 1)}; }
Grads d_expm1(const GradCtx &c) { return {c.grad() * (c.out() + 1)}; }
Grads d_sqrt(const GradCtx &c) { return {c.grad() / (c.out() * 2)}; }
Grads d_rsqrt(const GradCtx &c) { return {c.grad() * c.out() * c.out() * c.out() * -0.5}; }
Grads d_sin(const GradCtx &c) { return {c.grad() * cos(c.in(0))}; }
Grads d_cos(const GradCtx &c) { return {c.grad() * neg(sin(c.in(0)))}; }
Grads d_tan(const GradCtx &c) { return {c.grad() * (square(c.out()) + 1)}; }
Grads d_asin(const GradCtx &c) { return {c.grad() * rsqrt(1 - square(c.in(0)))}; }
Grads d_acos(const GradCtx &c) { return {neg(c.grad() * rsqrt(1 - square(c.in(0))))}; }
Grads d_atan(const GradCtx &c) { return {c.grad() / (square(c.in(0)) + 1)}; }
Grads d_sinh(const GradCtx &c) { return {c.grad() * cosh(c.in(0))}; }
Grads d_cosh(const GradCtx &c) { return {c.grad() * sinh(c.in(0))}; }
Grads d_asinh(const GradCtx &c) { return {c.grad() * rsqrt(square(c.in(0)) + 1)}; }
Grads d_acosh(const GradCtx &c) { return {c.grad() * rsqrt(square(c.in(0)) - 1)}; }
Grads d_atanh(const GradCtx &c) { return {c.grad() / (1 - square(c.in(0)))}; }
Grads d_log2(const GradCtx &c) { return {c.grad() / (c.in(0) * kLn2)}; }
Grads d_log10(const GradCtx &c) { return {c.grad() / (c.in(0) * kLn10)}; }
Grads d_tanh(const GradCtx &c) { return {c.grad() * (1 - square(c.out()))}; }
Grads d_sigmoid(const GradCtx &c) { return {c.grad() * c.out() * (1 - c.out())}; }
// torch's threshold_backward: zero where the result is <= 0 (NaN passes the gradient).
Grads d_relu(const GradCtx &c) { return {masked_fill(c.grad(), le(c.out(), 0), 0)}; }
Grads d_gelu(const GradCtx &c) {
  const Tensor &x = c.in(0);
  if (attrs::Gelu{c.attrs}.approximate() == "tanh") {
    constexpr double kBeta = 0.7978845608028654, kKappa = 0.044715;
    Tensor x2 = square(x);
    Tensor t = tanh((x + x2 * x * kKappa) * kBeta);
    Tensor left = (t + 1) * 0.5;
    Tensor right = x * 0.5 * (1 - square(t)) * kBeta * (x2 * (3 * kKappa) + 1);
    return {c.grad() * (left + right)};
  }
  constexpr double kInvSqrt2 = 0.70710678118654752440, kInvSqrt2Pi = 0.39894228040143267794;
  Tensor cdf = (erf(x * kInvSqrt2) + 1) * 0.5;
  Tensor pdf = exp(square(x) * -0.5) * kInvSqrt2Pi;
  return {c.grad() * (cdf + x * pdf)};
}
Grads d_silu(const GradCtx &c) {
  Tensor s = sigmoid(c.in(0));
  return {c.grad() * s * (c.in(0) * (1 - s) + 1)};
}
Grads d_hardsigmoid(const GradCtx &c) {
  const Tensor &x = c.in(0);
  return {where(logical_and(gt(x, -3.0), lt(x, 3.0)), c.grad() / 6.0, 0.0)};
}
Grads d_softsign(const GradCtx &c) { return {c.grad() / square(abs(c.in(0)) + 1)}; }
Grads d_hardswish(const GradCtx &c) {
  const Tensor &x = c.in(0);
  Tensor mid = where(le(x, 3.0), c.grad() * (x / 3.0 + 0.5), c.grad());
  return {where(lt(x, -3.0), 0.0, mid)};
}
Grads d_mish(const GradCtx &c) {
  const Tensor &x = c.in(0);
  Tensor ts = tanh(log1p(exp(x)));
  return {c.grad() * (ts + x * sigmoid(x) * (1 - square(ts)))};
}
Grads d_log_sigmoid(const GradCtx &c) { return {c.grad() * sigmoid(neg(c.in(0)))}; }
Grads d_selu(const GradCtx &c) {
  constexpr double kAlpha = 1.6732632423543772, kScale = 1.0507009873554805;
  const Tensor &x = c.in(0);
  return {where(gt(x, 0.0), c.grad() * kScale, c.grad() * exp(x) * (kAlpha * kScale))};
}
Grads d_erf(const GradCtx &c) {
  constexpr double k2OverSqrtPi = 1.12837916709551257390;
  return {c.grad() * exp(neg(square(c.in(0)))) * k2OverSqrtPi};
}
Grads d_reciprocal(const GradCtx &c) { return {neg(c.grad() * square(c.out()))}; }
Grads d_square(const GradCtx &c) { return {c.grad() * c.in(0) * 2}; }
// floor, ceil, round, sign: piecewise constant, zero gradient (as torch).
Grads d_zero(const GradCtx &c) { return {zeros_like(c.grad())}; }
Grads d_identity(const GradCtx &c) { return {c.grad()}; }

// ---- binary elementwise: a = in(0), b = in(1)

Grads d_add(const GradCtx &c) {
  const Scalar alpha = attrs::Add{c.attrs}.alpha();
  return {c.grad(), c.need(1) ? c.grad() * alpha : Tensor()};
}
Grads d_sub(const GradCtx &c) {
  const Scalar alpha = attrs::Sub{c.attrs}.alpha();
  return {c.grad(), c.need(1) ? c.grad() * -alpha.to<double>() : Tensor()};
}
Grads d_mul(const GradCtx &c) {
  return {c.need(0) ? c.grad() * c.in(1) : Tensor(), c.need(1) ? c.grad() * c.in(0) : Tensor()};
}
Grads d_div(const GradCtx &c) {
  if (attrs::Div{c.attrs}.rounding_mode()) return {zeros_like(c.grad()), zeros_like(c.grad())};
  const Tensor &a = c.in(0), &b = c.in(1);
  return {c.need(0) ? c.grad() / b : Tensor(), c.need(1) ? neg(c.grad() * a / square(b)) : Tensor()};
}
// torch's pow_backward: zero where the exponent is 0 (for a), and where a == 0 with
// a non-negative exponent (for the exponent).
Grads d_pow(const GradCtx &c) {
  const Tensor &a = c.in(0), &b = c.in(1), &y = c.out();
  Grads g(2);
  if (c.need(0)) g[0] = where(eq(b, 0.0), 0.0, c.grad() * b * pow(a, b - 1));
  if (c.need(1)) g[1] = where(logical_and(eq(a, 0.0), ge(b, 0.0)), 0.0, c.grad() * y * log(a));
  return g;
}
// Ties share the gradient equally, as torch's maximum/minimum.
Grads d_max_min(const GradCtx &c, bool is_max) {
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor shared = where(eq(a, b), c.grad() / 2.0, c.grad());
  return {c.need(0) ? masked_fill(shared, is_max ? lt(a, b) : gt(a, b), 0) : Tensor(),
          c.need(1) ? masked_fill(shared, is_max ? gt(a, b) : lt(a, b), 0) : Tensor()};
}
Grads d_maximum(const GradCtx &c) { return d_max_min(c, true); }
Grads d_minimum(const GradCtx &c) { return d_max_min(c, false); }
Grads d_remainder(const GradCtx &c) {
  return {c.grad(), c.need(1) ? neg(c.grad() * div(c.in(0), c.in(1), "floor")) : Tensor()};
}
Grads d_fmod(const GradCtx &c) {
  return {c.grad(), c.need(1) ? neg(c.grad() * div(c.in(0), c.in(1), "trunc")) : Tensor()};
}
Grads d_atan2(const GradCtx &c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor r = c.grad() / (square(a) + square(b));
  return {c.need(0) ? r * b : Tensor(), c.need(1) ? neg(r * a) : Tensor()};
}
Grads d_hypot(const GradCtx &c) {
  return {c.need(0) ? c.grad() * c.in(0) / c.out() : Tensor(), c.need(1) ? c.grad() * c.in(1) / c.out() : Tensor()};
}
// d copysign(a, b)/da = sign(a) * sign(result) (zero at a == 0); nothing flows to b.
Grads d_copysign(const GradCtx &c) {
  const Tensor &a = c.in(0);
  return {where(eq(a, 0.0), 0.0, c.grad() * c.out() / a), zeros_like(c.grad())};
}
Grads d_where(const GradCtx &c) {
  const Tensor &cond = c.in(0);
  return {Tensor(), c.need(1) ? where(cond, c.grad(), 0.0) : Tensor(), c.need(2) ? where(cond, 0.0, c.grad()) : Tensor()};
}
Grads d_clamp(const GradCtx &c) {
  const attrs::Clamp a{c.attrs};
  const Tensor &x = c.in(0);
  Tensor keep;
  if (a.min()) keep = ge(x, *a.min());
  if (a.max()) keep = keep.defined() ? logical_and(keep, le(x, *a.max())) : le(x, *a.max());
  if (!keep.defined()) return {c.grad()};
  return {where(keep, c.grad(), 0.0)};
}
Grads d_masked_fill(const GradCtx &c) { return {masked_fill(c.grad(), c.in(1), 0), Tensor()}; }
Grads d_lerp(const GradCtx &c) {
  const Tensor &a = c.in(0), &b = c.in(1), &w = c.in(2);
  return {c.need(0) ? c.grad() * (1 - w) : Tensor(), c.need(1) ? c.grad() * w : Tensor(),
          c.need(2) ? c.grad() * (b - a) : Tensor()};
}
// copy(self, src): the result is src's values; self's are overwritten.
Grads d_copy(const GradCtx &c) { return {Tensor(), c.grad()}; }

// ---- reductions

Grads d_sum(const GradCtx &c) {
  const attrs::Sum a{c.attrs};
  const DimList dims = reduced_dims(a.dims(), int64_t(c.input_sizes[0].size()), "sum");
  return {unreduce(c.grad(), dims, a.keepdim()).expand(c.input_sizes[0])};
}
// g / (n - minus), n the count of elements a reduction of `whole` into
// `reduced` took. While tracing, the count is read per call (sym_numel of each,
// in float64), so that a graph over symbolic sizes divides by the call's n;
// canonicalize folds it back to the number for static sizes.
Tensor over_count(const Tensor &g, const Tensor &whole, const Tensor &reduced, int64_t n, double minus = 0) {
  if (!kiln::detail::tracing()) return g / (double(n) - minus);
  Tensor n_whole = sym_numel(whole).to(kFloat64); // traced in this order on every compiler
  Tensor n_reduced = sym_numel(reduced).to(kFloat64);
  return g / (n_whole / n_reduced - minus);
}
Grads d_mean(const GradCtx &c) {
  const attrs::Mean a{c.attrs};
  const DimList dims = reduced_dims(a.dims(), int64_t(c.input_sizes[0].size()), "mean");
  const int64_t n = count_of(c.input_sizes[0], dims);
  Tensor g = unreduce(c.grad(), dims, a.keepdim()).expand(c.input_sizes[0]);
  return {over_count(g, g, c.grad(), n)};
}
// The product of every other element along the last dim of x [..., K], without
// dividing (zeros are fine): exclusive cumulative products from both ends.
Tensor others_product_last(const Tensor &x) {
  const int64_t k = x.size(-1);
  DimList one = x.sizes().vec();
  one.back() = 1;
  Tensor ones_col = ones(one, x.dtype());
  Tensor fwd = cumprod(cat({ones_col, x.narrow(-1, 0, k - 1)}, -1), -1);
  Tensor xr = flip(x, {-1});
  Tensor bwd = flip(cumprod(cat({ones_col, xr.narrow(-1, 0, k - 1)}, -1), -1), {-1});
  return fwd * bwd;
}
Grads d_prod(const GradCtx &c) {
  const attrs::Prod a{c.attrs};
  const Tensor &x = c.in(0);
  const int64_t n = x.dim();
  if (n == 0) return {c.grad()};
  const DimList dims = reduced_dims(a.dims(), n, "prod");
  // The reduced dims last, flattened into one: [kept..., K].
  DimList perm, kept;
  for (int64_t d = 0; d < n; ++d)
    if (!std::binary_search(dims.begin(), dims.end(), d)) perm.push_back(d), kept.push_back(x.size(d));
  for (int64_t d : dims) perm.push_back(d);
  DimList flat = kept;
  flat.push_back(count_of(x.sizes(), dims));
  if (flat.back() == 0) return {zeros_like(x)};
  Tensor xp = x.permute(perm).reshape(flat);
  DimList gshape = kept;
  gshape.push_back(1);
  Tensor gp = unreduce(c.grad(), dims, a.keepdim()).permute(perm).reshape(gshape);
  Tensor r = (others_product_last(xp) * gp);
  DimList permuted;
  for (int64_t d : perm) permuted.push_back(x.size(d));
  DimList inverse(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = int64_t(i);
  return {r.reshape(permuted).permute(inverse)};
}
// amax / amin: ties share the gradient equally (torch's amax backward).
Grads d_amax_amin(const GradCtx &c, IntArrayRef dims_attr, bool keepdim, const char *op) {
  const Tensor &x = c.in(0);
  const DimList dims = reduced_dims(dims_attr, x.dim(), op);
  Tensor y = unreduce(c.out(), dims, keepdim);
  Tensor mask = to(eq(x, y), x.dtype());
  Tensor count = dims.empty() ? mask : sum(mask, dims, true);
  return {unreduce(c.grad(), dims, keepdim) * mask / count};
}
Grads d_amax(const GradCtx &c) {
  const attrs::Amax a{c.attrs};
  return d_amax_amin(c, a.dims(), a.keepdim(), "amax");
}
Grads d_amin(const GradCtx &c) {
  const attrs::Amin a{c.attrs};
  return d_amax_amin(c, a.dims(), a.keepdim(), "amin");
}
// max(x, dim) / min(x, dim): the gradient goes to the index each result came from.
Grads d_max_min_dim(const GradCtx &c, int64_t dim, bool keepdim) {
  const Tensor &x = c.in(0);
  if (x.dim() == 0) return {c.grad()};
  const int64_t d = kiln::detail::wrap_dim(dim, x.dim(), "max");
  Tensor g = keepdim ? c.grad() : c.grad().unsqueeze(d);
  Tensor idx = keepdim ? c.out(1) : c.out(1).unsqueeze(d);
  return {scatter(zeros(x.sizes(), x.dtype()), d, idx, g)};
}
Grads d_max_dim(const GradCtx &c) {
  const attrs::MaxDim a{c.attrs};
  return d_max_min_dim(c, a.dim(), a.keepdim());
}
Grads d_min_dim(const GradCtx &c) {
  const attrs::MinDim a{c.attrs};
  return d_max_min_dim(c, a.dim(), a.keepdim());
}
// var: 2 (x - mean) / (N - correction); std: that over 2 std.
Tensor centered_over_n(const GradCtx &c, IntArrayRef dims_attr, std::optional<double> correction, const char *op) {
  const Tensor &x = c.in(0);
  const DimList dims = reduced_dims(dims_attr, x.dim(), op);
  Tensor centered = dims.empty() ? x - x : x - mean(x, dims, true);
  return over_count(centered, x, c.grad(), count_of(x.sizes(), dims), correction.value_or(1.0));
}
Grads d_var(const GradCtx &c) {
  const attrs::Var a{c.attrs};
  const DimList dims = reduced_dims(a.dims(), c.in(0).dim(), "var");
  return {unreduce(c.grad(), dims, a.keepdim()) * centered_over_n(c, a.dims(), a.correction(), "var") * 2.0};
}
Grads d_std(const GradCtx &c) {
  const attrs::Std a{c.attrs};
  const DimList dims = reduced_dims(a.dims(), c.in(0).dim(), "std");
  Tensor y = unreduce(c.out(), dims, a.keepdim());
  Tensor g = masked_fill(unreduce(c.grad(), dims, a.keepdim()) / y, eq(y, 0.0), 0);
  return {g * centered_over_n(c, a.dims(), a.correction(), "std")};
}
// p-norms (torch's norm_backward): p = 0 has zero gradient; p = inf shares it
// among the entries of the largest magnitude; a zero norm gives zero.
Grads d_norm(const GradCtx &c) {
  const attrs::Norm a{c.attrs};
  const Tensor &x = c.in(0);
  const DimList dims = reduced_dims(a.dims(), x.dim(), "norm");
  const double p = a.p().to<double>();
  Tensor g = unreduce(c.grad(), dims, a.keepdim());
  Tensor y = unreduce(c.out(), dims, a.keepdim());
  if (p == 0) return {zeros_like(x)};
  if (p == 1) return {g * sign(x)};
  if (std::isinf(p)) {
    Tensor mask = to(eq(abs(x), y), x.dtype());
    Tensor count = dims.empty() ? mask : sum(mask, dims, true);
    return {g * sign(x) * mask / count};
  }
  Tensor r = p == 2 ? x * g / y : x * pow(abs(x), p - 2) * g / pow(y, p - 1);
  return {masked_fill(r, eq(y, 0.0), 0)};
}

// ---- views and movement

// view, reshape, squeeze, unsqueeze: the gradient in the input's shape.
Grads d_reshape(const GradCtx &c) { return {c.grad().reshape(c.input_sizes[0])}; }
Grads d_transpose(const GradCtx &c) {
  const attrs::Transpose a{c.attrs};
  return {c.grad().transpose(a.dim0(), a.dim1())};
}
Grads d_permute(const GradCtx &c) {
  const DimList perm = dims_of(attrs::Permute{c.attrs}.dims());
  const int64_t n = int64_t(perm.size());
  DimList inverse(perm.size());
  for (int64_t i = 0; i < n; ++i) inverse[kiln::detail::wrap_dim(perm[i], n, "permute")] = i;
  return {c.grad().permute(inverse)};
}
// slice / select: the gradient written into zeros of the input's shape.
Grads d_slice(const GradCtx &c) {
  const attrs::Slice a{c.attrs};
  Tensor z = zeros(c.input_sizes[0], c.grad().dtype());
  Tensor part = z.slice(a.dim(), a.start(), a.end(), a.step());
  part.copy_(c.grad());
  return {z};
}
Grads d_select(const GradCtx &c) {
  const attrs::Select a{c.attrs};
  Tensor z = zeros(c.input_sizes[0], c.grad().dtype());
  Tensor part = z.select(a.dim(), a.index());
  part.copy_(c.grad());
  return {z};
}
Grads d_split(const GradCtx &c) {
  const attrs::Split a{c.attrs};
  return {cat(c.grads, a.dim())};
}

// ---- contractions

Grads d_mm(const GradCtx &c) {
  return {c.need(0) ? mm(c.grad(), c.in(1).t()) : Tensor(), c.need(1) ? mm(c.in(0).t(), c.grad()) : Tensor()};
}
Grads d_bmm(const GradCtx &c) {
  return {c.need(0) ? bmm(c.grad(), c.in(1).transpose(1, 2)) : Tensor(),
          c.need(1) ? bmm(c.in(0).transpose(1, 2), c.grad()) : Tensor()};
}
// matmul with torch's rank rules: a 1-D operand is a row (a) or a column (b) that
// the result drops; batch dims broadcast (the engine sums them back).
Grads d_matmul(const GradCtx &c) {
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor a2 = a.dim() == 1 ? a.unsqueeze(0) : a;
  Tensor b2 = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor g = c.grad();
  // Back to the rank of the product of a2 and b2: b's column, then a's row.
  if (b.dim() == 1) g = g.unsqueeze(g.dim());
  if (a.dim() == 1) g = g.unsqueeze(g.dim() - 1);
  Grads out(2);
  if (c.need(0)) out[0] = sum_to(matmul(g, b2.transpose(-1, -2)), a2.sizes()).reshape(a.sizes());
  if (c.need(1)) out[1] = sum_to(matmul(a2.transpose(-1, -2), g), b2.sizes()).reshape(b.sizes());
  return out;
}
Grads d_addmm(const GradCtx &c) {
  const attrs::Addmm a{c.attrs};
  const Scalar beta = a.beta(), alpha = a.alpha();
  return {c.need(0) ? c.grad() * beta : Tensor(), c.need(1) ? mm(c.grad(), c.in(2).t()) * alpha : Tensor(),
          c.need(2) ? mm(c.in(1).t(), c.grad()) * alpha : Tensor()};
}
// linear(x, w, b) = x w^T + b over any leading dims of x.
Grads d_linear(const GradCtx &c) {
  const Tensor &x = c.in(0), &w = c.in(1);
  Grads out(3);
  if (c.need(0)) out[0] = matmul(c.grad(), w);
  if (c.need(1)) {
    Tensor g2 = c.grad().reshape({-1, w.size(0)});
    Tensor x2 = x.reshape({-1, w.size(1)});
    out[1] = mm(g2.t(), x2);
  }
  if (c.need(2)) out[2] = c.grad();
  return out;
}

// conv2d(x, w, b): x's gradient is the transposed convolution of g with w (its
// output_padding restores x's size where the stride dropped rows); w's correlates
// x's sliding blocks (im2col) with g, per group; b's sums g over all but channels.
DimList pair_of(IntArrayRef v, int64_t fill) {
  if (v.empty()) return {fill, fill};
  return v.size() == 1 ? DimList{v[0], v[0]} : DimList{v[0], v[1]};
}
Grads d_conv2d(const GradCtx &c) {
  const attrs::Conv2d a{c.attrs};
  const DimList stride = pair_of(a.stride(), 1), padding = pair_of(a.padding(), 0),
                dilation = pair_of(a.dilation(), 1);
  const int64_t groups = a.groups();
  const bool batched = c.input_sizes[0].size() == 4;
  Tensor x = batched ? c.in(0) : c.in(0).unsqueeze(0);
  Tensor g = batched ? c.grad() : c.grad().unsqueeze(0);
  const Tensor &w = c.in(1);
  const int64_t n = x.size(0), cin = x.size(1), cout = w.size(0), kh = w.size(2), kw = w.size(3);
  Grads out(c.inputs.size());
  if (c.need(0)) {
    DimList out_pad(2);
    for (int i = 0; i < 2; ++i) {
      const int64_t k = i == 0 ? kh : kw;
      const int64_t covered = (g.size(2 + i) - 1) * stride[i] - 2 * padding[i] + dilation[i] * (k - 1) + 1;
      out_pad[i] = x.size(2 + i) - covered;
    }
    Tensor gx = conv_transpose2d(g, w, {}, stride, padding, out_pad, groups, dilation);
    out[0] = batched ? gx : gx.squeeze(0);
  }
  if (c.need(1)) {
    const int64_t blocks = g.size(2) * g.size(3);
    Tensor cols = im2col(x, {kh, kw}, dilation, padding, stride)
                      .reshape({n, groups, cin / groups * kh * kw, blocks});
    Tensor gg = g.reshape({n, groups, cout / groups, blocks});
    out[1] = sum(matmul(gg, cols.transpose(-1, -2)), {0}).reshape(c.input_sizes[1]);
  }
  if (c.inputs.size() > 2 && c.need(2)) out[2] = sum(g, {0, 2, 3});
  return out;
}

// ---- normalization and activation composites

Grads d_softmax(const GradCtx &c) {
  const int64_t dim = attrs::Softmax{c.attrs}.dim();
  const Tensor &y = c.out();
  return {y * (c.grad() - sum(c.grad() * y, {dim}, true))};
}
Grads d_log_softmax(const GradCtx &c) {
  const int64_t dim = attrs::LogSoftmax{c.attrs}.dim();
  return {c.grad() - exp(c.out()) * sum(c.grad(), {dim}, true)};
}
// Statistics recomputed from x (torch saves them; kiln's op has one result).
Grads d_layer_norm(const GradCtx &c) {
  const attrs::LayerNorm a{c.attrs};
  const Tensor &x = c.in(0);
  const int64_t k = int64_t(a.normalized_shape().size());
  DimList dims;
  for (int64_t d = x.dim() - k; d < x.dim(); ++d) dims.push_back(d);
  Tensor mu = mean(x, dims, true);
  Tensor rstd = rsqrt(mean(square(x - mu), dims, true) + a.eps());
  Tensor xhat = (x - mu) * rstd;
  const bool has_w = c.inputs.size() > 1 && c.in(1).defined();
  Tensor gx_hat = has_w ? c.grad() * c.in(1) : c.grad();
  Grads out(c.inputs.size());
  if (c.need(0))
    out[0] = rstd * (gx_hat - mean(gx_hat, dims, true) - xhat * mean(gx_hat * xhat, dims, true));
  if (c.need(1)) out[1] = c.grad() * xhat;
  if (c.need(2)) out[2] = c.grad();
  return out;
}
// batch_norm over dim 1: the batch statistics' formula in training mode, the
// running ones' (constants) otherwise. Running statistics take no gradient.
Grads d_batch_norm(const GradCtx &c) {
  const attrs::BatchNorm a{c.attrs};
  const Tensor &x = c.in(0);
  auto input = [&](size_t i) { return c.inputs.size() > i ? c.in(i) : Tensor(); };
  const Tensor w = input(1), rm = input(3), rv = input(4);
  DimList dims{0}, channel(size_t(x.dim()), 1);
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  channel[1] = x.size(1);
  auto per_channel = [&](const Tensor &t) { return t.reshape(channel); };
  Tensor mu, rstd;
  if (a.training() || !rm.defined()) {
    mu = mean(x, dims, true);
    rstd = rsqrt(mean(square(x - mu), dims, true) + a.eps());
  } else {
    mu = per_channel(rm);
    rstd = rsqrt(per_channel(rv) + a.eps());
  }
  Tensor xhat = (x - mu) * rstd;
  Tensor gx_hat = w.defined() ? c.grad() * per_channel(w) : c.grad();
  Grads out(c.inputs.size());
  if (c.need(0)) {
    if (a.training() || !rm.defined())
      out[0] = rstd * (gx_hat - mean(gx_hat, dims, true) - xhat * mean(gx_hat * xhat, dims, true));
    else
      out[0] = gx_hat * rstd;
  }
  if (c.need(1)) out[1] = sum(c.grad() * xhat, dims).reshape(c.input_sizes[1]);
  if (c.need(2)) out[2] = sum(c.grad(), dims).reshape(c.input_sizes[2]);
  return out;
}
// Only evaluation-mode dropout records a Dropout node: training mode records
// its mask (not differentiable) and the product, whose formula applies.
Grads d_dropout(const GradCtx &c) {
  const attrs::Dropout a{c.attrs};
  KILN_CHECK(!a.train() || a.p() == 0.0, "internal: DropoutBackward0 of a training-mode dropout");
  return {c.grad()};
}

// ---- structured ops

Grads d_tril(const GradCtx &c) { return {tril(c.grad(), attrs::Tril{c.attrs}.diagonal())}; }
Grads d_triu(const GradCtx &c) { return {triu(c.grad(), attrs::Triu{c.attrs}.diagonal())}; }
Grads d_cat(const GradCtx &c) {
  const int64_t dim = attrs::Cat{c.attrs}.dim();
  Grads out(c.input_sizes.size());
  // torch's legacy rule: 1-D empty inputs take no part.
  int64_t rank = 0;
  for (const Dims &s : c.input_sizes)
    if (!(s.size() == 1 && s[0] == 0)) rank = int64_t(s.size());
  const int64_t d = kiln::detail::wrap_dim(dim, std::max<int64_t>(rank, 1), "cat");
  int64_t offset = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const Dims &s = c.input_sizes[i];
    if (s.size() == 1 && s[0] == 0 && rank != 1) continue;
    if (c.need(i)) out[i] = c.grad().narrow(d, offset, s[d]);
    offset += s[d];
  }
  return out;
}
Grads d_stack(const GradCtx &c) {
  const int64_t n = int64_t(c.input_sizes.at(0).size()) + 1;
  const int64_t d = kiln::detail::wrap_dim(attrs::Stack{c.attrs}.dim(), n, "stack");
  Grads out(c.input_sizes.size());
  for (size_t i = 0; i < out.size(); ++i)
    if (c.need(i)) out[i] = c.grad().select(d, int64_t(i));
  return out;
}
Grads d_index_select(const GradCtx &c) {
  const int64_t dim = attrs::IndexSelect{c.attrs}.dim();
  return {index_add(zeros(c.input_sizes[0], c.grad().dtype()), dim, c.in(1), c.grad()), Tensor()};
}
Grads d_gather(const GradCtx &c) {
  const int64_t dim = attrs::Gather{c.attrs}.dim();
  return {scatter_add(zeros(c.input_sizes[0], c.grad().dtype()), dim, c.in(1), c.grad()), Tensor()};
}
// embedding(weight, indices): each looked-up row's gradient added into its row.
Grads d_embedding(const GradCtx &c) {
  const Dims &ws = c.input_sizes[0];
  Tensor g = c.grad().reshape({-1, ws[1]});
  return {index_add(zeros(ws, c.grad().dtype()), 0, c.in(1).reshape({-1}), g), Tensor()};
}
Grads d_cumsum(const GradCtx &c) {
  const int64_t dim = attrs::Cumsum{c.attrs}.dim();
  if (c.grad().dim() == 0) return {c.grad()};
  return {flip(cumsum(flip(c.grad(), {dim}), dim), {dim})};
}
// Scans along one dim of length n, as [..., n] rows: the gradient of element i sums
// g_j d y_j / d x_i over j >= i, through an [..., n, n] matrix (exact where
// dividing by x_i or subtracting exponents would not be; n^2 memory per row).
Tensor upper_mask(int64_t n, DType dtype) { return to(triu(ones({n, n})), dtype); }
// cumprod: d y_j / d x_i = prod_{k <= j, k != i} x_k, the cumulative product of row
// i of a matrix holding x with x_i replaced by 1 (zeros need no special case).
Grads d_cumprod(const GradCtx &c) {
  const Tensor &x = c.in(0);
  if (x.dim() == 0) return {c.grad()};
  const int64_t dim = kiln::detail::wrap_dim(attrs::Cumprod{c.attrs}.dim(), x.dim(), "cumprod");
  const int64_t n = x.size(dim);
  if (n == 0) return {zeros_like(x)};
  Tensor xr = movedim(x, {dim}, {-1}), gr = movedim(c.grad(), {dim}, {-1});
  DimList square_shape = xr.sizes().vec();
  square_shape.insert(square_shape.end() - 1, n);
  Tensor rows = where(to(eye(n), kBool), 1.0, xr.unsqueeze(-2).expand(square_shape));
  Tensor partial = cumprod(rows, -1) * upper_mask(n, x.dtype());
  return {movedim(sum(partial * gr.unsqueeze(-2), {-1}), {-1}, {dim})};
}
// logcumsumexp: d y_j / d x_i = exp(x_i - y_j) for j >= i, never above 1 there.
Grads d_logcumsumexp(const GradCtx &c) {
  const Tensor &x = c.in(0);
  if (x.dim() == 0) return {c.grad()};
  const int64_t dim = kiln::detail::wrap_dim(attrs::Logcumsumexp{c.attrs}.dim(), x.dim(), "logcumsumexp");
  const int64_t n = x.size(dim);
  if (n == 0) return {zeros_like(x)};
  Tensor xr = movedim(x, {dim}, {-1}), yr = movedim(c.out(), {dim}, {-1}), gr = movedim(c.grad(), {dim}, {-1});
  const double inf = std::numeric_limits<double>::infinity();
  Tensor diff = masked_fill(xr.unsqueeze(-1) - yr.unsqueeze(-2), logical_not(to(upper_mask(n, kFloat32), kBool)), -inf);
  return {movedim(sum(exp(diff) * gr.unsqueeze(-2), {-1}), {-1}, {dim})};
}
// as_strided reads storage positions: each result element's gradient is added at its
// position, and each input element collects the sum at its own (overlaps add up).
Tensor storage_positions(IntArrayRef sizes, IntArrayRef strides, int64_t offset) {
  Tensor pos = full({}, offset, kInt64);
  for (size_t d = 0; d < sizes.size(); ++d) {
    DimList shape(sizes.size(), 1);
    shape[d] = sizes[d];
    pos = pos + (arange(0, sizes[d], 1, kInt64) * strides[d]).reshape(shape);
  }
  return pos.expand(sizes).reshape({-1});
}
Grads d_as_strided(const GradCtx &c) {
  const attrs::AsStrided a{c.attrs};
  const Tensor &x = c.in(0);
  const int64_t offset = a.storage_offset().value_or(x.storage_offset());
  Tensor out_pos = storage_positions(a.size(), a.stride(), offset);
  Tensor in_pos = storage_positions(x.sizes(), x.strides(), x.storage_offset());
  int64_t extent = 1;
  {
    NoGradGuard off;
    if (out_pos.numel() > 0) extent = std::max(extent, amax(out_pos).item<int64_t>() + 1);
    if (in_pos.numel() > 0) extent = std::max(extent, amax(in_pos).item<int64_t>() + 1);
  }
  Tensor flat = index_add(zeros({extent}, c.grad().dtype()), 0, out_pos, c.grad().reshape({-1}));
  return {index_select(flat, 0, in_pos).reshape(x.sizes())};
}

// sort / topk: each value's gradient goes back to the position it came from.
Grads d_sort(const GradCtx &c) {
  const Tensor &x = c.in(0);
  if (x.dim() == 0) return {c.grad()};
  return {scatter(zeros(x.sizes(), c.grad().dtype()), attrs::Sort{c.attrs}.dim(), c.out(1), c.grad())};
}
Grads d_topk(const GradCtx &c) {
  const Dims &s = c.input_sizes[0];
  if (s.empty()) return {c.grad()};
  return {scatter(zeros(s, c.grad().dtype()), attrs::Topk{c.attrs}.dim(), c.out(1), c.grad())};
}
Grads d_scatter(const GradCtx &c) {
  const int64_t dim = attrs::Scatter{c.attrs}.dim();
  const Tensor &index = c.in(1);
  return {c.need(0) ? scatter(c.grad(), dim, index, 0.0) : Tensor(), Tensor(),
          c.need(2) ? gather(c.grad(), dim, index) : Tensor()};
}
// scatter_reduce: out[j] reduces the candidates of position j (self[j] when
// include_self, and every src element scattered to j); a position nothing is
// scattered to keeps self[j] (gradient 1). Without include_self, self's
// targeted positions get no gradient.
Grads d_scatter_reduce(const GradCtx &c) {
  const attrs::ScatterReduce a{c.attrs};
  const int64_t dim = a.dim();
  const Tensor &index = c.in(1), &g = c.grad();
  const std::string &reduce = a.reduce();
  Tensor gs, gsrc;
  if (reduce == "sum") {
    gs = g;
    gsrc = gather(g, dim, index);
  } else if (reduce == "mean") {
    // N[j]: the candidates of position j (at least 1: untargeted ones keep self).
    Tensor n = scatter_add(a.include_self() ? ones_like(g) : zeros_like(g), dim, index, ones_like(c.in(2), TensorOptions().dtype(g.dtype())));
    Tensor gn = g / where(eq(n, 0.0), 1.0, n);
    gs = gn;
    gsrc = gather(gn, dim, index);
  } else if (reduce == "amax" || reduce == "amin") {
    // The gradient is shared evenly by the candidates equal to the result.
    const Tensor &out = c.out(0);
    Tensor self_is = to(eq(c.in(0), out), g.dtype());
    if (!a.include_self()) self_is = scatter(self_is, dim, index, 0.0);
    Tensor src_is = to(eq(c.in(2), gather(out, dim, index)), g.dtype());
    Tensor share = g / scatter_add(self_is, dim, index, src_is);
    gs = self_is * share;
    gsrc = src_is * gather(share, dim, index);
  } else {
    KILN_CHECK(reduce == "prod", "internal: ScatterReduceBackward0 of reduce=\"", reduce, "\"");
    // The product of the other candidates, zeros included: with z zeros among
    // a position's candidates and p the product of its nonzero ones, a zero
    // candidate's is p when z == 1 (else 0), a nonzero x's is p / x when z == 0.
    const Tensor &self = c.in(0), &src = c.in(2);
    Tensor self_zero = eq(self, 0.0), src_zero = eq(src, 0.0);
    Tensor base = a.include_self() ? where(self_zero, 1.0, self) : ones_like(self);
    Tensor p = scatter_reduce(base, dim, index, where(src_zero, 1.0, src), "prod", true);
    Tensor z = scatter_add(a.include_self() ? to(self_zero, g.dtype()) : zeros_like(g), dim, index,
                           to(src_zero, g.dtype()));
    auto others = [](const Tensor &x, const Tensor &x_zero, const Tensor &p, const Tensor &z) {
      return where(x_zero, where(eq(z, 1.0), p, 0.0), where(eq(z, 0.0), p / where(x_zero, 1.0, x), 0.0));
    };
    gs = a.include_self() ? g * others(self, self_zero, p, z) : g;
    gsrc = gather(g, dim, index) * others(src, src_zero, gather(p, dim, index), gather(z, dim, index));
  }
  if (c.need(0) && !a.include_self()) gs = scatter(gs, dim, index, 0.0);
  return {c.need(0) ? gs : Tensor(), Tensor(), c.need(2) ? gsrc : Tensor()};
}
Grads d_index_add(const GradCtx &c) {
  const attrs::IndexAdd a{c.attrs};
  Tensor gs;
  if (c.need(2)) {
    gs = c.input_sizes[2].empty() ? c.grad().index_select(a.dim(), c.in(1)).reshape({}) :
                                    c.grad().index_select(a.dim(), c.in(1));
    gs = gs * a.alpha();
  }
  return {c.grad(), Tensor(), gs};
}
// index(self, idx...): the gradient accumulated back into zeros of self's shape.
Grads d_index(const GradCtx &c) {
  const attrs::Index a{c.attrs};
  std::vector<Tensor> in{zeros(c.input_sizes[0], c.grad().dtype()), c.grad()};
  in.insert(in.end(), c.inputs.begin() + 1, c.inputs.end());
  Grads out(c.inputs.size());
  out[0] = run_op(OpId::IndexPut, in, attrs::IndexPutArgs{.dims = a.dims(), .accumulate = true}.to_attrs())
               .at(0);
  return out;
}
// index_put(self, values, idx...): self's gradient where it was not overwritten;
// values' is the gradient read at the written positions.
Grads d_index_put(const GradCtx &c) {
  const attrs::IndexPut a{c.attrs};
  std::vector<Tensor> idx(c.inputs.begin() + 2, c.inputs.end());
  Grads out(c.inputs.size());
  if (c.need(0)) {
    if (a.accumulate()) {
      out[0] = c.grad();
    } else {
      std::vector<Tensor> in{c.grad(), zeros({}, c.grad().dtype())};
      in.insert(in.end(), idx.begin(), idx.end());
      out[0] = run_op(OpId::IndexPut, in, attrs::IndexPutArgs{.dims = a.dims(), .accumulate = false}.to_attrs())
                   .at(0);
    }
  }
  if (c.need(1)) {
    std::vector<Tensor> in{c.grad()};
    in.insert(in.end(), idx.begin(), idx.end());
    out[1] = run_op(OpId::Index, in, attrs::IndexArgs{.dims = a.dims()}.to_attrs()).at(0);
  }
  return out;
}
// max_pool2d: the gradient goes to each window's chosen element (indices into
// the input plane's H * W, as torch's).
Tensor pool_scatter(const Tensor &g, const Tensor &indices, IntArrayRef in_sizes) {
  Tensor gf = g.flatten(-2), idx = indices.flatten(-2);
  DimList plane(in_sizes.begin(), in_sizes.end() - 2);
  plane.push_back(in_sizes[in_sizes.size() - 2] * in_sizes.back());
  return scatter_add(zeros(plane, g.dtype()), -1, idx, gf).reshape(in_sizes);
}
Grads d_max_pool2d_with_indices(const GradCtx &c) { return {pool_scatter(c.grad(), c.out(1), c.input_sizes[0])}; }
Grads d_max_pool2d(const GradCtx &c) {
  const attrs::MaxPool2d a{c.attrs};
  Tensor indices;
  {
    NoGradGuard off;
    indices = std::get<1>(max_pool2d_with_indices(c.in(0), a.kernel_size(), a.stride(), a.padding(), a.dilation(),
                                                  a.ceil_mode()));
  }
  return {pool_scatter(c.grad(), indices, c.input_sizes[0])};
}

// Average pools are separable: y = A_h x A_w^T per plane, with A [out, in] holding
// 1/divisor over each window; so x's gradient is A_h^T g A_w.
Tensor pool_matrix(int64_t out, int64_t in, const std::function<void(int64_t, int64_t &, int64_t &, double &)> &window,
                   DType dtype) {
  std::vector<double> a(size_t(out * in), 0.0);
  for (int64_t i = 0; i < out; ++i) {
    int64_t lo = 0, hi = 0;
    double div = 1;
    window(i, lo, hi, div);
    for (int64_t j = std::max<int64_t>(lo, 0); j < std::min(hi, in); ++j) a[size_t(i * in + j)] = 1.0 / div;
  }
  return to(tensor(a).reshape({out, in}), dtype);
}
Tensor separable_pool_grad(const Tensor &g, const Tensor &ah, const Tensor &aw) {
  return matmul(matmul(ah.t(), g), aw);
}
// torch's avg_pool2d windows: [o s - p, o s - p + k) clipped to the padded input for the
// count_include_pad divisor, to the input for the other.
Grads d_avg_pool2d(const GradCtx &c) {
  const attrs::AvgPool2d a{c.attrs};
  const Dims &xs = c.input_sizes[0];
  const DimList k = pair_of(a.kernel_size(), 1), p = pair_of(a.padding(), 0);
  const DimList st = a.stride().empty() ? k : pair_of(a.stride(), 1);
  const Tensor &g = c.grad();
  Tensor m[2];
  for (int d = 0; d < 2; ++d) {
    const int64_t in = xs[xs.size() - 2 + size_t(d)], out = g.size(g.dim() - 2 + d);
    m[d] = pool_matrix(out, in, [&](int64_t o, int64_t &lo, int64_t &hi, double &div) {
      lo = o * st[d] - p[d];
      hi = std::min(lo + k[d], in + p[d]);
      div = a.count_include_pad() ? double(hi - lo) : double(std::min(hi, in) - std::max<int64_t>(lo, 0));
    }, g.dtype());
  }
  return {separable_pool_grad(g, m[0], m[1])};
}
// adaptive windows: [floor(o in / out), ceil((o + 1) in / out)).
Grads d_adaptive_avg_pool2d(const GradCtx &c) {
  const Dims &xs = c.input_sizes[0];
  const Tensor &g = c.grad();
  Tensor m[2];
  for (int d = 0; d < 2; ++d) {
    const int64_t in = xs[xs.size() - 2 + size_t(d)], out = g.size(g.dim() - 2 + d);
    m[d] = pool_matrix(out, in, [&](int64_t o, int64_t &lo, int64_t &hi, double &div) {
      lo = o * in / out;
      hi = ((o + 1) * in + out - 1) / out;
      div = double(hi - lo);
    }, g.dtype());
  }
  return {separable_pool_grad(g, m[0], m[1])};
}

// scaled_dot_product_attention, recomputed: S = q k^T scale (+ mask), P = softmax(S);
// dv = P^T g, dS = P (dP - rowsum(dP P)) with dP = g v^T, dq = dS k scale,
// dk = dS^T q scale; a float mask's gradient is dS.
Grads d_sdpa(const GradCtx &c) {
  const attrs::Sdpa a{c.attrs};
  KILN_CHECK(a.dropout_p() == 0.0, "ScaledDotProductAttentionBackward0: dropout_p must be 0");
  const Tensor &q = c.in(0), &k = c.in(1), &v = c.in(2);
  const Tensor mask = c.inputs.size() > 3 ? c.in(3) : Tensor();
  const double scale = a.scale() ? *a.scale() : 1.0 / std::sqrt(double(q.size(-1)));
  Tensor scores = matmul(q, k.transpose(-1, -2)) * scale;
  const double inf = std::numeric_limits<double>::infinity();
  if (a.is_causal()) {
    Tensor keep = to(tril(ones({q.size(-2), k.size(-2)})), kBool);
    scores = masked_fill(scores, logical_not(keep), -inf);
  } else if (mask.defined()) {
    scores = mask.dtype() == kBool ? masked_fill(scores, logical_not(mask), -inf) : scores + mask;
  }
  Tensor pr = softmax(scores, -1);
  const Tensor &g = c.grad();
  Tensor dp = matmul(g, v.transpose(-1, -2));
  Tensor ds = pr * (dp - sum(dp * pr, {-1}, true));
  Grads out(c.inputs.size());
  if (c.need(0)) out[0] = matmul(ds, k) * scale;
  if (c.need(1)) out[1] = matmul(ds.transpose(-1, -2), q) * scale;
  if (c.need(2)) out[2] = matmul(pr.transpose(-1, -2), g);
  if (c.need(3)) out[3] = ds;
  return out;
}

Derivative formula(Formula f, unsigned saves_inputs = 0, bool saves_outputs = false) {
  return {GradKind::Formula, f, saves_inputs, saves_outputs};
}
constexpr unsigned kIn0 = 1u, kIn1 = 2u, kIn2 = 4u;

// The decision for each op. No default: a new op in ops.def stops the build here
// until it has a formula, NoGrad, or an explicit NotImplemented.
Derivative make_derivative(OpId id) {
  const Derivative not_differentiable{GradKind::NotDifferentiable, nullptr, 0, false};
  const Derivative not_implemented{GradKind::NotImplemented, nullptr, 0, false};
  switch (id) {
  case OpId::Neg: return formula(d_neg);
  case OpId::Abs: return formula(d_abs, kIn0);
  case OpId::Exp: return formula(d_exp, 0, true);
  case OpId::Exp2: return formula(d_exp2, 0, true);
  case OpId::Log: return formula(d_log, kIn0);
  case OpId::Log1p: return formula(d_log1p, kIn0);
  case OpId::Expm1: return formula(d_expm1, 0, true);
  case OpId::Sqrt: return formula(d_sqrt, 0, true);
  case OpId::Rsqrt: return formula(d_rsqrt, 0, true);
  case OpId::Sin: return formula(d_sin, kIn0);
  case OpId::Cos: return formula(d_cos, kIn0);
  case OpId::Tan: return formula(d_tan, 0, true);
  case OpId::Asin: return formula(d_asin, kIn0);
  case OpId::Acos: return formula(d_acos, kIn0);
  case OpId::Atan: return formula(d_atan, kIn0);
  case OpId::Sinh: return formula(d_sinh, kIn0);
  case OpId::Cosh: return formula(d_cosh, kIn0);
  case OpId::Asinh: return formula(d_asinh, kIn0);
  case OpId::Acosh: return formula(d_acosh, kIn0);
  case OpId::Atanh: return formula(d_atanh, kIn0);
  case OpId::Log2: return formula(d_log2, kIn0);
  case OpId::Log10: return formula(d_log10, kIn0);
  case OpId::Tanh: return formula(d_tanh, 0, true);
  case OpId::Sigmoid: return formula(d_sigmoid, 0, true);
  case OpId::Relu: return formula(d_relu, 0, true);
  case OpId::Gelu: return formula(d_gelu, kIn0);
  case OpId::Silu: return formula(d_silu, kIn0);
  case OpId::Hardsigmoid: return formula(d_hardsigmoid, kIn0);
  case OpId::Softsign: return formula(d_softsign, kIn0);
  case OpId::Hardswish: return formula(d_hardswish, kIn0);
  case OpId::Mish: return formula(d_mish, kIn0);
  case OpId::LogSigmoid: return formula(d_log_sigmoid, kIn0);
  case OpId::Selu: return formula(d_selu, kIn0);
  case OpId::Erf: return formula(d_erf, kIn0);
  case OpId::Reciprocal: return formula(d_reciprocal, 0, true);
  case OpId::Square: return formula(d_square, kIn0);
  case OpId::Floor:
  case OpId::Ceil:
  case OpId::Round:
  case OpId::Sign: return formula(d_zero);
  case OpId::LogicalNot: return not_differentiable;
  case OpId::Cast: return formula(d_identity);
  case OpId::Add: return formula(d_add);
  case OpId::Sub: return formula(d_sub);
  case OpId::Mul: return formula(d_mul, kIn0 | kIn1);
  case OpId::Div: return formula(d_div, kIn0 | kIn1);
  case OpId::Pow: return formula(d_pow, kIn0 | kIn1, true);
  case OpId::Maximum: return formula(d_maximum, kIn0 | kIn1);
  case OpId::Minimum: return formula(d_minimum, kIn0 | kIn1);
  case OpId::Remainder: return formula(d_remainder, kIn0 | kIn1);
  case OpId::Atan2: return formula(d_atan2, kIn0 | kIn1);
  case OpId::Hypot: return formula(d_hypot, kIn0 | kIn1, true);
  case OpId::Fmod: return formula(d_fmod, kIn0 | kIn1);
  case OpId::Copysign: return formula(d_copysign, kIn0, true);
  case OpId::Eq:
  case OpId::Ne:
  case OpId::Lt:
  case OpId::Le:
  case OpId::Gt:
  case OpId::Ge:
  case OpId::LogicalAnd:
  case OpId::LogicalOr: return not_differentiable;
  case OpId::Where: return formula(d_where, kIn0);
  case OpId::Clamp: return formula(d_clamp, kIn0);
  case OpId::MaskedFill: return formula(d_masked_fill, kIn1);
  case OpId::Lerp: return formula(d_lerp, kIn0 | kIn1 | kIn2);
  case OpId::Sum: return formula(d_sum);
  case OpId::Mean: return formula(d_mean);
  case OpId::Prod: return formula(d_prod, kIn0);
  case OpId::Amax: return formula(d_amax, kIn0, true);
  case OpId::Amin: return formula(d_amin, kIn0, true);
  case OpId::MaxDim: return formula(d_max_dim, kIn0, true);
  case OpId::MinDim: return formula(d_min_dim, kIn0, true);
  case OpId::Argmax:
  case OpId::Argmin: return not_differentiable;
  case OpId::Var: return formula(d_var, kIn0);
  case OpId::Std: return formula(d_std, kIn0, true);
  case OpId::Norm: return formula(d_norm, kIn0, true);
  case OpId::View:
  case OpId::Reshape: return formula(d_reshape);
  case OpId::Transpose: return formula(d_transpose);
  case OpId::Permute: return formula(d_permute);
  case OpId::Slice: return formula(d_slice);
  case OpId::Select: return formula(d_select);
  case OpId::Unsqueeze:
  case OpId::Squeeze: return formula(d_reshape);
  case OpId::Expand: return formula(d_identity); // the engine sums back to the input's shape
  case OpId::AsStrided: return formula(d_as_strided, kIn0);
  case OpId::Contiguous:
  case OpId::Clone: return formula(d_identity);
  case OpId::Copy: return formula(d_copy);
  case OpId::Mm: return formula(d_mm, kIn0 | kIn1);
  case OpId::Bmm: return formula(d_bmm, kIn0 | kIn1);
  case OpId::Matmul: return formula(d_matmul, kIn0 | kIn1);
  case OpId::Addmm: return formula(d_addmm, kIn1 | kIn2);
  case OpId::Linear: return formula(d_linear, kIn0 | kIn1);
  case OpId::Conv2d: return formula(d_conv2d, kIn0 | kIn1);
  case OpId::Softmax: return formula(d_softmax, 0, true);
  case OpId::LogSoftmax: return formula(d_log_softmax, 0, true);
  case OpId::LayerNorm: return formula(d_layer_norm, kIn0 | kIn1);
  case OpId::BatchNorm: return formula(d_batch_norm, kAllInputs);
  case OpId::Dropout: return formula(d_dropout);
  case OpId::Sdpa: return formula(d_sdpa, kAllInputs);
  case OpId::MaxPool2d: return formula(d_max_pool2d, kIn0);
  case OpId::MaxPool2dWithIndices: return formula(d_max_pool2d_with_indices, 0, true);
  case OpId::AvgPool2d: return formula(d_avg_pool2d);
  case OpId::AdaptiveAvgPool2d: return formula(d_adaptive_avg_pool2d);
  case OpId::Embedding: return formula(d_embedding, kIn1);
  case OpId::Tril: return formula(d_tril);
  case OpId::Triu: return formula(d_triu);
  case OpId::Cat: return formula(d_cat);
  case OpId::Stack: return formula(d_stack);
  case OpId::Split: return formula(d_split);
  case OpId::IndexSelect: return formula(d_index_select, kIn1);
  case OpId::Gather: return formula(d_gather, kIn1);
  case OpId::Cumsum: return formula(d_cumsum);
  case OpId::Cumprod: return formula(d_cumprod, kIn0);
  case OpId::Logcumsumexp: return formula(d_logcumsumexp, kIn0, true);
  case OpId::Sort: return formula(d_sort, kIn0, true);
  case OpId::Topk: return formula(d_topk, 0, true);
  case OpId::Scatter: return formula(d_scatter, kIn1);
  case OpId::ScatterReduce: return formula(d_scatter_reduce, kAllInputs, true);
  case OpId::IndexAdd: return formula(d_index_add, kIn1);
  case OpId::Index: return formula(d_index, kAllInputs & ~kIn0);
  case OpId::IndexPut: return formula(d_index_put, kAllInputs & ~(kIn0 | kIn1));
  case OpId::DropoutMask:
  case OpId::Full:
  case OpId::Arange:
  case OpId::Linspace:
  case OpId::Eye:
  case OpId::SymNumel: return not_differentiable;
  }
  return not_implemented;
}

struct Table {
  Derivative by_op[kNumOps];
  Table() {
    for (size_t i = 0; i < kNumOps; ++i) by_op[i] = make_derivative(OpId(i));
  }
};

} // namespace

const Derivative &derivative(OpId id) {
  static const Table table;
  return table.by_op[size_t(id)];
}

} // namespace kiln::autograd::detail
