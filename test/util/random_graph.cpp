#include "util/random_graph.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>

#include "ir/graph.h"
#include "ir/printer.h"

namespace kiln::testing {

uint64_t Chooser::below(uint64_t n) {
  if (n <= 1) return 0;
  if (!from_bytes_) return gen_() % n;
  // Enough bytes for n (one for n <= 256, two beyond), so that a fuzzer's single
  // byte edit changes a single choice.
  uint64_t v = 0;
  int need = n <= 256 ? 1 : 2;
  for (int i = 0; i < need; ++i) {
    v <<= 8;
    if (pos_ < bytes_.size()) v |= bytes_[pos_++];
  }
  return v % n;
}

namespace {

using Shape = std::vector<int64_t>;

int64_t numel_of(const Shape &s) { return std::accumulate(s.begin(), s.end(), int64_t(1), std::multiplies<>()); }

// The broadcast of a and b, or nothing when they do not broadcast.
std::optional<Shape> broadcast(const Shape &a, const Shape &b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return std::nullopt;
    out[i] = std::max(da, db);
  }
  return out;
}

struct Val {
  Tensor t;
  double bound; // |element| <= bound (roughly: a guide for squashing, not a proof)
};

// Runs the chosen ops on the given inputs. Every choice reads only the chooser
// and shapes, so eager and traced runs choose the same ops.
class Builder {
public:
  Builder(Chooser c, const RandomGraphOptions &o) : c_(std::move(c)), o_(o) {}

  std::vector<Tensor> run(const std::vector<Tensor> &inputs) {
    for (const Tensor &t : inputs) pool_.push_back({t, 2.0});
    num_inputs_ = pool_.size();
    int ops = 1 + int(c_.below(uint64_t(o_.max_ops)));
    for (int i = 0; i < ops; ++i) step();
    std::vector<Tensor> outs = {pool_.back().t};
    size_t made = pool_.size() - num_inputs_;
    if (made > 1 && c_.chance(40)) outs.push_back(pool_[num_inputs_ + c_.below(made - 1)].t);
    return outs;
  }

private:
  Chooser c_;
  const RandomGraphOptions &o_;
  std::vector<Val> pool_;
  size_t num_inputs_ = 0;

  Shape shape(const Val &v) const { return v.t.sizes().vec(); }
  int64_t pick_dim(const Tensor &t) { return int64_t(c_.below(uint64_t(t.dim()))); }

  // Mostly one of the newest values (deep chains), sometimes any.
  Val pick() {
    if (c_.chance(70)) return pool_[pool_.size() - 1 - c_.below(std::min<size_t>(pool_.size(), 3))];
    return pool_[c_.below(pool_.size())];
  }

  void push(Tensor t, double bound) {
    Val v{std::move(t), bound};
    if (v.bound > 8) v = squash(v);
    pool_.push_back(std::move(v));
  }

  Val squash(const Val &v) {
    if (c_.chance(50)) return {tanh(v.t), 1.0};
    return {v.t * (1.0 / v.bound), 1.0};
  }

  // A parameter (a captured real tensor): the same values on every call.
  Tensor param(const Shape &s) {
    Tensor t = detail::make_tensor(s, kFloat32);
    std::mt19937_64 gen(c_.below(uint64_t(1) << 32));
    std::uniform_real_distribution<float> dist(-1, 1);
    float *p = static_cast<float *>(t.raw_data());
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
    return o_.dtype == kFloat32 ? t : t.to(o_.dtype);
  }

  // A shape that broadcasts against s: leading dims dropped, some dims 1.
  Shape broadcast_variant(const Shape &s) {
    size_t drop = s.empty() ? 0 : size_t(c_.below(s.size()));
    Shape out(s.begin() + long(drop), s.end());
    for (int64_t &d : out)
      if (c_.chance(30)) d = 1;
    return out;
  }

  void step() {
    if (o_.contractions && c_.chance(45)) return contract_sized();
    switch (c_.below(12)) {
    case 0:
    case 1:
    case 2: return unary();
    case 3:
    case 4:
    case 5: return binary();
    case 6: return reduce();
    case 7: return normalize();
    case 8: return contract();
    case 11: return attention(); // was a view: the other choices of existing seeds stay as they were
    default: return view();
    }
  }

