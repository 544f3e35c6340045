// Bad input to the graph entry points: kiln::trace, the reference interpreter,
// kiln::compile / CompiledFunction and the compiled executor. Each case throws a
// kiln::Error naming what is wrong, or returns exactly what eager returns
// (NaN for NaN, the same in-place effects), including weights mutated between
// calls, inputs that alias each other and ops tracing cannot handle under
// Fallback::Off.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "expect_error.h"

#include "codegen/executable.h"
#include "frontend/compile.h"
#include "frontend/trace.h"
#include "ir/graph.h"
#include "ir/interpreter.h"
#include "passes/pass_manager.h"

using namespace kiln;
using kiln::testing::expect_error;

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();


std::vector<double> values(const Tensor &t) {
  Tensor c = t.to(kFloat64).contiguous();
  const double *p = c.data_ptr<double>();
  return std::vector<double>(p, p + c.numel());
}

// Same shape; same values up to rounding, NaN where the reference has NaN and
// the same infinities.
void expect_same(const Tensor &got, const Tensor &want, double tol = 1e-5, const std::string &what = "") {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  std::vector<double> g = values(got), w = values(want);
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(w[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << " = " << g[i] << ", eager NaN";
    } else if (std::isinf(w[i])) {
      EXPECT_EQ(g[i], w[i]) << what << " element " << i;
    } else {
      EXPECT_NEAR(g[i], w[i], tol * (1 + std::fabs(w[i]))) << what << " element " << i;
    }
  }
}

void expect_same(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double tol = 1e-5,
                 const std::string &what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], want[i], tol, what + " output " + std::to_string(i));
}

std::vector<Tensor> clones(const std::vector<Tensor> &in) {
  std::vector<Tensor> out;
  for (const Tensor &t : in) out.push_back(t.clone());
  return out;
}

// Runs fn compiled on copies of `in` and eagerly on other copies; compares the
// results and the inputs afterwards (in-place effects).
void expect_compiled_equals_eager(const ModelFn &fn, const std::vector<Tensor> &in, const std::string &what,
                                  Fallback fb = Fallback::Off) {
  CompileOptions o;
  o.fallback = fb;
  CompiledFunction f = compile(fn, o);
  std::vector<Tensor> a = clones(in), b = clones(in);
  std::vector<Tensor> got = f(a);
  std::vector<Tensor> want = fn(b);
  expect_same(got, want, 1e-5, what);
  expect_same(a, b, 1e-5, what + " (inputs after the call)");
}

CompileOptions off() {
  CompileOptions o;
  o.fallback = Fallback::Off;
  return o;
}

Tensor with_specials(std::vector<int64_t> shape) {
  Tensor x = randn(shape);
  float *p = x.data_ptr<float>();
  int64_t n = x.numel();
  const float specials[] = {kNaN, kInf, -kInf, 0.f, -0.f, 1e30f, -1e30f};
  for (int64_t i = 0; i < n; i += 5) p[i] = specials[(i / 5) % 7];
  return x;
}

} // namespace

// ---- trace and the interpreter

TEST(BadInputTrace, ModelErrorsNameTheOpAndShapes) {
  auto fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + in[1]}; };
  expect_error([&] { trace(fn, {randn({2, 3}), randn({4})}); }, {"add", "[2, 3]", "[4]"});
  auto mm_fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{mm(in[0], in[0])}; };
  expect_error([&] { trace(mm_fn, {randn({2, 3})}); }, {"mm", "2x3 and 2x3"});
  auto sm = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0], 3)}; };
  expect_error([&] { trace(sm, {randn({2, 3})}); }, {"softmax", "3"});
}

TEST(BadInputTrace, BadExampleInputsAndResults) {
  auto id = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * 2.0}; };
  expect_error([&] { trace(id, {Tensor()}); }, {"undefined"});
  auto undefined_out = [](const std::vector<Tensor> &) { return std::vector<Tensor>{Tensor()}; };
  expect_error([&] { trace(undefined_out, {randn({2})}); }, {"undefined"});
  auto reads = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * in[0].sum().item<float>()}; };
  EXPECT_THROW(trace(reads, {randn({2})}), TraceError);
  auto past_end = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in.at(1)}; };
  EXPECT_THROW(trace(past_end, {randn({2})}), std::out_of_range); // the user's own bug, not kiln's
  // A function with no outputs or one returning an input traces fine.
  EXPECT_NO_THROW(trace([](const std::vector<Tensor> &) { return std::vector<Tensor>{}; }, {randn({2})}));
  EXPECT_NO_THROW(trace([](const std::vector<Tensor> &in) { return in; }, {randn({2})}));
}

