#include <algorithm>
// decompose, canonicalize, cse, dce and the pass manager, on hand-built and
// traced graphs. References are eager results on the same inputs.
#include "graph_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include "frontend/compile.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "passes/composed.h"
#include "passes/dump_names.h"
#include "passes/rewrite.h"
#include "runtime/kernels/vecmath_kernels.h"

using namespace kiln;
using namespace kiln::testing;
using ir::Graph;
using ir::Node;
using ir::TensorType;
using ir::Value;

namespace {

TensorType f32(std::vector<int64_t> shape) { return TensorType{kFloat32, Dims(shape), std::nullopt}; }

bool run_pass(Graph &g, const char *name) {
  auto p = passes::create_pass(name);
  EXPECT_TRUE(p) << name;
  return p->run(g);
}

Value *scalar(Graph &g, double v) { return g.add_const(detail::wrap_scalar(Scalar(v))); }

// A graph with one input x: f32[2, 3] and one node op(x, operands...) as its output.
struct OneNode {
  Graph g;
  Value *x;
  Node *node = nullptr;
  OneNode() { x = g.add_input(f32({2, 3}), "x"); }
  Node *add(OpId op, std::vector<Value *> operands, Attrs attrs, TensorType type) {
    node = g.create(op, std::move(operands), std::move(attrs), {type});
    g.set_outputs({node->result()});
    return node;
  }
};

const AttrValue kNone;

bool only_primitives(const Graph &g) {
  for (const Node *n : g.nodes())
    if (n->info().kind == OpKind::Composite) return false;
  return true;
}

} // namespace

// ---- decompose

struct Composite {
  const char *name;
  TracedFunction fn;
  std::vector<std::vector<int64_t>> shapes;
};

const std::vector<Composite> &composites() {
  static const std::vector<Composite> all = {
      {"softmax", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(1)}; }, {{4, 7}}},
      {"log_softmax", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].log_softmax(-1)}; },
       {{3, 5}}},
      {"layer_norm_affine",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{layer_norm(x[0], {4, 6}, x[1], x[2], 1e-5)}; },
       {{2, 4, 6}, {4, 6}, {4, 6}}},
      {"layer_norm_plain", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{layer_norm(x[0], {6})}; },
       {{3, 6}}},
      {"gelu_erf", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{gelu(x[0])}; }, {{17}}},
      {"gelu_tanh", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{gelu(x[0], "tanh")}; }, {{17}}},
      {"silu", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{silu(x[0])}; }, {{2, 9}}},
      {"linear_bias", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{linear(x[0], x[1], x[2])}; },
       {{2, 3, 4}, {5, 4}, {5}}},
      {"linear_nobias", [](const std::vector<Tensor> &x) { return std::vector<Tensor>{linear(x[0], x[1])}; },
       {{3, 4}, {2, 4}}},
      {"batch_norm_inference",
       [](const std::vector<Tensor> &x) {
         Tensor var = x[4].abs() + 0.5;
         return std::vector<Tensor>{batch_norm(x[0], x[1], x[2], x[3], var, false, 0.1, 1e-5)};
       },
       {{2, 3, 4, 4}, {3}, {3}, {3}, {3}}},
      {"var_std",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{x[0].var({1}), x[0].std({0, 2}, 0.0, true), x[0].var()};
       },
       {{3, 4, 5}}},
      {"sdpa_causal",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], {}, 0.0, true)};
       },
       {{2, 5, 8}, {2, 5, 8}, {2, 5, 8}}},
      {"sdpa_float_mask_scale",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], x[3], 0.0, false, 0.3)};
       },
       {{1, 2, 3, 4}, {1, 2, 6, 4}, {1, 2, 6, 5}, {3, 6}}},
      // Query rows 0 and 3 keep no key: zeros, as eager's (torch's) safe softmax gives, not NaN.
      {"sdpa_fully_masked_rows",
       [](const std::vector<Tensor> &x) {
         Tensor rows = tensor(std::vector<bool>{false, true, true, false, true}).view({5, 1});
         Tensor mask = logical_and(gt(x[3], -0.5), rows);
         return std::vector<Tensor>{scaled_dot_product_attention(x[0], x[1], x[2], mask)};
       },
       {{2, 5, 8}, {2, 6, 8}, {2, 6, 8}, {5, 6}}},
  };
  return all;
}

