// IR core: printer, parser, verifier, structural hash.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "ir/graph.h"
#include "ir/hash.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

namespace kiln::ir {
namespace {

TensorType ty(std::initializer_list<int64_t> shape, DType dt = kFloat32) { return TensorType{dt, Dims(shape), std::nullopt}; }

template <class T> Tensor make_const(std::initializer_list<int64_t> shape, std::vector<T> values) {
  Tensor t = detail::make_tensor(IntArrayRef(shape), dtype_of<T>);
  EXPECT_EQ(size_t(t.numel()), values.size());
  for (size_t i = 0; i < values.size(); ++i) static_cast<T *>(t.raw_data())[i] = values[i];
  return t;
}

Tensor wrapped(double v) {
  Tensor t = make_const<double>({}, {v});
  t.impl().wrapped_number = true;
  return t;
}

// Prints, parses, prints again: the texts must be identical and the graphs structurally equal.
std::unique_ptr<Graph> expect_round_trip(const Graph &g) {
  std::string a = print(g);
  std::unique_ptr<Graph> p;
  try {
    p = parse(a, "rt.kir");
  } catch (const Error &e) {
    ADD_FAILURE() << e.what() << "\n" << a;
    return nullptr;
  }
  EXPECT_EQ(a, print(*p));
  EXPECT_TRUE(structurally_equal(g, *p)) << a;
  EXPECT_EQ(structural_hash(g), structural_hash(*p)) << a;
  return p;
}

// The message of the kiln::Error `f` throws ("" when it does not throw).
template <class F> std::string error_of(F &&f) {
  try {
    f();
  } catch (const Error &e) {
    return e.what();
  }
  return "";
}

// w1 of the header comment, built with the Graph API.
std::unique_ptr<Graph> build_w1(const std::string &x = "x", const std::string &a = "a", const std::string &b = "b",
                                double alpha = 1.0) {
  auto g = std::make_unique<Graph>("w1");
  Value *vx = g->add_input(ty({16, 32}), x);
  Value *va = g->add_param(detail::make_tensor({32}, kFloat32), a);
  Value *vb = g->add_param(detail::make_tensor({32}, kFloat32), b);
  Node *m = g->create(OpId::Mul, {vx, va}, {}, {ty({16, 32})});
  Node *ad = g->create(OpId::Add, {m->result(), vb}, {AttrValue(alpha)}, {ty({16, 32})});
  Node *ge = g->create(OpId::Gelu, {ad->result()}, {AttrValue("tanh")}, {ty({16, 32})});
  g->set_outputs({ge->result()});
  return g;
}

// ------------------------------------------------------------------ printer

TEST(IrPrinter, PrintsTheHeaderExample) {
  auto g = build_w1("x", "a", "b", 1.0);
  g->nodes()[1]->attrs()[0] = AttrValue(1);
  EXPECT_EQ(print(*g), "graph @w1(%x: f32[16, 32]) params(%a: f32[32], %b: f32[32]) {\n"
                       "  %0 = mul(%x, %a) : f32[16, 32]\n"
                       "  %1 = add(%0, %b) {alpha = 1} : f32[16, 32]\n"
                       "  %2 = gelu(%1) {approximate = \"tanh\"} : f32[16, 32]\n"
                       "  return %2\n"
                       "}\n");
}

TEST(IrPrinter, MultipleResultsNoneOperandsStridesConstsAndWriteBacks) {
  Graph g("g");
  Value *x = g.add_input(TensorType{kFloat32, {4, 8}, Dims{1, 4}}, "x");
  Value *s = g.add_input(ty({4}, kInt64), "s");
  Value *w = g.add_param(detail::make_tensor({8, 8}, kFloat32), "w");
  g.add_const(wrapped(2.5), "c0");
  g.add_const(make_const<int64_t>({3}, {1, 2, 3}), "c1");
  Node *l = g.create(OpId::Linear, {x, w, nullptr}, {}, {ty({4, 8})});
  Node *mx = g.create(OpId::MaxDim, {l->result()}, {AttrValue(1), AttrValue(false)}, {ty({4}), ty({4}, kInt64)});
  g.add_write_back(s, mx->result(1));
  g.set_outputs({mx->result(0), mx->result(1)});
  EXPECT_EQ(print(g), "graph @g(%x: f32[4, 8]{1, 4}, %s: i64[4]) params(%w: f32[8, 8]) "
                      "consts(%c0: f64[] = wrapped 2.5, %c1: i64[3] = [1, 2, 3]) {\n"
                      "  %0 = linear(%x, %w, none) : f32[4, 8]\n"
                      "  %1, %2 = max(%0) {dim = 1, keepdim = false} : f32[4], i64[4]\n"
                      "  writeback %s <- %2\n"
                      "  return %1, %2\n"
                      "}\n");
  expect_round_trip(g);
}

TEST(IrPrinter, FusionGroupsPrintNested) {
  Graph g("g");
  Value *x = g.add_input(ty({4, 8}), "x");
  Value *y = g.add_input(ty({8}), "y");
  Node *grp = g.create_group({x, y}, {ty({4, 8})});
  Graph *body = grp->body();
  body->inputs()[0]->set_name("a");
  body->inputs()[1]->set_name("b");
  Node *m = body->create(OpId::Mul, {body->inputs()[0], body->inputs()[1]}, {}, {ty({4, 8})});
  body->set_outputs({m->result()});
  g.set_outputs({grp->result()});
  EXPECT_EQ(print(g), "graph @g(%x: f32[4, 8], %y: f32[8]) {\n"
                      "  %0 = fusion_group(%x, %y) : f32[4, 8] {\n"
                      "    graph @g.group(%a: f32[4, 8], %b: f32[8]) {\n"
                      // Renaming the body inputs (created as %0 and %1) freed their numbers.
                      "      %0 = mul(%a, %b) : f32[4, 8]\n"
                      "      return %0\n"
                      "    }\n"
                      "  }\n"
                      "  return %0\n"
                      "}\n");
  auto p = expect_round_trip(g);
  ASSERT_TRUE(p);
  EXPECT_NO_THROW(verify(*p));
}

// ------------------------------------------------------------------ round trips

TEST(IrRoundTrip, EveryAttributeKind) {
  const double kInf = std::numeric_limits<double>::infinity();
  std::vector<AttrValue> values = {
      AttrValue(), AttrValue(0), AttrValue(-7), AttrValue(int64_t(INT64_MIN)), AttrValue(int64_t(INT64_MAX)),
      AttrValue(0.1), AttrValue(1.0 / 3.0), AttrValue(-0.0), AttrValue(1e300), AttrValue(5e-324),
      AttrValue(kInf), AttrValue(-kInf), AttrValue(std::nan("")), AttrValue(2.0), AttrValue(123456789012345678.0),
      AttrValue(true), AttrValue(false), AttrValue(std::vector<int64_t>{}), AttrValue({0, -1, 5}),
      AttrValue("tanh"), AttrValue(""), AttrValue("quote\" back\\ nl\n tab\t ctl\x01 hi\xff"),
      AttrValue(kBool), AttrValue(kInt32), AttrValue(kInt64), AttrValue(kFloat32), AttrValue(kFloat64)};
  for (const AttrValue &v : values) {
    Graph g("attrs");
    Value *x = g.add_input(ty({4}), "x");
    // An attribute whose ops.def type holds v's kind (the parser checks each one).
    const AttrValue one = int64_t(1), four = std::vector<int64_t>{4};
    struct Slot {
      OpId op;
      Attrs attrs;
      size_t at;
    };
    const Slot slots[] = {
        {OpId::AsStrided, {four, four, v}, 2},                 // none, int: storage_offset (int?)
        {OpId::Dropout, {v, false}, 0},                        // float: p
        {OpId::Dropout, {0.5, v}, 1},                          // bool: train
        {OpId::AsStrided, {v, four, one}, 0},                  // int list: size
        {OpId::Gelu, {v}, 0},                                  // string: approximate
        {OpId::Cast, {v}, 0},                                  // dtype
    };
    const size_t kind = v.variant().index();
    const Slot &s = slots[kind <= 1 ? 0 : kind - 1];
    Node *n = g.create(s.op, {x}, s.attrs, {ty({4})});
    g.set_outputs({n->result()});
    auto p = expect_round_trip(g);
    ASSERT_TRUE(p);
    const AttrValue &got = p->nodes()[0]->attrs()[s.at];
    ASSERT_EQ(got.variant().index(), v.variant().index());
    if (v.is_float()) {
      double a = v.as_float(), b = got.as_float();
      EXPECT_EQ(0, std::memcmp(&a, &b, sizeof a)) << a << " vs " << b;
    } else {
      EXPECT_TRUE(got == v);
    }
  }
}

TEST(IrRoundTrip, RandomFloatBitsSurviveExactly) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 3000; ++i) {
    uint64_t bits = rng();
    double d;
    std::memcpy(&d, &bits, sizeof d);
    uint32_t fbits = uint32_t(rng());
    float f;
    std::memcpy(&f, &fbits, sizeof f);
    Graph g("f");
    Value *x = g.add_input(ty({4}), "x");
    g.add_const(make_const<float>({}, {f}), "cf");
    g.add_const(make_const<double>({2}, {d, double(f)}), "cd");
    Node *n = g.create(OpId::Clamp, {x}, {AttrValue(d), AttrValue()}, {ty({4})});
    g.set_outputs({n->result()});
    auto p = expect_round_trip(g);
    ASSERT_TRUE(p);
    double back = p->nodes()[0]->attrs()[0].as_float();
    if (std::isnan(d)) {
      EXPECT_TRUE(std::isnan(back));
    } else {
      EXPECT_EQ(0, std::memcmp(&d, &back, sizeof d)) << print(g);
    }
    float fback = *static_cast<const float *>(p->consts()[0]->tensor().raw_data());
    if (!std::isnan(f)) {
      EXPECT_EQ(0, std::memcmp(&f, &fback, sizeof f));
    }
  }
}

