// Kernels whose dim 0 is read per call (KernelDesc::runtime_dim0, issue 17):
// one compiled kernel, run at many extents (0, 1, vector and block tails,
// enough rows for several threads), against the plain C++ evaluator
// (codegen/interpret.h) of the same description at that extent.
#include <cmath>
#include <functional>

#include <gtest/gtest.h>

#include <kiln/kiln.h>

#include "codegen/interpret.h"
#include "codegen/gemm/path.h"
#include "codegen/op_lowering.h"
#include "expect_error.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/sym_infer.h"
#include "jit_test_util.h"
#include "passes/pass_manager.h"
#include "runtime/error.h"

namespace kiln::test {
namespace {

using codegen::Expr;
using kiln::testing::expect_error;
using codegen::KernelBuilder;
using codegen::KernelDesc;
using codegen::KOp;

// A kernel family: builds the description for a given dim-0 size.
struct Case {
  const char *name;
  std::function<KernelDesc(int64_t)> build;
  double tolerance; // relative; 0 = bit-exact
};

// Elements a buffer spans at extent n: 1 + sum (size_d - 1) * |stride_d|.
size_t buffer_elems(const std::vector<int64_t> &shape, const std::vector<int64_t> &strides) {
  for (int64_t s : shape)
    if (s == 0) return 0;
  int64_t last = 0;
  for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * std::abs(strides[d]);
  return size_t(last + 1);
}

KernelDesc at_extent(KernelDesc k, int64_t n) {
  k.shape[0] = n;
  return k;
}

std::vector<std::vector<uint8_t>> make_buffers(const KernelDesc &k, uint32_t seed) {
  std::vector<std::vector<uint8_t>> bufs;
  for (size_t i = 0; i < k.num_buffers(); ++i) {
    const codegen::BufferSpec &b = i < k.inputs.size() ? k.inputs[i] : k.outputs[i - k.inputs.size()].buffer;
    size_t n = buffer_elems(k.shape, b.strides);
    switch (b.dtype) {
    case DType::Float32: bufs.push_back(bytes_of(random_values<float>(n, -3, 3, seed + uint32_t(i)))); break;
    case DType::Int32: bufs.push_back(bytes_of(random_values<int32_t>(n, -50, 50, seed + uint32_t(i)))); break;
    default: bufs.emplace_back(n * itemsize(b.dtype), uint8_t(0)); break;
    }
  }
  return bufs;
}

void expect_same(const KernelDesc &k, const std::vector<std::vector<uint8_t>> &got,
                 const std::vector<std::vector<uint8_t>> &want, double tol, const std::string &what) {
  for (size_t i = 0; i < k.num_buffers(); ++i) { // inputs too: an in-place output lands in its input
    DType t = i < k.inputs.size() ? k.inputs[i].dtype : k.outputs[i - k.inputs.size()].buffer.dtype;
    if (t != DType::Float32 || tol == 0) {
      ASSERT_EQ(got[i], want[i]) << what << ": buffer " << i;
      continue;
    }
    std::vector<float> g = values_of<float>(got[i]), w = values_of<float>(want[i]);
    ASSERT_EQ(g.size(), w.size());
    for (size_t e = 0; e < g.size(); ++e)
      ASSERT_NEAR(g[e], w[e], tol * (1 + std::abs(w[e]))) << what << ": buffer " << i << " element " << e;
  }
}

std::vector<Case> cases() {
  return {
      {"broadcast row vector, [n, 1024]",
       [](int64_t n) {
         KernelBuilder k({n, 1024});
         Expr x = k.input(DType::Float32), a = k.input(DType::Float32, {0, 1});
         k.output(x * a + 1.5);
         return k.build();
       },
       0},
      {"contiguous [n, 3] collapsed into one loop of 3n",
       [](int64_t n) {
         KernelBuilder k({n, 3});
         Expr x = k.input(DType::Float32), y = k.input(DType::Float32);
         k.output(max(x * 2.0 - y, 0.25));
         return k.build();
       },
       0},
      {"transposed inner dims [n, 5, 7]",
       [](int64_t n) {
         KernelBuilder k({n, 5, 7});
         Expr x = k.input(DType::Float32, {35, 1, 5});
         k.output(x * x);
         return k.build();
       },
       0},
      {"int32 compare and select to bool and int32, [n, 33]",
       [](int64_t n) {
         KernelBuilder k({n, 33});
         Expr x = k.input(DType::Int32), y = k.input(DType::Int32, {0, 1});
         Expr lt = k.binary(KOp::Lt, x, y);
         k.output(lt);
         k.output(k.select(lt, x, y));
         return k.build();
       },
       0},
      {"in place, [n, 17]",
       [](int64_t n) {
         KernelBuilder k({n, 17});
         Expr x = k.input(DType::Float32);
         k.output(x * 3.0 + 1.0);
         k.alias_output(0, 0);
         return k.build();
       },
       0},
      {"softmax rows of 1000",
       [](int64_t n) {
         KernelBuilder k({n, 1000});
         Expr x = k.input(DType::Float32);
         Expr e = k.unary(KOp::Exp, x - k.reduce(KOp::Max, x));
         k.output(e / k.reduce(KOp::Add, e));
         return k.build();
       },
       2e-6},
      {"row statistics of short rows (row blocks), [n, 12]",
       [](int64_t n) {
         KernelBuilder k({n, 12});
         Expr x = k.input(DType::Float32);
         k.output_per_row(k.reduce(KOp::Add, x * x));
         k.output_per_row(k.reduce(KOp::Max, x));
         return k.build();
       },
       1e-6},
      {"layer norm over [n, 4, 100]",
       [](int64_t n) {
         KernelBuilder k({n, 4, 100});
         Expr x = k.input(DType::Float32), g = k.input(DType::Float32, {0, 0, 1});
         Expr c = x - reduce_mean(x);
         k.output(c * rsqrt(reduce_mean(c * c) + 1e-5) * g);
         return k.build();
       },
       1e-5},
      {"rows down columns (tiles), [n, 32, 16] rows along the last dim of stride 32",
       [](int64_t n) {
         KernelBuilder k({n, 32, 16});
         Expr x = k.input(DType::Float32, {512, 1, 32});
         k.output_per_row(k.reduce(KOp::Add, x));
         return k.build();
       },
       1e-5}, // the evaluator sums 16 floats in float32, the kernel in double
      {"rows of two dims, [n, 6, 10] with row rank 2",
       [](int64_t n) {
         KernelBuilder k({n, 6, 10}, 2);
         Expr x = k.input(DType::Float32);
         k.output(x - reduce_mean(x));
         return k.build();
       },
       1e-6},
  };
}

const std::vector<int64_t> kExtents = {0, 1, 2, 3, 7, 15, 16, 17, 31, 64, 100, 257, 1000, 3000};

KernelDesc runtime_desc(const Case &c, int64_t traced) {
  KernelDesc k = c.build(traced);
  k.runtime_dim0 = true;
  return k;
}

TEST(RuntimeExtent, OneKernelServesEveryExtent) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    KernelDesc k = runtime_desc(c, 8);
    auto kernel = test_jit().compile(k);
    int64_t compiles = test_jit().stats().compiles;
    for (int64_t n : kExtents) {
      KernelDesc at = at_extent(k, n);
      at.runtime_dim0 = false;
      std::vector<std::vector<uint8_t>> want = make_buffers(at, uint32_t(n));
      std::vector<std::vector<uint8_t>> got = want;
      std::vector<void *> ref, run;
      for (auto &b : want) ref.push_back(b.data());
      for (auto &b : got) run.push_back(b.data());
      codegen::interpret(at, ref.data());
      run.push_back(&n);
      EXPECT_EQ(test_jit().compile(k).get(), kernel.get());
      kernel->run(run.data());
      expect_same(at, got, want, c.tolerance, std::string(c.name) + " at n = " + std::to_string(n));
    }
    EXPECT_EQ(test_jit().stats().compiles, compiles) << "a new extent compiled a kernel";
  }
}