TEST(BadInputTrace, InPlaceThroughAnExpandedInputIsRejected) {
  auto fn = [](const std::vector<Tensor> &in) {
    Tensor e = in[0].expand({3, 4});
    e.add_(1.0);
    return std::vector<Tensor>{e};
  };
  EXPECT_THROW(trace(fn, {randn({4})}), Error);
  EXPECT_THROW(fn({randn({4})}), Error); // eager refuses it too
}

TEST(BadInputTrace, InterpreterChecksItsInputs) {
  auto g = trace([](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * 2.0}; }, {randn({2, 3})});
  expect_error([&] { ir::interpret(*g, {}); }, {"input"});
  expect_error([&] { ir::interpret(*g, {randn({2, 3}), randn({2, 3})}); }, {"input"});
  expect_error([&] { ir::interpret(*g, {randn({3, 2})}); }, {"[3, 2]"});
  expect_error([&] { ir::interpret(*g, {randn({2, 3}, kFloat64)}); }, {"input 0", "f64[2, 3]"});
  expect_error([&] { ir::interpret(*g, {Tensor()}); }, {"undefined"});
}

// ---- the compiled executor

TEST(BadInputExecutor, RunChecksInputsAgainstTheSpecialization) {
  std::vector<Tensor> ex = {randn({4, 8})};
  std::shared_ptr<ir::Graph> g =
      trace([](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(in[0] * 2.0 + 1.0)}; }, ex);
  passes::run_pipeline(*g, passes::default_pipeline());
  auto exe = codegen::make_executable(g, ex);
  expect_same(exe->run(ex)[0], relu(ex[0] * 2.0 + 1.0));
  expect_error([&] { exe->run({}); }, {"expected 1 input"});
  expect_error([&] { exe->run({ex[0], ex[0]}); }, {"expected 1 input"});
  expect_error([&] { exe->run({randn({8, 4})}); }, {"input 0", "[8, 4]", "[4, 8]"});
  expect_error([&] { exe->run({randn({400, 800})}); }, {"input 0", "[400, 800]"});
  expect_error([&] { exe->run({randn({4, 8}, kFloat64)}); }, {"input 0", "float64"});
  expect_error([&] { exe->run({randn({8, 4}).t()}); }, {"input 0", "strides"});
  expect_error([&] { exe->run({Tensor()}); }, {"input 0", "undefined"});
  expect_error([&] { codegen::make_executable(g, {}); }, {"expected 1 input"});
}

// ---- compile

TEST(BadInputCompile, BadArguments) {
  expect_error([] { compile(ModelFn()); }, {"compile", "empty"});
  CompileOptions o;
  o.cache_limit = 0;
  expect_error([&] { compile([](const std::vector<Tensor> &in) { return in; }, o); }, {"cache_limit", "0"});
  o.cache_limit = -5;
  expect_error([&] { compile([](const std::vector<Tensor> &in) { return in; }, o); }, {"cache_limit", "-5"});
  o = {};
  o.pipeline = "decompose,nosuchpass";
  CompiledFunction bad_pipeline = compile([](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + 1.0}; },
                                          [&] { CompileOptions p = o; p.fallback = Fallback::Off; return p; }());
  expect_error([&] { bad_pipeline({randn({2})}); }, {"nosuchpass"});
  CompiledFunction unset; // default-constructed: not compiled from anything
  expect_error([&] { unset({randn({2})}); }, {"CompiledFunction"});
  expect_error([&] { unset.stats(); }, {"CompiledFunction"});
  expect_error([&] { unset.graph_for({randn({2})}); }, {"CompiledFunction"});
}