TEST(IrRoundTrip, ConstantsOfEveryDtypeRankAndLayout) {
  Graph g("consts");
  g.add_const(make_const<bool>({2}, {true, false}), "b");
  g.add_const(make_const<int32_t>({2, 2}, {INT32_MIN, -1, 0, INT32_MAX}), "i");
  g.add_const(make_const<int64_t>({}, {INT64_MIN}), "l");
  g.add_const(make_const<float>({3}, {0.1f, -0.0f, 1e-45f}), "f");
  g.add_const(make_const<double>({1, 2}, {0.30000000000000004, -1e-310}), "d");
  g.add_const(make_const<float>({0, 3}, {}), "empty");
  g.add_const(wrapped(-3.25), "w");
  // A transposed (non-contiguous) constant prints in logical order.
  Tensor base = make_const<int64_t>({2, 3}, {1, 2, 3, 4, 5, 6});
  g.add_const(detail::make_view(base, {3, 2}, {1, 3}, 0), "t");
  g.set_outputs({g.consts()[7]});
  auto p = expect_round_trip(g);
  ASSERT_TRUE(p);
  EXPECT_NE(print(g).find("%t: i64[3, 2] = [1, 4, 2, 5, 3, 6]"), std::string::npos) << print(g);
  EXPECT_TRUE(p->consts()[6]->tensor().impl().wrapped_number);
  EXPECT_FALSE(p->consts()[4]->tensor().impl().wrapped_number);
}