  void unary() {
    if (o_.scan_ops && c_.chance(40)) return scan_unary();
    if (o_.extended_ops && c_.chance(60)) return extended_unary();
    Val a = pick();
    const Tensor &x = a.t;
    switch (c_.below(12)) {
    case 0: return push(relu(x), a.bound);
    case 1: return push(gelu(x), a.bound);
    case 2: return push(gelu(x, "tanh"), a.bound);
    case 3: return push(tanh(x), 1);
    case 4: return push(sigmoid(x), 1);
    case 5: return push(neg(x), a.bound);
    case 6: return push(abs(x), a.bound);
    case 7: return push(silu(x), a.bound);
    case 8: return push(erf(x), 1);
    case 9: return push(x * 0.75 + 0.5, a.bound + 0.5);
    case 10: return push(sub(x, 1.5, 2), a.bound + 3);
    default:
      if (a.bound > 3) return push(exp(tanh(x)), std::exp(1.0));
      return push(exp(x), std::exp(a.bound));
    }
  }

  // The newer elementwise ops, with their inputs kept in their domains (tanh, abs + 1)
  // so that NaN stays the exception it is in a model.
  void extended_unary() {
    Val a = pick();
    const Tensor &x = a.t;
    const double b = a.bound;
    switch (c_.below(24)) {
    case 0: return push(sin(x), 1);
    case 1: return push(cos(x), 1);
    case 2: return push(tan(tanh(x)), 1.6);
    case 3: return push(asin(tanh(x)), 1.6);
    case 4: return push(acos(tanh(x)), 3.2);
    case 5: return push(atan(x), 1.6);
    case 6: return push(sinh(tanh(x)), 1.2);
    case 7: return push(cosh(tanh(x)), 1.6);
    case 8: return push(asinh(x), b);
    case 9: return push(acosh(abs(x) + 1.0), b + 1);
    case 10: return push(atanh(tanh(x) * 0.9), 1.5);
    case 11: return push(log2(abs(x) + 0.5), b + 1);
    case 12: return push(log10(abs(x) + 0.5), b + 1);
    case 13: return push(hardswish(x), b);
    case 14: return push(mish(x), b);
    case 15: return push(log_sigmoid(x), b + 1);
    case 16: return push(selu(x), 1.06 * b + 1.76);
    case 17: return push(leaky_relu(x, 0.2), b);
    case 18: return push(elu(x, 0.5), std::max(b, 0.5));
    case 19: return push(softplus(x, 2.0, 3.0), b + 1);
    case 20: return push(hardtanh(x, -0.5, 0.75), 1);
    case 21: return push(nan_to_num(logit(sigmoid(x), 1e-3)), 7);
    case 22: return push(where(isfinite(x), x, 0.0), b);
    default:
      if (x.dim() == 0) return push(relu6(x), std::min(b, 6.0));
      return push(logsumexp(x, {x.dim() - 1}, true), b + std::log(double(x.size(-1)) + 1));
    }
  }

  // Scans and sorts (eager steps inside compiled code) and the rounding composites.
  void scan_unary() {
    Val a = pick();
    const Tensor &x = a.t;
    const double b = a.bound;
    if (x.dim() == 0 || x.numel() == 0) return push(trunc(x * 2.0), 2 * b);
    const int64_t d = pick_dim(x);
    const double n = double(x.size(d));
    switch (c_.below(7)) {
    case 0: return push(cumsum(x, d), b * n);
    case 1: return push(cumprod(tanh(x), d), 1);
    case 2: return push(logcumsumexp(x, d), b + std::log(n) + 1);
    case 3: return push(std::get<0>(sort(x, d, c_.chance(50))), b);
    case 4: {
      const int64_t k = 1 + int64_t(c_.below(uint64_t(x.size(d))));
      return push(std::get<0>(topk(x, k, d, c_.chance(50))), b);
    }
    case 5: return push(trunc(x * 2.0), 2 * b);
    default: return push(frac(x), 1);
    }
  }

  void binary() {
    Val a = pick();
    Shape sa = shape(a);
    Val b;
    std::vector<size_t> partners;
    for (size_t i = 0; i < pool_.size(); ++i) {
      auto out = broadcast(sa, shape(pool_[i]));
      if (out && numel_of(*out) <= o_.max_numel) partners.push_back(i);
    }
    if (!partners.empty() && c_.chance(60)) {
      b = pool_[partners[c_.below(partners.size())]];
    } else {
      b = {param(broadcast_variant(sa)), 1.0};
    }
    if (c_.chance(50)) std::swap(a, b);
    if (o_.scan_ops && c_.chance(30)) return libm_binary(a, b);
    switch (c_.below(7)) {
    case 0: return push(add(a.t, b.t), a.bound + b.bound);
    case 1: return push(add(a.t, b.t, -0.5), a.bound + 0.5 * b.bound);
    case 2: return push(sub(a.t, b.t), a.bound + b.bound);
    case 3: return push(mul(a.t, b.t), a.bound * b.bound);
    case 4: return push(div(a.t, abs(b.t) + 0.5), 2 * a.bound);
    case 5: return push(maximum(a.t, b.t), std::max(a.bound, b.bound));
    default: return push(minimum(a.t, b.t), std::max(a.bound, b.bound));
    }
  }

