// Symbolic shape inference (issue 17): result dims fitted over the symbols from
// each op's concrete shape rule (ir/sym_infer.h), the passes that keep symbols
// (upcast, decompose, canonicalize, cse, dce), binding symbols per call, and
// the interpreter running one symbolic graph at many sizes.
//
// References: hand-written expressions, the op's eager kernel on META tensors
// at sizes the fit never saw, and the original graph interpreted eagerly.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include <kiln/kiln.h>

#include "expect_error.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/sym_infer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/rewrite.h"
#include "runtime/op_attrs.h"
#include "runtime/trace_hook.h"

namespace kiln::ir {
namespace {

using kiln::testing::expect_error;

SymExpr s(const char *text) { return SymExpr::parse(text); }

std::vector<SymExpr> dims(std::initializer_list<const char *> texts) {
  std::vector<SymExpr> out;
  for (const char *t : texts) out.push_back(s(t));
  return out;
}

// ---- the fit on hand-written rules

TEST(SymFit, RecoversMultilinearSizes) {
  // A rule computed directly in int64: s0*s1 + 3*s0 - 2, a constant, s1, and 2*s0*s1.
  auto rule = [](std::span<const int64_t> v) {
    return std::vector<Dims>{Dims({v[0] * v[1] + 3 * v[0] - 2, 7, v[1]}), Dims({2 * v[0] * v[1]})};
  };
  std::vector<int64_t> hints{4, 6};
  std::vector<int> symbols{0, 1};
  auto got = fit_symbolic_dims(rule, hints, symbols);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], dims({"s0*s1 + 3*s0 - 2", "7", "s1"}));
  EXPECT_EQ(got[1], dims({"2*s0*s1"}));
}

TEST(SymFit, HoldsSymbolsOutsideTheListAtTheirHints) {
  // s1 is not fitted: the rule sees its hint (6) and the fit a constant.
  auto rule = [](std::span<const int64_t> v) { return std::vector<Dims>{Dims({v[0] + v[1]})}; };
  std::vector<int64_t> hints{4, 6};
  std::vector<int> symbols{0};
  EXPECT_EQ(fit_symbolic_dims(rule, hints, symbols)[0], dims({"s0 + 6"}));
}

TEST(SymFit, FitsFloorDivisionsOfOneSymbol) {
  std::vector<int64_t> hints{4, 20};
  std::vector<int> symbols{0, 1};
  // Floor divisions: 4 // 16 = 5 // 16 = 0 looks constant on the unit cube.
  // A conv's output height (3x3, padding 1, stride 2), a 2x2 pool's, a
  // patchify conv's (kernel and stride 16), next to a multilinear dim.
  auto conv = [](int64_t h) { return (h + 2 - 3) / 2 + 1; };
  for (int64_t den : {2, 3, 16}) {
    auto rule = [&](std::span<const int64_t> v) {
      return std::vector<Dims>{Dims({v[0] / den, conv(v[1]), v[0] * v[1]}), Dims({(v[1] - 16) / 16 + 1})};
    };
    const std::vector<std::vector<SymExpr>> got = fit_symbolic_dims(rule, hints, symbols);
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0][0], SymExpr::floordiv(s("s0"), den));
    EXPECT_EQ(got[0][2], s("s0*s1"));
    // Every size from 2 to 199 against the rule (the fit saw a few dozen).
    for (int64_t a = 2; a < 200; ++a) {
      const std::vector<int64_t> v{a, a + 16}; // s1 >= 16: the patchify conv's kernel fits
      const std::vector<Dims> want = rule(v);
      for (size_t r = 0; r < got.size(); ++r)
        EXPECT_EQ(IntArrayRef(evaluate_dims(got[r], v)), IntArrayRef(want[r])) << "den " << den << " at " << a;
    }
  }
}

