// Symbolic dims in IR types (issue 17): the header's symbols(...) give the
// traced sizes, types print their dims as expressions, the parser and the
// verifier check them, and static graphs are unchanged.
#include <gtest/gtest.h>

#include <string>

#include "expect_error.h"
#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

using kiln::testing::expect_error;

const char *kGraph = R"(graph @g(%x: f32[s0, 768], %m: f32[floordiv(s0 + 1, 2), 2*s1]) symbols(s0 = 5, s1 = 3) params(%w: f32[768]) {
  %0 = mul(%x, %w) : f32[s0, 768]
  %1 = fusion_group(%0, %w) : f32[s0, 768] {
    graph @g.group(%p: f32[s0, 768], %q: f32[768]) {
      %0 = add(%p, %q) {alpha = 1} : f32[s0, 768]
      return %0
    }
  }
  return %1, %m
}
)";

std::string header(const std::string &inputs, const std::string &symbols, const std::string &body_type = "f32[s0]") {
  return "graph @g(" + inputs + ")" + symbols + " {\n  %0 = neg(%x) : " + body_type + "\n  return %0\n}\n";
}

TEST(SymbolicTypes, ParseGivesTheTracedSizesAndPrintsBack) {
  auto g = parse(kGraph);
  EXPECT_EQ(g->symbol_hints(), (std::vector<int64_t>{5, 3}));
  const TensorType &x = g->inputs()[0]->type(), &m = g->inputs()[1]->type();
  ASSERT_TRUE(x.symbolic());
  EXPECT_EQ(x.sym[0], SymExpr::symbol(0));
  EXPECT_EQ(x.sym[1], SymExpr(768));
  EXPECT_EQ(std::vector<int64_t>(x.shape.begin(), x.shape.end()), (std::vector<int64_t>{5, 768}));
  // floor((5 + 1) / 2) = 3 and 2 * 3 = 6, at s0 = 5, s1 = 3.
  EXPECT_EQ(std::vector<int64_t>(m.shape.begin(), m.shape.end()), (std::vector<int64_t>{3, 6}));
  EXPECT_EQ(m.str(), "f32[floordiv(s0 + 1, 2), 2*s1]");
  EXPECT_FALSE(g->params()[0]->type().symbolic());
  verify(*g);
  EXPECT_EQ(print(*g), kGraph);
  auto again = parse(print(*g));
  EXPECT_TRUE(structurally_equal(*g, *again));
  EXPECT_EQ(structural_hash(*g), structural_hash(*again));
}

TEST(SymbolicTypes, ASymbolicTypeIsNotItsTracedSizes) {
  auto sym = parse(header("%x: f32[s0]", " symbols(s0 = 4)"));
  auto fixed = parse(header("%x: f32[4]", "", "f32[4]"));
  EXPECT_EQ(IntArrayRef(sym->inputs()[0]->type().shape), IntArrayRef(fixed->inputs()[0]->type().shape));
  EXPECT_FALSE(sym->inputs()[0]->type() == fixed->inputs()[0]->type());
  EXPECT_FALSE(structurally_equal(*sym, *fixed));
  EXPECT_NE(structural_hash(*sym), structural_hash(*fixed));
  EXPECT_EQ(print(*fixed).find("symbols"), std::string::npos); // static graphs print as before
}

