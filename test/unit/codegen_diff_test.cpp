// Differential test: random kernels (random shapes, broadcast/permuted operands,
// random expression DAGs) compiled by the JIT vs codegen::interpret.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "codegen/interpret.h"
#include "codegen/jit.h"
#include "runtime/ops.h"

using namespace kiln::codegen;
using kiln::DType;

namespace {

struct Operand {
  std::vector<int64_t> strides;
  int64_t elements = 1;
};

// A dense buffer over `shape`, broadcast along some dims, laid out in a random dim order.
Operand random_operand(std::mt19937 &g, const std::vector<int64_t> &shape, bool allow_broadcast) {
  size_t rank = shape.size();
  std::vector<int64_t> sizes(rank);
  for (size_t d = 0; d < rank; ++d) sizes[d] = (allow_broadcast && g() % 3 == 0) ? 1 : shape[d];
  std::vector<size_t> order(rank);
  std::iota(order.begin(), order.end(), 0);
  if (g() % 2) std::shuffle(order.begin(), order.end(), g);
  Operand op;
  op.strides.assign(rank, 0);
  for (size_t k = rank; k-- > 0;) {
    size_t d = order[k];
    op.strides[d] = sizes[d] == 1 ? 0 : op.elements;
    op.elements *= sizes[d];
  }
  return op;
}

std::vector<int64_t> random_shape(std::mt19937 &g) {
  size_t rank = 1 + g() % 4;
  std::vector<int64_t> shape(rank);
  for (size_t d = 0; d + 1 < rank; ++d) shape[d] = 1 + g() % 5;
  shape[rank - 1] = 1 + g() % 70; // crosses vector widths and remainders
  return shape;
}

struct Case {
  KernelDesc desc;
  std::vector<int64_t> buffer_elements; // per buffer
};

Expr pick(std::mt19937 &g, const std::vector<Expr> &pool) {
  // Prefer recent values so that DAGs get deep, but reuse old ones too.
  size_t n = pool.size();
  return g() % 3 ? pool[n - 1 - g() % std::min<size_t>(n, 3)] : pool[g() % n];
}

// Float DAGs: every arithmetic result is squashed by tanh/sigmoid/erf, so values
// stay O(1) and errors cannot be amplified by cancellation.
Case random_float_case(std::mt19937 &g, DType t) {
  auto shape = random_shape(g);
  KernelBuilder k(shape);
  Case c;
  std::vector<Expr> pool;
  int inputs = 1 + g() % 3;
  for (int i = 0; i < inputs; ++i) {
    Operand op = random_operand(g, shape, i > 0);
    pool.push_back(k.input(t, op.strides));
    c.buffer_elements.push_back(op.elements);
  }
  auto squash = [&](Expr e) {
    switch (g() % 3) {
    case 0: return tanh(e);
    case 1: return sigmoid(e);
    default: return erf(e);
    }
  };
  int steps = 4 + g() % 10;
  for (int s = 0; s < steps; ++s) {
    Expr a = pick(g, pool), b = pick(g, pool);
    switch (g() % 9) {
    case 0: pool.push_back(squash(a + b)); break;
    case 1: pool.push_back(squash(a - b * 1.5)); break;
    case 2: pool.push_back(a * sigmoid(b)); break; // |result| <= |a|: no growth
    case 3: pool.push_back(min(a, b)); break;
    case 4: pool.push_back(max(a, -b)); break;
    case 5: pool.push_back(k.select(k.binary(KOp::Lt, a, b), a, b * 0.5)); break;
    case 6: pool.push_back(squash(k.fma(a, b, pick(g, pool)))); break;
    case 7: pool.push_back(log1p(abs(a)) + exp(-abs(b))); break;
    default: pool.push_back(squash(expm1(a) + log(abs(b) + 0.5))); break;
    }
  }
  Operand out = random_operand(g, shape, false);
  k.output(pool.back(), out.strides);
  c.buffer_elements.push_back(out.elements);
  if (g() % 2) {
    k.output(k.cast(pool[pool.size() / 2], DType::Float64), out.strides);
    c.buffer_elements.push_back(out.elements);
  }
  c.desc = k.build();
  return c;
}

Case random_int_case(std::mt19937 &g, DType t) {
  auto shape = random_shape(g);
  KernelBuilder k(shape);
  Case c;
  std::vector<Expr> pool;
  int inputs = 1 + g() % 3;
  for (int i = 0; i < inputs; ++i) {
    Operand op = random_operand(g, shape, i > 0);
    pool.push_back(k.input(t, op.strides));
    c.buffer_elements.push_back(op.elements);
  }
  DType other = t == DType::Int32 ? DType::Int64 : DType::Int32;
  int steps = 4 + g() % 10;
  for (int s = 0; s < steps; ++s) {
    Expr a = pick(g, pool), b = pick(g, pool);
    switch (g() % 11) {
    case 0: pool.push_back(a + b); break;
    case 1: pool.push_back(a - b); break;
    case 2: pool.push_back(a * b); break; // wraps
    case 3: pool.push_back(a / b); break; // /0 and MIN/-1 defined
    case 4: pool.push_back(min(a, b)); break;
    case 5: pool.push_back(max(a, -b)); break;
    case 6: pool.push_back(k.binary(KOp::Xor, a, k.binary(KOp::And, b, k.constant(0x5f5f, t)))); break;
    case 7: pool.push_back(k.select(k.binary(KOp::Ge, a, b), abs(a), k.unary(KOp::Not, b))); break;
    case 8: pool.push_back(k.cast(k.cast(a, other) * k.cast(b, other), t)); break;
    case 9: pool.push_back(k.fma(a, b, pick(g, pool))); break;
    default: pool.push_back(k.cast(k.binary(KOp::Ne, a, b), t) + a); break;
    }
  }
  Operand out = random_operand(g, shape, false);
  k.output(pool.back(), out.strides);
  c.buffer_elements.push_back(out.elements);
  k.output(k.binary(KOp::Lt, pool[pool.size() / 2], pool.back()), out.strides); // a bool output
  c.buffer_elements.push_back(out.elements);
  c.desc = k.build();
  return c;
}

// Byte buffers for every operand, inputs filled with random values of their dtype.
std::vector<std::vector<uint8_t>> make_buffers(std::mt19937 &g, const Case &c) {
  std::vector<std::vector<uint8_t>> bufs;
  size_t nin = c.desc.inputs.size();
  for (size_t b = 0; b < c.buffer_elements.size(); ++b) {
    DType t = b < nin ? c.desc.inputs[b].dtype : c.desc.outputs[b - nin].buffer.dtype;
    size_t n = size_t(c.buffer_elements[b]);
    std::vector<uint8_t> bytes(n * kiln::itemsize(t), 0xcd);
    if (b < nin) {
      std::uniform_real_distribution<double> real(-3, 3);
      for (size_t i = 0; i < n; ++i) {
        int64_t iv = g() % 8 == 0 ? 0 : int64_t(g() % 2001) - 1000;
        if (g() % 50 == 0) iv = t == DType::Int32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
        switch (t) {
        case DType::Float32: { float v = float(real(g)); std::memcpy(&bytes[i * 4], &v, 4); break; }
        case DType::Float64: { double v = real(g); std::memcpy(&bytes[i * 8], &v, 8); break; }
        case DType::Int32: { int32_t v = int32_t(iv); std::memcpy(&bytes[i * 4], &v, 4); break; }
        case DType::Int64: { std::memcpy(&bytes[i * 8], &iv, 8); break; }
        case DType::Bool: bytes[i] = uint8_t(iv & 1); break;
        case DType::UInt8:
        case DType::Int8:
        case DType::Int16:
        case DType::Float16:
        case DType::BFloat16: ADD_FAILURE() << "codegen lowers no kernel of dtype " << t; break;
        }
      }
    }
    bufs.push_back(std::move(bytes));
  }
  return bufs;
}

std::vector<void *> pointers(std::vector<std::vector<uint8_t>> &bufs) {
  std::vector<void *> p;
  for (auto &b : bufs) p.push_back(b.data());
  return p;
}

// Compares output buffers element-wise; floats within `tol` (absolute, values are O(1)).
void expect_same_outputs(const Case &c, std::vector<std::vector<uint8_t>> &jit,
                         std::vector<std::vector<uint8_t>> &ref, double tol, int seed) {
  size_t nin = c.desc.inputs.size();
  for (size_t o = 0; o < c.desc.outputs.size(); ++o) {
    DType t = c.desc.outputs[o].buffer.dtype;
    const auto &a = jit[nin + o], &b = ref[nin + o];
    if (!kiln::is_floating(t)) {
      EXPECT_EQ(a, b) << "seed " << seed << " output " << o << "\n" << c.desc.to_string();
      continue;
    }
    size_t n = a.size() / kiln::itemsize(t);
    for (size_t i = 0; i < n; ++i) {
      double x, y;
      if (t == DType::Float32) {
        float fx, fy;
        std::memcpy(&fx, &a[i * 4], 4);
        std::memcpy(&fy, &b[i * 4], 4);
        x = fx, y = fy;
      } else {
        std::memcpy(&x, &a[i * 8], 8);
        std::memcpy(&y, &b[i * 8], 8);
      }
      bool same = (std::isnan(x) && std::isnan(y)) || std::abs(x - y) <= tol;
      ASSERT_TRUE(same) << "seed " << seed << " output " << o << " element " << i << ": jit " << x
                        << " vs interpreter " << y << "\n" << c.desc.to_string();
    }
  }
}

void run_cases(DType t, int count, double tol) {
  Jit jit;
  for (int seed = 0; seed < count; ++seed) {
    std::mt19937 g(1000u * unsigned(t) + unsigned(seed));
    Case c = kiln::is_floating(t) ? random_float_case(g, t) : random_int_case(g, t);
    auto in_jit = make_buffers(g, c);
    auto in_ref = in_jit;
    auto kernel = jit.compile(c.desc);
    auto pj = pointers(in_jit), pr = pointers(in_ref);
    kernel->run(pj.data());
    interpret(c.desc, pr.data());
    expect_same_outputs(c, in_jit, in_ref, tol, seed);
  }
}

} // namespace

// float32 transcendentals differ from std:: by < 5e-7 each (test/unit/vecmath_test.cpp);
// a dozen squashed levels stay far below 1e-5.
TEST(CodegenDiff, RandomFloat32Kernels) { run_cases(DType::Float32, 25, 1e-5); }
TEST(CodegenDiff, RandomFloat64Kernels) { run_cases(DType::Float64, 12, 1e-12); }
TEST(CodegenDiff, RandomInt32Kernels) { run_cases(DType::Int32, 20, 0); }
TEST(CodegenDiff, RandomInt64Kernels) { run_cases(DType::Int64, 12, 0); }