class DecomposeTest : public ::testing::TestWithParam<int> {};

TEST_P(DecomposeTest, OnlyPrimitivesAndSameResults) {
  const Composite &c = composites()[size_t(GetParam())];
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.shapes.size(); ++i) in.push_back(rnd(c.shapes[i], 40 + i));
  auto g = trace(c.fn, in);
  EXPECT_FALSE(only_primitives(*g)) << "the traced graph should name the composite";
  EXPECT_TRUE(run_pass(*g, "decompose"));
  EXPECT_TRUE(only_primitives(*g)) << ir::print(*g);
  for (uint64_t seed = 0; seed < 3; ++seed) {
    std::vector<Tensor> x;
    for (size_t i = 0; i < c.shapes.size(); ++i) x.push_back(rnd(c.shapes[i], 1000 * seed + i));
    EXPECT_TRUE(all_close(ir::interpret(*g, x), c.fn(x), 1e-5));
  }
}

INSTANTIATE_TEST_SUITE_P(Composites, DecomposeTest, ::testing::Range(0, int(composites().size())),
                         [](const auto &info) { return std::string(composites()[size_t(info.param)].name); });

TEST(Decompose, LeavesPrimitivesAlone) {
  auto g = trace([](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].exp() + 1}; }, {rnd({3}, 1)});
  EXPECT_FALSE(run_pass(*g, "decompose"));
  EXPECT_EQ(g->num_nodes(), 2u);
}

// passes::composed, the graph builders decompose rewrites silu and gelu with, is the
// composed-op list's lines expanded over graph values: each function's graph, run node
// by node by the interpreter (each node its eager op), equals the eager kernel that
// kiln-vecmath-gen generated from the same line, bit for bit, in both float dtypes, NaN
// (min/max propagate it), +-inf, +-0, subnormals and a sweep of ordinary values included.
namespace {
std::vector<double> composed_inputs() {
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  std::vector<double> v = {0.0, -0.0, inf, -inf, nan, -nan, 1e-40, -1e-40, 3.0, -3.0, 6.0, -6.0, 1e30, -1e30};
  for (int i = -2000; i <= 2000; ++i) v.push_back(i * 0.00537);
  return v;
}

using ComposedGraph = passes::composed::Val (*)(passes::composed::Val);
using Kernel32 = void (*)(const float *, float *, int64_t);
using Kernel64 = void (*)(const double *, double *, int64_t);
struct ComposedCase {
  const char *name;
  ComposedGraph graph;
  Kernel32 f32;
  Kernel64 f64;
};

std::vector<ComposedCase> composed_cases() {
  return {
#define X(fn, def) {#fn, passes::composed::fn, kiln_pw_##fn##_f32, kiln_pw_##fn##_f64},
#define X_OP(Id, fn, def) X(fn, def)
      KILN_COMPOSED_OPS(X_OP) KILN_COMPOSED_KERNELS(X)
#undef X_OP
#undef X
  };
}

template <class T, class K> void expect_graph_equals_kernel(const ComposedCase &c, DType dt, K kernel) {
  std::vector<double> in = composed_inputs();
  std::vector<T> x(in.begin(), in.end()), want(x.size());
  kernel(x.data(), want.data(), int64_t(x.size()));
  ir::Graph g;
  ir::Value *xv = g.add_input(ir::TensorType{dt, {int64_t(x.size())}, std::nullopt}, "x");
  passes::Builder b(g, nullptr);
  g.set_outputs({c.graph({&b, xv}).v});
  Tensor got = ir::interpret(g, {from_blob(x.data(), {int64_t(x.size())}, dt)})[0].contiguous();
  ASSERT_EQ(got.dtype(), dt) << c.name;
  const T *y = static_cast<const T *>(got.raw_data());
  for (size_t i = 0; i < x.size(); ++i) {
    bool same = std::isnan(y[i]) ? std::isnan(want[i]) : std::memcmp(&y[i], &want[i], sizeof(T)) == 0;
    EXPECT_TRUE(same) << c.name << " " << dt << ": x=" << x[i] << " graph " << y[i] << ", kernel " << want[i];
  }
}
} // namespace