// The traced extent picks no code: kernels traced at different sizes share
// their key, and so the compiled kernel.
TEST(RuntimeExtent, TracedExtentIsNotPartOfTheKey) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    KernelDesc a = runtime_desc(c, 8), b = runtime_desc(c, 300);
    EXPECT_EQ(a.key(), b.key());
    EXPECT_EQ(test_jit().compile(a).get(), test_jit().compile(b).get());
    KernelDesc fixed = c.build(8);
    EXPECT_NE(fixed.key(), a.key()) << "a static kernel must not share its key with a runtime one";
  }
}

// The interpreter reads the extent as the compiled code does.
TEST(RuntimeExtent, InterpreterReadsTheExtent) {
  KernelDesc k = runtime_desc(cases()[1], 8);
  int64_t n = 5;
  std::vector<float> x(15, 2.0f), y(15, 1.0f), out(15, -7.0f);
  void *bufs[] = {x.data(), y.data(), out.data(), &n};
  codegen::interpret(k, bufs);
  for (float v : out) EXPECT_EQ(v, 3.0f);
  n = -1;
  EXPECT_THROW(codegen::interpret(k, bufs), Error);
}

// A runtime row (KernelDesc::runtime_row), traced at [n, L]: softmax rows
// of x * s + b (x row-major, so dim 0 steps by the row length; s over the
// rows; b one per row) and the rows' sums of x, which a later reduction uses
// (a Shifted sum: L * K at the call's L), with the rows' max of x - total.
// The static kernel at each length is
// the same desc without runtime_row.
KernelDesc row_kernel(int64_t n, int64_t length) {
  KernelBuilder k({n, length});
  Expr x = k.input(DType::Float32), s = k.input(DType::Float32, {0, 1}), b = k.input(DType::Float32, {1, 0});
  Expr v = x * s + b;
  Expr e = k.unary(KOp::Exp, v - k.reduce(KOp::Max, v));
  k.output(e / k.reduce(KOp::Add, e));
  Expr total = k.reduce(KOp::Add, x);
  k.output_per_row(total);
  k.output_per_row(k.reduce(KOp::Max, x - total));
  KernelDesc d = k.build();
  d.runtime_dim0 = d.runtime_row = true;
  d.row_strided = {1, 0, 0, 1, 0, 0};
  return d;
}