TEST(BadInputCompile, ModelErrorsPropagateUnderEveryFallbackMode) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in.at(0) + in.at(1)}; };
  for (Fallback fb : {Fallback::Off, Fallback::Allow, Fallback::Force}) {
    CompileOptions o;
    o.fallback = fb;
    CompiledFunction f = compile(fn, o);
    expect_error([&] { f({randn({2, 3}), randn({4})}); }, {"add", "[2, 3]", "[4]"});
    // Too few inputs: the model's own at() throws std::out_of_range, passed through unchanged.
    EXPECT_THROW(f({randn({2, 3})}), std::out_of_range);
    expect_error([&] { f({randn({2, 3}), Tensor()}); }, {"undefined"});
    // The function still works afterwards.
    Tensor a = randn({2, 3}), b = randn({3});
    expect_same(f({a, b})[0], a + b);
  }
}

TEST(BadInputCompile, UnsupportedOpsThrowUnderFallbackOff) {
  ModelFn reads = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{in[0] * in[0].sum().item<float>()};
  };
  expect_error([&] { compile(reads, off())({randn({4})}); }, {"compile @main", "item"});
  ModelFn through_expand = [](const std::vector<Tensor> &in) {
    Tensor x = in[0].clone();
    Tensor e = x.as_strided({2, 2}, {1, 1});
    e.add_(1.0);
    return std::vector<Tensor>{x};
  };
  expect_error([&] { compile(through_expand, off())({randn({4})}); }, {"compile @main"});
  // From the environment too.
  setenv("KILN_FALLBACK", "off", 1);
  CompiledFunction f = compile(reads);
  unsetenv("KILN_FALLBACK");
  expect_error([&] { f({randn({4})}); }, {"compile @main", "item"});
  // Allow runs them eagerly with the eager result.
  CompileOptions allow;
  allow.fallback = Fallback::Allow;
  Tensor x = randn({4});
  expect_same(compile(reads, allow)({x})[0], reads({x})[0]);
  // An unknown KILN_FALLBACK value means allow.
  setenv("KILN_FALLBACK", "sometimes", 1);
  CompiledFunction g = compile(reads);
  unsetenv("KILN_FALLBACK");
  expect_same(g({x})[0], reads({x})[0]);
  EXPECT_EQ(g.stats().eager_calls, 1);
}

TEST(BadInputCompile, NaNAndInfMatchEagerThroughFusedKernels) {
  manual_seed(11);
  std::vector<std::pair<std::string, ModelFn>> models = {
      {"relu", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(in[0] * 2.0)}; }},
      {"clamp", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{clamp(in[0] + 1.0, -1.0, 1.0)}; }},
      {"maximum", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{maximum(in[0] - 1.0, in[0] * 0.5)}; }},
      {"minimum", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{minimum(in[0] * 3.0, in[0].neg())}; }},
      {"gelu", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * 0.5, "tanh")}; }},
      {"gelu-erf", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] + 0.0)}; }},
      {"silu", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{silu(in[0] * 1.0)}; }},
      {"sigmoid-tanh", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{sigmoid(in[0]) + tanh(in[0])}; }},
      {"exp-log", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{exp(in[0]) + log(in[0].abs())}; }},
      {"softmax", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0] * 1.0, -1)}; }},
      {"log_softmax", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{log_softmax(in[0] * 1.0, -1)}; }},
      {"layer_norm", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{layer_norm(in[0], {37})}; }},
      {"amax", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{amax(in[0] * 2.0, {1}, true)}; }},
      {"amin", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{amin(in[0] * 2.0, {1})}; }},
      {"sum-mean", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].sum({1}) + in[0].mean({1})}; }},
      {"where", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{where(in[0] > 0, in[0], in[0] * 0.1)}; }},
      {"compare", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{(in[0] >= in[0] * 2.0).to(kFloat32)}; }},
      // NaN and out-of-range values to integers: INT_MIN as eager (the kernel's
      // own cast saturated: NaN -> 0, inf -> INT_MAX).
      {"to-int", [](const std::vector<Tensor> &in) {
         return std::vector<Tensor>{(in[0] * 2.0).to(kInt32) + 1, (in[0] * 1e10).to(kInt64).to(kFloat32) * 0.5};
       }},
  };
  Tensor x = with_specials({6, 37});
  for (const auto &[name, fn] : models) expect_compiled_equals_eager(fn, {x}, name);
  // Whole rows of NaN / -inf.
  Tensor rows = randn({3, 37});
  rows.select(0, 0).fill_(kNaN);
  rows.select(0, 1).fill_(-kInf);
  for (const auto &[name, fn] : models) expect_compiled_equals_eager(fn, {rows}, name + " (special rows)");
}