TEST(Composed, GraphBuildersEqualTheListsKernels) {
  for (const ComposedCase &c : composed_cases()) {
    expect_graph_equals_kernel<float>(c, kFloat32, c.f32);
    expect_graph_equals_kernel<double>(c, kFloat64, c.f64);
  }
}

// ---- canonicalize: identities are removed, non-identities stay

TEST(Canonicalize, RemovesArithmeticIdentities) {
  struct Case {
    OpId op;
    double c;
    bool const_first;
    Attrs attrs;
    bool removed;
  };
  const std::vector<Case> cases = {
      {OpId::Mul, 1, false, {}, true},     {OpId::Mul, 1, true, {}, true},
      {OpId::Mul, 2, false, {}, false},    {OpId::Add, 0, false, {int64_t(1)}, true},
      {OpId::Add, 0, true, {int64_t(1)}, true}, {OpId::Add, 0, false, {int64_t(2)}, false},
      {OpId::Add, 1, false, {int64_t(1)}, false}, {OpId::Sub, 0, false, {int64_t(1)}, true},
      {OpId::Sub, 0, true, {int64_t(1)}, false}, {OpId::Div, 1, false, {kNone}, true},
      {OpId::Div, 1, false, {AttrValue("floor")}, false}, {OpId::Div, 2, false, {kNone}, false},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(detail::concat(op_info(c.op).mnemonic, " with ", c.c, c.const_first ? " first" : " second"));
    OneNode t;
    Value *k = scalar(t.g, c.c);
    t.add(c.op, c.const_first ? std::vector<Value *>{k, t.x} : std::vector<Value *>{t.x, k}, c.attrs, f32({2, 3}));
    EXPECT_EQ(run_pass(t.g, "canonicalize"), c.removed);
    EXPECT_EQ(t.g.num_nodes(), c.removed ? 0u : 1u);
    EXPECT_EQ(t.g.outputs()[0] == t.x, c.removed);
  }
}

TEST(Canonicalize, IdentityMustKeepTheType) {
  {
    Graph g; // int64 x * 1.0 is float32: not x
    Value *x = g.add_input(TensorType{kInt64, Dims({2, 3}), std::nullopt}, "x");
    Node *n = g.create(OpId::Mul, {x, scalar(g, 1.0)}, {}, {f32({2, 3})});
    g.set_outputs({n->result()});
    EXPECT_FALSE(run_pass(g, "canonicalize"));
    EXPECT_EQ(g.num_nodes(), 1u);
  }
  {
    Graph g; // 0-dim x * ones([1, 1]) broadcasts: not x
    Value *x = g.add_input(f32({}), "x");
    Node *n = g.create(OpId::Mul, {x, g.add_const(ones({1, 1}))}, {}, {f32({1, 1})});
    g.set_outputs({n->result()});
    EXPECT_FALSE(run_pass(g, "canonicalize"));
    EXPECT_EQ(g.num_nodes(), 1u);
  }
}

TEST(Canonicalize, RemovesMovementIdentities) {
  {
    OneNode t; // transpose(transpose(x, 0, 1), 1, 0) -> x
    Node *a = t.g.create(OpId::Transpose, {t.x}, {int64_t(0), int64_t(1)}, {f32({3, 2})});
    t.add(OpId::Transpose, {a->result()}, {int64_t(1), int64_t(0)}, f32({2, 3}));
    EXPECT_TRUE(run_pass(t.g, "canonicalize"));
    EXPECT_EQ(t.g.outputs()[0], t.x);
    EXPECT_EQ(t.g.num_nodes(), 0u);
  }
  {
    OneNode t; // transpose(x, 0, 1) alone stays
    t.add(OpId::Transpose, {t.x}, {int64_t(0), int64_t(1)}, f32({3, 2}));
    EXPECT_FALSE(run_pass(t.g, "canonicalize"));
  }
  {
    OneNode t; // expand to the same shape, to() the same dtype, permute identity
    Node *e = t.g.create(OpId::Expand, {t.x}, {std::vector<int64_t>{2, 3}}, {f32({2, 3})});
    Node *c = t.g.create(OpId::Cast, {e->result()}, {kFloat32}, {f32({2, 3})});
    t.add(OpId::Permute, {c->result()}, {std::vector<int64_t>{0, 1}}, f32({2, 3}));
    EXPECT_TRUE(run_pass(t.g, "canonicalize"));
    EXPECT_EQ(t.g.outputs()[0], t.x);
  }
  {
    OneNode t; // contiguous(contiguous(x)) -> contiguous(x)
    Node *a = t.g.create(OpId::Contiguous, {t.x}, {}, {f32({2, 3})});
    t.add(OpId::Contiguous, {a->result()}, {}, f32({2, 3}));
    EXPECT_TRUE(run_pass(t.g, "canonicalize"));
    EXPECT_EQ(t.g.outputs()[0], a->result());
    EXPECT_EQ(t.g.num_nodes(), 1u);
  }
  {
    OneNode t; // to(x, f64) stays
    t.add(OpId::Cast, {t.x}, {kFloat64}, TensorType{kFloat64, Dims({2, 3}), std::nullopt});
    EXPECT_FALSE(run_pass(t.g, "canonicalize"));
  }
}

