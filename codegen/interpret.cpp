#include "codegen/interpret.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/error.h"

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
double round_to(double v, DType t) { return t == DType::Float32 ? double(float(v)) : v; }

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
    else r.f = to == DType::Float32 ? double(float(v.i)) : double(v.i); // one rounding
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

bool compare(KOp op, Val a, Val b, bool fp) {
  if (fp) {
    switch (op) {
    case KOp::Eq: return a.f == b.f;
    case KOp::Ne: return a.f != b.f; // true for NaN
    case KOp::Lt: return a.f < b.f;
    case KOp::Le: return a.f <= b.f;
    case KOp::Gt: return a.f > b.f;
    default: return a.f >= b.f;
    }
  }
  switch (op) {
  case KOp::Eq: return a.i == b.i;
  case KOp::Ne: return a.i != b.i;
  case KOp::Lt: return a.i < b.i;
  case KOp::Le: return a.i <= b.i;
  case KOp::Gt: return a.i > b.i;
  default: return a.i >= b.i;
  }
}

double transcendental(KOp op, double x) {
  switch (op) {
  case KOp::Exp: return std::exp(x);
  case KOp::Expm1: return std::expm1(x);
  case KOp::Log: return std::log(x);
  case KOp::Log1p: return std::log1p(x);
  case KOp::Tanh: return std::tanh(x);
  case KOp::Erf: return std::erf(x);
  case KOp::Sigmoid: return 1.0 / (1.0 + std::exp(-x));
  case KOp::Sqrt: return std::sqrt(x);
  case KOp::Floor: return std::floor(x);
  case KOp::Ceil: return std::ceil(x);
  default: return std::nearbyint(x); // Round: half to even in the default mode
  }
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
  default: r.f = transcendental(n.op, x); break;
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

Val eval(const KernelDesc &k, const Node &n, const std::vector<Val> &vals) {
  Val a = n.args[0] >= 0 ? vals[n.args[0]] : Val{};
  Val b = n.args[1] >= 0 ? vals[n.args[1]] : Val{};
  Val c = n.args[2] >= 0 ? vals[n.args[2]] : Val{};
  DType at = n.args[0] >= 0 ? k.nodes[n.args[0]].dtype : n.dtype;
  switch (n.op) {
  case KOp::Const: return Val{n.fvalue, n.ivalue};
  case KOp::Eq: case KOp::Ne: case KOp::Lt: case KOp::Le: case KOp::Gt: case KOp::Ge:
    return Val{0, compare(n.op, a, b, is_floating(at))};
  case KOp::Select: return a.i ? b : c;
  case KOp::Cast: return cast(a, at, n.dtype);
  default: return is_floating(n.dtype) ? eval_float(n, a, b, c) : eval_int(n, a, b, c);
  }
}

} // namespace

void interpret(const KernelDesc &k, void *const *buffers) {
  k.validate();
  if (k.numel() == 0) return;
  size_t rank = k.shape.size(), nbuf = k.num_buffers();
  auto strides = [&](size_t buf) -> const std::vector<int64_t> & {
    return buf < k.inputs.size() ? k.inputs[buf].strides : k.outputs[buf - k.inputs.size()].buffer.strides;
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