TEST(IrRoundTrip, QuotedNamesAndEmptyGraphs) {
  Graph g("my graph\"1");
  Value *x = g.add_input(ty({}), "odd name");
  Value *y = g.add_input(ty({2}, kBool), "-lead.dot$");
  g.set_outputs({y, x});
  expect_round_trip(g);
  Graph empty("e");
  EXPECT_EQ(print(empty), "graph @e() {\n  return\n}\n");
  expect_round_trip(empty);
}

TEST(IrRoundTrip, ManyGraphShapes) {
  // Chains, diamonds, fan-out, every dtype, ranks 0..4, nested groups.
  std::mt19937 rng(7);
  const DType dts[] = {kBool, kInt32, kInt64, kFloat32, kFloat64};
  for (int trial = 0; trial < 50; ++trial) {
    Graph g("g" + std::to_string(trial));
    std::vector<Value *> pool;
    for (int i = 0; i < 1 + int(rng() % 3); ++i) {
      Dims shape;
      for (int d = 0; d < int(rng() % 5); ++d) shape.push_back(int64_t(rng() % 7));
      pool.push_back(g.add_input(TensorType{dts[rng() % 5], shape, std::nullopt}, "in" + std::to_string(i)));
    }
    for (int i = 0; i < int(rng() % 12); ++i) {
      Value *a = pool[rng() % pool.size()], *b = pool[rng() % pool.size()];
      Node *n = nullptr;
      switch (rng() % 4) {
      case 0: n = g.create(OpId::Add, {a, b}, {AttrValue(int(rng() % 3))}, {a->type()}); break;
      case 1: n = g.create(OpId::Neg, {a}, {}, {a->type()}); break;
      case 2: n = g.create(OpId::Sum, {a}, {AttrValue({0}), AttrValue(true), AttrValue(kFloat64)}, {ty({1})}); break;
      default: {
        n = g.create_group({a, b}, {a->type(), b->type()});
        Graph *body = n->body();
        Node *inner = body->create(OpId::Mul, {body->inputs()[0], body->inputs()[1]}, {}, {a->type()});
        body->set_outputs({inner->result(), body->inputs()[1]});
      }
      }
      for (Value *r : n->results()) pool.push_back(r);
    }
    g.set_outputs({pool.back(), pool.front()});
    if (rng() % 2) g.add_write_back(g.inputs()[0], pool.back());
    expect_round_trip(g);
  }
}