TEST(BadInputCompile, ZeroSizeInputsMatchEager) {
  ModelFn chain = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * 2.0 + 1.0)}; };
  ModelFn rows = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{softmax(in[0], -1), in[0].sum({1})}; };
  ModelFn lin = [w = randn({5, 4})](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w))}; };
  ModelFn full_sum = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].sum() + 1.0, in[0].mean()}; };
  for (std::vector<int64_t> shape : {std::vector<int64_t>{0, 4}, std::vector<int64_t>{3, 0}}) {
    expect_compiled_equals_eager(chain, {randn(shape)}, "chain");
    expect_compiled_equals_eager(rows, {randn(shape)}, "rows");
    expect_compiled_equals_eager(full_sum, {randn(shape)}, "full sum");
  }
  expect_compiled_equals_eager(lin, {randn({0, 4})}, "linear");
}

TEST(BadInputCompile, OverlappingInPlaceInsideTheModelMatchesEager) {
  ModelFn add_t = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.add_(x.t());
    return std::vector<Tensor>{x * 2.0};
  };
  expect_compiled_equals_eager(add_t, {randn({5, 5})}, "x.add_(x.t())", Fallback::Allow);
  ModelFn shift = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    Tensor dst = x.slice(0, 1);
    dst.add_(x.slice(0, 0, 7));
    return std::vector<Tensor>{x + 1.0};
  };
  expect_compiled_equals_eager(shift, {randn({8})}, "shifted slices", Fallback::Allow);
  ModelFn into_expand = [](const std::vector<Tensor> &in) {
    Tensor e = in[0].expand({3, 4});
    e.mul_(2.0);
    return std::vector<Tensor>{e};
  };
  for (Fallback fb : {Fallback::Off, Fallback::Allow}) {
    CompileOptions o;
    o.fallback = fb;
    expect_error([&] { compile(into_expand, o)({randn({4})}); }, {"mul_"});
  }
}

TEST(BadInputCompile, InputsThatAliasEachOtherMatchEager) {
  // Compiled first for distinct inputs; the same signature with one tensor
  // passed twice must not reuse a plan that assumed no aliasing.
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor a = in[0];
    a.add_(in[1]);
    return std::vector<Tensor>{a * in[1]};
  };
  CompiledFunction f = compile(fn);
  Tensor x = randn({16}), y = randn({16});
  Tensor xr = x.clone(), yr = y.clone();
  expect_same(f({x, y}), fn({xr, yr}));
  Tensor s = randn({16}), sr = s.clone();
  std::vector<Tensor> got = f({s, s});
  std::vector<Tensor> want = fn({sr, sr});
  expect_same(got, want, 1e-5, "aliased inputs");
  expect_same(s, sr, 1e-5, "aliased input after the call");
  // A view of the other input.
  Tensor b = randn({2, 16}), br = b.clone();
  expect_same(f({b.select(0, 0), b.select(0, 0)}), fn({br.select(0, 0), br.select(0, 0)}), 1e-5, "aliased views");
  expect_same(b, br, 1e-5, "aliased views after the call");
}

TEST(BadInputCompile, InputThatAliasesACapturedWeightMatchesEager) {
  Tensor w = randn({8});
  ModelFn fn = [w](const std::vector<Tensor> &in) {
    Tensor a = in[0];
    a.mul_(2.0);
    return std::vector<Tensor>{a + w};
  };
  CompiledFunction f = compile(fn);
  Tensor x = randn({8});
  Tensor xr = x.clone();
  expect_same(f({x}), fn({xr}));
  // Now pass the weight itself: eager sees the doubled weight in `a + w`.
  Tensor w_before = w.clone();
  std::vector<Tensor> got = f({w});
  Tensor got_w = w.clone();
  w.copy_(w_before);
  std::vector<Tensor> want = fn({w});
  expect_same(got, want, 1e-5, "input aliases the weight");
  expect_same(got_w, w, 1e-5, "weight after the call");
}