  // The binary libm list and remainder, with operands that keep each continuous (no
  // branch cut, no step of fmod), so that a last-bit difference upstream between
  // compiled and eager (a reassociated sum) stays a last-bit difference here.
  void libm_binary(const Val &a, const Val &b) {
    switch (c_.below(5)) {
    case 0: return push(atan2(a.t, abs(b.t) + 0.5), 1.6);
    case 1: return push(hypot(a.t, b.t), a.bound + b.bound);
    case 2: return push(fmod(tanh(a.t) * 0.9, abs(b.t) + 1.0), 0.9);
    case 3: return push(copysign(a.t, param(broadcast_variant(shape(a)))), a.bound);
    default: return push(remainder(abs(tanh(a.t)) * 0.9 + 0.05, abs(b.t) + 1.0), 0.95);
    }
  }

  // The dims to reduce: the last, another one, two, or all.
  std::vector<int64_t> reduce_dims(const Tensor &x) {
    int64_t r = x.dim();
    switch (c_.below(4)) {
    case 0: return {r - 1};
    case 1: return {pick_dim(x)};
    case 2: {
      if (r < 2) return {0};
      int64_t d0 = pick_dim(x), d1 = (d0 + 1 + int64_t(c_.below(uint64_t(r - 1)))) % r;
      return {std::min(d0, d1), std::max(d0, d1)};
    }
    default: {
      std::vector<int64_t> all(static_cast<size_t>(r));
      std::iota(all.begin(), all.end(), 0);
      return all;
    }
    }
  }

  void reduce() {
    Val a = pick();
    if (a.t.dim() == 0) return unary();
    std::vector<int64_t> dims = reduce_dims(a.t);
    bool keep = c_.chance(50);
    double count = 1;
    for (int64_t d : dims) count *= double(a.t.sizes()[size_t(d)]);
    switch (c_.below(3)) {
    case 0: return push(sum(a.t, dims, keep), a.bound * count);
    case 1: return push(mean(a.t, dims, keep), a.bound);
    default: return push(amax(a.t, dims, keep), a.bound);
    }
  }

  void normalize() {
    Val a = pick();
    if (a.t.dim() == 0) return unary();
    if (c_.chance(50)) return push(softmax(a.t, pick_dim(a.t)), 1);
    Shape s = shape(a);
    size_t k = s.size() >= 2 && c_.chance(30) ? 2 : 1;
    Shape norm(s.end() - long(k), s.end());
    double bound = std::sqrt(double(numel_of(norm)));
    // eps 0.1, not 1e-5: on a nearly constant row (a view can make one) the result
    // is (x - mean) / sqrt(eps), which magnifies the executors' last-ulp differences
    // in x by 1/sqrt(eps). That is ill-conditioning, not a bug; 0.1 keeps it at ~3x.
    const double eps = 0.1;
    switch (c_.below(3)) {
    case 0: return push(layer_norm(a.t, norm, {}, {}, eps), bound);
    case 1: return push(layer_norm(a.t, norm, param(norm), param(norm), eps), bound + 1);
    default: return push(layer_norm(a.t, norm, param(norm), {}, eps), bound);
    }
  }

  // A boolean mask (a parameter) whose rows are sometimes all false: keys
  // masked out for a whole query row, where SDPA gives zeros, not NaN.
  Tensor mask_param(int64_t rows, int64_t cols) {
    Tensor m = detail::make_tensor({rows, cols}, kBool);
    std::mt19937_64 gen(c_.below(uint64_t(1) << 32));
    bool *p = static_cast<bool *>(m.raw_data());
    for (int64_t i = 0; i < rows; ++i) {
      bool none = gen() % 3 == 0;
      for (int64_t j = 0; j < cols; ++j) p[i * cols + j] = !none && gen() % 4 != 0;
    }
    return m;
  }

