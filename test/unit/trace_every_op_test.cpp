// Every op of the table, traced through the real tracer: the graph verifies,
// prints and parses back identically, and the interpreter gives eager's results.
// The test also fails when an op of ops.def has no case here.
#include <gtest/gtest.h>

#include <set>

#include <kiln/kiln.h>

#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace kiln;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Case {
  const char *name;
  std::vector<Tensor> inputs;
  Fn fn;
};

std::vector<Tensor> one(Tensor t) { return {std::move(t)}; }

std::vector<Case> cases() {
  manual_seed(7);
  Tensor x = randn({4, 6}), y = randn({4, 6}), pos = rand({4, 6}) + 0.5, row = randn({6});
  Tensor unit = rand({4, 6}) * 1.8 - 0.9; // asin, acos, atanh: inside (-1, 1)
  Tensor mask = gt(randn({4, 6}), 0.0), ints = randint(1, 9, {4, 6});
  Tensor m = randn({6, 5}), b3 = randn({2, 4, 6}), b3w = randn({2, 6, 3});
  Tensor img = randn({2, 3, 8, 8}), cw = randn({4, 3, 3, 3}), cb = randn({4});
  Tensor bw = rand({3}) + 0.5, bb = randn({3}), bm = randn({3}), bv = rand({3}) + 0.5;
  Tensor emb = randn({10, 6}), idx = tensor({3, 0, 9}), gidx = randint(0, 6, {4, 6});
  Tensor ixs = tensor({3, 0, 2, 3}); // rows of x, a repeat included
  Tensor q = randn({1, 2, 5, 4}), k = randn({1, 2, 5, 4}), v = randn({1, 2, 5, 4});
  auto unary = [&](const char *n, Tensor (*f)(const Tensor &), const Tensor &in) {
    return Case{n, {in}, [f](const std::vector<Tensor> &a) { return one(f(a[0])); }};
  };
  std::vector<Case> c = {
      unary("neg", neg, x), unary("abs", abs, x), unary("exp", exp, x), unary("log", log, pos),
      unary("log1p", log1p, pos), unary("expm1", expm1, x), unary("sqrt", sqrt, pos), unary("rsqrt", rsqrt, pos),
      unary("sin", sin, x), unary("cos", cos, x), unary("tanh", tanh, x), unary("sigmoid", sigmoid, x),
      unary("relu", relu, x), unary("silu", silu, x), unary("hardsigmoid", hardsigmoid, x), unary("erf", erf, x), unary("reciprocal", reciprocal, pos),
      unary("softsign", softsign, x), unary("exp2", exp2, x), unary("hardswish", hardswish, x),
      unary("mish", mish, x), unary("log_sigmoid", log_sigmoid, x), unary("selu", selu, x),
      unary("tan", tan, x), unary("asin", asin, unit), unary("acos", acos, unit), unary("atan", atan, x),
      unary("sinh", sinh, x), unary("cosh", cosh, x), unary("asinh", asinh, x), unary("acosh", acosh, pos + 1.0),
      unary("atanh", atanh, unit), unary("log2", log2, pos), unary("log10", log10, pos),
      unary("square", square, x), unary("floor", floor, x), unary("ceil", ceil, x), unary("round", round, x),
      unary("sign", sign, x), unary("logical_not", logical_not, mask),
      {"gelu", {x}, [](auto &a) { return one(gelu(a[0], "tanh") + gelu(a[0])); }},
      {"to", {x}, [](auto &a) { return one(a[0].to(kFloat64)); }},
      {"add", {x, y}, [](auto &a) { return one(add(a[0], a[1], 2) + 1.5); }},
      {"sub", {x, row}, [](auto &a) { return one(sub(a[0], a[1], 0.5)); }},
      {"mul", {x, y}, [](auto &a) { return one(a[0] * a[1] * 3); }},
      {"div", {x, pos}, [](auto &a) { return one(div(a[0], a[1]) + div(a[0], a[1], "floor")); }},
      {"pow", {pos}, [](auto &a) { return one(pow(a[0], 2.5) + pow(a[0], a[0])); }},
      {"maximum", {x, y}, [](auto &a) { return one(maximum(a[0], a[1]) + minimum(a[0], a[1])); }},
      {"remainder", {x, pos}, [](auto &a) { return one(remainder(a[0], a[1])); }},
      {"index", {x, ixs}, [](auto &a) {
         return std::vector<Tensor>{index(a[0], {a[1]}), a[0].index({indexing::Slice(), a[1]}) * 2.0};
       }},
      {"index_put", {x, ixs, row}, [](auto &a) {
         Tensor t = a[0] * 1.0;
         index_put_(t, {a[1]}, a[2], true);
         return std::vector<Tensor>{index_put(a[0], {a[1]}, a[2]), t};
       }},
      {"atan2", {x, y}, [](auto &a) { return one(atan2(a[0], a[1])); }},
      {"hypot", {x, row}, [](auto &a) { return one(hypot(a[0], a[1])); }},
      {"fmod", {x, pos}, [](auto &a) { return std::vector<Tensor>{fmod(a[0], a[1]), a[0].fmod(-0.75)}; }},
      {"copysign", {x, y}, [](auto &a) { return std::vector<Tensor>{copysign(a[0], a[1]), a[0].copysign(-1.0)}; }},
      {"libm2_", {x, y}, [](auto &a) {
         Tensor t = a[0] * 1.0;
         t.atan2_(a[1]).hypot_(a[1]).fmod_(a[1]).copysign_(a[1]).fmod_(0.5).copysign_(-2.0);
         return one(t);
       }},
      {"compare", {x, y}, [](auto &a) {
         return std::vector<Tensor>{eq(a[0], a[1]), ne(a[0], a[1]), lt(a[0], a[1]), le(a[0], 0.5), gt(a[0], a[1]),
                                    ge(a[0], a[1])};
       }},
      {"logical", {mask}, [](auto &a) { return std::vector<Tensor>{logical_and(a[0], a[0].logical_not()), logical_or(a[0], a[0])}; }},
      {"where", {mask, x, y}, [](auto &a) { return one(where(a[0], a[1], a[2])); }},
      {"clamp", {x}, [](auto &a) { return one(clamp(a[0], -0.5, 0.5)); }},
      {"masked_fill", {x, mask}, [](auto &a) { return one(a[0].masked_fill(a[1], -1.0)); }},
      {"lerp", {x, y}, [](auto &a) { return one(lerp(a[0], a[1], 0.3)); }},
      {"copy_", {x, row}, [](auto &a) {
         Tensor t = a[0] * 1.0;
         t.copy_(a[1]);
         return one(t);
       }},
      {"in-place", {x, y}, [](auto &a) {
         Tensor t = a[0] * 1.0;
         t.add_(a[1]).mul_(2.0).sub_(0.5).div_(3.0).clamp_(-1.0, 1.0).relu_();
         Tensor z = a[1] * 1.0;
         z.fill_(2.0);
         Tensor w = a[1] * 1.0;
         w.zero_();
         return std::vector<Tensor>{t, z, w};
       }},
      {"sum", {x}, [](auto &a) { return std::vector<Tensor>{sum(a[0]), sum(a[0], {1}, true), mean(a[0], {0}), prod(a[0], 1)}; }},
      {"amax", {x}, [](auto &a) { return std::vector<Tensor>{amax(a[0], {1}), amin(a[0], {0, 1}), max(a[0])}; }},
      {"max", {x}, [](auto &a) {
         auto [mv, mi] = max(a[0], 1);
         auto [nv, ni] = min(a[0], 0, true);
         return std::vector<Tensor>{mv, mi, nv, ni, argmax(a[0], 1), argmin(a[0])};
       }},
      {"var", {x}, [](auto &a) { return std::vector<Tensor>{var(a[0], {1}), kiln::std(a[0], {0}, 0.0, true), norm(a[0], 2, {1})}; }},
      {"views", {b3}, [](auto &a) {
         Tensor t = a[0].view({8, 6}).reshape({2, 24}).transpose(0, 1).permute({1, 0});
         Tensor s = a[0].slice(2, 1, 5, 2).select(0, 1).unsqueeze(0).squeeze(0);
         Tensor e = a[0].select(2, 0).unsqueeze(2).expand({2, 4, 6});
         Tensor st = a[0].as_strided({2, 2}, {1, 3}, 1);
         return std::vector<Tensor>{t * 1.0, s * 1.0, e * 1.0, st * 1.0, a[0].transpose(0, 2).contiguous(), a[0].clone()};
       }},
      {"mm", {x, m}, [](auto &a) { return one(mm(a[0], a[1])); }},
      {"bmm", {b3, b3w}, [](auto &a) { return one(bmm(a[0], a[1]) + matmul(a[0], a[1])); }},
      {"addmm", {x, m}, [](auto &a) { return one(addmm(zeros({4, 5}), a[0], a[1], 0.5, 2.0)); }},
      {"linear", {x, m}, [](auto &a) { return one(linear(a[0], a[1].t(), a[1].select(0, 0))); }},
      {"conv2d", {img, cw, cb}, [](auto &a) {
         return std::vector<Tensor>{conv2d(a[0], a[1], a[2], 1, 1), conv2d(a[0], a[1], {}, 2)};
       }},
      {"softmax", {x}, [](auto &a) { return std::vector<Tensor>{softmax(a[0], -1), log_softmax(a[0], 0)}; }},
      {"layer_norm", {x, row}, [](auto &a) { return one(layer_norm(a[0], {6}, a[1], a[1])); }},
      {"batch_norm", {img, bw, bb, bm, bv}, [](auto &a) { return one(batch_norm(a[0], a[1], a[2], a[3], a[4])); }},
      {"dropout", {x}, [](auto &a) { return one(dropout(a[0], 0.5, false)); }},
      {"dropout training", {x}, [](auto &a) { return one(dropout(a[0] + 2.0, 0.5, true)); }},
      {"sdpa", {q, k, v}, [](auto &a) { return one(scaled_dot_product_attention(a[0], a[1], a[2], {}, 0.0, true)); }},
      {"pools", {img}, [](auto &a) {
         auto [mv, mi] = max_pool2d_with_indices(a[0], {3, 2}, {2, 1}, {1, 0}, {1, 2}, true);
         return std::vector<Tensor>{max_pool2d(a[0], {2, 2}), avg_pool2d(a[0], {3, 3}, {2, 2}, 1),
                                    adaptive_avg_pool2d(a[0], {3, 3}), mv, mi};
       }},
      {"embedding", {emb, idx}, [](auto &a) { return one(embedding(a[0], a[1])); }},
      {"tril", {x}, [](auto &a) { return std::vector<Tensor>{tril(a[0], 1), triu(a[0], -1)}; }},
      {"cat", {x, y}, [](auto &a) { return std::vector<Tensor>{cat({a[0], a[1]}, 1), stack({a[0], a[1]}, 0)}; }},
      {"split", {x}, [](auto &a) {
         auto p = a[0].split(2, 1);
         auto c = a[0].chunk(2, 0);
         return std::vector<Tensor>{p[0] * 1.0, p[2] * 1.0, c[1] * 1.0};
       }},
      {"index_select", {x, idx, gidx}, [](auto &a) {
         return std::vector<Tensor>{index_select(a[0], 0, tensor({3, 1})), gather(a[0], 1, a[2])};
       }},
      {"scans", {x}, [](auto &a) {
         return std::vector<Tensor>{cumsum(a[0], 1), cumprod(a[0], 0, kFloat64), logcumsumexp(a[0], -1)};
       }},
      {"sort", {x}, [](auto &a) {
         auto [v, i] = sort(a[0], 1, true);
         auto [tv, ti] = topk(a[0], 2, 0, false);
         return std::vector<Tensor>{v, i, tv, ti};
       }},
      {"scatter", {x, gidx, y}, [](auto &a) {
         return std::vector<Tensor>{scatter(a[0], 1, a[1], a[2]), scatter_reduce(a[0], 1, a[1], a[2], "amax", false),
                                    index_add(a[0], 0, tensor({3, 1}), a[2].slice(0, 0, 2), 2)};
       }},
      {"factories", {x}, [](auto &a) {
         return std::vector<Tensor>{a[0] + full({4, 6}, 2.0), arange(0, 6, 1, kFloat32) + a[0], linspace(0, 1, 6) * a[0],
                                    eye(4, 6) + a[0], a[0] / sym_numel(a[0])};
       }},
  };
  (void)ints;
  return c;
}

} // namespace