TEST(SymFit, RefusesSizesThatAreNeitherMultilinearNorAFloorDivision) {
  std::vector<int64_t> hints{4, 6};
  std::vector<int> symbols{0, 1};
  auto square = [](std::span<const int64_t> v) { return std::vector<Dims>{Dims({v[0] * v[0]})}; };
  expect_error([&] { fit_symbolic_dims(square, hints, symbols); }, {"result 0 is [", "neither multilinear"});
  // A floor division of two symbols, of a product, and by more than 32.
  auto two = [](std::span<const int64_t> v) { return std::vector<Dims>{Dims({(v[0] + v[1]) / 2})}; };
  expect_error([&] { fit_symbolic_dims(two, hints, symbols); }, {"not [", "at s0 = "});
  auto product = [](std::span<const int64_t> v) { return std::vector<Dims>{Dims({v[0] * v[1] / 3})}; };
  expect_error([&] { fit_symbolic_dims(product, hints, symbols); }, {"neither multilinear"});
  auto wide = [](std::span<const int64_t> v) { return std::vector<Dims>{Dims({v[0] / 64})}; };
  expect_error([&] { fit_symbolic_dims(wide, std::vector<int64_t>{70, 6}, symbols); }, {"neither multilinear"});
}

TEST(SymFit, ReportsARuleThatHoldsOnlyForRelatedSymbols) {
  // An add of [s0] and [s1]: sizes agree at the hints only.
  auto rule = [](std::span<const int64_t> v) {
    KILN_CHECK(v[0] == v[1], "add: shapes [", v[0], "] and [", v[1], "] do not broadcast");
    return std::vector<Dims>{Dims({v[0]})};
  };
  std::vector<int64_t> hints{5, 5};
  std::vector<int> symbols{0, 1};
  expect_error([&] { fit_symbolic_dims(rule, hints, symbols); },
               {"hold only for some values of the symbols", "do not broadcast"});
}

TEST(SymFit, ErrorsOnRankChangesTooManySymbolsAndTracedFailures) {
  std::vector<int64_t> hints{4, 4, 4, 4, 4};
  std::vector<int> one{0};
  auto rank = [](std::span<const int64_t> v) { return std::vector<Dims>{v[0] == 4 ? Dims({1}) : Dims({1, 1})}; };
  expect_error([&] { fit_symbolic_dims(rank, hints, one); }, {"ranks change"});
  auto any = [](std::span<const int64_t>) { return std::vector<Dims>{Dims({1})}; };
  std::vector<int> five{0, 1, 2, 3, 4};
  expect_error([&] { fit_symbolic_dims(any, hints, five); }, {"5 symbols", "at most 4"});
  auto bad = [](std::span<const int64_t>) -> std::vector<Dims> { throw Error("mm: the traced sizes fail"); };
  expect_error([&] { fit_symbolic_dims(bad, hints, one); }, {"mm: the traced sizes fail"});
}

// ---- real ops through passes::Builder, against the eager kernel on META tensors

struct OpCase {
  std::string name;
  OpId op;
  std::vector<int> operands; // indexes into the graph's values below
  Attrs attrs;
  std::vector<std::vector<SymExpr>> want; // per result; {} = check against META only
};

class SymOps : public ::testing::Test {
protected:
  void SetUp() override {
    g = parse(R"(graph @g(%x: f32[s0, s1, 8], %y: f32[s1, 8], %i: i64[s0, 3], %img: f32[2, 3, s1, 10]) symbols(s0 = 4, s1 = 6) params(%w: f32[8, 5], %e: f32[12, 8]) {
  return %x
}
)");
    vals = {g->inputs()[0], g->inputs()[1], g->inputs()[2], g->inputs()[3], g->params()[0], g->params()[1]};
  }

  // The result types at random values of the symbols, against run_op on META
  // tensors of the operands' sizes there.
  void check_against_meta(const OpCase &c, const std::vector<Value *> &results, const std::vector<Value *> &in) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 8; ++trial) {
      std::vector<int64_t> v{int64_t(rng() % 40 + 2), int64_t(rng() % 40 + 2)};
      std::vector<Tensor> metas;
      for (Value *x : in) {
        std::vector<int64_t> sizes;
        for (size_t d = 0; d < x->type().shape.size(); ++d)
          sizes.push_back(x->type().symbolic() ? x->type().sym[d].evaluate(v) : x->type().shape[int64_t(d)]);
        metas.push_back(detail::make_tensor(sizes, x->type().dtype, true));
      }
      detail::TracingOff off;
      std::vector<Tensor> out = run_op(c.op, metas, c.attrs);
      ASSERT_EQ(out.size(), results.size()) << c.name;
      for (size_t r = 0; r < out.size(); ++r) {
        const TensorType &t = results[r]->type();
        std::vector<int64_t> got;
        for (size_t d = 0; d < t.shape.size(); ++d)
          got.push_back(t.symbolic() ? t.sym[d].evaluate(v) : t.shape[int64_t(d)]);
        EXPECT_EQ(IntArrayRef(got), out[r].sizes()) << c.name << " result " << r << " " << t.str() << " at s0 = " << v[0]
                                                    << ", s1 = " << v[1];
      }
    }
  }

  std::unique_ptr<Graph> g;
  std::vector<Value *> vals;
};