// Lengths across the vector tails and the float sums' blocks of 1024.
TEST(RuntimeExtent, OneKernelServesEveryRowLength) {
  KernelDesc k = row_kernel(3, 40);
  auto kernel = test_jit().compile(k);
  EXPECT_EQ(k.key(), row_kernel(9, 1500).key()) << "the traced sizes must pick no code";
  KernelDesc fixed = k;
  fixed.runtime_row = false;
  fixed.row_strided.clear();
  EXPECT_NE(fixed.key(), k.key());
  int64_t compiles = test_jit().stats().compiles;
  for (int64_t length : {1, 2, 7, 16, 17, 33, 1023, 1024, 1025, 2049, 3001}) {
    for (int64_t n : {1, 5}) {
      KernelDesc at = at_extent(k.at_row_length(length), n);
      at.runtime_dim0 = false;
      std::vector<std::vector<uint8_t>> want = make_buffers(at, uint32_t(n * length));
      std::vector<std::vector<uint8_t>> got = want;
      std::vector<void *> ref, run;
      for (auto &b : want) ref.push_back(b.data());
      for (auto &b : got) run.push_back(b.data());
      codegen::interpret(at, ref.data());
      int64_t extents[2] = {n, length};
      run.push_back(extents);
      kernel->run(run.data());
      // (The interpreter sums a row of 3001 in float32, one element at a time: ~1e-4 off.)
      expect_same(at, got, want, 1e-4, "at n = " + std::to_string(n) + ", length " + std::to_string(length));
      // The interpreter reads both sizes as the compiled code does.
      std::vector<std::vector<uint8_t>> interpreted = make_buffers(at, uint32_t(n * length));
      std::vector<void *> ptrs;
      for (auto &b : interpreted) ptrs.push_back(b.data());
      ptrs.push_back(extents);
      codegen::interpret(k, ptrs.data());
      expect_same(at, interpreted, want, 0, "interpreted at length " + std::to_string(length));
    }
  }
  EXPECT_EQ(test_jit().stats().compiles, compiles) << "a new length compiled a kernel";
}

TEST(RuntimeExtent, RefusesARuntimeRowThatCannotHoldAtEveryLength) {
  KernelDesc k = row_kernel(3, 40);
  k.row_strided = {1, 0, 1, 1, 0, 0}; // b's dim-0 stride is 1, no multiple of the length
  expect_error([&] { k.validate(); }, {"buffer 2 steps dim 0 by a multiple of the row length, but its stride 1 is no "
                                       "multiple of the traced 40"});
  k = row_kernel(3, 40);
  k.row_strided = {3, 0, 0, 1, 0, 0}; // a rank-2 kernel has one outer dim
  expect_error([&] { k.validate(); }, {"buffer 0's row_strided mask 3 marks dims beyond the 1 outer ones"});
  k = row_kernel(3, 40);
  k.row_strided.pop_back();
  expect_error([&] { k.validate(); }, {"5 row_strided flags for 6 buffers"});
  k = row_kernel(3, 40);
  k.runtime_dim0 = false;
  expect_error([&] { k.validate(); }, {"a runtime row needs a runtime dim 0"});
}

TEST(RuntimeExtent, RefusesWhatCannotHoldAtEveryExtent) {
  { // dim 0 is the reduced row
    KernelBuilder k({8});
    Expr x = k.input(DType::Float32);
    k.output_per_row(k.reduce(KOp::Add, x));
    KernelDesc d = k.build();
    d.runtime_dim0 = true;
    try {
      d.validate();
      ADD_FAILURE() << "a runtime dim 0 in the row was accepted";
    } catch (const Error &e) {
      EXPECT_NE(std::string(e.what()).find("must be an outer dim"), std::string::npos) << e.what();
    }
  }
  { // rank 0
    KernelBuilder k({});
    k.output(k.input(DType::Float32) * 2.0);
    KernelDesc d = k.build();
    d.runtime_dim0 = true;
    EXPECT_THROW(d.validate(), Error);
  }
  { // traced at 1, an in-place output whose dim-0 stride differs from its input's
    KernelBuilder k({1, 4});
    Expr x = k.input(DType::Float32, {8, 1});
    k.output(x + 1.0, {4, 1});
    k.alias_output(0, 0);
    KernelDesc d = k.build(); // valid at extent 1
    d.runtime_dim0 = true;
    EXPECT_THROW(d.validate(), Error);
    EXPECT_THROW(test_jit().compile(d), Error);
  }
}

// ---- fusion groups of symbolic graphs (codegen::lower_symbolic_group)

// `text` through decompose..fuse: a symbolic graph holding one fusion group.
std::unique_ptr<ir::Graph> fused(const char *text, const char *passes = "decompose,canonicalize,cse,dce,fuse") {
  auto g = ir::parse(text);
  manual_seed(11);
  for (ir::Value *p : g->params()) g->bind_param(p, randn(p->type().shape));
  passes::run_pipeline(*g, passes);
  return g;
}

