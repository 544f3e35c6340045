#include "codegen/interpret.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/error.h"
#include "runtime/kernels/vecmath_kernels.h"

namespace kiln::codegen {
namespace {

// One value: floats in f (already rounded to the dtype), ints and bools in i
// (bools as 0/1, int32 sign-extended).
struct Val {
  double f = 0;
  int64_t i = 0;
};

int64_t wrap(int64_t v, DType t) {
  if (t == DType::Int32) return int64_t(int32_t(uint32_t(uint64_t(v))));
  if (t == DType::Bool) return v != 0;
  return v;
}
// float16 / bfloat16 values are held as the float32 value of their bits.
double round_to(double v, DType t) {
  if (t == DType::Float16) return double(float(Half(float(v))));
  if (t == DType::BFloat16) return double(float(BFloat16(float(v))));
  return t == DType::Float32 ? double(float(v)) : v;
}

// Two's-complement arithmetic without signed-overflow UB.
int64_t add_w(int64_t a, int64_t b) { return int64_t(uint64_t(a) + uint64_t(b)); }
int64_t sub_w(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }
int64_t mul_w(int64_t a, int64_t b) { return int64_t(uint64_t(a) * uint64_t(b)); }

Val load(const void *base, int64_t off, DType t) {
  Val v;
  switch (t) {
  case DType::Bool: v.i = static_cast<const uint8_t *>(base)[off] != 0; break;
  case DType::Int32: v.i = static_cast<const int32_t *>(base)[off]; break;
  case DType::Int64: v.i = static_cast<const int64_t *>(base)[off]; break;
  case DType::Float32: v.f = static_cast<const float *>(base)[off]; break;
  case DType::Float64: v.f = static_cast<const double *>(base)[off]; break;
  case DType::Float16: v.f = float(static_cast<const Half *>(base)[off]); break;
  case DType::BFloat16: v.f = float(static_cast<const BFloat16 *>(base)[off]); break;
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16: KILN_FAIL("internal: codegen has no lowering for dtype ", t); // refused by rule_misfit
  }
  return v;
}

void store(void *base, int64_t off, DType t, Val v) {
  switch (t) {
  case DType::Bool: static_cast<uint8_t *>(base)[off] = uint8_t(v.i != 0); break;
  case DType::Int32: static_cast<int32_t *>(base)[off] = int32_t(v.i); break;
  case DType::Int64: static_cast<int64_t *>(base)[off] = v.i; break;
  case DType::Float32: static_cast<float *>(base)[off] = float(v.f); break;
  case DType::Float64: static_cast<double *>(base)[off] = v.f; break;
  case DType::Float16: static_cast<Half *>(base)[off] = Half(float(v.f)); break;
  case DType::BFloat16: static_cast<BFloat16 *>(base)[off] = BFloat16(float(v.f)); break;
  case DType::UInt8:
  case DType::Int8:
  case DType::Int16: KILN_FAIL("internal: codegen has no lowering for dtype ", t); // refused by rule_misfit
  }
}

// Saturating float -> int (llvm.fptosi.sat): NaN -> 0, out of range -> the limit.
int64_t saturate(double f, DType to) {
  if (std::isnan(f)) return 0;
  double lo = to == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
  double hi = to == DType::Int32 ? 2147483647.0 : 9223372036854775807.0;
  if (f <= lo) return to == DType::Int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  if (f >= hi) return to == DType::Int32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  return int64_t(f);
}

Val cast(Val v, DType from, DType to) {
  Val r;
  if (from == to) return v;
  if (to == DType::Bool) {
    r.i = is_floating(from) ? (v.f != 0) : (v.i != 0); // NaN != 0 is true, as in torch
    return r;
  }
  if (is_floating(to)) {
    if (is_floating(from)) r.f = round_to(v.f, to);
    else r.f = to == DType::Float64 ? double(v.i) : round_to(double(float(v.i)), to); // through float32, as eager
    return r;
  }
  r.i = is_floating(from) ? saturate(v.f, to) : wrap(v.i, to);
  return r;
}

double fmin_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? a : b; // -0 < +0, as llvm.minimum
  return a < b ? a : b;
}
double fmax_nan(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

// Only the six comparisons reach here (eval_args); anything else fails loudly
// rather than being taken for one of them.
bool compare(KOp op, Val a, Val b, bool fp) {
  if (op == KOp::Eq) return fp ? a.f == b.f : a.i == b.i;
  if (op == KOp::Ne) return fp ? a.f != b.f : a.i != b.i; // true for NaN
  if (op == KOp::Lt) return fp ? a.f < b.f : a.i < b.i;
  if (op == KOp::Le) return fp ? a.f <= b.f : a.i <= b.i;
  if (op == KOp::Gt) return fp ? a.f > b.f : a.i > b.i;
  if (op == KOp::Ge) return fp ? a.f >= b.f : a.i >= b.i;
  KILN_FAIL("interpret: ", op_name(op), " is not a comparison");
}

double transcendental(KOp op, DType t, double x) {
  switch (op) {
#define X(Id, fn, f64)                                                                                     \
  case KOp::Id: return kiln_vm_##fn##_f64(x);
    KILN_VECMATH_OPS(X)
#undef X
#define X(Id, fn, def)                                                                                     \
  case KOp::Id: return t == DType::Float32 ? double(kiln_lm_##fn##_f32(float(x))) : kiln_lm_##fn##_f64(x);
    KILN_LIBM_OPS(X)
#undef X
#define X(Id, fn, def) case KOp::Id:
    KILN_LIBM2_OPS(X)
#undef X
    break; // binary: eval_float
  case KOp::Sqrt: return std::sqrt(x);
  case KOp::Floor: return std::floor(x);
  case KOp::Ceil: return std::ceil(x);
  case KOp::Round: return std::nearbyint(x); // half to even in the default mode
  case KOp::Const: case KOp::Load: case KOp::Add: case KOp::Sub: case KOp::Mul: case KOp::Div: case KOp::Min: case KOp::Max:
  case KOp::Eq: case KOp::Ne: case KOp::Lt: case KOp::Le: case KOp::Gt: case KOp::Ge: case KOp::And: case KOp::Or:
  case KOp::Xor: case KOp::Neg: case KOp::Abs: case KOp::Not: case KOp::Cast: case KOp::Rsqrt: case KOp::Fma: case KOp::Select:
  case KOp::Reduce:
    break; // eval_float handles these itself, or they are not float unary ops
  }
  KILN_FAIL("internal: interpreter: ", op_name(op), " is not a float unary op");
}

Val eval_float(const Node &n, Val a, Val b, Val c) {
  Val r;
  double x = a.f, y = b.f;
  switch (n.op) {
  case KOp::Add: r.f = x + y; break;
  case KOp::Sub: r.f = x - y; break;
  case KOp::Mul: r.f = x * y; break;
  case KOp::Div: r.f = x / y; break;
  case KOp::Min: r.f = fmin_nan(x, y); break;
  case KOp::Max: r.f = fmax_nan(x, y); break;
  case KOp::Neg: r.f = -x; break;
  case KOp::Abs: r.f = std::fabs(x); break;
  case KOp::Fma: r.f = std::fma(x, y, c.f); break;
  case KOp::Rsqrt: r.f = 1.0 / round_to(std::sqrt(x), n.dtype); break;
#define X(Id, fn, def)                                                                                     \
  case KOp::Id:                                                                                            \
    r.f = n.dtype == DType::Float32 ? double(kiln_lm2_##fn##_f32(float(x), float(y))) : kiln_lm2_##fn##_f64(x, y); \
    break;
    KILN_LIBM2_OPS(X)
#undef X
  default: r.f = transcendental(n.op, n.dtype, x); break;
  }
  r.f = round_to(r.f, n.dtype);
  return r;
}

Val eval_int(const Node &n, Val a, Val b, Val c) {
  Val r;
  int64_t x = a.i, y = b.i;
  DType t = n.dtype;
  int64_t min_v = t == DType::Int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  switch (n.op) {
  case KOp::Add: r.i = add_w(x, y); break;
  case KOp::Sub: r.i = sub_w(x, y); break;
  case KOp::Mul: r.i = mul_w(x, y); break;
  case KOp::Div: r.i = y == 0 ? 0 : (x == min_v && y == -1 ? min_v : x / y); break;
  case KOp::Min: r.i = std::min(x, y); break;
  case KOp::Max: r.i = std::max(x, y); break;
  case KOp::Neg: r.i = sub_w(0, x); break;
  case KOp::Abs: r.i = x < 0 ? sub_w(0, x) : x; break;
  case KOp::And: r.i = x & y; break;
  case KOp::Or: r.i = x | y; break;
  case KOp::Xor: r.i = x ^ y; break;
  case KOp::Not: r.i = t == DType::Bool ? !x : ~x; break;
  case KOp::Fma: r.i = add_w(mul_w(x, y), c.i); break;
  default: KILN_FAIL("interpret: ", op_name(n.op), " on ", t);
  }
  r.i = wrap(r.i, t);
  return r;
}

// `at` is the operand type (the result type for nullary nodes).
Val eval_args(const Node &n, DType at, Val a, Val b, Val c) {
  switch (n.op) {
  case KOp::Const: return Val{n.fvalue, n.ivalue};
  case KOp::Eq: case KOp::Ne: case KOp::Lt: case KOp::Le: case KOp::Gt: case KOp::Ge:
    return Val{0, compare(n.op, a, b, is_floating(at))};
  case KOp::Select: return a.i ? b : c;
  case KOp::Cast: return cast(a, at, n.dtype);
  default: return is_floating(n.dtype) ? eval_float(n, a, b, c) : eval_int(n, a, b, c);
  }
}

Val eval(const KernelDesc &k, const Node &n, const std::vector<Val> &vals) {
  Val a = n.args[0] >= 0 ? vals[n.args[0]] : Val{};
  Val b = n.args[1] >= 0 ? vals[n.args[1]] : Val{};
  Val c = n.args[2] >= 0 ? vals[n.args[2]] : Val{};
  DType at = n.args[0] >= 0 ? k.nodes[n.args[0]].dtype : n.dtype;
  return eval_args(n, at, a, b, c);
}

// ---- row-wise reductions

// The identity of `combine` on `t`, which a reduction starts from.
Val reduce_identity(KOp combine, DType t) {
  double inf = std::numeric_limits<double>::infinity();
  bool i32 = t == DType::Int32;
  int64_t lo = i32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
  int64_t hi = i32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
  if (combine == KOp::Add) return Val{0, 0};
  if (combine == KOp::Mul) return Val{1, 1};
  if (combine == KOp::Max) return Val{-inf, lo};
  if (combine == KOp::Min) return Val{inf, hi};
  KILN_FAIL("interpret: ", op_name(combine), " is not a reduction combine");
}

// A row-reduction kernel, row by row: each node's values over the whole row are
// computed in node order, so a reduction sees its operand's complete row. The
// fold is sequential (the compiled code's order differs: see codegen/kernel.h).
// A row of several dims (row_rank > 1) is walked as one flat index j, in
// row-major order, through a table of each buffer's offsets.
class RowInterpreter {
public:
  RowInterpreter(const KernelDesc &k, void *const *buffers)
      : k_(k), bufs_(buffers), per_row_(k.per_row_nodes()), len_(k.row_length()),
        vals_(k.nodes.size(), std::vector<Val>(size_t(len_))), row_(k.nodes.size()) {
    offsets_.assign(k.num_buffers(), std::vector<int64_t>(size_t(len_), 0));
    size_t first = k.shape.size() - size_t(k.row_rank);
    for (size_t b = 0; b < k.num_buffers(); ++b)
      for (int64_t j = 0; j < len_; ++j) {
        int64_t rest = j, off = 0;
        for (size_t d = k.shape.size(); d-- > first;) {
          off += (rest % k.shape[d]) * strides(b)[d];
          rest /= k.shape[d];
        }
        offsets_[b][size_t(j)] = off;
      }
  }

  void run() {
    size_t outer_rank = k_.shape.size() - size_t(k_.row_rank);
    std::vector<int64_t> idx(outer_rank, 0), base(k_.num_buffers(), 0);
    for (size_t d = 0; d < outer_rank; ++d)
      if (k_.shape[d] == 0) return;
    for (;;) {
      run_row(base);
      // Odometer over the outer dims, keeping every buffer's row offset.
      size_t d = outer_rank;
      for (; d-- > 0;) {
        for (size_t b = 0; b < base.size(); ++b) base[b] += strides(b)[d];
        if (++idx[d] < k_.shape[d]) break;
        for (size_t b = 0; b < base.size(); ++b) base[b] -= strides(b)[d] * k_.shape[d];
        idx[d] = 0;
      }
      if (d == size_t(-1)) return;
    }
  }

private:
  const std::vector<int64_t> &strides(size_t buf) const {
    return k_.buffer(buf).strides;
  }

  // Per-row nodes are evaluated once (row_), the others at every j (vals_).
  void run_row(const std::vector<int64_t> &base) {
    for (size_t i = 0; i < k_.nodes.size(); ++i) {
      const Node &n = k_.nodes[i];
      if (n.op == KOp::Reduce) {
        row_[i] = fold(n);
        continue;
      }
      if (per_row_[i]) {
        row_[i] = evaluate(n, base, 0, [&](int32_t a) { return row_[a]; });
        continue;
      }
      for (int64_t j = 0; j < len_; ++j)
        vals_[i][j] = evaluate(n, base, j, [&](int32_t a) { return at(a, j); });
    }
    for (size_t o = 0; o < k_.outputs.size(); ++o) store_output(o, base);
  }

  Val at(int32_t node, int64_t j) const { return per_row_[node] ? row_[node] : vals_[node][j]; }

  template <class Arg>
  Val evaluate(const Node &n, const std::vector<int64_t> &base, int64_t j, Arg &&arg) const {
    if (n.op == KOp::Load) {
      // Per-row loads come with j = 0, also for an empty row (their row strides are 0).
      int64_t off = base[n.input] + (len_ > 0 ? offsets_[size_t(n.input)][size_t(j)] : 0);
      return load(bufs_[n.input], off, n.dtype);
    }
    Val v[3];
    for (int a = 0; a < op_arity(n.op); ++a) v[a] = arg(n.args[a]);
    DType at = n.args[0] >= 0 ? k_.nodes[n.args[0]].dtype : n.dtype;
    return eval_args(n, at, v[0], v[1], v[2]);
  }

  // acc = combine(acc, x) left to right, each step rounded to the dtype.
  Val fold(const Node &n) const {
    Node step;
    step.op = n.combine;
    step.dtype = n.dtype;
    Val acc = reduce_identity(n.combine, n.dtype);
    for (int64_t j = 0; j < len_; ++j) acc = eval_args(step, n.dtype, acc, at(n.args[0], j), Val{});
    if (n.combine == KOp::Add && is_floating(n.dtype)) acc.f += 0.0; // -0 sums to +0, as torch
    return acc;
  }

  void store_output(size_t o, const std::vector<int64_t> &base) {
    const OutputSpec &out = k_.outputs[o];
    size_t buf = k_.inputs.size() + o;
    if (k_.constant_along_row(out.buffer.strides) && per_row_[out.value]) { // row statistics: once per row, even if empty
      store(bufs_[buf], base[buf], out.buffer.dtype, row_[out.value]);
      return;
    }
    for (int64_t j = 0; j < len_; ++j)
      store(bufs_[buf], base[buf] + offsets_[buf][size_t(j)], out.buffer.dtype, at(out.value, j));
  }

  const KernelDesc &k_;
  void *const *bufs_;
  std::vector<uint8_t> per_row_;
  int64_t len_;
  std::vector<std::vector<int64_t>> offsets_; // per buffer, per row element j: offset from the row's base
  std::vector<std::vector<Val>> vals_;
  std::vector<Val> row_;
};

} // namespace

void interpret(const KernelDesc &desc, void *const *given) {
  desc.validate();
  if (desc.runtime_layout) { // this call's extents and strides, as the compiled code reads them
    const int64_t *words = static_cast<const int64_t *>(given[desc.num_buffers()]);
    KernelDesc at = desc.at_layout(words);
    for (size_t b = 0; b < desc.num_buffers(); ++b)
      KILN_CHECK(words[desc.shape.size() * (2 + b) - 1] == desc.buffer(b).strides.back(), "kernel: buffer ", b,
                 "'s last-dim stride ", words[desc.shape.size() * (2 + b) - 1], " is not the compiled ",
                 desc.buffer(b).strides.back());
    for (int64_t e : at.shape) KILN_CHECK(e >= 0, "kernel: negative runtime extent ", e);
    interpret(at, given);
    return;
  }
  if (desc.runtime_row) { // this call's extent and row length, as the compiled code reads them
    const int64_t *extents = static_cast<const int64_t *>(given[desc.num_buffers()]);
    KILN_CHECK(extents[1] >= 0, "kernel: negative runtime row length ", extents[1]);
    KernelDesc at = desc.at_row_length(extents[1]);
    interpret(at, given); // (its runtime dim 0 reads extents[0])
    return;
  }
  if (desc.runtime_dim0) { // this call's extent, as the compiled code reads it
    KernelDesc at = desc;
    at.runtime_dim0 = false;
    at.shape[0] = *static_cast<const int64_t *>(given[desc.num_buffers()]);
    KILN_CHECK(at.shape[0] >= 0, "kernel: negative runtime extent ", at.shape[0]);
    interpret(at, given);
    return;
  }
  const KernelDesc &k = desc;
  // An output written in place uses its input's pointer, as the compiled code does.
  std::vector<void *> pointers(given, given + k.num_buffers());
  for (size_t o = 0; o < k.outputs.size(); ++o)
    if (k.aliased_input(o) >= 0) pointers[k.inputs.size() + o] = pointers[size_t(k.aliased_input(o))];
  void *const *buffers = pointers.data();
  if (k.has_reductions()) {
    RowInterpreter(k, buffers).run();
    return;
  }
  if (k.numel() == 0) return;
  size_t rank = k.shape.size(), nbuf = k.num_buffers();
  auto strides = [&](size_t buf) -> const std::vector<int64_t> & {
    return k.buffer(buf).strides;
  };
  std::vector<int64_t> idx(rank, 0), off(nbuf, 0);
  std::vector<Val> vals(k.nodes.size());
  for (int64_t e = 0, n = k.numel(); e < n; ++e) {
    for (size_t i = 0; i < k.nodes.size(); ++i) {
      const Node &node = k.nodes[i];
      vals[i] = node.op == KOp::Load ? load(buffers[node.input], off[node.input], node.dtype)
                                     : eval(k, node, vals);
    }
    for (size_t o = 0; o < k.outputs.size(); ++o) {
      size_t buf = k.inputs.size() + o;
      store(buffers[buf], off[buf], k.outputs[o].buffer.dtype, vals[k.outputs[o].value]);
    }
    // Odometer step over the iteration space, keeping every buffer's offset.
    for (size_t d = rank; d-- > 0;) {
      for (size_t b = 0; b < nbuf; ++b) off[b] += strides(b)[d];
      if (++idx[d] < k.shape[d]) break;
      for (size_t b = 0; b < nbuf; ++b) off[b] -= strides(b)[d] * k.shape[d];
      idx[d] = 0;
    }
  }
}

} // namespace kiln::codegen