TEST(IrParser, ParamsAreMetaAndCanBeBound) {
  auto g = parse("graph @g(%x: f32[2]) params(%w: f32[2, 3]{3, 1}) {\n  return %w\n}\n");
  Value *w = g->find_param("w");
  ASSERT_TRUE(w);
  EXPECT_TRUE(w->tensor().is_meta());
  EXPECT_EQ(w->type().str(), "f32[2, 3]{3, 1}");
  Tensor live = detail::make_tensor({2, 3}, kFloat32);
  g->bind_param(w, live);
  EXPECT_TRUE(w->tensor().is_same(live));
  EXPECT_NE(error_of([&] { g->bind_param(w, detail::make_tensor({3}, kFloat32)); }).find("has type f32[2, 3]"),
            std::string::npos);
  EXPECT_EQ(g->find_param("nope"), nullptr);
}

TEST(IrParser, NamesNeverCollideWithLaterFreshNames) {
  auto g = parse("graph @g(%x: f32[2]) {\n  %1 = neg(%x) : f32[2]\n  %0 = neg(%1) : f32[2]\n  return %0\n}\n");
  Node *n = g->create(OpId::Neg, {g->outputs()[0]}, {}, {ty({2})});
  EXPECT_NE(n->result()->name(), "0");
  EXPECT_NE(n->result()->name(), "1");
  EXPECT_NO_THROW(verify(*g));
}

// ------------------------------------------------------------------ parse errors

struct BadText {
  const char *text;
  const char *where;   // "line:col"
  const char *message; // substring
};