const ir::Node &first_group(const ir::Graph &g) {
  for (const ir::Node *n : g.nodes())
    if (n->kind() == ir::Node::Kind::FusionGroup) return *n;
  throw Error("no fusion group");
}

const ir::Node &only_group(const ir::Graph &g) {
  const ir::Node *group = nullptr;
  for (const ir::Node *n : g.nodes())
    if (n->kind() == ir::Node::Kind::FusionGroup) {
      EXPECT_EQ(group, nullptr) << "more than one group";
      group = n;
    }
  if (!group) throw Error("no fusion group");
  return *group;
}

// What a kernel over runtime sizes reads per call: its dim 0's extent, that
// and its row's length, or its whole layout (KernelDesc::runtime_layout).
enum class Reads { Dim0, Row, Layout };

// One kernel lowered from the group at the traced sizes, run at every extent
// of each symbol (the symbols at different ones) against the interpreter
// running the symbolic graph (its group body node by node). What the kernel
// reads per call (`reads`) is what the lowering gives as formulas of the symbols.
void expect_group_serves_every_extent(const char *text, Reads reads = Reads::Dim0, double atol = 1e-6) {
  auto g = fused(text);
  const ir::Node &group = only_group(*g);
  std::vector<size_t> operands;
  codegen::RuntimeExtents sizes;
  KernelDesc k = codegen::lower_symbolic_group(*g, group, g->symbol_hints(), operands, nullptr, &sizes);
  EXPECT_EQ(k.runtime_dim0, reads != Reads::Layout);
  EXPECT_EQ(k.runtime_row, reads == Reads::Row);
  EXPECT_EQ(k.runtime_layout, reads == Reads::Layout);
  EXPECT_EQ(sizes.row.has_value(), reads == Reads::Row);
  EXPECT_EQ(sizes.layout.size(), reads == Reads::Layout ? k.layout_words() : 0u);
  auto kernel = test_jit().compile(k);
  int64_t compiles = test_jit().stats().compiles;
  ASSERT_EQ(g->outputs().size(), group.results().size());
  const size_t extents = std::size(kExtents);
  for (size_t trial = 0; trial < extents; ++trial) {
    std::vector<int64_t> values;
    for (size_t s = 0; s < g->symbol_hints().size(); ++s) values.push_back(kExtents[(trial + 3 * s) % extents]);
    // Sizes 0 and 1 stay static in a traced graph (broadcasting reads them).
    if (std::any_of(values.begin(), values.end(), [](int64_t v) { return v < 2; })) continue;
    SCOPED_TRACE("symbols at " + shape_str(values));
    std::vector<int64_t> extents(sizes.words());
    sizes.fill(values, extents.data());
    int64_t elements = 1;
    for (const ir::Value *r : group.results()) {
      if (!r->type().symbolic()) continue;
      int64_t e = 1;
      for (int64_t d : ir::evaluate_dims(r->type().sym, values)) e *= d;
      elements = std::max(elements, e);
    }
    if (elements > (int64_t(1) << 17)) continue; // (a symbol squared at 3000: gigabytes)
    const int64_t n = extents[0];
    std::vector<Tensor> inputs;
    manual_seed(uint64_t(n));
    for (const ir::Value *in : g->inputs()) inputs.push_back(randn(ir::evaluate_dims(in->type().sym, values)));
    std::vector<Tensor> want = ir::interpret(*g, inputs);
    std::vector<void *> bufs;
    for (size_t i : operands) {
      const ir::Value *v = group.operand(i);
      if (v->kind() == ir::Value::Kind::Input) {
        size_t at = size_t(std::find(g->inputs().begin(), g->inputs().end(), v) - g->inputs().begin());
        bufs.push_back(inputs.at(at).data_ptr<float>());
      } else {
        bufs.push_back(v->tensor().data_ptr<float>());
      }
    }
    std::vector<Tensor> got;
    for (const ir::Value *r : group.results()) {
      const ir::TensorType &t = r->type(); // (a static type has no sym)
      got.push_back(full(t.symbolic() ? ir::evaluate_dims(t.sym, values) : std::vector<int64_t>(t.shape.begin(), t.shape.end()), -7.0));
      bufs.push_back(got.back().data_ptr<float>());
    }
    bufs.push_back(extents.data());
    kernel->run(bufs.data());
    for (size_t i = 0; i < got.size(); ++i) { // the graph returns the group's results in its own order
      auto at = std::find(g->outputs().begin(), g->outputs().end(), group.result(i));
      ASSERT_NE(at, g->outputs().end());
      const Tensor &w = want.at(size_t(at - g->outputs().begin()));
      ASSERT_EQ(got[i].sizes(), w.sizes());
      EXPECT_TRUE(allclose(got[i], w, 1e-5, atol)) << "result " << i << ": max |diff| "
                                                  << (got[i] - w).abs().max().item<float>() << " of max |w| "
                                                  << w.abs().max().item<float>();
    }
  }
  EXPECT_EQ(test_jit().stats().compiles, compiles) << "a new size compiled a kernel";
}