TEST(TraceEveryOp, VerifiesRoundTripsAndMatchesEager) {
  std::set<OpId> seen;
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    std::unique_ptr<ir::Graph> g;
    ASSERT_NO_THROW(g = trace(c.fn, c.inputs)) << c.name;
    ASSERT_NO_THROW(ir::verify(*g));
    std::string text = ir::print(*g);
    std::unique_ptr<ir::Graph> back = ir::parse(text, c.name);
    EXPECT_EQ(ir::print(*back), text);
    for (const ir::Node *n : g->nodes()) seen.insert(n->op());
    manual_seed(1234); // random ops (dropout's mask) draw alike in both
    std::vector<Tensor> want = c.fn(c.inputs);
    manual_seed(1234);
    std::vector<Tensor> got = ir::interpret(*g, c.inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << "output " << i;
      EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
      double d = amax(abs(got[i].to(kFloat64) - want[i].to(kFloat64))).item<double>();
      EXPECT_LE(d, 1e-5) << "output " << i;
    }
  }
  std::vector<std::string_view> missing;
  for (int i = 0; i < kNumOps; ++i)
    if (!seen.count(OpId(i))) missing.push_back(op_info(OpId(i)).mnemonic);
  std::string list;
  for (auto m : missing) list += std::string(m) + " ";
  EXPECT_TRUE(missing.empty()) << "ops never traced by any case: " << list;
}

// Every op of the table through kiln::compile with fallback off (an op without a
// lowering runs as an eager node inside the plan, never as a whole-function
// fallback): compiled outputs equal eager within rtol 1e-4, atol 1e-5.
TEST(CompileEveryOp, MatchesEagerWithFallbackOff) {
  for (const Case &c : cases()) {
    SCOPED_TRACE(c.name);
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(c.fn, o);
    std::vector<Tensor> got;
    manual_seed(1234); // random ops draw alike in both
    ASSERT_NO_THROW(got = f(c.inputs)) << c.name;
    EXPECT_EQ(f.stats().eager_calls, 0);
    manual_seed(1234);
    std::vector<Tensor> want = c.fn(c.inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << "output " << i;
      EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
      Tensor g64 = got[i].to(kFloat64), w64 = want[i].to(kFloat64);
      double excess = amax(abs(g64 - w64) - (abs(w64) * 1e-4 + 1e-5)).item<double>();
      EXPECT_LE(excess, 0) << "output " << i;
    }
  }
}