TEST(IrParser, ErrorsCarryLineAndColumn) {
  const BadText cases[] = {
      {"graph @g(%x: f32[4]) {\n  %0 = ad(%x, %x) : f32[4]\n  return %0\n}", "2:8", "unknown op 'ad'; did you mean 'add'?"},
      {"graph @g(%x: f32[4]) {\n  %0 = mul(%x, %y) : f32[4]\n  return %0\n}", "2:16", "use of undefined value '%y'"},
      {"graph @g(%x: f32[4]) {\n  %x = neg(%x) : f32[4]\n  return %x\n}", "2:3", "redefinition of value '%x'"},
      {"graph @g(%x: f32[4], %x: f32[4]) {\n  return %x\n}", "1:22", "redefinition of value '%x'"},
      {"graph @g(%x: f32[4]) {\n  %0 = add(%x, %x) {alpah = 1} : f32[4]\n  return %0\n}", "2:21",
       "add has no attribute 'alpah'; did you mean 'alpha'?"},
      {"graph @g(%x: f32[4]) {\n  %0 = add(%x, %x) {alpha = 1, alpha = 2} : f32[4]\n  return %0\n}", "2:32",
       "attribute 'alpha' given twice"},
      {"graph @g(%x: f32[4]) {\n  %0 = add(%x, %x) {alpha = \"one\"} : f32[4]\n  return %0\n}", "2:29",
       "attribute 'alpha' of add must be a number"},
      {"graph @g(%x: f32[4]) {\n  %0 = neg(%x) {alpha = 1} : f32[4]\n  return %0\n}", "2:17",
       "neg has no attribute 'alpha' (it has none)"},
      {"graph @g(%x: f32[4]) {\n  %0 = add(%x, %x) : f32[4]\n  return %0\n}", "2:8", "add needs attribute 'alpha'"},
      {"graph @g(%x: f32[4]) {\n  %0 = add(%x) {alpha = 1} : f32[4]\n  return %0\n}", "2:8", "add takes 2 operands, got 1"},
      {"graph @g(%x: f32[4]) {\n  %0, %1 = neg(%x) : f32[4]\n  return %0\n}", "2:12", "2 results but 1 result types"},
      {"graph @g(%x: f17[4]) {\n  return %x\n}", "1:14", "unknown dtype 'f17'"},
      {"graph @g(%x: f32[4, -1]) {\n  return %x\n}", "1:17", "dimension -1 is out of range"},
      {"graph @g(%x: f32[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]) {\n  return %x\n}", "1:17", "at most 16"},
      {"graph @g(%x: f32[4]{1, 2}) {\n  return %x\n}", "1:20", "type has 1 dims but 2 strides"},
      {"graph @g(%x: f32[4]) {\n  %0 = gelu(%x) {approximate = \"tanh} : f32[4]\n  return %0\n}", "2:32",
       "unterminated string"},
      {"graph @g(%x: f32[4]) {\n  %0 = gelu(%x) {approximate = \"\\q\"} : f32[4]\n  return %0\n}", "2:33",
       "unknown escape"},
      {"graph @g(%x: f32[4]) {\n  %0 = neg(%x) : f32[4]\n", "3:1", "unterminated graph @g: expected 'return'"},
      {"graph @g(%x: f32[4]) {\n  return %x\n", "3:1", "expected '}' after return"},
      {"graph @g(%x: f32[4]) {\n  return %x\n}\n}", "4:1", "expected end of file"},
      {"graph @g(%x: f32[4]) {\n  return %x ;\n}", "2:13", "unexpected character ';'"},
      {"grph @g() {\n}", "1:1", "expected 'graph'"},
      {"", "1:1", "expected 'graph', got end of file"},
      {"graph @g() consts(%c: i64[1] = [99999999999999999999]) {\n  return %c\n}", "1:33", "out of range"},
      {"graph @g() consts(%c: i32[1] = [3000000000]) {\n  return %c\n}", "1:33", "does not fit in i32"},
      {"graph @g() consts(%c: f32[] = 1e39) {\n  return %c\n}", "1:31", "out of range"},
      {"graph @g() consts(%c: i64[2] = [1, 2, 3]) {\n  return %c\n}", "1:39", "has more than 2 elements"},
      {"graph @g() consts(%c: i64[2] = [1]) {\n  return %c\n}", "1:32", "needs 2 elements, got 1"},
      {"graph @g() consts(%c: i1[] = 1) {\n  return %c\n}", "1:30", "expected true or false"},
      {"graph @g() consts(%c: f64[2] = wrapped [1.0, 2.0]) {\n  return %c\n}", "1:32", "only a 0-dim constant"},
      {"graph @g(%x: f32[4]) {\n  %0 = fusion_group(%x) : f32[4] {\n    graph @b(%a: f32[4], %b: f32[4]) {\n"
       "      return %a\n    }\n  }\n  return %0\n}",
       "3:26", "fusion body has more inputs than the group has operands (1)"},
      {"graph @g(%x: f32[4]) {\n  %0 = fusion_group(%x) : f32[4] {\n    graph @b(%a: f32[4]) {\n"
       "      %0 = neg(%x) : f32[4]\n      return %0\n    }\n  }\n  return %0\n}",
       "4:16", "use of undefined value '%x'"},
      {"graph @g(%x: f32[4]) {\n  writeback %x < %x\n  return %x\n}", "2:16", "unexpected character '<'"},
  };
  for (const BadText &c : cases) {
    std::string msg = error_of([&] { parse(c.text, "t.kir"); });
    EXPECT_EQ(msg.rfind(std::string("t.kir:") + c.where + ": ", 0), 0u) << c.text << "\n-> " << msg;
    EXPECT_NE(msg.find(c.message), std::string::npos) << c.text << "\n-> " << msg;
  }
}