TEST(RuntimeExtentGroups, SoftmaxRows) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 100]) symbols(s0 = 8) params(%w: f32[100]) {
  %0 = mul(%x, %w) : f32[s0, 100]
  %1 = softmax(%0) {dim = 1} : f32[s0, 100]
  return %1
})");
}

TEST(RuntimeExtentGroups, LayerNormOverBatchAndTokens) {
  expect_group_serves_every_extent(
      R"(graph @g(%x: f32[s0, 6, 16]) symbols(s0 = 4) params(%lw: f32[16], %lb: f32[16]) {
  %0 = layer_norm(%x, %lw, %lb) {normalized_shape = [16], eps = 1e-05} : f32[s0, 6, 16]
  %1 = relu(%0) : f32[s0, 6, 16]
  return %1, %0
})");
}

// A language model's batch and sequence length both change (dynamic = Auto
// after both did): one kernel over rows of s0 * s1.
TEST(RuntimeExtentGroups, LayerNormOverBatchAndSequence) {
  expect_group_serves_every_extent(
      R"(graph @g(%x: f32[s0, s1, 16], %r: f32[s0, s1, 16]) symbols(s0 = 4, s1 = 6) params(%lw: f32[16], %lb: f32[16]) {
  %0 = add(%x, %r) {alpha = 1} : f32[s0, s1, 16]
  %1 = layer_norm(%0, %lw, %lb) {normalized_shape = [16], eps = 1e-05} : f32[s0, s1, 16]
  %2 = gelu(%1) {approximate = "tanh"} : f32[s0, s1, 16]
  return %2
})");
}

// One symbol in three dims (W7 under On: the batch, and H = W), elementwise
// and row-major: one loop over s0 * 3 * s1 * s1.
TEST(RuntimeExtentGroups, ElementwiseOverSquareImages) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s1, 3, s0, s0], %y: f32[s1, 3, s0, s0]) symbols(s0 = 5, s1 = 2) {
  %0 = add(%x, %y) {alpha = 1} : f32[s1, 3, s0, s0]
  %1 = relu(%0) : f32[s1, 3, s0, s0]
  return %1
})");
}

// W2 under dynamic = On: the softmax's row length is a symbol too, read per
// call; the lengths cover the vector tails and more than one sum block (1024).
TEST(RuntimeExtentGroups, SoftmaxOverASymbolicRow) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, s1]) symbols(s0 = 4, s1 = 6) {
  %0 = softmax(%x) {dim = 1} : f32[s0, s1]
  return %0
})", Reads::Row);
  expect_group_serves_every_extent(R"(graph @g(%x: f32[4, s0]) symbols(s0 = 6) {
  %0 = mul(%x, %x) : f32[4, s0]
  %1 = log_softmax(%0) {dim = 1} : f32[4, s0]
  return %1
})", Reads::Row);
  // A whole-tensor sum over [s0] (an outer dim of 1 in front).
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0]) symbols(s0 = 6) {
  %0 = exp(%x) : f32[s0]
  %1 = sum(%0) {dims = [0], keepdim = false, dtype = none} : f32[]
  return %1
})", Reads::Row, 1e-4);
  // Column sums over a symbolic batch: the row walks a column (stride 8).
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 8]) symbols(s0 = 4) {
  %0 = exp(%x) : f32[s0, 8]
  %1 = sum(%0) {dims = [0], keepdim = false, dtype = none} : f32[8]
  return %1
})", Reads::Row);
}

// A Shifted sum (of x as loaded, used by a later reduction: the row's first
// element K, and L * K with the call's L), a per-row max of it times the
// row, a sum of squares, and an input broadcast over the rows ([s1], dim-0
// stride 0) next to row-major ones ([s0, 3, s1]: the outer dims fold into
// dim 0, which steps by the row length).
TEST(RuntimeExtentGroups, RowStatisticsOverASymbolicRow) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 3, s1], %y: f32[s1]) symbols(s0 = 2, s1 = 5) {
  %0 = sum(%x) {dims = [2], keepdim = true, dtype = none} : f32[s0, 3, 1]
  %1 = add(%x, %y) {alpha = 1} : f32[s0, 3, s1]
  %2 = mul(%1, %0) : f32[s0, 3, s1]
  %3 = amax(%2) {dims = [2], keepdim = false} : f32[s0, 3]
  %4 = mul(%1, %1) : f32[s0, 3, s1]
  %5 = sum(%4) {dims = [2], keepdim = false, dtype = none} : f32[s0, 3]
  return %3, %5, %2
})", Reads::Row, 1e-3); // (x + y) * S: S is a sum of up to 257 values of either sign, as exact as eager's only to ~1e-5
}