  // scaled_dot_product_attention of a (the queries) over parameter keys and
  // values: causal, with a boolean mask, or with a float mask of -inf.
  void attention() {
    Val a = pick();
    Shape s = shape(a);
    if (s.size() < 2) return unary();
    int64_t L = s[s.size() - 2], E = s.back();
    int64_t S = 1 + int64_t(c_.below(uint64_t(o_.max_dim))), Ev = 1 + int64_t(c_.below(uint64_t(o_.max_dim)));
    Shape scores = s, out = s;
    scores.back() = S;
    out.back() = Ev;
    if (numel_of(scores) > o_.max_numel || numel_of(out) > o_.max_numel) return unary();
    Tensor q = a.bound > 2 ? a.t * (2.0 / a.bound) : a.t; // keeps exp's argument moderate
    Tensor k = param({S, E}), v = param({S, Ev});
    switch (c_.below(3)) {
    case 0: return push(scaled_dot_product_attention(q, k, v, {}, 0.0, true), 1);
    case 1: return push(scaled_dot_product_attention(q, k, v, mask_param(L, S)), 1);
    default: {
      Tensor fmask = zeros({L, S}, q.dtype()).masked_fill(logical_not(mask_param(L, S)), -INFINITY);
      return push(scaled_dot_product_attention(q, k, v, fmask), 1);
    }
    }
  }

  // The products of a pool value with a weight parameter that both contraction
  // generators draw (contract, contract_sized).
  enum class WeightProduct { Linear, LinearNoBias, Matmul, MatmulTransposed };

  bool fits(const Val &a, int64_t n) {
    Shape out = shape(a);
    out.back() = n;
    return numel_of(out) <= o_.max_numel;
  }

  // a [.., K] times a K x n weight in the form `p`; unary() instead when the
  // result would be too large.
  void weight_product(const Val &a, WeightProduct p, int64_t n) {
    if (!fits(a, n)) return unary();
    const int64_t k = a.t.sizes().back();
    const double bound = a.bound * double(k);
    switch (p) {
    case WeightProduct::Linear: return push(linear(a.t, param({n, k}), param({n})), bound + 1);
    case WeightProduct::LinearNoBias: return push(linear(a.t, param({n, k})), bound);
    case WeightProduct::Matmul: return push(matmul(a.t, param({k, n})), bound);
    // A transposed operand (a view), as in attention's q @ k^T.
    case WeightProduct::MatmulTransposed: return push(matmul(a.t, param({n, k}).transpose(0, 1)), bound);
    }
  }

  void contract() {
    Val a = pick();
    if (a.t.dim() == 0) return unary();
    const int64_t n = 1 + int64_t(c_.below(uint64_t(o_.max_dim)));
    switch (c_.below(4)) {
    case 0: return weight_product(a, WeightProduct::Linear, n);
    case 1: return weight_product(a, WeightProduct::Matmul, n);
    case 2: return weight_product(a, WeightProduct::MatmulTransposed, n);
    default: {
      if (a.t.dim() < 2) return unary();
      Shape s = shape(a);
      Shape out = s;
      out.back() = s[s.size() - 2];
      if (numel_of(out) > o_.max_numel) return unary();
      return push(matmul(a.t, a.t.transpose(-1, -2)), a.bound * (a.bound * double(s.back())));
    }
    }
  }

  // GEMM sizes for contraction graphs: the micro-kernel edges (1, 2, 3, 7, 17,
  // 33, 65 leave partial tiles) and a full vector (16).
  int64_t gemm_size() {
    static constexpr int64_t sizes[] = {1, 2, 3, 7, 16, 17, 33, 65};
    return sizes[c_.below(std::size(sizes))];
  }