TEST(IrParser, DeepNestingIsAnErrorNotAStackOverflow) {
  std::string text;
  const int depth = 2000;
  for (int i = 0; i < depth; ++i) text += "graph @g(%x: f32[4]) {\n%0 = fusion_group(%x) : f32[4] {\n";
  std::string msg = error_of([&] { parse(text); });
  EXPECT_NE(msg.find("fusion groups nested more than 32 deep"), std::string::npos) << msg;
  EXPECT_NE(error_of([&] { parse(std::string(1 << 20, '[')); }), "");
  EXPECT_NE(error_of([&] { parse("graph @g(%x: f32[" + std::string(100000, '9') + "]) {\n return\n}"); }), "");
}

// ------------------------------------------------------------------ verifier

TEST(IrVerifier, AcceptsWellFormedGraphs) {
  auto g = build_w1();
  EXPECT_NO_THROW(verify(*g));
  EXPECT_NO_THROW(verify(*parse(print(*g))));
}

TEST(IrVerifier, UseBeforeDefinition) {
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  Node *a = g.create(OpId::Neg, {x}, {}, {ty({4})});
  Node *b = g.create(OpId::Neg, {a->result()}, {}, {ty({4})});
  g.set_outputs({b->result()});
  g.move_before(b, a);
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: %1 = neg(%0): use of %0 before its definition");
}

TEST(IrVerifier, WrongOperandAndAttributeCounts) {
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  Node *n = g.create(OpId::Add, {x}, {AttrValue(1)}, {ty({4})});
  g.set_outputs({n->result()});
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: %0 = add(%x): wrong operand count 1");
  n->attrs().clear();
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: %0 = add(%x): 1 attributes expected, got 0");
}

TEST(IrVerifier, MismatchedResultType) {
  Graph g("g");
  Value *x = g.add_input(ty({4, 8}), "x");
  Value *y = g.add_input(ty({8}), "y");
  Node *n = g.create(OpId::Add, {x, y}, {AttrValue(1)}, {ty({4, 9})});
  g.set_outputs({n->result()});
  EXPECT_EQ(error_of([&] { verify(g); }),
            "verify: @g: %0 = add(%x, %y): result type f32[4, 9] does not match the inferred f32[4, 8]");
  n->result()->set_type(ty({4, 8}, kFloat64));
  EXPECT_NE(error_of([&] { verify(g); }).find("result type f64[4, 8] does not match the inferred f32[4, 8]"),
            std::string::npos);
  n->result()->set_type(ty({4, 8}));
  EXPECT_NO_THROW(verify(g));
  // Operands the op's rule rejects.
  y->set_type(ty({3}));
  EXPECT_NE(error_of([&] { verify(g); }).find("not broadcastable"), std::string::npos);
}

TEST(IrVerifier, WrappedNumberConstantsKeepTheirPromotion) {
  // i64 tensor * wrapped 2.5 -> f32 (the default float dtype); a plain 0-dim f64 -> f64.
  auto g = parse("graph @g(%x: i64[4]) consts(%c: f64[] = wrapped 2.5) {\n"
                 "  %0 = mul(%x, %c) : f32[4]\n  return %0\n}\n");
  EXPECT_NO_THROW(verify(*g));
  auto h = parse("graph @g(%x: i64[4]) consts(%c: f64[] = 2.5) {\n  %0 = mul(%x, %c) : f32[4]\n  return %0\n}\n");
  EXPECT_NE(error_of([&] { verify(*h); }).find("does not match the inferred f64[4]"), std::string::npos);
}

TEST(IrVerifier, ViewsReductionsAndMultipleResults) {
  auto g = parse("graph @g(%x: f32[2, 3]) {\n"
                 "  %0 = transpose(%x) {dim0 = 0, dim1 = 1} : f32[3, 2]\n"
                 "  %1, %2 = max(%0) {dim = 1, keepdim = true} : f32[3, 1], i64[3, 1]\n"
                 "  %3 = sum(%0) {dims = [0], keepdim = false, dtype = f64} : f64[2]\n"
                 "  return %1, %2, %3\n}\n");
  EXPECT_NO_THROW(verify(*g));
  auto bad = parse("graph @g(%x: f32[2, 3]) {\n"
                   "  %1, %2 = max(%x) {dim = 1, keepdim = true} : f32[2, 1], f32[2, 1]\n"
                   "  return %1\n}\n");
  EXPECT_NE(error_of([&] { verify(*bad); }).find("result 1 type f32[2, 1] does not match the inferred i64[2, 1]"),
            std::string::npos);
}

