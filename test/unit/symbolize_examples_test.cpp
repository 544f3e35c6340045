// Tracing with symbolic dims (issue 17, frontend/symbolize.h): the function is
// traced again at moved sizes, and every value's dims are fitted over the
// symbols. References: hand-written types, and eager at sizes the tracing never
// saw, against the interpreter running the one symbolic graph there.
#include "graph_test_util.h"

#include <random>

#include "example.h"
#include "example_params.h"
#include "expect_error.h"
#include "frontend/symbolize.h"
#include "ir/printer.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

std::string type_of(const ir::Value *v) { return v->type().str(); }

// Sizes at new values of the symbols; integer inputs keep values the example
// allows (indexes stay in range).
std::vector<Tensor> inputs_at(const SymbolicTrace &st, const std::vector<Tensor> &examples,
                              const std::vector<int64_t> &values, uint64_t seed) {
  manual_seed(seed);
  std::vector<Tensor> out;
  for (size_t i = 0; i < examples.size(); ++i) {
    std::vector<int64_t> sizes = examples[i].sizes().vec();
    for (size_t k = 0; k < st.symbols.size(); ++k)
      for (const InputDim &d : st.symbols[k])
        if (d.input == i) sizes[size_t(d.dim)] = values[k];
    const Tensor &ex = examples[i];
    if (is_floating(ex.dtype())) {
      out.push_back(randn(sizes).to(ex.dtype()));
    } else if (ex.dtype() == kBool) {
      out.push_back(gt(randn(sizes), 0.0));
    } else {
      int64_t hi = ex.numel() ? int64_t(ex.max().item().toDouble()) + 1 : 1;
      out.push_back(randint(0, std::max<int64_t>(hi, 1), sizes).to(ex.dtype()));
    }
  }
  return out;
}