TEST_F(SymOps, ResultDimsMatchTheEagerRuleAtSizesTheFitNeverSaw) {
  auto I = [](std::vector<int64_t> v) { return AttrValue(std::move(v)); };
  const std::vector<OpCase> cases = {
      {"add broadcast", OpId::Add, {0, 1}, {AttrValue(1)}, {dims({"s0", "s1", "8"})}},
      {"matmul", OpId::Matmul, {0, 4}, {}, {dims({"s0", "s1", "5"})}},
      {"sum over s1", OpId::Sum, {0}, {I({1}), AttrValue(false), AttrValue()}, {dims({"s0", "8"})}},
      {"mean keepdim", OpId::Mean, {0}, {I({0, 2}), AttrValue(true), AttrValue()}, {dims({"1", "s1", "1"})}},
      {"cat", OpId::Cat, {0, 0}, {AttrValue(1)}, {dims({"s0", "2*s1", "8"})}},
      {"transpose", OpId::Transpose, {0}, {AttrValue(0), AttrValue(2)}, {dims({"8", "s1", "s0"})}},
      {"slice", OpId::Slice, {0}, {AttrValue(1), AttrValue(2), AttrValue(), AttrValue(1)}, {dims({"s0", "s1 - 2", "8"})}},
      {"select", OpId::Select, {0}, {AttrValue(1), AttrValue(0)}, {dims({"s0", "8"})}},
      {"unsqueeze", OpId::Unsqueeze, {1}, {AttrValue(0)}, {dims({"1", "s1", "8"})}},
      {"embedding", OpId::Embedding, {5, 2}, {}, {dims({"s0", "3", "8"})}},
      {"topk", OpId::Topk, {0}, {AttrValue(2), AttrValue(1), AttrValue(true), AttrValue(true)},
       {dims({"s0", "2", "8"}), dims({"s0", "2", "8"})}},
      {"conv over the batch", OpId::Conv2d, {3, 3}, {}, {}}, // filled below: weight static
      {"softmax", OpId::Softmax, {0}, {AttrValue(1)}, {dims({"s0", "s1", "8"})}},
      {"cumsum", OpId::Cumsum, {0}, {AttrValue(1), AttrValue()}, {dims({"s0", "s1", "8"})}},
      // A floor division of one symbol (ir::FloorFit).
      {"max_pool2d over s1", OpId::MaxPool2d, {3},
       attrs::MaxPool2dArgs{.kernel_size = std::vector<int64_t>{2, 2}, .stride = std::vector<int64_t>{2, 2},
                            .padding = std::vector<int64_t>{0, 0}, .dilation = std::vector<int64_t>{1, 1},
                            .ceil_mode = false}
           .to_attrs(),
       {dims({"2", "3", "floordiv(s1, 2)", "5"})}},
  };
  for (OpCase c : cases) {
    if (c.op == OpId::Conv2d) continue; // a symbolic spatial dim: refused below
    std::vector<Value *> in;
    for (int k : c.operands) in.push_back(vals[size_t(k)]);
    passes::Builder b(*g, nullptr);
    std::vector<Value *> results;
    ASSERT_NO_THROW(results = b.op_n(c.op, in, c.attrs)) << c.name;
    for (size_t r = 0; r < c.want.size(); ++r) {
      ASSERT_TRUE(results[r]->type().symbolic()) << c.name;
      EXPECT_EQ(results[r]->type().sym, c.want[r]) << c.name << ": " << results[r]->type().str();
    }
    check_against_meta(c, results, in);
  }
}

TEST_F(SymOps, RefusesOpsWithoutASymbolicShape) {
  passes::Builder b(*g, nullptr);
  // [s0, s1, 8] + [s0, 3]: broadcasting needs s1 == 3 (never, for a symbol).
  expect_error([&] { b.op(OpId::Add, {vals[0], vals[2]}, {AttrValue(1)}); }, {"add"});
  // A reshape of a symbolic value needs its symbolic sizes.
  expect_error([&] { b.op(OpId::Reshape, {vals[1]}, {AttrValue(std::vector<int64_t>{48})}); },
               {"reshape", "needs the result's symbolic sizes"});
}