TEST(Canonicalize, FoldsViewChainsAndPermutes) {
  {
    OneNode t; // view(reshape(x, [6]), [3, 2]) -> reshape(x, [3, 2])
    Node *a = t.g.create(OpId::Reshape, {t.x}, {std::vector<int64_t>{6}}, {f32({6})});
    t.add(OpId::View, {a->result()}, {std::vector<int64_t>{3, 2}}, f32({3, 2}));
    EXPECT_TRUE(run_pass(t.g, "canonicalize"));
    ASSERT_EQ(t.g.num_nodes(), 1u);
    const Node *r = t.g.outputs()[0]->producer();
    EXPECT_EQ(r->op(), OpId::Reshape);
    EXPECT_EQ(r->operand(0), t.x);
    EXPECT_EQ(r->attr("shape")->as_ints(), (std::vector<int64_t>{3, 2}));
    Tensor x = rnd({2, 3}, 1);
    EXPECT_TRUE(close(ir::interpret(t.g, {x})[0], x.reshape({3, 2})));
  }
  {
    OneNode t; // reshape back to the input's shape -> x
    Node *a = t.g.create(OpId::Reshape, {t.x}, {std::vector<int64_t>{6}}, {f32({6})});
    t.add(OpId::Reshape, {a->result()}, {std::vector<int64_t>{2, 3}}, f32({2, 3}));
    EXPECT_TRUE(run_pass(t.g, "canonicalize"));
    EXPECT_EQ(t.g.outputs()[0], t.x);
  }
  {
    Graph g; // permute(permute(x, [1, 2, 0]), [2, 0, 1]) -> x; [1, 2, 0] twice -> [2, 0, 1]
    Value *x = g.add_input(f32({2, 3, 4}), "x");
    Node *a = g.create(OpId::Permute, {x}, {std::vector<int64_t>{1, 2, 0}}, {f32({3, 4, 2})});
    Node *b = g.create(OpId::Permute, {a->result()}, {std::vector<int64_t>{2, 0, 1}}, {f32({2, 3, 4})});
    Node *c = g.create(OpId::Permute, {a->result()}, {std::vector<int64_t>{1, 2, 0}}, {f32({4, 2, 3})});
    g.set_outputs({b->result(), c->result()});
    EXPECT_TRUE(run_pass(g, "canonicalize"));
    EXPECT_EQ(g.outputs()[0], x);
    const Node *p = g.outputs()[1]->producer();
    ASSERT_TRUE(p);
    EXPECT_EQ(p->operand(0), x);
    EXPECT_EQ(p->attr("dims")->as_ints(), (std::vector<int64_t>{2, 0, 1}));
    Tensor xt = rnd({2, 3, 4}, 3);
    EXPECT_TRUE(close(ir::interpret(g, {xt})[1], xt.permute({1, 2, 0}).permute({1, 2, 0})));
  }
}