TEST(Symbolize, SizesReadInTheFunctionBecomeExpressions) {
  manual_seed(1);
  Tensor w = randn({8, 16});
  // A model that reads its sizes as integers, as C++ models do.
  TracedFunction fn = [w](const std::vector<Tensor> &a) {
    const Tensor &x = a[0];
    int64_t b = x.size(0), t = x.size(1);
    Tensor flat = x.reshape({b * t, 16});
    Tensor y = relu(matmul(flat, w.t())).view({b, t, 8});
    return std::vector<Tensor>{softmax(y, 1) + a[1].unsqueeze(-1), y.sum({1})};
  };
  std::vector<Tensor> ex = {randn({4, 6, 16}), randn({4, 6})};
  SymbolicTrace st = trace_symbolic(fn, ex, every_input_dim(ex));
  const ir::Graph &g = *st.graph;
  ASSERT_EQ(g.symbol_hints(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(type_of(g.inputs()[0]), "f32[s0, s1, 16]");
  EXPECT_EQ(type_of(g.inputs()[1]), "f32[s0, s1]");
  EXPECT_EQ(type_of(g.outputs()[0]), "f32[s0, s1, 8]");
  EXPECT_EQ(type_of(g.outputs()[1]), "f32[s0, 8]");
  const std::string text = ir::print(g);
  EXPECT_NE(text.find(": f32[s0*s1, 16]"), std::string::npos) << text;
  // Duck sizing: input 0 dim 0 and input 1 dim 0 are one symbol.
  ASSERT_EQ(st.symbols.size(), 2u);
  EXPECT_EQ(st.symbols[0].size(), 2u);
  // The dim the model spells as 16 stays static, with the reason.
  ASSERT_EQ(st.static_reasons.size(), 1u);
  EXPECT_NE(st.static_reasons[0].find("input 0 dim 2 (size 16): no symbolic shape: the sizes hold only for some "
                                      "values of the symbols (at s0 = 4, s1 = 6, s2 = 17: reshape: shape [24, 16] is "
                                      "invalid"),
            std::string::npos)
      << st.static_reasons[0];

  for (auto [b, t] : {std::pair{4, 6}, {2, 3}, {9, 2}, {5, 31}}) {
    std::vector<Tensor> in = inputs_at(st, ex, {b, t}, uint64_t(b * 100 + t));
    EXPECT_TRUE(all_close(ir::interpret(g, in), fn(in), 1e-5)) << b << " x " << t;
  }
}

TEST(Symbolize, DimsTheGraphDependsOnStayStatic) {
  std::vector<Tensor> ex = {randn({4, 6}), randn({1, 6})};
  // Size 1: broadcasting depends on it.
  auto add = [](const std::vector<Tensor> &a) { return std::vector<Tensor>{a[0] + a[1]}; };
  SymbolicTrace st = trace_symbolic(add, ex, {{1, 0}, {0, 0}});
  ASSERT_EQ(st.static_reasons.size(), 1u);
  EXPECT_NE(st.static_reasons[0].find("input 1 dim 0 (size 1): sizes 0 and 1 stay static"), std::string::npos);
  EXPECT_EQ(type_of(st.graph->inputs()[0]), "f32[s0, 6]");
  EXPECT_EQ(type_of(st.graph->inputs()[1]), "f32[1, 6]");

  // A constant computed from a size (x / sqrt(x.size(1))).
  auto scale = [](const std::vector<Tensor> &a) {
    return std::vector<Tensor>{a[0] / std::sqrt(double(a[0].size(1)))};
  };
  st = trace_symbolic(scale, {randn({4, 6})}, {{0, 0}, {0, 1}});
  EXPECT_EQ(type_of(st.graph->inputs()[0]), "f32[s0, 6]");
  ASSERT_EQ(st.static_reasons.size(), 1u);
  EXPECT_NE(st.static_reasons[0].find("is computed from the size"), std::string::npos) << st.static_reasons[0];

  // An attribute computed from a size (a slice that drops the last column).
  auto slice = [](const std::vector<Tensor> &a) {
    return std::vector<Tensor>{a[0].slice(1, 0, a[0].size(1) - 1)};
  };
  st = trace_symbolic(slice, {randn({4, 6})}, {{0, 1}});
  EXPECT_FALSE(st.graph->inputs()[0]->type().symbolic());
  ASSERT_EQ(st.static_reasons.size(), 1u);
  EXPECT_NE(st.static_reasons[0].find("attributes computed from the size"), std::string::npos) << st.static_reasons[0];

  // Bad requests name the input and the dim.
  expect_error([&] { trace_symbolic(add, ex, {{2, 0}}); }, {"input 2 does not exist", "takes 2 inputs"});
  expect_error([&] { trace_symbolic(add, ex, {{0, 2}}); }, {"input 0 of shape [4, 6] has no dim 2"});
}

// Every example with every input dim requested: the symbolic graph verifies,
// and the interpreter running it at new sizes equals eager there.
class SymbolizeExample : public ::testing::TestWithParam<std::string> {};

TEST_P(SymbolizeExample, InterpreterMatchesEagerAtNewSizes) {
  const examples::Example *ex = examples::find_example(GetParam());
  ASSERT_TRUE(ex);
  examples::Workload w = ex->make();
  SymbolicTrace st = trace_symbolic(w.fn, w.inputs, every_input_dim(w.inputs));
  std::string summary = GetParam() + ": " + std::to_string(st.symbols.size()) + " symbols, " +
                        std::to_string(st.traces) + " traces";
  for (const std::string &r : st.static_reasons) summary += "\n  static: " + r;
  std::cout << summary << "\n";
  // Every requested dim is either a symbol's or has its reason.
  size_t kept = 0;
  for (const std::vector<InputDim> &dims : st.symbols) kept += dims.size();
  EXPECT_EQ(kept + st.static_reasons.size(), every_input_dim(w.inputs).size()) << summary;
  EXPECT_EQ(st.symbols.size(), st.graph->symbol_hints().size());
  if (st.symbols.empty()) return;
  const std::vector<int64_t> &hints = st.graph->symbol_hints();
  // (The traced sizes themselves: trace_examples_test.)
  for (int trial = 0; trial < 2; ++trial) {
    std::vector<int64_t> values;
    for (int64_t h : hints) values.push_back(trial == 0 ? h + 3 : std::max<int64_t>(2, h / 2 + 1));
    std::vector<Tensor> in = inputs_at(st, w.inputs, values, uint64_t(trial));
    std::vector<Tensor> eager_in = copies(in);
    std::vector<Tensor> want = w.fn(eager_in);
    EXPECT_TRUE(all_close(ir::interpret(*st.graph, in), want, 1e-4)) << GetParam() << " trial " << trial;
    EXPECT_TRUE(all_close(in, eager_in, 1e-5)) << "mutated inputs differ";
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, SymbolizeExample, ::testing::ValuesIn(kiln::testing::example_names()),
                         kiln::testing::example_param_name);

} // namespace