TEST(IrVerifier, OptionalAndVariadicOperands) {
  auto g = parse("graph @g(%x: f32[4, 8], %q: f32[2, 5, 8]) params(%w: f32[3, 8], %b: f32[3]) {\n"
                 "  %0 = linear(%x, %w, none) : f32[4, 3]\n"
                 "  %1 = linear(%x, %w, %b) : f32[4, 3]\n"
                 "  %2 = linear(%x, %w) : f32[4, 3]\n"
                 "  %3 = cat(%0, %1, %2) {dim = 0} : f32[12, 3]\n"
                 "  %4 = scaled_dot_product_attention(%q, %q, %q, none) {dropout_p = 0.0, is_causal = true, "
                 "scale = none} : f32[2, 5, 8]\n"
                 "  return %3, %4\n}\n");
  EXPECT_NO_THROW(verify(*g));
  // An attribute of the wrong kind: the parser checks each attribute against its
  // type in ops.def (ATTR(IntList, dims)), before the verifier sees the graph.
  EXPECT_EQ(error_of([&] {
              parse("graph @g(%x: f32[4, 8]) {\n  %0 = sum(%x) {dims = 1, keepdim = false, dtype = none} : f32[4]\n"
                    "  return %0\n}\n");
            }),
            "<input>:2:24: attribute 'dims' of sum must be an int list");
}

TEST(IrVerifier, DanglingOutputsAndWriteBacks) {
  Graph other("other");
  Value *foreign = other.add_input(ty({4}), "z");
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  g.set_outputs({foreign});
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: dangling output %z: not defined in this graph");
  g.set_outputs({nullptr});
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: returns none");
  g.set_outputs({x});
  g.add_write_back(x, foreign);
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: dangling write-back value %z");
  g.write_backs().clear();
  Value *c = g.add_const(make_const<float>({4}, {1, 2, 3, 4}), "c");
  g.add_write_back(c, x);
  EXPECT_NE(error_of([&] { verify(g); }).find("write-back target %c is not an input or parameter"), std::string::npos);
}

TEST(IrVerifier, OpenFusionBody) {
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  Value *y = g.add_input(ty({4}), "y");
  Node *grp = g.create_group({x}, {ty({4})});
  Graph *body = grp->body();
  Node *n = body->create(OpId::Mul, {body->inputs()[0], y}, {}, {ty({4})});
  body->set_outputs({n->result()});
  g.set_outputs({grp->result()});
  EXPECT_EQ(error_of([&] { verify(g); }),
            "verify: @g/g.group: %1 = mul(%0, %y): fusion body is not closed: reads %y from another graph");
  n->set_operand(1, body->inputs()[0]);
  EXPECT_NO_THROW(verify(g));
  // Group result types must match what the body returns.
  grp->result()->set_type(ty({5}));
  EXPECT_NE(error_of([&] { verify(g); }).find("has type f32[5] but the body returns f32[4]"), std::string::npos);
}

TEST(IrVerifier, ErrorsNameTheNodeAndParsedNodesHaveLocations) {
  SourceMap locs;
  auto g = parse("graph @g(%x: f32[4]) {\n  %0 = neg(%x) : f32[4]\n    %1 = exp(%0) : f64[4]\n  return %1\n}\n",
                 "l.kir", &locs);
  ASSERT_EQ(locs.size(), 2u);
  const Node *bad = g->nodes()[1];
  EXPECT_EQ(locs[bad].line, 3);
  EXPECT_EQ(locs[bad].col, 5);
  try {
    verify(*g);
    ADD_FAILURE() << "verify accepted a wrong result type";
  } catch (const VerifyError &e) {
    EXPECT_EQ(e.node(), bad);
  }
}

TEST(IrVerifier, DuplicateNames) {
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  Value *y = g.add_input(ty({4}), "y");
  y->set_name("x");
  g.set_outputs({x});
  EXPECT_EQ(error_of([&] { verify(g); }), "verify: @g: value name %x is defined twice");
}