// Means over a symbolic row scale by the call's 1 / L (Node::inverse_row_length):
// a row mean, a variance as the mean of squared deviations (the mean's sum
// Shifted, the scale applied to the double sum) with its rsqrt, and column
// means over a symbolic batch.
TEST(RuntimeExtentGroups, MeansOverASymbolicRow) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[4, s0]) symbols(s0 = 6) {
  %0 = mean(%x) {dims = [1], keepdim = false, dtype = none} : f32[4]
  return %0
})", Reads::Row);
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, s1]) symbols(s0 = 3, s1 = 6) {
  %0 = mean(%x) {dims = [1], keepdim = true, dtype = none} : f32[s0, 1]
  %1 = sub(%x, %0) {alpha = 1} : f32[s0, s1]
  %2 = mul(%1, %1) : f32[s0, s1]
  %3 = mean(%2) {dims = [1], keepdim = true, dtype = none} : f32[s0, 1]
  %4 = rsqrt(%3) : f32[s0, 1]
  %5 = mul(%1, %4) : f32[s0, s1]
  return %5
})", Reads::Row, 1e-5);
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 8]) symbols(s0 = 4) {
  %0 = mean(%x) {dims = [0], keepdim = false, dtype = none} : f32[8]
  return %0
})", Reads::Row);
}

// Per-row results over [s0, s1]: the mean of each row, with the rows' max.
TEST(RuntimeExtentGroups, RowStatisticsOverTwoSymbols) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, s1, 12]) symbols(s0 = 3, s1 = 5) {
  %0 = mean(%x) {dims = [2], keepdim = true, dtype = none} : f32[s0, s1, 1]
  %1 = sub(%x, %0) {alpha = 1} : f32[s0, s1, 12]
  %2 = amax(%1) {dims = [2], keepdim = false} : f32[s0, s1]
  return %1, %2
})");
}

// Rows of several dims that every buffer walks as one are one row of their
// product, read per call: a global average pool after a per-channel affine
// map (its [s0, 4] outer dims stay two: the channel's operands walk them
// otherwise than the image, which steps dim 0 by 4 rows and dim 1 by one),
// and a sum over a row of a constant and a symbolic dim.
TEST(RuntimeExtentGroups, RowsOfSeveralDims) {
  expect_group_serves_every_extent(
      R"(graph @g(%x: f32[s0, 4, s1, s2]) symbols(s0 = 2, s1 = 5, s2 = 3) params(%w: f32[4, 1, 1], %b: f32[4, 1, 1]) {
  %0 = mul(%x, %w) : f32[s0, 4, s1, s2]
  %1 = add(%0, %b) {alpha = 1} : f32[s0, 4, s1, s2]
  %2 = relu(%1) : f32[s0, 4, s1, s2]
  %3 = mean(%2) {dims = [2, 3], keepdim = false, dtype = none} : f32[s0, 4]
  return %3
})", Reads::Row, 1e-5);
  expect_group_serves_every_extent(R"(graph @g(%x: f32[4, s0, 3]) symbols(s0 = 6) {
  %0 = exp(%x) : f32[4, s0, 3]
  %1 = sum(%0) {dims = [1, 2], keepdim = false, dtype = none} : f32[4]
  return %1
})", Reads::Row, 1e-4);
}

// A mean over the sequence of [s0, s1, D] (a sentence embedding's mean
// pooling): the kernel walks [s0, D, s1], its rows columns of stride D, and the
// input's outer dims do not fold into one (dim 0 steps by D rows, dim 1 by 1).
// With D >= 16 the rows go in tiles of neighbouring rows, the row length read
// per call; the interpreter is the reference (a max with the mean).
TEST(RuntimeExtentGroups, StridedRowsInTiles) {
  expect_group_serves_every_extent(
      R"(graph @g(%x: f32[s0, s1, 24]) symbols(s0 = 4, s1 = 6) params(%w: f32[24]) {
  %0 = mul(%x, %w) : f32[s0, s1, 24]
  %1 = mean(%0) {dims = [1], keepdim = false, dtype = none} : f32[s0, 24]
  %2 = amax(%0) {dims = [1], keepdim = false} : f32[s0, 24]
  return %1, %2
})", Reads::Row, 1e-5);
}

// The same with D = 8: too few rows side by side for a tile. A runtime row
// reads such rows element by element, slower than eager: refused, the group
// runs eagerly.
TEST(RuntimeExtentGroups, RefusesStridedRowsOverOuterDimsThatDoNotFold) {
  std::vector<size_t> operands;
  auto g = fused(R"(graph @g(%x: f32[s0, s1, 8]) symbols(s0 = 4, s1 = 6) params(%w: f32[8]) {
  %0 = mul(%x, %w) : f32[s0, s1, 8]
  %1 = mean(%0) {dims = [1], keepdim = false, dtype = none} : f32[s0, 8]
  return %1
})");
  expect_error([&] { codegen::lower_symbolic_group(*g, first_group(*g), g->symbol_hints(), operands); },
               {"its rows are strided (buffer 0 walks them by 8) and its outer dims [4, 8, 6] do not fold into one"});
}