  // A contraction of a pool value with a parameter (or itself) at a random
  // size: linear (with or without bias), matmul against [K, N] or a transposed
  // [N, K], a broadcast batch, bmm, addmm, conv2d.
  void contract_sized() {
    Val a = pick();
    if (a.t.dim() == 4 && c_.chance(60)) return conv(a);
    if (a.t.dim() == 0) return unary();
    Shape s = shape(a);
    const int64_t k = s.back(), n = gemm_size();
    Shape out = s;
    out.back() = n;
    const double bound = a.bound * double(k);
    switch (c_.below(7)) {
    case 0:
      if (!fits(a, n)) return unary();
      return weight_product(a, c_.chance(50) ? WeightProduct::LinearNoBias : WeightProduct::Linear, n);
    case 1: return weight_product(a, WeightProduct::Matmul, n);
    case 2: return weight_product(a, WeightProduct::MatmulTransposed, n);
    case 3: { // a broadcast batch on the right: [.., M, K] @ [B, K, N]
      if (a.t.dim() > 2) return push(matmul(a.t, param({k, n})), bound);
      int64_t b = 1 + int64_t(c_.below(3));
      Shape o2 = {b, a.t.dim() == 2 ? s[0] : 1, n};
      if (numel_of(o2) > o_.max_numel) return unary();
      Tensor r = matmul(a.t, param({b, k, n}));
      return push(r, bound);
    }
    case 4: { // bmm of a 3-D value with a parameter, or with itself transposed
      if (a.t.dim() != 3) return push(matmul(a.t, param({k, n})), bound);
      if (c_.chance(30)) {
        Shape o3 = {s[0], s[1], s[1]};
        if (numel_of(o3) > o_.max_numel) return unary();
        return push(bmm(a.t, a.t.transpose(1, 2)), a.bound * bound);
      }
      if (numel_of(out) > o_.max_numel) return unary();
      return push(bmm(a.t, param({s[0], k, n})), bound);
    }
    case 5: { // addmm(input [N], mat1 [M, K], mat2 [K, N], beta, alpha)
      if (a.t.dim() != 2 || numel_of(out) > o_.max_numel) return unary();
      const double beta = c_.chance(50) ? 1.0 : 0.5, alpha = c_.chance(50) ? 1.0 : -2.0;
      return push(addmm(param({n}), a.t, param({k, n}), beta, alpha), std::abs(alpha) * bound + beta);
    }
    default: // a 2-D value as an NCHW image [1, 1, M, K] would be a 1-channel conv
      if (a.t.dim() == 2 && s[0] * s[1] * 4 <= o_.max_numel) return conv({a.t.unsqueeze(0).unsqueeze(0), a.bound});
      if (numel_of(out) > o_.max_numel) return unary();
      return push(matmul(a.t, param({k, n})), bound);
    }
  }

  // conv2d of an NCHW value: stride 1 or 2, padding 0 to 2, dilation 1 or 2,
  // groups a divisor of C (C itself: depthwise), kernel 1 to 3 per axis, bias or not.
  void conv(const Val &a) {
    if (c_.chance(15)) return winograd_conv(a);
    Shape s = shape(a);
    const int64_t c = s[1], h = s[2], w = s[3];
    std::vector<int64_t> divisors;
    for (int64_t g = 1; g <= c; ++g)
      if (c % g == 0) divisors.push_back(g);
    const int64_t groups = c_.chance(60) ? 1 : divisors[c_.below(divisors.size())];
    static constexpr int64_t couts[] = {1, 2, 3, 4, 8, 17};
    const int64_t cout = groups == 1 ? couts[c_.below(std::size(couts))] : groups * (1 + int64_t(c_.below(2)));
    int64_t kh = 1 + int64_t(c_.below(3)), kw = 1 + int64_t(c_.below(3));
    const int64_t sh = 1 + int64_t(c_.below(2)), sw = 1 + int64_t(c_.below(2));
    const int64_t ph = int64_t(c_.below(3)), pw = int64_t(c_.below(3));
    const int64_t dh = 1 + int64_t(c_.below(2)), dw = 1 + int64_t(c_.below(2));
    if (h + 2 * ph < dh * (kh - 1) + 1) kh = 1; // the window must fit the padded input
    if (w + 2 * pw < dw * (kw - 1) + 1) kw = 1;
    const int64_t ho = (h + 2 * ph - dh * (kh - 1) - 1) / sh + 1, wo = (w + 2 * pw - dw * (kw - 1) - 1) / sw + 1;
    if (s[0] * cout * ho * wo > o_.max_numel) return unary();
    const double bound = a.bound * double(c / groups * kh * kw);
    Tensor weight = param({cout, c / groups, kh, kw});
    Tensor bias = c_.chance(50) ? param({cout}) : Tensor();
    return push(conv2d(a.t, weight, bias, {sh, sw}, {ph, pw}, {dh, dw}, groups), bound + (bias.defined() ? 1 : 0));
  }

