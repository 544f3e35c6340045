// decompose: rewrites composite ops (softmax, layer_norm, gelu, linear, ...)
// into primitives of the op table (reductions, elementwise ops, contractions),
// one rule per composite. Rules may emit other composites (sdpa over zero
// keys emits softmax); the pass repeats until none it knows is left. A composite whose
// rule does not apply (dropout in training, sdpa with dropout) stays. Over
// symbolic sizes it also splits a sum, mean, amax or amin over several
// runs of dims in two (split_reduction).
#include <algorithm>
#include <cmath>
#include <limits>

#include "passes/composed.h"
#include "passes/rewrite.h"
#include "runtime/op_attrs.h"

namespace kiln::passes {

namespace {

using ir::Node;
using ir::Value;
using Values = std::vector<Value *>;

int64_t rank(const Value *v) { return int64_t(v->type().shape.size()); }
// Whether dim d of v's type is a symbol (its size known only per call). A rule
// that reads a size to pick a form or compute a constant leaves the op whole
// there rather than decide for the traced size alone.
bool symbolic_dim(const Value *v, int64_t d) {
  const ir::TensorType &t = v->type();
  return t.symbolic() && !t.sym.at(size_t(d)).is_constant();
}
int64_t wrap(int64_t d, int64_t r) { return d < 0 ? d + r : d; }

// ---- the primitives the rules are written in (attributes as the adapters read them)
struct Emit {
  Builder &b;
  Value *add(Value *x, Value *y) { return b.op<OpId::Add>({x, y}, {.alpha = 1}); }
  Value *sub(Value *x, Value *y) { return b.op<OpId::Sub>({x, y}, {.alpha = 1}); }
  Value *mul(Value *x, Value *y) { return b.op<OpId::Mul>({x, y}, {}); }
  Value *div(Value *x, Value *y) { return b.op<OpId::Div>({x, y}, {.rounding_mode = std::nullopt}); }
  Value *mul(Value *x, double c) { return mul(x, b.scalar(c)); }
  Value *add(Value *x, double c) { return add(x, b.scalar(c)); }
  Value *unary(OpId id, Value *x) { return b.op(id, {x}, {}); }
  Value *sum(Value *x, std::vector<int64_t> dims) {
    return b.op<OpId::Sum>({x}, {.dims = dims, .keepdim = true, .dtype = std::nullopt});
  }
  Value *mean(Value *x, std::vector<int64_t> dims) {
    return b.op<OpId::Mean>({x}, {.dims = dims, .keepdim = true, .dtype = std::nullopt});
  }
  Value *amax(Value *x, std::vector<int64_t> dims) { return b.op<OpId::Amax>({x}, {.dims = dims, .keepdim = true}); }
  Value *reshape(Value *x, std::vector<int64_t> shape) { return b.op<OpId::Reshape>({x}, {.shape = shape}); }
  Value *transpose(Value *x, int64_t d0, int64_t d1) { return b.op<OpId::Transpose>({x}, {.dim0 = d0, .dim1 = d1}); }
  Value *matmul(Value *x, Value *y) { return b.op<OpId::Matmul>({x, y}, {}); }
};

std::vector<int64_t> all_dims(const Value *v) {
  std::vector<int64_t> d(size_t(rank(v)));
  for (size_t i = 0; i < d.size(); ++i) d[i] = int64_t(i);
  return d;
}

// ---- rules: each returns the values replacing the node's results (empty: not applicable)

// The max-shifted forms reduce with amax, which has no identity: over a dim of
// size 0 it raises where softmax itself returns an empty tensor, so such a
// softmax stays whole.
bool empty_dim(const Value *x, int64_t d) { return rank(x) > 0 && x->type().shape[size_t(d)] == 0; }

Values softmax(Emit e, const Node &n) {
  Value *x = n.operand(0);
  int64_t d = wrap(attrs::Softmax{n}.dim(), rank(x));
  if (empty_dim(x, d)) return {};
  Value *shifted = e.sub(x, e.amax(x, {d}));
  Value *ex = e.unary(OpId::Exp, shifted);
  return {e.div(ex, e.sum(ex, {d}))};
}

Values log_softmax(Emit e, const Node &n) {
  Value *x = n.operand(0);
  int64_t d = wrap(attrs::LogSoftmax{n}.dim(), rank(x));
  if (empty_dim(x, d)) return {};
  Value *shifted = e.sub(x, e.amax(x, {d}));
  Value *lse = e.unary(OpId::Log, e.sum(e.unary(OpId::Exp, shifted), {d}));
  return {e.sub(shifted, lse)};
}

// (x - mean) * rsqrt(var + eps) over the trailing normalized_shape dims, then weight and bias.
Values layer_norm(Emit e, const Node &n) {
  Value *x = n.operand(0);
  attrs::LayerNorm a{n};
  size_t k = a.normalized_shape().size();
  if (int64_t(k) > rank(x)) return {}; // malformed: the verifier reports it
  std::vector<int64_t> dims;
  for (int64_t d = rank(x) - int64_t(k); d < rank(x); ++d) dims.push_back(d);
  Value *centered = e.sub(x, e.mean(x, dims));
  Value *var = e.mean(e.mul(centered, centered), dims);
  Value *y = e.mul(centered, e.unary(OpId::Rsqrt, e.add(var, a.eps())));
  if (n.operands().size() > 1 && n.operand(1)) y = e.mul(y, n.operand(1));
  if (n.operands().size() > 2 && n.operand(2)) y = e.add(y, n.operand(2));
  return {y};
}

// Inputs (x, weight, bias, running_mean, running_var); per-channel tensors
// broadcast along dim 1. Training mode normalizes with the batch statistics.
Values batch_norm(Emit e, const Node &n) {
  Value *x = n.operand(0);
  if (rank(x) < 2) return {};
  auto opnd = [&](size_t i) { return i < n.operands().size() ? n.operand(i) : nullptr; };
  bool training = attrs::BatchNorm{n}.training();
  double eps = attrs::BatchNorm{n}.eps();
  if (symbolic_dim(x, 1)) return {}; // the per-channel reshapes would need the count per call
  std::vector<int64_t> chan(size_t(rank(x)), 1);
  chan.at(1) = x->type().shape[1];
  auto per_channel = [&](Value *v) { return e.reshape(v, chan); };
  Value *mean = nullptr, *var = nullptr;
  if (training || !opnd(3) || !opnd(4)) {
    std::vector<int64_t> dims;
    for (int64_t d = 0; d < rank(x); ++d)
      if (d != 1) dims.push_back(d);
    mean = e.mean(x, dims);
    Value *c = e.sub(x, mean);
    var = e.mean(e.mul(c, c), dims);
  } else {
    mean = per_channel(opnd(3));
    var = per_channel(opnd(4));
  }
  Value *y = e.mul(e.sub(x, mean), e.unary(OpId::Rsqrt, e.add(var, eps)));
  if (opnd(1)) y = e.mul(y, per_channel(opnd(1)));
  if (opnd(2)) y = e.add(y, per_channel(opnd(2)));
  return {y};
}

// gelu and silu: their one definition, the composed-op list's line
// (the composed-op list, runtime/ops.def), built as graph nodes (passes/composed.h).
Values gelu(Emit e, const Node &n) {
  composed::Val x{&e.b, n.operand(0)};
  return {(attrs::Gelu{n}.approximate() == "tanh" ? composed::gelu_tanh(x) : composed::gelu_erf(x)).v};
}

Values silu(Emit e, const Node &n) { return {composed::silu({&e.b, n.operand(0)}).v}; }

// Contractions up to this many multiply-adds become mul + sum so that the fuse
// pass can put them in one JIT kernel with their bias and activation: for W6's
// [1, 64] x [64, 64] layers a BLAS call and a separate epilogue kernel cost more
// in call overhead than the arithmetic itself. Large GEMMs keep BLAS.
constexpr int64_t kTinyContraction = 64 * 1024;

// Contractions over at most this many terms become that many broadcast
// products added elementwise. As mul + sum they are row kernels over rows of
// K elements: train-mlp's K = 2 linear was 16,384 rows of 2 (14-18 us for 33K
// multiply-adds); as products they vectorize along N and fuse with the bias,
// the activation or a backward's mask like any elementwise op (under 2 us).
constexpr int64_t kUnrolledContraction = 4;

bool has_symbolic_dim(const Value *v) {
  for (int64_t d = 0; d < rank(v); ++d)
    if (symbolic_dim(v, d)) return true;
  return false;
}

// x[..., K] times m's K rows (k_dim 0: m is [K, N]) or columns (k_dim 1: m is
// [N, K]), summed over K: x[..., k, None] * m's k-th [N] slice, added in k order.
// Null unless K is at most kUnrolledContraction and every size is a constant
// (the form is chosen by K alone, but the views would be over symbols).
Value *unrolled_contraction(Emit e, Value *x, Value *m, int64_t k_dim) {
  if (rank(m) != 2 || rank(x) < 1 || has_symbolic_dim(x) || has_symbolic_dim(m)) return nullptr;
  const DType dt = x->type().dtype;
  if ((dt != DType::Float32 && dt != DType::Float64) || m->type().dtype != dt) return nullptr;
  const int64_t k = m->type().shape[size_t(k_dim)];
  if (k < 1 || k > kUnrolledContraction || x->type().shape[size_t(rank(x) - 1)] != k) return nullptr;
  const int64_t last = rank(x) - 1;
  Value *acc = nullptr;
  for (int64_t i = 0; i < k; ++i) {
    Value *xi = e.b.op<OpId::Unsqueeze>({e.b.op<OpId::Select>({x}, {.dim = last, .index = i})}, {.dim = last});
    Value *term = e.mul(xi, e.b.op<OpId::Select>({m}, {.dim = k_dim, .index = i}));
    acc = acc ? e.add(acc, term) : term;
  }
  return acc;
}

// a[M, K] @ b[K, N] (mm, or matmul of two matrices) over few K: the products.
Values small_k_matmul(Emit e, const Node &n) {
  Value *a = n.operand(0), *b = n.operand(1);
  if (rank(a) != 2 || rank(b) != 2) return {};
  Value *y = unrolled_contraction(e, a, b, 0);
  if (!y) return {};
  return {y};
}

// x[..., K] @ w[N, K]^T as sum(x[..., 1, K] * w, -1) when it is tiny.
Value *tiny_linear(Emit e, Value *x, Value *w) {
  if (rank(w) != 2 || rank(x) < 1) return nullptr;
  const Dims &xs = x->type().shape, &ws = w->type().shape;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < xs.size(); ++i) rows *= xs[i];
  for (int64_t d = 0; d < rank(x); ++d)
    if (symbolic_dim(x, d)) return nullptr; // a size-dependent choice: BLAS serves every size
  int64_t n = ws[0], k = ws[1];
  if (xs[xs.size() - 1] != k || k == 0 || rows * n * k > kTinyContraction) return nullptr;
  if (!is_floating(x->type().dtype) || x->type().dtype != w->type().dtype) return nullptr;
  Value *prod = e.mul(e.b.op<OpId::Unsqueeze>({x}, {.dim = rank(x) - 1}), w);
  return e.b.op<OpId::Sum>({prod}, {.dims = std::vector<int64_t>{rank(x)}, .keepdim = false, .dtype = std::nullopt});
}

// x @ w^T (+ b)
Values linear(Emit e, const Node &n) {
  Value *x = n.operand(0), *w = n.operand(1);
  Value *y = unrolled_contraction(e, x, w, 1);
  if (!y) y = tiny_linear(e, x, w);
  if (!y) y = e.matmul(x, rank(w) == 2 ? e.transpose(w, 0, 1) : w);
  if (n.operands().size() > 2 && n.operand(2)) y = e.add(y, n.operand(2));
  return {y};
}

// beta * input + alpha * (mat1 @ mat2), floating dtypes: a matmul and its
// epilogue, which fuse hands to kiln's GEMM (codegen/epilogue.cpp) as linear's,
// input broadcast as add broadcasts it. As eager: beta == 0 ignores input
// (NaN included). alpha == 0 stays addmm: BLAS then reads neither matrix, so
// their inf and NaN must not show.
Values addmm(Emit e, const Node &n) {
  if (!is_floating(n.result()->type().dtype)) return {};
  attrs::Addmm a{n};
  const double alpha = a.alpha().toDouble();
  if (alpha == 0) return {};
  Value *y = e.matmul(n.operand(1), n.operand(2));
  if (alpha != 1) y = e.mul(y, alpha);
  if (a.beta().toDouble() == 0) return {y};
  return {e.b.op<OpId::Add>({y, n.operand(0)}, {.alpha = a.beta()})};
}

// sum((x - mean)^2) / (N - correction) over dims (all when empty). A: the
// attributes of var or std (the same ones).
template <class A> Value *variance(Emit e, const Node &n, A a) {
  Value *x = n.operand(0);
  std::vector<int64_t> dims = a.dims();
  if (dims.empty()) dims = all_dims(x);
  for (int64_t &d : dims) d = wrap(d, rank(x));
  bool keepdim = a.keepdim();
  double correction = a.correction().value_or(1.0);
  double count = 1;
  bool symbolic = false;
  for (int64_t d : dims) {
    symbolic |= symbolic_dim(x, d);
    count *= double(x->type().shape[size_t(d)]);
  }
  Value *m = e.mean(x, dims);
  Value *c = e.sub(x, m);
  Value *ss = e.b.op<OpId::Sum>({e.mul(c, c)}, {.dims = dims, .keepdim = keepdim, .dtype = std::nullopt});
  if (!symbolic) return e.mul(ss, 1.0 / std::max(0.0, count - correction));
  // N per call: x's elements over the result's, in float64 as the constant above.
  auto count_of = [&](Value *v) {
    return e.b.op<OpId::Cast>({e.b.op<OpId::SymNumel>({v}, {})}, {.dtype = kFloat64});
  };
  Value *whole = count_of(x); // in this order: arguments' order is unspecified, the graph's must not be
  Value *reduced = count_of(ss);
  Value *den = e.add(e.div(whole, reduced), -correction);
  den = e.b.op<OpId::Clamp>({den}, {.min = Scalar(0.0), .max = std::nullopt});
  return e.mul(ss, e.unary(OpId::Reciprocal, den));
}

Values var(Emit e, const Node &n) {
  Value *v = variance(e, n, attrs::Var{n});
  return v ? Values{v} : Values{};
}
Values std_(Emit e, const Node &n) {
  Value *v = variance(e, n, attrs::Std{n});
  return v ? Values{e.unary(OpId::Sqrt, v)} : Values{};
}

// torch's _safe_softmax, as SDPA uses it: a row whose every score is -inf (all
// keys masked out) gives zeros where plain softmax gives 0/0 = NaN. The row max
// is -inf exactly for such rows (a NaN anywhere keeps the row NaN, as in eager).
Value *safe_softmax(Emit e, Value *x, int64_t d) {
  if (empty_dim(x, d)) return e.b.op<OpId::Softmax>({x}, {.dim = d}); // no keys: stays whole (and has no rows to zero)
  Value *mx = e.amax(x, {d});
  Value *ex = e.unary(OpId::Exp, e.sub(x, mx));
  Value *probs = e.div(ex, e.sum(ex, {d}));
  Value *all_masked = e.b.op<OpId::Eq>({mx, e.b.scalar(-std::numeric_limits<double>::infinity())}, {});
  return e.b.op<OpId::MaskedFill>({probs, all_masked}, {.value = 0.0});
}

// softmax(q k^T * scale + mask) v; inputs (q, k, v, attn_mask).
Values sdpa(Emit e, const Node &n) {
  attrs::Sdpa a{n};
  if (a.dropout_p() != 0.0) return {}; // dropout stays in the composite
  Value *q = n.operand(0), *k = n.operand(1), *v = n.operand(2);
  if (rank(q) < 2 || rank(k) < 2) return {};
  Value *mask = n.operands().size() > 3 ? n.operand(3) : nullptr;
  const Dims &qs = q->type().shape, &ks = k->type().shape;
  // The default scale reads E, and the causal mask is a constant [L, S].
  if ((!a.scale() && symbolic_dim(q, rank(q) - 1)) ||
      (a.is_causal() && (symbolic_dim(q, rank(q) - 2) || symbolic_dim(k, rank(k) - 2))))
    return {};
  int64_t L = qs[qs.size() - 2], S = ks[ks.size() - 2], E = qs[qs.size() - 1];
  double scale = a.scale().value_or(1.0 / std::sqrt(double(E)));
  Value *scores = e.mul(e.matmul(q, e.transpose(k, rank(k) - 2, rank(k) - 1)), scale);
  const double neg_inf = -std::numeric_limits<double>::infinity();
  auto mask_out = [&](Value *keep) {
    return e.b.op<OpId::MaskedFill>({scores, e.unary(OpId::LogicalNot, keep)}, {.value = neg_inf});
  };
  if (a.is_causal()) {
    Value *ones = e.b.op<OpId::Full>({}, {.size = std::vector<int64_t>{L, S}, .value = true, .dtype = kBool});
    scores = mask_out(e.b.op<OpId::Tril>({ones}, {.diagonal = 0}));
  }
  if (mask) scores = mask->type().dtype == kBool ? mask_out(mask) : e.add(scores, mask);
  return {e.matmul(safe_softmax(e, scores, rank(scores) - 1), v)};
}

// Inference dropout is the identity.
Values dropout(Emit, const Node &n) {
  if (attrs::Dropout{n}.train()) return {};
  return {n.operand(0)};
}

// A global average pool (output size [1, 1]) is the mean over the image,
// which fuse joins to the ops before it and which reads its image size per
// call over symbolic sizes (torch's decomposition does the same). (An empty
// image, where a mean would give NaN, never gets here: the pool raises.)
Values adaptive_avg_pool2d(Emit e, const Node &n) {
  Value *x = n.operand(0);
  const std::vector<int64_t> out = attrs::AdaptiveAvgPool2d{n}.output_size();
  if (out.size() != 2 || out[0] != 1 || out[1] != 1 || rank(x) < 3) return {};
  return {e.mean(x, {rank(x) - 2, rank(x) - 1})};
}

// A reduction's dims, keepdim and dtype, as split_reduction reads and re-emits
// them (amax and amin have no dtype). The caller's op is one of the four.
struct ReductionForm {
  std::vector<int64_t> dims;
  bool keepdim = false;
  std::optional<DType> dtype;
};
ReductionForm reduction_form(const Node &n) {
  if (n.op() == OpId::Sum) return {attrs::Sum{n}.dims(), attrs::Sum{n}.keepdim(), attrs::Sum{n}.dtype()};
  if (n.op() == OpId::Mean) return {attrs::Mean{n}.dims(), attrs::Mean{n}.keepdim(), attrs::Mean{n}.dtype()};
  if (n.op() == OpId::Amax) return {attrs::Amax{n}.dims(), attrs::Amax{n}.keepdim(), std::nullopt};
  return {attrs::Amin{n}.dims(), attrs::Amin{n}.keepdim(), std::nullopt};
}
Value *reduce(Emit e, OpId op, Value *x, const ReductionForm &f) {
  if (op == OpId::Sum) return e.b.op<OpId::Sum>({x}, {.dims = f.dims, .keepdim = f.keepdim, .dtype = f.dtype});
  if (op == OpId::Mean) return e.b.op<OpId::Mean>({x}, {.dims = f.dims, .keepdim = f.keepdim, .dtype = f.dtype});
  if (op == OpId::Amax) return e.b.op<OpId::Amax>({x}, {.dims = f.dims, .keepdim = f.keepdim});
  return e.b.op<OpId::Amin>({x}, {.dims = f.dims, .keepdim = f.keepdim});
}

// A sum, mean, amax or amin over dims that are not one run (batch_norm's
// [0, 2, 3] of NCHW), where a symbol sizes one of them, as the reduction over
// the innermost run of them, then over the others (each of the four is
// associative that way; a mean of equal-sized means is the mean). A kernel
// reads a row of one dim per call, and runs of rows walked with a stride in
// tiles, but not a row of several runs: whole, such a reduction runs eagerly
// over symbolic sizes (6-9x slower than the static kernel; these two run
// 1.2-1.4x of it, measured on [s0, 64, 56, 56]). Static sizes keep it whole:
// one kernel reads the row faster than two.
Values split_reduction(Emit e, const Node &n) {
  Value *x = n.operand(0);
  const ReductionForm whole = reduction_form(n);
  std::vector<int64_t> dims = whole.dims;
  if (dims.empty()) dims = all_dims(x);
  for (int64_t &d : dims) d = wrap(d, rank(x));
  std::sort(dims.begin(), dims.end());
  // Dims of size 1 at every size reduce nothing (the second reduction's inner ones).
  std::vector<int64_t> live;
  bool symbolic = false;
  for (int64_t d : dims) {
    symbolic |= symbolic_dim(x, d);
    if (symbolic_dim(x, d) || x->type().shape[size_t(d)] != 1) live.push_back(d);
  }
  if (!symbolic || live.empty()) return {};
  size_t run = live.size() - 1; // where the innermost run of consecutive dims starts
  while (run > 0 && live[run - 1] + 1 == live[run]) --run;
  if (run == 0) return {};
  const ReductionForm inner{{live.begin() + std::ptrdiff_t(run), live.end()}, true, whole.dtype};
  const ReductionForm rest{dims, whole.keepdim, std::nullopt};
  return {reduce(e, n.op(), reduce(e, n.op(), x, inner), rest)};
}

struct Decomposition {
  OpId op;
  Values (*rewrite)(Emit, const Node &);
};

const Decomposition kRules[] = {
    {OpId::Softmax, softmax}, {OpId::LogSoftmax, log_softmax}, {OpId::LayerNorm, layer_norm},
    {OpId::BatchNorm, batch_norm}, {OpId::Gelu, gelu}, {OpId::Silu, silu}, {OpId::Linear, linear},
    {OpId::Addmm, addmm}, {OpId::Mm, small_k_matmul}, {OpId::Matmul, small_k_matmul},
    {OpId::Var, var}, {OpId::Std, std_}, {OpId::Sdpa, sdpa}, {OpId::Dropout, dropout},
    {OpId::AdaptiveAvgPool2d, adaptive_avg_pool2d}, {OpId::Sum, split_reduction}, {OpId::Mean, split_reduction},
    {OpId::Amax, split_reduction}, {OpId::Amin, split_reduction},
};

const Decomposition *rule_for(const Node &n) {
  if (n.kind() != Node::Kind::Op) return nullptr;
  for (const Decomposition &d : kRules)
    if (d.op == n.op()) return &d;
  return nullptr;
}

// Makes `v` carry `want`'s dtype (a composite may compute in a wider type).
Value *match_dtype(Builder &b, Value *v, const ir::TensorType &want) {
  if (v->type().dtype == want.dtype) return v;
  return b.op<OpId::Cast>({v}, {.dtype = want.dtype});
}

bool same_strides(const std::optional<Dims> &a, const std::optional<Dims> &b) {
  if (a.has_value() != b.has_value()) return false;
  return !a || IntArrayRef(*a) == IntArrayRef(*b);
}

// The composite's result layout is eager's (softmax of a transposed x is
// contiguous); its decomposition's elementwise ops would lay the result out
// like their operands. A result the rule computed (an elementwise node, which
// fuse puts in a group whose kernel stores it in its type's layout) takes the
// composite's layout instead; a value the rule returned as it was (an operand,
// a view) keeps its own.
void keep_layout(const Node &composite, const Value &result, Value &rep) {
  if (same_strides(rep.type().strides, result.type().strides)) return;
  const Node *p = rep.producer();
  if (!p || p->kind() != Node::Kind::Op || p->info().kind != OpKind::Elementwise) return;
  for (const Value *o : composite.operands())
    if (o == &rep) return;
  ir::TensorType t = rep.type();
  t.strides = result.type().strides;
  rep.set_type(t);
}

bool decompose_node(ir::Graph &g, Node &n) {
  const Decomposition *rule = rule_for(n);
  if (!rule) return false;
  Builder b(g, &n);
  Values rep = rule->rewrite(Emit{b}, n);
  if (rep.empty()) return false;
  KILN_CHECK(rep.size() == n.results().size(), "decompose: ", n.mnemonic(), ": rule made ", rep.size(),
             " results for ", n.results().size());
  for (size_t i = 0; i < rep.size(); ++i) {
    Value *v = match_dtype(b, rep[i], n.result(i)->type());
    KILN_CHECK(IntArrayRef(v->type().shape) == IntArrayRef(n.result(i)->type().shape) &&
                   v->type().sym == n.result(i)->type().sym,
               "decompose: ",
               n.mnemonic(), ": decomposition has type ", v->type().str(), ", the op has ",
               n.result(i)->type().str());
    keep_layout(n, *n.result(i), *v);
    g.replace_all_uses(n.result(i), v);
  }
  g.erase(&n);
  return true;
}

class Decompose : public Pass {
public:
  std::string_view name() const override { return "decompose"; }
  bool handles_symbolic() const override { return true; }

  bool run(ir::Graph &g) override {
    bool changed = false;
    for (bool again = true; again;) {
      again = false;
      for (Node *n : g.nodes())
        if (decompose_node(g, *n)) again = changed = true;
    }
    return changed;
  }
};

} // namespace

KILN_REGISTER_PASS(Decompose, "decompose");

} // namespace kiln::passes