TEST(RuntimeExtentGroups, ElementwiseOverShortRows) {
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 3], %y: f32[s0, 3]) symbols(s0 = 5) {
  %0 = add(%x, %y) {alpha = 1} : f32[s0, 3]
  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, 3]
  return %1
})");
}

TEST(RuntimeExtentGroups, RefusesGroupsNoOneKernelServesAtEverySize) {
  std::vector<size_t> operands;
  auto lower = [&](const char *text, const char *passes = "decompose,canonicalize,cse,dce,fuse") {
    auto g = fused(text, passes);
    return codegen::lower_symbolic_group(*g, first_group(*g), g->symbol_hints(), operands);
  };
  // A row of two dims, one of them symbolic, that the input does not walk as
  // one (a row of several dims that it does is one row of their product).
  // (decompose splits such a reduction in two, so it never gets here in a
  // pipeline: lowered without it.)
  expect_error([&] { lower(R"(graph @g(%x: f32[s0, 4, 3]) symbols(s0 = 6) {
  %0 = exp(%x) : f32[s0, 4, 3]
  %1 = amax(%0) {dims = [0, 2], keepdim = false} : f32[4]
  return %1
})", "canonicalize,cse,dce,fuse"); }, {"the symbols s0 size its row of 2 dims, which a kernel reads as one row only where every buffer walks them "
          "as one", "does not walk dims 1..2 of kernel shape [4, 6, 3]"});
  // An operand whose strides change with a symbol (the transposed view of a
  // symbolic input, which the kernel would read in place).
  expect_error([&] { lower(R"(graph @g(%x: f32[s0, s1]) symbols(s0 = 4, s1 = 6) {
  %0 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[s1, s0]
  %1 = exp(%0) : f32[s1, s0]
  return %1
})"); }, {"the layout of operand 0 changes with s1 (strides [1, 6], then [1, 7])"});
  // A contraction over the batch heads an epilogue group when codegen reads its
  // M per call (kiln's GEMM); that group is an epilogue step, not a kernel.
  {
    auto g = fused(R"(graph @g(%x: f32[s0, 16]) symbols(s0 = 4) params(%w: f32[16, 8], %b: f32[8]) {
  %0 = matmul(%x, %w) : f32[s0, 8]
  %1 = add(%0, %b) {alpha = 1} : f32[s0, 8]
  return %1
})");
    const bool heads = codegen::gemm::path() == codegen::gemm::Path::Jit;
    EXPECT_EQ(first_group(*g).body()->num_nodes(), heads ? 2u : 1u);
    if (heads)
      expect_error([&] { codegen::lower_symbolic_group(*g, first_group(*g), g->symbol_hints(), operands); },
                   {"is a contraction with its epilogue"});
    else
      EXPECT_EQ(codegen::lower_symbolic_group(*g, first_group(*g), g->symbol_hints(), operands).runtime_dim0, true);
  }
  expect_error([&] { lower(R"(graph @g(%x: f32[s0, 16]) symbols(s0 = 4) params(%w: f32[16]) {
  %0 = exp(%w) : f32[16]
  %1 = add(%x, %0) {alpha = 1} : f32[s0, 16]
  %2 = sum(%1) {dims = [1], keepdim = false, dtype = none} : f32[s0]
  return %2, %0
})"); }, {"mentions no symbol"});
}

// Element-wise groups whose buffers do not walk the symbolic dims as one: a
// kernel with a runtime layout (KernelDesc::runtime_layout), every extent and
// stride read per call. Its dims merge where they do at every size (H and W).
TEST(RuntimeLayoutGroups, PerChannelOperandsOverImagesOfEverySize) {
  // W7's batch norm and relu under On: [s1, 3, s0, s0] images, per-channel
  // scale and shift, and a residual.
  expect_group_serves_every_extent(
      R"(graph @g(%x: f32[s1, 3, s0, s0], %r: f32[s1, 3, s0, s0]) symbols(s0 = 5, s1 = 2) params(%a: f32[3, 1, 1], %b: f32[3, 1, 1]) {
  %0 = mul(%x, %a) : f32[s1, 3, s0, s0]
  %1 = add(%0, %b) {alpha = 1} : f32[s1, 3, s0, s0]
  %2 = add(%1, %r) {alpha = 1} : f32[s1, 3, s0, s0]
  %3 = relu(%2) : f32[s1, 3, s0, s0]
  return %3
})",
      Reads::Layout);
  auto g = fused(R"(graph @g(%x: f32[s1, 3, s0, s0]) symbols(s0 = 5, s1 = 2) params(%b: f32[3, 1, 1]) {
  %0 = add(%x, %b) {alpha = 1} : f32[s1, 3, s0, s0]
  return %0
})");
  std::vector<size_t> operands;
  codegen::RuntimeExtents sizes;
  KernelDesc k = codegen::lower_symbolic_group(*g, only_group(*g), g->symbol_hints(), operands, nullptr, &sizes);
  // [batch, channel, H * W]: H and W merge at every size, the batch and the
  // channel do not (the bias repeats over the batch).
  EXPECT_EQ(k.shape, (std::vector<int64_t>{2, 3, 25}));
  ASSERT_EQ(sizes.layout.size(), 12u); // 3 extents, then 3 strides of x, b and the result
  EXPECT_EQ(sizes.layout[2], ir::SymExpr::symbol(0) * ir::SymExpr::symbol(0));
  EXPECT_EQ(sizes.layout[3], ir::SymExpr(3) * ir::SymExpr::symbol(0) * ir::SymExpr::symbol(0)); // x's batch stride
  EXPECT_EQ(sizes.layout[6], ir::SymExpr(0));                                                   // b's batch stride
  KernelDesc other = codegen::lower_symbolic_group(*g, only_group(*g), std::vector<int64_t>{7, 3}, operands);
  EXPECT_EQ(other.key(), k.key()) << "the traced sizes must pick no code";
}

