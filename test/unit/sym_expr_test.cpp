// ir::SymExpr (ir/sym.h), the symbolic sizes of issue 17: random expressions
// against a direct int64 evaluation of the same expression tree (its own floor
// division), the normal form on algebraic identities, the text form read back,
// and the errors.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "expect_error.h"
#include "ir/sym.h"

namespace kiln::ir {
namespace {

using kiln::testing::expect_error;

SymExpr s(int k) { return SymExpr::symbol(k); }
SymExpr P(const char *text) { return SymExpr::parse(text); }

// ------------------------------------------------------------ random trees

struct Ast {
  enum Kind { Const, Sym, Add, Sub, Mul, FloorDiv, Mod, Neg } kind = Const;
  int64_t c = 0;
  int sym = 0;
  std::shared_ptr<Ast> a, b;
};

constexpr int kSymbols = 4;

std::shared_ptr<Ast> gen(std::mt19937_64 &rng, int depth) {
  auto n = std::make_shared<Ast>();
  const int pick = int(rng() % (depth == 0 ? 2 : 8));
  n->kind = Ast::Kind(pick);
  if (n->kind == Ast::Const) n->c = int64_t(rng() % 19) - 9;
  if (n->kind == Ast::Sym) n->sym = int(rng() % kSymbols);
  if (n->kind >= Ast::Add) n->a = gen(rng, depth - 1);
  if (n->kind >= Ast::Add && n->kind != Ast::Neg) n->b = gen(rng, depth - 1);
  return n;
}

// Python's a // b and a % b, written apart from the library's.
int64_t py_mod(int64_t a, int64_t b) { return ((a % b) + b) % b; }
int64_t py_div(int64_t a, int64_t b) { return (a - py_mod(a, b)) / b; }

// nullopt: a divisor is 0 somewhere in the tree.
std::optional<int64_t> eval(const Ast &n, const std::vector<int64_t> &v) {
  if (n.kind == Ast::Const) return n.c;
  if (n.kind == Ast::Sym) return v[size_t(n.sym)];
  std::optional<int64_t> a = eval(*n.a, v);
  if (!a) return std::nullopt;
  if (n.kind == Ast::Neg) return -*a;
  std::optional<int64_t> b = eval(*n.b, v);
  if (!b) return std::nullopt;
  switch (n.kind) {
  case Ast::Add: return *a + *b;
  case Ast::Sub: return *a - *b;
  case Ast::Mul: return *a * *b;
  case Ast::FloorDiv: return *b == 0 ? std::nullopt : std::optional<int64_t>(py_div(*a, *b));
  case Ast::Mod: return *b == 0 ? std::nullopt : std::optional<int64_t>(py_mod(*a, *b));
  case Ast::Const:
  case Ast::Sym:
  case Ast::Neg: break;
  }
  return std::nullopt;
}

SymExpr build(const Ast &n) {
  switch (n.kind) {
  case Ast::Const: return SymExpr(n.c);
  case Ast::Sym: return s(n.sym);
  case Ast::Neg: return -build(*n.a);
  case Ast::Add: return build(*n.a) + build(*n.b);
  case Ast::Sub: return build(*n.a) - build(*n.b);
  case Ast::Mul: return build(*n.a) * build(*n.b);
  case Ast::FloorDiv: return SymExpr::floordiv(build(*n.a), build(*n.b));
  case Ast::Mod: return SymExpr::mod(build(*n.a), build(*n.b));
  }
  return SymExpr();
}

// Fully parenthesized, for the parser.
std::string text(const Ast &n) {
  switch (n.kind) {
  case Ast::Const: return std::to_string(n.c);
  case Ast::Sym: return "s" + std::to_string(n.sym);
  case Ast::Neg: return "-(" + text(*n.a) + ")";
  case Ast::Add: return "(" + text(*n.a) + " + " + text(*n.b) + ")";
  case Ast::Sub: return "(" + text(*n.a) + " - " + text(*n.b) + ")";
  case Ast::Mul: return "(" + text(*n.a) + ")*(" + text(*n.b) + ")";
  case Ast::FloorDiv: return "floordiv(" + text(*n.a) + ", " + text(*n.b) + ")";
  case Ast::Mod: return "mod(" + text(*n.a) + ", " + text(*n.b) + ")";
  }
  return "";
}

TEST(SymExpr, RandomExpressionsEqualTheirTreesAtEveryValue) {
  std::mt19937_64 rng(17);
  int compared = 0, divided_by_zero = 0;
  for (int i = 0; i < 4000; ++i) {
    std::shared_ptr<Ast> ast = gen(rng, 3);
    std::vector<std::vector<int64_t>> bindings;
    for (int j = 0; j < 6; ++j) {
      std::vector<int64_t> v;
      for (int k = 0; k < kSymbols; ++k) v.push_back(int64_t(rng() % 21) - 6); // -6..14: floor semantics below 0 too
      bindings.push_back(v);
    }
    std::optional<SymExpr> e;
    try {
      e = build(*ast);
    } catch (const Error &err) {
      // Only a divisor that is the constant 0 in every binding may refuse.
      for (const auto &v : bindings) EXPECT_FALSE(eval(*ast, v).has_value()) << text(*ast) << ": " << err.what();
      ++divided_by_zero;
      continue;
    }
    for (const auto &v : bindings) {
      std::optional<int64_t> want = eval(*ast, v);
      if (!want) continue; // the tree divides by 0 here; the normal form may have cancelled it
      ASSERT_EQ(e->evaluate(v), *want) << text(*ast) << " as " << e->str() << " at s = " << v[0] << ", " << v[1]
                                       << ", " << v[2] << ", " << v[3];
      ++compared;
    }
    // The text form reads back to the same normal form, and so does the tree's own text.
    ASSERT_EQ(SymExpr::parse(e->str()), *e) << e->str();
    ASSERT_EQ(SymExpr::parse(text(*ast)), *e) << text(*ast);
    EXPECT_LT(e->max_symbol(), kSymbols);
  }
  EXPECT_GT(compared, 15000);
  EXPECT_GT(divided_by_zero, 0); // the sweep reaches the refusal
}

// ------------------------------------------------------------ normal form

TEST(SymExpr, AlgebraicIdentitiesHaveOneNormalForm) {
  EXPECT_EQ((s(0) + 1) * (s(0) + 1), s(0) * s(0) + 2 * s(0) + 1);
  EXPECT_EQ((s(0) - s(1)) * (s(0) + s(1)), s(0) * s(0) - s(1) * s(1));
  EXPECT_EQ(s(1) * s(0) * 3, 3 * s(0) * s(1));
  EXPECT_EQ(s(0) - s(0), SymExpr(0));
  EXPECT_EQ((s(0) - s(0)).constant(), std::optional<int64_t>(0));
  EXPECT_EQ((s(0) * 2 - s(0) - s(0) + 5).constant(), std::optional<int64_t>(5));
  EXPECT_FALSE((s(0) + 1).is_constant());
  EXPECT_NE(s(0), s(1));
  EXPECT_NE(s(0) * s(0), s(0));
}

TEST(SymExpr, FloorDivisionSimplifiesWhatItCan) {
  EXPECT_EQ(SymExpr::floordiv(128 * s(0), 64), 2 * s(0));                        // a reshape's size
  EXPECT_EQ(SymExpr::floordiv(6 * s(0) + 5, 2), 3 * s(0) + 2);                   // floor((6x + 5) / 2) = 3x + 2
  EXPECT_EQ(SymExpr::floordiv(s(0) * s(1) * 4, s(1)), 4 * s(0));                  // exact by a symbol
  EXPECT_EQ(SymExpr::floordiv(2 * s(0) + 2, 4), SymExpr::floordiv(s(0) + 1, 2)); // (2y) // 4 = y // 2
  EXPECT_EQ(SymExpr::floordiv(6 * s(0) + 5, 4), s(0) + 1 + SymExpr::floordiv(2 * s(0) + 1, 4));
  EXPECT_EQ(SymExpr::floordiv(s(0), -1), -s(0));
  EXPECT_EQ(SymExpr::floordiv(-s(0), 2), -s(0) + SymExpr::floordiv(s(0), 2)); // floor(-x / 2) = -x + floor(x / 2)
  EXPECT_EQ(SymExpr::floordiv(-7, 2), SymExpr(-4)); // Python: -7 // 2 == -4
  // A coefficient at the edge of int64: floor(-2^63 / 3) = -3074457345618258603 (3 * that is -2^63 - 1).
  const std::vector<int64_t> one = {1};
  EXPECT_EQ(SymExpr::floordiv(s(0) * std::numeric_limits<int64_t>::min(), 3).evaluate(one), -3074457345618258603);
  EXPECT_EQ(SymExpr::mod(-7, 2), SymExpr(1));       // Python: -7 % 2 == 1
  EXPECT_EQ(SymExpr::mod(4 * s(0) + 3, 4), SymExpr(3));
  EXPECT_EQ(SymExpr::mod(s(0) * s(1), s(1)), SymExpr(0));
  // a // b stays an atom when nothing divides; a == (a // b) * b + a % b still.
  SymExpr q = SymExpr::floordiv(s(0), s(1));
  EXPECT_FALSE(q.is_constant());
  EXPECT_EQ(q * s(1) + SymExpr::mod(s(0), s(1)), s(0));
  EXPECT_EQ(q.max_symbol(), 1);
}

TEST(SymExpr, ExactDivisionOnlyWhenItHoldsForEveryValue) {
  EXPECT_EQ(SymExpr::exact_div(s(0) * s(0) + 2 * s(0) + 1, s(0) + 1), std::optional<SymExpr>(s(0) + 1));
  EXPECT_EQ(SymExpr::exact_div(6 * s(0) * s(1), 3 * s(1)), std::optional<SymExpr>(2 * s(0)));
  EXPECT_EQ(SymExpr::exact_div(SymExpr(12), SymExpr(4)), std::optional<SymExpr>(SymExpr(3)));
  EXPECT_EQ(SymExpr::exact_div(SymExpr(0), s(0)), std::optional<SymExpr>(SymExpr(0)));
  EXPECT_FALSE(SymExpr::exact_div(3 * s(0), 2).has_value()); // odd s0
  EXPECT_FALSE(SymExpr::exact_div(s(0) + 1, s(0)).has_value());
  EXPECT_FALSE(SymExpr::exact_div(s(0), s(0) * s(1)).has_value());
  EXPECT_FALSE(SymExpr::exact_div(s(0), 0).has_value());
}

TEST(SymExpr, TextForm) {
  EXPECT_EQ((128 * s(0) + 4).str(), "128*s0 + 4");
  EXPECT_EQ((1 - s(0)).str(), "-s0 + 1");
  EXPECT_EQ((s(1) * s(0) * s(0)).str(), "s0*s0*s1");
  EXPECT_EQ(SymExpr(0).str(), "0");
  EXPECT_EQ(SymExpr::floordiv(s(0) + 1, 4).str(), "floordiv(s0 + 1, 4)");
  EXPECT_EQ(SymExpr::floordiv(s(0), 2 * s(1)).str(), "floordiv(s0, 2*s1)");
  EXPECT_EQ(P(" 2 *s0*  s1 - -3"), 2 * s(0) * s(1) + 3);
  EXPECT_EQ(P("floordiv(s0, 2) * 2 + mod(s0, 2)"), s(0));
  EXPECT_EQ(P("2 * (s0 + 1)"), 2 * s(0) + 2);
  EXPECT_EQ(P("-s0 * 3"), -3 * s(0));
  EXPECT_EQ(P("s10"), s(10));
}

// A dim a call binds is a symbol alone: not a multiple, a power, a sum or a division of one.
TEST(SymExpr, AsSymbolOnlyOfABareSymbol) {
  EXPECT_EQ(s(3).as_symbol(), std::optional<int>(3));
  EXPECT_EQ(P("s0").as_symbol(), std::optional<int>(0));
  EXPECT_EQ((s(0) + s(1) - s(1)).as_symbol(), std::optional<int>(0));
  EXPECT_EQ(SymExpr(5).as_symbol(), std::nullopt);
  EXPECT_EQ(SymExpr(0).as_symbol(), std::nullopt);
  EXPECT_EQ((2 * s(0)).as_symbol(), std::nullopt);
  EXPECT_EQ((-s(0)).as_symbol(), std::nullopt);
  EXPECT_EQ((s(0) * s(0)).as_symbol(), std::nullopt);
  EXPECT_EQ((s(0) + 1).as_symbol(), std::nullopt);
  EXPECT_EQ((s(0) * s(1)).as_symbol(), std::nullopt);
  EXPECT_EQ(SymExpr::floordiv(s(0), 2).as_symbol(), std::nullopt);
}

// ------------------------------------------------------------ errors

TEST(SymExpr, BadInputIsAnError) {
  expect_error([] { SymExpr::floordiv(s(0), 0); }, {"s0 // 0", "division by zero"});
  expect_error([] { SymExpr::mod(s(0), s(1) - s(1)); }, {"division by zero"});
  expect_error([] { SymExpr::parse("s0 +"); }, {"'s0 +'", "position 4"});
  expect_error([] { SymExpr::parse("x"); }, {"expected a number, a symbol s<k> or '('", "position 0"});
  expect_error([] { SymExpr::parse("s0 / 2"); }, {"unexpected '/'"});
  expect_error([] { SymExpr::parse("s0 // 2"); }, {"unexpected '/'"}); // // is a comment in the IR text
  expect_error([] { SymExpr::parse("floordiv(s0 2)"); }, {"expected ',' between floordiv's operands"});
  expect_error([] { SymExpr::parse(std::string(100, '(') + "s0" + std::string(100, ')')); }, {"nested more than 64 deep"});
  expect_error(
      [] {
        SymExpr p = 1;
        for (int k = 0; k < 13; ++k) p = p * (s(k) + 1);
      },
      {"more than 4096 terms"});
  expect_error([] { SymExpr::parse("(s0 + 1"); }, {"expected ')'"});
  expect_error([] { SymExpr::parse(""); }, {"expected a number"});
  expect_error([] { SymExpr::parse("99999999999999999999"); }, {"out of range"});
  expect_error([] { SymExpr::parse("s99999999999"); }, {"symbol id out of range"});
  expect_error([] { SymExpr::symbol(-1); }, {"s-1"});
  const std::vector<int64_t> two = {3, 0};
  expect_error([&] { (s(0) + s(2)).evaluate(two); }, {"s0 + s2", "s2 has no value", "2 given"});
  expect_error([&] { SymExpr::floordiv(s(0), s(1)).evaluate(two); }, {"s1 is 0", "division by zero"});
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  expect_error([] { SymExpr(kMax) + 1; }, {"overflows int64"});
  expect_error([] { -SymExpr(std::numeric_limits<int64_t>::min()); }, {"overflows int64"});
  expect_error([&] { (s(0) * kMax).evaluate(two); }, {"overflows int64"});
}

} // namespace
} // namespace kiln::ir