// ------------------------------------------------------------------ structural hash

TEST(IrHash, IndependentOfNames) {
  auto a = build_w1("x", "a", "b");
  auto b = build_w1("input", "weight", "bias");
  b->set_name("other");
  EXPECT_NE(print(*a), print(*b));
  EXPECT_EQ(structural_hash(*a), structural_hash(*b));
  EXPECT_TRUE(structurally_equal(*a, *b));
}

TEST(IrHash, ChangesWithAttributesTypesWiringAndConstants) {
  auto base = build_w1();
  auto attr = build_w1("x", "a", "b", 2.0);
  EXPECT_NE(structural_hash(*base), structural_hash(*attr));
  EXPECT_FALSE(structurally_equal(*base, *attr));

  auto type = build_w1();
  type->nodes()[2]->result()->set_type(ty({16, 32}, kFloat64));
  EXPECT_NE(structural_hash(*base), structural_hash(*type));
  EXPECT_FALSE(structurally_equal(*base, *type));

  auto strides = build_w1();
  strides->nodes()[2]->result()->set_type(TensorType{kFloat32, {16, 32}, Dims{32, 1}});
  EXPECT_NE(structural_hash(*base), structural_hash(*strides));

  auto wiring = build_w1();
  Node *add = wiring->nodes()[1];
  add->set_operand(1, wiring->params()[0]); // add(%0, %a) instead of add(%0, %b)
  EXPECT_NE(structural_hash(*base), structural_hash(*wiring));
  EXPECT_FALSE(structurally_equal(*base, *wiring));

  auto c1 = build_w1(), c2 = build_w1();
  c1->add_const(make_const<float>({2}, {1.f, 2.f}));
  c2->add_const(make_const<float>({2}, {1.f, 3.f}));
  EXPECT_NE(structural_hash(*c1), structural_hash(*c2));
  EXPECT_FALSE(structurally_equal(*c1, *c2));
  auto c3 = build_w1();
  c3->add_const(make_const<float>({2}, {1.f, 2.f}), "other_name");
  EXPECT_EQ(structural_hash(*c1), structural_hash(*c3));
  EXPECT_TRUE(structurally_equal(*c1, *c3));

  auto outs = build_w1();
  outs->set_outputs({outs->nodes()[1]->result()});
  EXPECT_NE(structural_hash(*base), structural_hash(*outs));
  EXPECT_FALSE(structurally_equal(*base, *outs));
}

TEST(IrHash, NodeHashForCse) {
  Graph g("g");
  Value *x = g.add_input(ty({4}), "x");
  Value *y = g.add_input(ty({4}), "y");
  Node *a = g.create(OpId::Add, {x, y}, {AttrValue(1)}, {ty({4})});
  Node *b = g.create(OpId::Add, {x, y}, {AttrValue(1)}, {ty({4})});
  Node *c = g.create(OpId::Add, {x, y}, {AttrValue(2)}, {ty({4})});
  Node *d = g.create(OpId::Sub, {x, y}, {AttrValue(1)}, {ty({4})});
  EXPECT_EQ(node_hash(*a), node_hash(*b));
  EXPECT_NE(node_hash(*a), node_hash(*c));
  EXPECT_NE(node_hash(*a), node_hash(*d));
}

TEST(IrHash, FusionBodiesAreCompared) {
  auto make = [](OpId inner, const std::string &name) {
    auto g = std::make_unique<Graph>(name);
    Value *x = g->add_input(ty({4}), "x");
    Node *grp = g->create_group({x}, {ty({4})});
    Node *n = grp->body()->create(inner, {grp->body()->inputs()[0]}, {}, {ty({4})});
    grp->body()->set_outputs({n->result()});
    g->set_outputs({grp->result()});
    return g;
  };
  auto a = make(OpId::Neg, "a"), b = make(OpId::Neg, "b"), c = make(OpId::Exp, "a");
  EXPECT_EQ(structural_hash(*a), structural_hash(*b));
  EXPECT_TRUE(structurally_equal(*a, *b));
  EXPECT_NE(structural_hash(*a), structural_hash(*c));
  EXPECT_FALSE(structurally_equal(*a, *c));
}

} // namespace
} // namespace kiln::ir