TEST(RuntimeLayoutGroups, OperandsRepeatingOverOneSymbolOnly) {
  // x repeats over s1 but not over s0: no one stride walks [s0, s1].
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s0, 1, 8], %y: f32[s1, 8]) symbols(s0 = 4, s1 = 6) {
  %0 = add(%x, %y) {alpha = 1} : f32[s0, s1, 8]
  %1 = gelu(%0) {approximate = "tanh"} : f32[s0, s1, 8]
  return %1
})",
                                   Reads::Layout, 1e-5);
  // A symbolic innermost dim, with a row-per-position operand (a mask over
  // [s0, s0] added to every head's scores).
  expect_group_serves_every_extent(R"(graph @g(%x: f32[s1, 4, s0, s0], %m: f32[s0, s0]) symbols(s0 = 6, s1 = 2) {
  %0 = add(%x, %m) {alpha = 1} : f32[s1, 4, s0, s0]
  %1 = exp(%0) : f32[s1, 4, s0, s0]
  return %1
})",
                                   Reads::Layout, 1e-5);
}

// The compiled kernel reads the call's layout words as the interpreter does.
TEST(RuntimeLayoutGroups, InterpreterReadsTheLayout) {
  auto g = fused(R"(graph @g(%x: f32[3, s0]) symbols(s0 = 2) params(%b: f32[3, 1]) {
  %0 = add(%x, %b) {alpha = 1} : f32[3, s0]
  return %0
})");
  std::vector<size_t> operands;
  codegen::RuntimeExtents sizes;
  KernelDesc k = codegen::lower_symbolic_group(*g, only_group(*g), g->symbol_hints(), operands, nullptr, &sizes);
  ASSERT_TRUE(k.runtime_layout);
  std::vector<float> x(3 * 5), b = {1, 2, 3}, out(3 * 5, -7.0f);
  for (size_t i = 0; i < x.size(); ++i) x[i] = float(i);
  std::vector<int64_t> words(sizes.words());
  sizes.fill(std::vector<int64_t>{5}, words.data());
  EXPECT_EQ(words, (std::vector<int64_t>{3, 5, 5, 1, 1, 0, 5, 1}));
  void *bufs[] = {x.data(), b.data(), out.data(), words.data()};
  codegen::interpret(k, bufs);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], float(i) + b[i / 5]) << i;
  std::vector<float> compiled(3 * 5, -7.0f);
  void *run[] = {x.data(), b.data(), compiled.data(), words.data()};
  test_jit().compile(k)->run(run);
  EXPECT_EQ(compiled, out);
  words[words.size() - 1] = 2; // the output's last-dim stride is compiled in
  EXPECT_THROW(codegen::interpret(k, bufs), Error);
}

// instantiate: the static graph of one call's sizes, which runs as the symbolic one there.
TEST(RuntimeExtentGroups, InstantiateGivesTheStaticGraphOfOneCall) {
  auto g = fused(R"(graph @g(%x: f32[s0, 6, 16]) symbols(s0 = 4) params(%lw: f32[16], %lb: f32[16]) {
  %0 = layer_norm(%x, %lw, %lb) {normalized_shape = [16], eps = 1e-05} : f32[s0, 6, 16]
  %1 = view(%0) {shape = [24, 16]} : f32[6*s0, 16]
  return %1
})");
  std::vector<int64_t> at = {9};
  auto fixed = ir::instantiate(*g, at);
  EXPECT_TRUE(fixed->symbol_hints().empty());
  EXPECT_EQ(fixed->inputs()[0]->type().str(), "f32[9, 6, 16]");
  EXPECT_EQ(fixed->outputs()[0]->type().str(), "f32[54, 16]");
  EXPECT_EQ(fixed->outputs()[0]->name(), g->outputs()[0]->name());
  manual_seed(2);
  Tensor x = randn({9, 6, 16});
  std::vector<Tensor> want = ir::interpret(*g, {x}), got = ir::interpret(*fixed, {x});
  ASSERT_EQ(got[0].sizes(), IntArrayRef({54, 16}));
  EXPECT_TRUE(equal(got[0], want[0]));
  expect_error([&] { ir::instantiate(*g, std::vector<int64_t>{}); }, {"instantiate: @g has 1 symbol, given 0 values"});
}

} // namespace
} // namespace kiln::test