  // A conv kiln runs through Winograd F(2x2, 3x3) (codegen/gemm/winograd.h:
  // 16+ channels each way, tiles that fill the panels), within max_numel: a
  // [1, 16, 11, 11] parameter shifted by a's mean, then 16 -> 16, 3x3, pad 1.
  void winograd_conv(const Val &a) {
    Tensor x = param({1, 16, 11, 11}) + a.t.mean();
    Tensor weight = param({16, 16, 3, 3});
    Tensor bias = c_.chance(50) ? param({16}) : Tensor();
    const double bound = (1 + a.bound) * 16 * 9;
    return push(conv2d(x, weight, bias, {1, 1}, {1, 1}, {1, 1}, 1), bound + (bias.defined() ? 1 : 0));
  }

  void view() {
    Val a = pick();
    const Tensor &x = a.t;
    Shape s = shape(a);
    int64_t r = x.dim();
    if (r == 0) return push(x.unsqueeze(0), a.bound);
    switch (c_.below(8)) {
    case 0:
      if (r < 2) return push(x.unsqueeze(int64_t(c_.below(2))), a.bound);
      return push(x.transpose(pick_dim(x), pick_dim(x)), a.bound);
    case 1: {
      std::vector<int64_t> perm(static_cast<size_t>(r));
      std::iota(perm.begin(), perm.end(), 0);
      for (size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[c_.below(i)]);
      return push(x.permute(perm), a.bound);
    }
    case 2: {
      int64_t d = pick_dim(x), size = s[size_t(d)];
      int64_t len = 1 + int64_t(c_.below(uint64_t(size)));
      int64_t start = int64_t(c_.below(uint64_t(size - len + 1)));
      return push(x.narrow(d, start, len), a.bound);
    }
    case 3: {
      int64_t d = pick_dim(x), size = s[size_t(d)];
      int64_t start = int64_t(c_.below(uint64_t(size)));
      return push(slice(x, d, start, size, 2), a.bound);
    }
    case 4: {
      if (r < 2) return push(x.unsqueeze(0), a.bound);
      int64_t d = pick_dim(x);
      return push(x.select(d, int64_t(c_.below(uint64_t(s[size_t(d)])))), a.bound);
    }
    case 5: return expand_view(a);
    case 6: return push(x.unsqueeze(int64_t(c_.below(uint64_t(r + 1)))), a.bound);
    default: return reshape_view(a);
    }
  }

  void expand_view(const Val &a) {
    Shape s = shape(a);
    int64_t grow = 2 + int64_t(c_.below(3));
    if (numel_of(s) * grow > o_.max_numel) return push(a.t.unsqueeze(0), a.bound);
    std::vector<size_t> ones;
    for (size_t i = 0; i < s.size(); ++i)
      if (s[i] == 1) ones.push_back(i);
    if (!ones.empty() && c_.chance(70)) {
      s[ones[c_.below(ones.size())]] = grow;
      return push(a.t.expand(s), a.bound);
    }
    s.insert(s.begin(), grow);
    return push(a.t.expand(s), a.bound);
  }

  // Reshape of contiguous data only: merge two adjacent dims or split one.
  void reshape_view(const Val &a) {
    if (!a.t.is_contiguous()) return push(a.t.contiguous(), a.bound);
    Shape s = shape(a);
    size_t d = c_.below(s.size());
    if (d + 1 < s.size() && c_.chance(50)) {
      s[d] *= s[d + 1];
      s.erase(s.begin() + long(d) + 1);
      return push(a.t.reshape(s), a.bound);
    }
    int64_t size = s[d];
    for (int64_t f = 2; f < size; ++f) {
      if (size % f) continue;
      s[d] = f;
      s.insert(s.begin() + long(d) + 1, size / f);
      return push(a.t.view(s), a.bound);
    }
    return push(a.t.reshape({-1}), a.bound);
  }
};

Shape random_shape(Chooser &c, const RandomGraphOptions &o) {
  Shape s(static_cast<size_t>(1 + c.below(uint64_t(o.max_rank))));
  for (int64_t &d : s) d = 1 + int64_t(c.below(uint64_t(o.max_dim)));
  while (numel_of(s) > o.max_numel) *std::max_element(s.begin(), s.end()) /= 2;
  return s;
}

// Inputs of a contraction graph: a [M, K] or [B, M, K] of GEMM sizes and an
// NCHW image for the convolutions.
void contraction_inputs(Chooser &c, const RandomGraphOptions &o, RandomGraph &rg) {
  static constexpr int64_t sizes[] = {1, 2, 3, 7, 16, 17, 33, 65};
  auto size = [&] { return sizes[c.below(std::size(sizes))]; };
  Shape base = {size(), size()};
  if (c.chance(40)) base.insert(base.begin(), 1 + int64_t(c.below(3)));
  while (numel_of(base) > o.max_numel) *std::max_element(base.begin(), base.end()) /= 2;
  static constexpr int64_t channels[] = {1, 2, 3, 4, 6, 8}, sides[] = {1, 3, 5, 7, 9, 17};
  Shape image = {1 + int64_t(c.below(2)), channels[c.below(std::size(channels))], sides[c.below(std::size(sides))],
                 sides[c.below(std::size(sides))]};
  rg.input_shapes = {base, image};
}

RandomGraph make(Chooser c, std::string origin, const RandomGraphOptions &opts) {
  RandomGraph rg;
  rg.origin = std::move(origin);
  rg.dtype = opts.dtype;
  if (opts.contractions) {
    contraction_inputs(c, opts, rg);
    rg.fn = [c, opts](const std::vector<Tensor> &in) { return Builder(c, opts).run(in); };
    return rg;
  }
  Shape base = random_shape(c, opts);
  int n = 1 + int(c.below(uint64_t(opts.max_inputs)));
  rg.input_shapes.push_back(base);
  for (int i = 1; i < n; ++i) {
    Shape s = base;
    size_t drop = c.below(s.size());
    s.erase(s.begin(), s.begin() + long(drop));
    for (int64_t &d : s)
      if (c.chance(30)) d = 1;
    rg.input_shapes.push_back(s);
  }
  // Each call starts from the chooser as it is now, so each call makes the same choices.
  rg.fn = [c, opts](const std::vector<Tensor> &in) { return Builder(c, opts).run(in); };
  return rg;
}

} // namespace