TEST_F(SymOps, ReshapeTakesItsSymbolicSizes) {
  passes::Builder b(*g, nullptr);
  TensorType to(kFloat32, Dims({4 * 6, 8}), std::nullopt, dims({"s0*s1", "8"}));
  Value *r = b.reshape(vals[0], to);
  EXPECT_EQ(r->type().sym, to.sym);
  EXPECT_EQ(r->producer()->op(), OpId::Reshape);
  // A target that does not hold at other sizes is refused there.
  TensorType wrong(kFloat32, Dims({4 * 6, 8}), std::nullopt, dims({"4*s1", "8"}));
  expect_error([&] { b.reshape(vals[0], wrong); }, {"reshape", "hold only for some values"});
}

TEST(SymVerify, ChecksAReshapesSymbolicSizesAwayFromTheTracedCall) {
  auto text = [](const char *type, const char *shape = "[24, 8]") {
    return std::string("graph @g(%x: f32[s0, s1, 8]) symbols(s0 = 4, s1 = 6) {\n  %0 = reshape(%x) {shape = ") + shape +
           "} : " + type + "\n  return %0\n}\n";
  };
  verify(*parse(text("f32[s0*s1, 8]")));
  verify(*parse(text("f32[8*s0*s1]", "[192]")));
  // Right at the traced sizes (4 * 6 = 24), wrong at any other s0.
  expect_error([&] { verify(*parse(text("f32[4*s1, 8]"))); }, {"reshape", "shape [44, 8] is invalid for input of size 616"});
}

// ---- binding symbols per call

TEST(SymBind, BindsBareDimsAndChecksTheRest) {
  auto g = parse(R"(graph @g(%x: f32[s0, 2*s1], %y: f32[s1, 3]) symbols(s0 = 4, s1 = 5) {
  return %x
}
)");
  EXPECT_EQ(bind_symbols(*g, {IntArrayRef({7, 18}), IntArrayRef({9, 3})}), (std::vector<int64_t>{7, 9}));
  expect_error([&] { bind_symbols(*g, {IntArrayRef({7, 17}), IntArrayRef({9, 3})}); },
               {"input 0 (%x)", "size 17 in dim 1", "2*s1 = 18 at s1 = 9"});
  expect_error([&] { bind_symbols(*g, {IntArrayRef({7, 18}), IntArrayRef({9, 4})}); },
               {"input 1 (%y)", "size 4 in dim 1", "needs 3"});
  expect_error([&] { bind_symbols(*g, {IntArrayRef({7, 18})}); }, {"2 inputs expected"});
  auto unbound = parse(R"(graph @g(%x: f32[2*s0]) symbols(s0 = 4) {
  return %x
}
)");
  expect_error([&] { bind_symbols(*unbound, {IntArrayRef({8})}); }, {"no input dim is s0 alone"});
}

// ---- passes over a symbolic graph, run by the interpreter at many sizes

const char *kModel = R"(graph @g(%x: f32[s0, s1, 16]) symbols(s0 = 4, s1 = 6) params(%w: f32[8, 16], %b: f32[8], %lw: f32[16], %lb: f32[16]) consts(%one: f64[] = wrapped 1.0) {
  %0 = layer_norm(%x, %lw, %lb) {normalized_shape = [16], eps = 1e-05} : f32[s0, s1, 16]
  %1 = linear(%0, %w, %b) : f32[s0, s1, 8]
  %2 = gelu(%1) {approximate = "tanh"} : f32[s0, s1, 8]
  %3 = softmax(%2) {dim = 1} : f32[s0, s1, 8]
  %4 = view(%3) {shape = [24, 8]} : f32[s0*s1, 8]
  %5 = reshape(%4) {shape = [4, 48]} : f32[s0, 8*s1]
  %6 = var(%5) {dims = [1], correction = 1, keepdim = false} : f32[s0]
  %7 = mul(%6, %6) : f32[s0]
  %8 = mul(%7, %one) : f32[s0]
  return %5, %8
}
)";

void bind_params(Graph &g) {
  manual_seed(3);
  for (Value *p : g.params()) g.bind_param(p, randn(p->type().shape));
}