TEST(SymbolicTypes, ParseErrors) {
  expect_error([] { parse(header("%x: f32[s1]", " symbols(s0 = 4)")); }, {"s1 has no value"});
  expect_error([] { parse(header("%x: f32[s0]", "")); }, {"s0 has no value", "the graph header has no symbols(...)"});
  expect_error([] { parse(header("%x: f32[s0]", " symbols(s1 = 4)")); }, {"expected symbol s0"});
  expect_error([] { parse(header("%x: f32[s0]", " symbols(s0 = -4)")); }, {"out of range"});
  expect_error([] { parse(header("%x: f32[s0 - 5]", " symbols(s0 = 4)", "f32[s0 - 5]")); },
               {"dimension -1 is out of range"});
  expect_error([] { parse(header("%x: f32[s0 +]", " symbols(s0 = 4)")); }, {"bad symbolic dim", "'s0 +'"});
  expect_error([] { parse(header("%x: f32[s0]{1}", " symbols(s0 = 4)")); }, {"cannot have strides"});
  expect_error([] { parse("graph @g(%x: f32[s0]) symbols(s0 = 4) params(%w: f32[s0]) {\n  return %x\n}\n"); },
               {"a parameter's type cannot have symbolic dims"});
  expect_error([] { parse("graph @g(%x: f32[s0]) symbols(s0 = 4) consts(%c: f32[s0] = [1.0, 2.0, 3.0, 4.0]) {\n"
                          "  return %x\n}\n"); },
               {"a constant's type cannot have symbolic dims"});
  expect_error(
      [] {
        parse("graph @g(%x: f32[s0]) symbols(s0 = 4) {\n  %0 = fusion_group(%x) : f32[s0] {\n"
              "    graph @b(%p: f32[s0]) symbols(s0 = 4) {\n      return %p\n    }\n  }\n  return %0\n}\n");
      },
      {"symbols(...) belongs in the top-level graph's header"});
  // Every error names the place: file:line:col.
  expect_error([] { parse(header("%x: f32[s2]", " symbols(s0 = 4)"), "f.kir"); }, {"f.kir:1:"});
}

TEST(SymbolicTypes, VerifierChecksEveryTypeAgainstTheSymbols) {
  auto g = parse(header("%x: f32[s0, 2*s0]", " symbols(s0 = 4)", "f32[s0, 2*s0]"));
  verify(*g);
  Value *x = g->inputs()[0];
  TensorType t = x->type();
  t.shape = Dims(std::vector<int64_t>{4, 9});
  x->set_type(t);
  expect_error([&] { verify(*g); }, {"%x: f32[s0, 2*s0]", "dim 1 is 8 at the symbols' values, but 9 in the shape"});
  t.shape = Dims(std::vector<int64_t>{4, 8});
  t.sym[1] = SymExpr::symbol(3);
  x->set_type(t);
  expect_error([&] { verify(*g); }, {"s3 is not among the graph's 1 symbols"});
  t.sym = {SymExpr::symbol(0)};
  x->set_type(t);
  expect_error([&] { verify(*g); }, {"1 symbolic dims for 2 sizes"});
  t.sym = {SymExpr::symbol(0), 2 * SymExpr::symbol(0)};
  t.strides = Dims(std::vector<int64_t>{8, 1});
  x->set_type(t);
  expect_error([&] { verify(*g); }, {"strides"});
}

TEST(SymbolicTypes, VerifierRunsTheShapeRuleAtOtherValuesOfTheSymbols) {
  // At s0 = s1 = 4 the rule gives [4, 768] either way; only [s0, 768] holds for every s0.
  const std::string ok = "graph @g(%x: f32[s0, 768], %y: f32[s1]) symbols(s0 = 4, s1 = 4) params(%w: f32[768]) {\n"
                         "  %0 = mul(%x, %w) : f32[s0, 768]\n  return %0\n}\n";
  verify(*parse(ok));
  std::string bad = ok;
  bad.replace(bad.find(": f32[s0, 768]\n"), 14, ": f32[s1, 768]");
  expect_error([&] { verify(*parse(bad)); },
               {"%0 = mul(%x, %w)", "result type f32[s1, 768] does not match the inferred f32[7, 768] at s0 = 7, s1 = 9"});
  // sum over dim 1 of [s0, 2*s1] is [s0]; typed [2*s1] it matches only at the traced values.
  const std::string sum = "graph @g(%x: f32[s0, 2*s1]) symbols(s0 = 6, s1 = 3) {\n"
                          "  %0 = sum(%x) {dims = [1], keepdim = false, dtype = none} : f32[TYPE]\n  return %0\n}\n";
  auto with = [&](const std::string &type) { return std::string(sum).replace(sum.find("TYPE"), 4, type); };
  verify(*parse(with("s0")));
  expect_error([&] { verify(*parse(with("2*s1"))); }, {"does not match the inferred f32[9] at s0 = 9, s1 = 8"});
  // add(x, y) with x: [s0] and y: [s1] holds where s0 == s1 only: the rule refuses other sizes, and that
  // relation is a guard's business, not a type error.
  verify(*parse("graph @g(%x: f32[s0], %y: f32[s1]) symbols(s0 = 4, s1 = 4) {\n"
                "  %0 = add(%x, %y) {alpha = 1} : f32[s0]\n  return %0\n}\n"));
}

} // namespace
} // namespace kiln::ir