namespace {

Tensor uniform(const Shape &shape, std::mt19937_64 &gen) {
  std::uniform_real_distribution<float> dist(-2, 2);
  Tensor t = detail::make_tensor(shape, kFloat32);
  float *p = static_cast<float *>(t.raw_data());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = dist(gen);
  return t;
}

// A tensor of `shape` in a layout picked by gen (see RandomGraph::make_inputs).
Tensor strided_input(const Shape &shape, std::mt19937_64 &gen) {
  const size_t rank = shape.size();
  const size_t d = rank == 0 ? 0 : size_t(gen() % rank);
  switch (gen() % 4) {
  case 1: { // permuted: result dim i is dim perm[i] of a contiguous base
    std::vector<int64_t> perm(rank);
    for (size_t i = 0; i < rank; ++i) perm[i] = int64_t(i);
    std::shuffle(perm.begin(), perm.end(), gen);
    Shape base(rank);
    for (size_t i = 0; i < rank; ++i) base[size_t(perm[i])] = shape[i];
    return uniform(base, gen).permute(perm);
  }
  case 2: { // every other element of a base twice as long along d
    if (rank == 0) break;
    Shape base = shape;
    base[d] *= 2;
    return uniform(base, gen).slice(int64_t(d), 1, base[d], 2);
  }
  case 3: { // expanded along d
    if (rank == 0 || shape[d] == 1) break;
    Shape one = shape;
    one[d] = 1;
    return uniform(one, gen).expand(shape);
  }
  default: break;
  }
  return uniform(shape, gen);
}

} // namespace

std::vector<Tensor> RandomGraph::make_inputs(uint64_t data_seed, bool strided) const {
  std::mt19937_64 gen(data_seed);
  std::vector<Tensor> out;
  for (const auto &s : input_shapes) out.push_back(strided ? strided_input(s, gen) : uniform(s, gen));
  if (dtype != kFloat32)
    for (Tensor &t : out) t = t.to(dtype);
  return out;
}

std::unique_ptr<ir::Graph> RandomGraph::trace() const { return kiln::trace(fn, make_inputs(0), "random"); }

RandomGraph random_graph(uint64_t seed, const RandomGraphOptions &opts) {
  return make(Chooser(seed), "seed " + std::to_string(seed) + " (replay: KILN_RANDOM_GRAPH_SEED=" +
                                 std::to_string(seed) + ")",
              opts);
}

RandomGraph random_graph_from_bytes(const uint8_t *data, size_t size, const RandomGraphOptions &opts) {
  return make(Chooser(data, size), "fuzzer input (" + std::to_string(size) + " bytes)", opts);
}

RandomGraphOptions contraction_graph_options() {
  RandomGraphOptions o;
  o.contractions = true;
  o.max_ops = 8;
  o.max_numel = 8192;
  return o;
}