// `rewritten` (kModel after some passes) is valid IR that reads back to
// itself, and equals the original model at the traced sizes and at 5 others.
void expect_valid_and_equal_at_every_size(const Graph &original, const Graph &rewritten) {
  const std::string text = print(rewritten);
  auto reparsed = parse(text);
  EXPECT_EQ(print(*reparsed), text);
  verify(*reparsed);
  manual_seed(5);
  for (auto [b, t] : {std::pair{4, 6}, {2, 3}, {7, 5}, {3, 33}, {9, 2}, {16, 17}}) {
    Tensor x = randn({b, t, 16});
    auto want = interpret(original, {x});
    auto got = interpret(rewritten, {x});
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      ASSERT_EQ(got[i].sizes(), want[i].sizes()) << "output " << i << " at " << b << " x " << t;
      EXPECT_TRUE(allclose(got[i], want[i], 1e-4, 1e-5)) << "output " << i << " at " << b << " x " << t;
    }
    EXPECT_EQ(want[0].sizes(), IntArrayRef({b, 8 * t}));
  }
}

TEST(SymPasses, KeepSymbolsAndEqualTheOriginalAtEverySize) {
  auto original = parse(kModel), rewritten = parse(kModel);
  bind_params(*original);
  bind_params(*rewritten);
  passes::PipelineOptions opts;
  opts.verify_each = true;
  passes::run_pipeline(*rewritten, "upcast,decompose,canonicalize,cse,dce", opts);
  const std::string text = print(*rewritten);
  // Every composite with a size-free rule is gone; var divides by a count read per call.
  for (const char *gone : {"layer_norm(", "linear(", "gelu(", "softmax(", "view(", "mul(%7", "var("})
    EXPECT_EQ(text.find(gone), std::string::npos) << gone << " in:\n" << text;
  EXPECT_NE(text.find("sym_numel("), std::string::npos) << text;
  EXPECT_NE(text.find("matmul("), std::string::npos) << "the tiny-contraction form depends on the size:\n" << text;
  EXPECT_NE(text.find("reshape(%"), std::string::npos) << text;
  expect_valid_and_equal_at_every_size(*original, *rewritten);
  expect_error([&] { interpret(*rewritten, {randn({4, 6, 15})}); }, {"input 0 (%x)", "f32[s0, s1, 16]"});
}

// fuse over symbols: groups whose types keep their symbols, and the fused
// graph equals the original at every size.
TEST(SymPasses, FuseGroupsOverSymbolicDims) {
  auto original = parse(kModel), fused = parse(kModel);
  bind_params(*original);
  bind_params(*fused);
  passes::PipelineOptions opts;
  opts.verify_each = true;
  passes::run_pipeline(*fused, "upcast,decompose,canonicalize,cse,dce,fuse", opts);
  const std::string text = print(*fused);
  EXPECT_NE(text.find("fusion_group("), std::string::npos) << text;
  EXPECT_NE(text.find(": f32[s0, s1, 8]"), std::string::npos) << "group results keep their symbolic types:\n" << text;
  expect_valid_and_equal_at_every_size(*original, *fused);
}

// In a fusion body (no symbols(...) of its own) the Builder reads the traced
// values off its operands' bare dims; an operand of [2*s0] alone gives none.
TEST(SymPasses, BuilderInAFusionBodyNeedsEachSymbolAsABareDim) {
  auto g = parse(R"(graph @g(%x: f32[s0], %y: f32[2*s0]) symbols(s0 = 3) {
  %0 = fusion_group(%x, %y) : f32[s0] {
    graph @g.group(%0: f32[s0], %1: f32[2*s0]) {
      %2 = exp(%0) : f32[s0]
      return %2
    }
  }
  return %0
})");
  Graph &body = *g->nodes()[0]->body();
  passes::Builder b(body, nullptr);
  Value *neg = b.op<OpId::Neg>({body.inputs()[0]}, {});
  EXPECT_EQ(neg->type().str(), "f32[s0]");
  expect_error([&] { b.op<OpId::Neg>({body.inputs()[1]}, {}); },
               {"s0 is no operand's dim alone", "unknown in this fusion body", "f32[2*s0]"});
}

TEST(SymPasses, PassesThatReadSizesRefuseSymbolicGraphs) {
  auto g = parse(kModel);
  const std::string before = print(*g);
  for (const char *pipeline : {"decompose,layout", "fuse,layout", "layout", "materialize-views,layout"})
    expect_error([&] { passes::run_pipeline(*g, pipeline); }, {"does not handle symbolic dims yet", "decompose"});
  EXPECT_EQ(print(*g), before) << "a refused pipeline ran a pass";
}

} // namespace
} // namespace kiln::ir