TEST(Canonicalize, FoldsConstants) {
  Graph g;
  Value *x = g.add_input(f32({3}), "x");
  Tensor a = rnd({3}, 1), b = rnd({3}, 2);
  Value *ca = g.add_const(a), *cb = g.add_const(b);
  Node *sum = g.create(OpId::Add, {ca, cb}, {int64_t(1)}, {f32({3})});
  Node *e = g.create(OpId::Exp, {sum->result()}, {}, {f32({3})});
  Node *out = g.create(OpId::Mul, {x, e->result()}, {}, {f32({3})});
  g.set_outputs({out->result()});
  EXPECT_TRUE(run_pass(g, "canonicalize"));
  ASSERT_EQ(g.num_nodes(), 1u);
  const Value *folded = g.nodes()[0]->operand(1);
  ASSERT_EQ(folded->kind(), Value::Kind::Const);
  std::vector<double> va = vals(a), vb = vals(b), vf = vals(folded->tensor());
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(vf[i], std::exp(float(va[i] + vb[i])), 1e-5 * std::exp(va[i] + vb[i]));
  // A node reading a graph input is never folded.
  EXPECT_FALSE(run_pass(g, "canonicalize"));
}

TEST(Canonicalize, DoesNotFoldLargeConstants) {
  Graph g;
  Value *c = g.add_const(ones({100, 100}));
  Node *n = g.create(OpId::Neg, {c}, {}, {f32({100, 100})});
  g.set_outputs({n->result()});
  EXPECT_FALSE(run_pass(g, "canonicalize"));
  EXPECT_EQ(g.num_nodes(), 1u);
}

// ---- cse

TEST(Cse, MergesDuplicatesWithTheSameAttributes) {
  Graph g;
  Value *x = g.add_input(f32({4}), "x"), *y = g.add_input(f32({4}), "y");
  Node *a = g.create(OpId::Add, {x, y}, {int64_t(1)}, {f32({4})});
  Node *b = g.create(OpId::Add, {x, y}, {int64_t(1)}, {f32({4})});
  Node *c = g.create(OpId::Add, {x, y}, {int64_t(2)}, {f32({4})}); // other alpha
  Node *d = g.create(OpId::Add, {y, x}, {int64_t(1)}, {f32({4})}); // other operand order
  Node *e = g.create(OpId::Mul, {b->result(), c->result()}, {}, {f32({4})});
  Node *f = g.create(OpId::Mul, {b->result(), c->result()}, {}, {f32({4})});
  g.set_outputs({a->result(), e->result(), f->result(), d->result()});
  EXPECT_TRUE(run_pass(g, "cse"));
  EXPECT_EQ(g.num_nodes(), 4u);
  EXPECT_EQ(g.outputs()[1], g.outputs()[2]);
  EXPECT_EQ(g.outputs()[1]->producer()->operand(0), a->result());
  EXPECT_EQ(g.outputs()[1]->producer()->operand(1), c->result());
  EXPECT_EQ(g.outputs()[3], d->result());
  EXPECT_FALSE(run_pass(g, "cse"));
}

TEST(Cse, KeepsViewsWithDifferentAttributes) {
  auto g = trace(
      [](const std::vector<Tensor> &x) {
        return std::vector<Tensor>{x[0].sum({0}) + x[0].sum({0}), x[0].sum({1}), x[0].sum({0}, true)};
      },
      {rnd({3, 3}, 1)});
  EXPECT_TRUE(run_pass(*g, "cse"));
  EXPECT_EQ(count_op(*g, OpId::Sum), 3);
}

// ---- dce

TEST(Dce, RemovesDeadNodesAndKeepsWriteBacks) {
  Graph g;
  Value *x = g.add_input(f32({4}), "x");
  Node *live = g.create(OpId::Exp, {x}, {}, {f32({4})});
  Node *dead1 = g.create(OpId::Neg, {x}, {}, {f32({4})});
  g.create(OpId::Abs, {dead1->result()}, {}, {f32({4})});
  Node *wb = g.create(OpId::Relu, {x}, {}, {f32({4})});
  g.set_outputs({live->result()});
  g.add_write_back(x, wb->result());
  EXPECT_TRUE(run_pass(g, "dce"));
  EXPECT_EQ(ops_of(g), (std::vector<OpId>{OpId::Exp, OpId::Relu}));
  EXPECT_FALSE(run_pass(g, "dce"));
}