TEST(BadInputCompile, WeightsMutatedBetweenCallsGiveTheEagerResult) {
  manual_seed(5);
  Tensor w = randn({16, 8}), b = randn({16}), scale = randn({16});
  Tensor base = randn({16, 4});
  Tensor wt = base.t(); // a non-contiguous weight: a view of `base`
  float raw[16];
  for (int i = 0; i < 16; ++i) raw[i] = float(i) * 0.25f;
  Tensor blob = from_blob(raw, {16});
  ModelFn fn = [=](const std::vector<Tensor> &in) {
    Tensor h = gelu(linear(in[0], w, b) * scale + blob, "tanh");
    return std::vector<Tensor>{softmax(h, -1), matmul(wt, h.t())};
  };
  CompiledFunction f = compile(fn, off());
  Tensor x = randn({3, 8});
  auto check = [&](const std::string &what) { expect_same(f({x}), fn({x}), 1e-4, what); };
  check("first call");
  w.mul_(-0.5);
  check("w.mul_");
  b.copy_(randn({16}));
  check("b.copy_");
  scale.select(0, 3).fill_(100.0);
  check("scale through a view");
  scale.slice(0, 8).zero_();
  check("scale through a slice");
  base.add_(1.0);
  check("the base of a transposed weight");
  raw[5] = -7.0f;
  check("user memory behind from_blob");
  w.data_ptr<float>()[0] = 3.0f;
  check("w through data_ptr");
  scale.fill_(kNaN);
  check("NaN weights");
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

TEST(BadInputCompile, MismatchedInputsRecompileInsteadOfMisreading) {
  ModelFn fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{exp(in[0]) * 2.0}; };
  CompiledFunction f = compile(fn, off());
  Tensor base = randn({8, 6});
  for (const Tensor &x : {base, base.t(), base.slice(1, 0, 6, 2), base.expand({2, 8, 6}), base.to(kFloat64),
                          base.select(1, 2), base.slice(0, 2, 6), randn({}), base.unsqueeze(1)})
    expect_same(f({x}), fn({x}), 1e-5, "signature " + shape_str(x.sizes()) + " " + shape_str(x.strides()));
  expect_same(f({base}), fn({base}), 1e-5, "the first signature again");
}

TEST(BadInputCompile, HugeResultsThrowKilnError) {
  ModelFn add_one = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + 1.0}; };
  Tensor huge = randn({1}).expand({int64_t(1) << 30, int64_t(1) << 30}); // a view: no memory yet
  for (Fallback fb : {Fallback::Off, Fallback::Allow}) {
    CompileOptions o;
    o.fallback = fb;
    expect_error([&] { compile(add_one, o)({huge}); }, {"too large"});
  }
  ModelFn outer = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{matmul(in[0], in[1])}; };
  Tensor col = randn({1, 1}).expand({int64_t(1) << 21, 1}), row = randn({1, int64_t(1) << 21});
  expect_error([&] { compile(outer, off())({col, row}); }, {"cannot allocate"});
  ModelFn expand_big = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{in[0].expand({int64_t(1) << 40, 4}).contiguous()};
  };
  expect_error([&] { compile(expand_big, off())({randn({4})}); }, {"cannot allocate", "[1099511627776, 4]"});
  ModelFn overflow = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{in[0].expand({int64_t(1) << 40, int64_t(1) << 40})};
  };
  expect_error([&] { compile(overflow, off())({randn({1})}); }, {"expand", "too many elements"});
}

TEST(BadInputCompile, IntegerDivisionByZeroThrowsLikeEager) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{div(in[0] * 3, in[1] + 1, std::string("trunc")) + 1};
  };
  Tensor a = tensor({int64_t(7), int64_t(-7), int64_t(9)});
  Tensor ok = tensor({int64_t(1), int64_t(2), int64_t(-4)});
  Tensor bad = tensor({int64_t(1), int64_t(-1), int64_t(3)}); // bad + 1 has a zero
  for (Fallback fb : {Fallback::Off, Fallback::Allow}) {
    CompileOptions o;
    o.fallback = fb;
    CompiledFunction f = compile(fn, o);
    expect_same(f({a, ok})[0], fn({a, ok})[0]);
    expect_error([&] { fn({a, bad}); }, {"div", "division by zero"});
    expect_error([&] { f({a, bad}); }, {"div", "division by zero"});
  }
}