namespace kiln::ir {
namespace {

// period(): moving the symbols by multiples of it moves every floor division by
// a whole amount. Checked against the definition: at every multiple, each
// expression's change is exactly linear in the move (codegen's probes need that).
TEST(SymExpr, PeriodMakesFloorDivisionsLinearInTheMoves) {
  EXPECT_EQ(SymExpr::parse("3*s0*s1 + 4").period(), 1);
  const char *texts[] = {"floordiv(s1 + 1, 2)", "floordiv(s1 + 3, 8)*floordiv(s2 + 3, 8)",
                         "floordiv(s1 + 3, 8) + floordiv(s2, 3)", "floordiv(floordiv(s0, 2) + 1, 4)",
                         "64*s0*floordiv(2*s1 + 1, 6)"};
  const int64_t want[] = {2, 8, 24, 8, 6};
  for (size_t i = 0; i < std::size(texts); ++i) {
    const SymExpr e = SymExpr::parse(texts[i]);
    const int64_t p = e.period();
    EXPECT_GT(p, 0) << texts[i];
    EXPECT_EQ(p % want[i], 0) << texts[i] << ": " << p;
    // Along one symbol at a time (the others fixed), the differences between
    // successive moves by p are constant for a linear term and change linearly for a product.
    for (int k = 0; k < 3; ++k)
      for (int64_t base = 2; base < 12; ++base) {
        auto at = [&](int64_t move) {
          std::vector<int64_t> v{base + 3, base + 5, base + 7};
          v[size_t(k)] += move * p;
          return e.evaluate(v);
        };
        const int64_t d1 = at(1) - at(0), d2 = at(2) - at(1), d3 = at(3) - at(2);
        EXPECT_EQ(d3 - d2, d2 - d1) << texts[i] << " along s" << k << " from " << base;
      }
  }
  // A symbolic divisor has no period, nor divisions whose periods' lcm passes kMaxPeriod.
  EXPECT_EQ(SymExpr::floordiv(SymExpr::symbol(0), SymExpr::symbol(1)).period(), 0);
  EXPECT_EQ(SymExpr::parse("floordiv(s0, 31)*floordiv(s1, 37)").period(), 0);
}

} // namespace
} // namespace kiln::ir