TEST(Dce, TracedFunctionWithInPlaceUpdateKeepsItsEffect) {
  TracedFunction fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    (void)(x * 5); // dead
    x.mul_(3);
    return std::vector<Tensor>{in[0].sum({0})};
  };
  Tensor a = rnd({4}, 3);
  auto g = trace(fn, {a});
  EXPECT_TRUE(run_pass(*g, "dce"));
  EXPECT_EQ(count_op(*g, OpId::Mul), 1);
  Tensor ea = copy_of(a), ga = copy_of(a);
  std::vector<Tensor> want = fn({ea});
  EXPECT_TRUE(all_close(ir::interpret(*g, {ga}), want));
  EXPECT_TRUE(close(ga, ea));
}

// ---- the pass manager

TEST(PassManager, RegistryKnowsTheFirstPasses) {
  std::vector<std::string> names = passes::pass_names();
  for (const char *p : {"decompose", "canonicalize", "cse", "dce"})
    EXPECT_NE(std::find(names.begin(), names.end(), p), names.end()) << p;
  EXPECT_EQ(passes::create_pass("nope"), nullptr);
  EXPECT_EQ(passes::create_pass("dce")->name(), "dce");
}

TEST(PassManager, UnknownPassListsKnownOnes) {
  Graph g;
  try {
    passes::run_pipeline(g, "decompose,frobnicate");
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    std::string m = e.what();
    EXPECT_NE(m.find("frobnicate"), std::string::npos) << m;
    EXPECT_NE(m.find("canonicalize"), std::string::npos) << m;
  }
}

TracedFunction block_fn(Tensor w, Tensor b) {
  return [w, b](const std::vector<Tensor> &x) {
    Tensor h = gelu(linear(x[0], w, b)) * 1;
    Tensor y = layer_norm(h + h.t().t(), {8}) + 0;
    return std::vector<Tensor>{y.softmax(-1), y.softmax(-1)};
  };
}

TEST(PassManager, DefaultPipelineKeepsResults) {
  TracedFunction fn = block_fn(rnd({8, 8}, 1), rnd({8}, 2));
  Tensor x = rnd({4, 8}, 3);
  auto g = trace(fn, {x});
  passes::PipelineOptions o;
  o.verify_each = true;
  std::vector<passes::PassTiming> t = passes::run_pipeline(*g, passes::default_pipeline(), o);
  std::string pipeline = passes::default_pipeline();
  ASSERT_EQ(t.size(), size_t(std::count(pipeline.begin(), pipeline.end(), ',') + 1));
  EXPECT_EQ(t[0].pass, "upcast");
  EXPECT_FALSE(t[0].changed) << "no float16 / bfloat16 here";
  EXPECT_EQ(t[1].pass, "decompose");
  for (const auto &p : t) EXPECT_GE(p.ms, 0.0);
  EXPECT_TRUE(t[1].changed);
  EXPECT_TRUE(only_primitives(*g));
  EXPECT_EQ(g->outputs()[0], g->outputs()[1]) << "cse merges the two softmaxes";
  for (uint64_t seed = 0; seed < 3; ++seed) {
    Tensor xi = rnd({4, 8}, 50 + seed);
    EXPECT_TRUE(all_close(ir::interpret(*g, {xi}), fn({xi}), 1e-5));
  }
}

TEST(PassManager, DumpsToAStreamOnlyWhenChanged) {
  auto g = trace([](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(0)}; }, {rnd({4}, 1)});
  std::ostringstream os;
  passes::PipelineOptions o;
  o.dump_after = {"*"};
  o.dump_stream = &os;
  passes::run_pipeline(*g, "decompose,dce", o);
  std::string s = os.str();
  EXPECT_NE(s.find("// ----- IR after decompose -----"), std::string::npos) << s;
  EXPECT_EQ(s.find("IR after dce"), std::string::npos) << s;
  EXPECT_NE(s.find("amax"), std::string::npos) << s;
}

TEST(PassManager, EnvDumpDirWritesNumberedFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln-dump-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  setenv("KILN_DUMP", "after-all", 1);
  setenv("KILN_DUMP_DIR", dir.c_str(), 1);
  passes::PipelineOptions o = passes::PipelineOptions::from_env();
  unsetenv("KILN_DUMP");
  unsetenv("KILN_DUMP_DIR");
  EXPECT_EQ(o.dump_dir, dir.string());
  auto g = trace([](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(0) * 1}; },
                 {rnd({4}, 1)});
  passes::run_pipeline(*g, "decompose,cse,canonicalize,dce", o);
  // Named as `kiln dump --out` names them (passes::dump_file_name).
  EXPECT_TRUE(fs::exists(dir / "00-after-trace.kir"));
  EXPECT_TRUE(fs::exists(dir / "01-after-decompose.kir"));
  EXPECT_FALSE(fs::exists(dir / "02-after-cse.kir")) << "cse changed nothing";
  EXPECT_TRUE(fs::exists(dir / "03-after-canonicalize.kir"));
  std::ifstream f(dir / "01-after-decompose.kir");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("amax"), std::string::npos);
  fs::remove_all(dir);
}