TEST(BadInputCompile, CompiledFunctionsCalledFromATracedModel) {
  // A compiled function inside another one is inlined into the outer graph; it
  // used to build a specialization on meta tensors that failed ("already
  // tracing") and then ran every later direct call eagerly (under Off: threw).
  ModelFn inner_fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(in[0] * 2.0)}; };
  CompiledFunction inner = compile(inner_fn, off());
  ModelFn outer_fn = [&](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{inner({in[0] + 1.0})[0] * 3.0};
  };
  CompiledFunction outer = compile(outer_fn, off());
  Tensor x = randn({8});
  expect_same(outer({x}), outer_fn({x}));
  expect_same(inner({x}), inner_fn({x}));
  EXPECT_EQ(inner.stats().eager_calls, 0);
  EXPECT_EQ(inner.stats().compiles, 1);
  EXPECT_EQ(outer.kernels_per_call({x}), 1); // inlined: one fused kernel for the whole chain

  // A model that calls its own compiled function (another signature) while it
  // is being compiled used to deadlock on the compile lock.
  CompiledFunction *self = nullptr;
  ModelFn recursive = [&](const std::vector<Tensor> &in) {
    if (in[0].dim() == 1) return (*self)({in[0].unsqueeze(0)});
    return std::vector<Tensor>{in[0] * 2.0};
  };
  CompiledFunction f = compile(recursive, off());
  self = &f;
  expect_same(f({x}), {x.unsqueeze(0) * 2.0});
}

TEST(BadInputCompile, WritingToAnOutputDoesNotChangeLaterCalls) {
  // Outputs that are (views of) graph constants, folded or traced factories,
  // used to be the plan's own constant tensor: `y.add_(100)` changed what every
  // later call returned. `w * 1.0` became the weight itself (canonicalize), and
  // two equal results one tensor (cse).
  Tensor w = ones({3});
  std::vector<std::pair<std::string, ModelFn>> models = {
      {"weight", [w](const std::vector<Tensor> &) { return std::vector<Tensor>{w * 1.0}; }},
      {"input", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].t() * 1.0, in[0] + 0.0}; }},
      {"cse", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * 2.0, in[0] * 2.0}; }},
      {"factory", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{full({3}, 2.0), in[0] * 2.0}; }},
      {"folded", [](const std::vector<Tensor> &) { return std::vector<Tensor>{full({3}, 2.0) * 3.0 + 1.0}; }},
      {"arange view", [](const std::vector<Tensor> &) { return std::vector<Tensor>{arange(6, kFloat32).view({2, 3}).t()}; }},
      {"scalar", [](const std::vector<Tensor> &) { return std::vector<Tensor>{scalar_tensor(5.0) * 1.0}; }},
      {"zeros_like", [](const std::vector<Tensor> &in) { return std::vector<Tensor>{zeros_like(in[0]) + 0.0}; }},
  };
  Tensor x = ones({3});
  for (size_t m = 0; m < models.size(); ++m) {
    const auto &[name, fn] = models[m];
    CompiledFunction f = compile(fn, off());
    std::vector<Tensor> first = f({x});
    for (Tensor &y : first) y.add_(100.0);
    expect_same(first, [&] {
      std::vector<Tensor> want = fn({x});
      for (Tensor &y : want) y.add_(100.0);
      return want;
    }(), 1e-6, name + " (the outputs written to)");
    expect_same(f({x}), fn({x}), 1e-6, name + " (compiled)");
    expect_same(x, ones({3}), 0, name + " (the input)");
    // The interpreter runs the optimized graph as it is: only constants are
    // copied there (the first three models return shared values by design).
    if (m < 3) continue;
    std::shared_ptr<ir::Graph> g = trace(fn, {x});
    passes::run_pipeline(*g, passes::default_pipeline());
    for (Tensor &y : ir::interpret(*g, {x})) y.add_(100.0);
    expect_same(ir::interpret(*g, {x}), fn({x}), 1e-6, name + " (interpreter)");
  }
  expect_same(w, ones({3}), 0, "the weight");
}