RandomGraphOptions reduced_float_graph_options(DType dtype) {
  RandomGraphOptions o = extended_graph_options();
  o.dtype = dtype;
  return o;
}

RandomGraphOptions extended_graph_options() {
  RandomGraphOptions o;
  o.extended_ops = true;
  o.max_ops = 8;
  o.max_numel = 512;
  return o;
}

RandomGraphOptions scan_graph_options() {
  RandomGraphOptions o = extended_graph_options();
  o.extended_ops = false;
  o.scan_ops = true;
  return o;
}

int64_t max_contraction_length(const ir::Graph &g) {
  int64_t longest = 0;
  for (const ir::Node *n : g.nodes()) {
    if (n->body()) longest = std::max(longest, max_contraction_length(*n->body()));
    if (n->kind() != ir::Node::Kind::Op || n->operands().empty()) continue;
    auto last = [&](size_t i) -> int64_t {
      if (i >= n->operands().size() || !n->operand(i)) return 0;
      const Dims &s = n->operand(i)->type().shape;
      return s.size() == 0 ? 0 : s[s.size() - 1];
    };
    const OpId op = n->op();
    if (op == OpId::Mm || op == OpId::Bmm || op == OpId::Matmul || op == OpId::Linear || op == OpId::Sdpa)
      longest = std::max(longest, last(0));
    if (op == OpId::Addmm) longest = std::max(longest, last(1));
    if (op == OpId::Sdpa && n->operands().size() > 1 && n->operand(1)) {
      const Dims &k = n->operand(1)->type().shape; // p v sums over the S keys
      if (k.size() >= 2) longest = std::max(longest, k[k.size() - 2]);
    }
    if (op == OpId::Conv2d) {
      const Dims &w = n->operand(1)->type().shape;
      int64_t len = 1;
      for (size_t d = 1; d < w.size(); ++d) len *= w[d];
      longest = std::max(longest, len);
    }
  }
  return longest;
}

std::vector<uint64_t> random_graph_seeds(uint64_t first, uint64_t count) {
  if (const char *env = std::getenv("KILN_RANDOM_GRAPH_SEED"); env && *env)
    return {std::strtoull(env, nullptr, 10)};
  std::vector<uint64_t> seeds(count);
  std::iota(seeds.begin(), seeds.end(), first);
  return seeds;
}

std::string describe(const RandomGraph &rg, const ir::Graph &g) {
  std::ostringstream os;
  os << "random graph from " << rg.origin << ", inputs";
  for (const auto &s : rg.input_shapes) os << " " << shape_str(s);
  os << "\n" << ir::print(g);
  return os.str();
}

namespace {

// Elements in row-major order as doubles, read through the strides.
std::vector<double> elements(const Tensor &t) {
  Tensor c = to(t, kFloat64).contiguous();
  const double *p = static_cast<const double *>(c.raw_data());
  return std::vector<double>(p, p + c.numel());
}

} // namespace

std::string compare_outputs(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double rtol,
                            double atol) {
  std::ostringstream os;
  if (got.size() != want.size()) {
    os << got.size() << " outputs, expected " << want.size();
    return os.str();
  }
  for (size_t o = 0; o < got.size(); ++o) {
    if (got[o].dtype() != want[o].dtype() || got[o].sizes() != want[o].sizes()) {
      os << "output " << o << ": " << got[o].dtype() << shape_str(got[o].sizes()) << ", expected "
         << want[o].dtype() << shape_str(want[o].sizes());
      return os.str();
    }
    std::vector<double> a = elements(got[o]), b = elements(want[o]);
    double worst = 0;
    size_t at = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      if (std::isnan(a[i]) || std::isnan(b[i])) {
        if (std::isnan(a[i]) != std::isnan(b[i])) { worst = INFINITY; at = i; break; }
        continue;
      }
      if (a[i] == b[i]) continue;
      if (std::isinf(a[i]) || std::isinf(b[i])) { worst = INFINITY; at = i; break; }
      double over = std::abs(a[i] - b[i]) - (atol + rtol * std::abs(b[i]));
      if (!(over <= worst)) { worst = over; at = i; }
    }
    if (worst > 0) {
      os << "output " << o << " element " << at << ": got " << a[at] << ", expected " << b[at]
         << " (|diff| " << std::abs(a[at] - b[at]) << ", rtol " << rtol << ", atol " << atol << ")";
      return os.str();
    }
  }
  return "";
}

} // namespace kiln::testing