// KILN_DUMP_DIR under kiln::compile: each specialization (input signature) and
// each function (CompileOptions::name) gets its own folder, and a rerun leaves
// no numbered dump of an earlier run.
TEST(PassManager, EnvDumpDirKeepsFunctionsAndSpecializationsApartAndDropsStaleDumps) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("kiln-dump-spec-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "f" / "f32-5");
  std::ofstream(dir / "f" / "f32-5" / "08-after-fuse.kir") << "stale"; // fuse is pass 7
  std::ofstream(dir / "f" / "f32-5" / "notes.txt") << "not a dump";
  auto fn = [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(-1) * 2}; };
  setenv("KILN_DUMP_DIR", dir.c_str(), 1);
  CompileOptions f_opts, other_opts;
  f_opts.name = "f";
  other_opts.name = "other";
  CompiledFunction f = compile(fn, f_opts), other = compile(fn, other_opts);
  f({rnd({2, 3}, 1)});
  f({rnd({5}, 2)});
  other({rnd({5}, 3)});
  unsetenv("KILN_DUMP_DIR");
  for (const char *sub : {"f/f32-2x3", "f/f32-5", "other/f32-5"}) {
    EXPECT_TRUE(fs::exists(dir / sub / "00-after-trace.kir")) << sub;
    EXPECT_TRUE(fs::exists(dir / sub / "02-after-decompose.kir")) << sub; // 01: upcast, which changed nothing
  }
  EXPECT_FALSE(fs::exists(dir / "f" / "f32-5" / "08-after-fuse.kir")) << "a stale dump of an earlier run";
  EXPECT_TRUE(fs::exists(dir / "f" / "f32-5" / "notes.txt")) << "only numbered dumps are removed";
  std::ifstream in(dir / "f" / "f32-2x3" / "00-after-trace.kir");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("f32[2, 3]"), std::string::npos) << text;
  EXPECT_EQ(passes::dump_subdir(*trace(fn, {rnd({2, 3}, 1)}, "f")), "f/f32-2x3");
  fs::remove_all(dir);
}

// Fresh values are numbered from what the graph holds, not from the names it
// used before: a printed-and-parsed copy gets the same new names.
TEST(PassManager, FreshNamesDependOnlyOnTheLiveGraph) {
  auto g = trace([](const std::vector<Tensor> &x) { return std::vector<Tensor>{(x[0] * 2 + 1).softmax(0)}; },
                 {rnd({4}, 1)});
  passes::run_pipeline(*g, "canonicalize,cse,dce", {});
  auto copy = ir::parse(ir::print(*g));
  passes::run_pipeline(*g, passes::default_pipeline(), {});
  passes::run_pipeline(*copy, passes::default_pipeline(), {});
  EXPECT_EQ(ir::print(*g), ir::print(*copy));
}

TEST(PassManager, FromEnvParsesPassLists) {
  setenv("KILN_DUMP", "after:decompose,cse", 1);
  passes::PipelineOptions o = passes::PipelineOptions::from_env();
  EXPECT_EQ(o.dump_after, (std::vector<std::string>{"decompose", "cse"}));
  setenv("KILN_DUMP", "kernels", 1);
  EXPECT_TRUE(passes::PipelineOptions::from_env().dump_after.empty());
  unsetenv("KILN_DUMP");
}

TEST(PassManager, UnwritableDumpDirWarnsAndContinues) {
  auto g = trace([](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(0)}; }, {rnd({4}, 1)});
  passes::PipelineOptions o;
  o.dump_after = {"*"};
  o.dump_dir = "/proc/kiln-cannot-write-here";
  EXPECT_NO_THROW(passes::run_pipeline(*g, "decompose", o));
  EXPECT_TRUE(only_primitives(*g));
}
