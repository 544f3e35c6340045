// kiln::compile with dynamic shapes (issue 17, CompileOptions::dynamic): which
// dims turn symbolic (Auto, On, Off, dynamic_dims, static_dims), that one
// specialization then serves every size of them without compiling, that a call
// breaking the specialization's relations (sizes 0 and 1, two inputs' dims
// that must be equal) specializes again or errors as eager does, and that
// every result equals eager's (a naive loop where eager could share a bug).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <thread>

#include <kiln/kiln.h>

#include "expect_error.h"
#include "codegen/executable.h"
#include "ir/graph.h"
#include "ir/printer.h"

using namespace kiln;
using kiln::testing::expect_error;

namespace {

void expect_equal(const std::vector<Tensor> &got, const std::vector<Tensor> &want, const std::string &where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << where << ", output " << i;
    if (want[i].numel() == 0) continue;
    Tensor g = got[i].to(kFloat64), w = want[i].to(kFloat64);
    EXPECT_LE(amax(abs(g - w) - (abs(w) * 1e-5 + 1e-6)).item<double>(), 0) << where << ", output " << i;
  }
}

// f's results for `in` against eager's: values and strides.
void expect_as_eager(CompiledFunction &f, const ModelFn &fn, const std::vector<Tensor> &in, const std::string &where) {
  std::vector<Tensor> got = f(in), want = fn(in);
  expect_equal(got, want, where);
  for (size_t k = 0; k < got.size() && k < want.size(); ++k)
    EXPECT_EQ(got[k].strides().vec(), want[k].strides().vec()) << where << ", output " << k;
}

// A row softmax of a scaled gelu, and a sum over each row of x * y: a kernel
// over rows, an elementwise chain and a reduction, all over the batch.
std::vector<Tensor> model(const std::vector<Tensor> &in) {
  Tensor h = gelu(in[0] * 0.5 + 1.0);
  return {softmax(h, -1), (in[0] * in[1]).sum({1})};
}

// Row r of softmax(gelu(x * 0.5 + 1)) by a naive double loop.
std::vector<double> naive_softmax_row(const Tensor &x, int64_t r) {
  const int64_t n = x.size(1);
  std::vector<double> e(size_t(n), 0.0);
  double mx = -INFINITY, sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    double v = double(x.data_ptr<float>()[r * n + j]) * 0.5 + 1.0;
    e[size_t(j)] = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    mx = std::max(mx, e[size_t(j)]);
  }
  for (double &v : e) sum += v = std::exp(v - mx);
  for (double &v : e) v /= sum;
  return e;
}

std::vector<Tensor> batch(int64_t b, int64_t n = 24) { return {randn({b, n}), randn({b, n})}; }

// f(batch(b)) equals model's result at each size.
void expect_batches_equal(const CompiledFunction &f, std::initializer_list<int64_t> sizes) {
  for (int64_t b : sizes) {
    std::vector<Tensor> in = batch(b);
    expect_equal(f(in), model(in), "batch " + std::to_string(b));
  }
}

TEST(CompileDynamic, AutoTurnsTheBatchSymbolicOnItsFirstChange) {
  manual_seed(1);
  CompiledFunction f = compile(model);
  for (int64_t b : {4, 7, 4, 16, 33, 2, 100}) {
    std::vector<Tensor> in = batch(b);
    std::vector<Tensor> got = f(in);
    expect_equal(got, model(in), "batch " + std::to_string(b));
    // The compiled softmax against a naive loop, for a row past the traced batch.
    std::vector<double> want = naive_softmax_row(in[0], b - 1);
    for (int64_t j = 0; j < 24; ++j)
      EXPECT_NEAR(got[0].data_ptr<float>()[(b - 1) * 24 + j], want[size_t(j)], 1e-6) << "batch " << b;
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 2); // batch 4 alone, then one for every batch
  EXPECT_EQ(s.dynamic_specializations, 1);
  EXPECT_EQ(s.specializations, 2);
  EXPECT_EQ(s.eager_calls, 0);
  EXPECT_EQ(s.calls, 7);
  // The symbolic specialization's graph says which dims are symbolic.
  std::shared_ptr<const ir::Graph> g = f.graph_for(batch(9));
  ASSERT_TRUE(g);
  EXPECT_EQ(g->inputs()[0]->type().str(), "f32[s0, 24]");
  EXPECT_EQ(f.stats().compiles, 2);
}

TEST(CompileDynamic, OffSpecializesEverySize) {
  CompileOptions o;
  o.dynamic = Dynamic::Off;
  CompiledFunction f = compile(model, o);
  expect_batches_equal(f, {4, 7, 16});
  EXPECT_EQ(f.stats().compiles, 3);
  EXPECT_EQ(f.stats().dynamic_specializations, 0);
}

TEST(CompileDynamic, OnIsSymbolicFromTheFirstCallAndStaticDimsStayStatic) {
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(model, o);
  manual_seed(2);
  std::vector<Tensor> in = batch(5, 24);
  expect_equal(f(in), model(in), "first call");
  EXPECT_EQ(f.stats().dynamic_specializations, 1);
  EXPECT_EQ(f.graph_for(in)->inputs()[0]->type().str(), "f32[s0, s1]"); // 5 and 24: two symbols
  for (auto [b, n] : {std::pair<int64_t, int64_t>{9, 24}, {3, 40}, {64, 7}}) {
    in = batch(b, n);
    expect_equal(f(in), model(in), "[" + std::to_string(b) + ", " + std::to_string(n) + "]");
  }
  EXPECT_EQ(f.stats().compiles, 1);

  o.static_dims = {{0, 1}, {1, 1}};
  CompiledFunction g = compile(model, o);
  in = batch(5, 24);
  expect_equal(g(in), model(in), "static row");
  EXPECT_EQ(g.graph_for(in)->symbol_hints().size(), 1u);
  in = batch(5, 25); // another row length: another specialization
  expect_equal(g(in), model(in), "static row 25");
  EXPECT_EQ(g.stats().compiles, 2);
}

TEST(CompileDynamic, DynamicDimsAreSymbolicFromTheFirstCallEvenWhenOff) {
  CompileOptions o;
  o.dynamic = Dynamic::Off;
  o.dynamic_dims = {{0, 0}, {1, -2}}; // -2: counted from the end, as torch's mark_dynamic
  CompiledFunction f = compile(model, o);
  expect_batches_equal(f, {6, 11, 30});
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().dynamic_specializations, 1);
}

TEST(CompileDynamic, BadDimsAreClearErrors) {
  CompileOptions both;
  both.dynamic_dims = {{0, 0}};
  both.static_dims = {{0, 0}};
  expect_error([&] { compile(model, both); }, {"input 0 dim 0", "both dynamic_dims and static_dims"});
  CompileOptions missing;
  missing.dynamic_dims = {{2, 0}};
  CompiledFunction f = compile(model, missing);
  expect_error([&] { f(batch(4)); }, {"input 2 does not exist", "2 inputs"});
  CompileOptions no_dim;
  no_dim.static_dims = {{0, 5}};
  CompiledFunction g = compile(model, no_dim);
  expect_error([&] { g(batch(4)); }, {"input 0", "has no dim 5"});
}

// Size 0 specializes (as in torch). Size 1 is served by the symbolic
// specialization when the optimized graph holds there (verified at build with
// each symbol at 1), and specializes where an op behaves otherwise at 1.
TEST(CompileDynamic, SizesZeroAndOne) {
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(model, o);
  manual_seed(3);
  expect_batches_equal(f, {8, 1, 0, 3, 1});
  // [s0, s1] serves 8, 1 and 3; [0, s1] specializes.
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.eager_calls, 0);

  // squeeze(0) drops dim 0 only where it is 1: the graph does not hold at 1.
  ModelFn squeeze = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].squeeze(0) * 2.0}; };
  CompiledFunction g = compile(squeeze, o);
  for (int64_t b : {8, 1, 5, 1}) {
    std::vector<Tensor> in = {randn({b, 6})};
    expect_equal(g(in), squeeze(in), "squeeze, batch " + std::to_string(b));
  }
  EXPECT_EQ(g.stats().compiles, 2);
  EXPECT_NE(g.stats().last_recompile_reason.find("input 0 dim 0 (s0) is 1: sizes 0 and 1 specialize here"),
            std::string::npos)
      << g.stats().last_recompile_reason;
}

// x + y over two batch dims that tracing found equal share one symbol (duck
// sizing): a call where they differ breaks that relation. Where eager
// broadcasts (one of them 1) it specializes again; where eager fails, so does
// the compiled call, with eager's error; it never computes garbage.
TEST(CompileDynamic, ACallBreakingARelationRecompilesOrErrorsAsEager) {
  ModelFn add = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + in[1]}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(add, o);
  std::vector<Tensor> in = {randn({6, 4}), randn({6, 4})};
  expect_equal(f(in), add(in), "equal batches");
  in = {randn({9, 4}), randn({9, 4})};
  expect_equal(f(in), add(in), "equal batches again");
  EXPECT_EQ(f.stats().compiles, 1);

  std::vector<Tensor> mismatched = {randn({9, 4}), randn({5, 4})};
  expect_error([&] { add(mismatched); }, {"add", "[9, 4]", "[5, 4]"}); // eager
  expect_error([&] { f(mismatched); }, {"add", "[9, 4]", "[5, 4]"});
  EXPECT_NE(f.stats().last_recompile_reason.find("input 1 dim 0 (s0) is 5 but input 0 bound s0 to 9"),
            std::string::npos)
      << f.stats().last_recompile_reason;

  std::vector<Tensor> broadcast = {randn({9, 4}), randn({1, 4})};
  expect_equal(f(broadcast), add(broadcast), "broadcast");
  // The failed call cached nothing; the broadcasting one specialized.
  EXPECT_EQ(f.stats().specializations, 2);
}

// A view whose sizes follow the batch (view with -1) and a slice inside the
// graph; a transposed (not contiguous) input does not run on the symbolic
// specialization (its guard asks for contiguous inputs): it specializes once
// more, symbolic again, and that one serves every transposed batch.
TEST(CompileDynamic, ViewsInsideTheGraphAndStridedInputs) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor v = in[0].view({-1, 2, 3}); // [2b, 2, 3]
    Tensor s = in[0].slice(1, 1, 5);   // [b, 4], strided
    return std::vector<Tensor>{(v * 2.0 + 1.0).exp().sum({2}), s.relu() + 1.0};
  };
  CompileOptions o;
  o.dynamic_dims = {{0, 0}};
  CompiledFunction f = compile(fn, o);
  for (int64_t b : {5, 12, 3}) {
    std::vector<Tensor> in = {randn({b, 6})};
    expect_equal(f(in), fn(in), "batch " + std::to_string(b));
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().dynamic_specializations, 1);
  for (int64_t b : {7, 4, 11}) {
    std::vector<Tensor> strided = {randn({6, b}).t()};
    expect_equal(f(strided), fn(strided), "transposed input, batch " + std::to_string(b));
  }
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_EQ(f.stats().dynamic_specializations, 2);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// Inputs laid out in another dense order than row-major (a sequence-major
// batch, transposed): under Auto, one more specialization serves every size
// of them. Its outputs take eager's layouts, which follow the input's.
TEST(CompileDynamic, TransposedInputsOfEverySizeShareOneSpecialization) {
  Tensor w = randn({16});
  ModelFn fn = [&](const std::vector<Tensor> &in) {
    Tensor x = in[0]; // [b, s, 16]
    Tensor y = x * w + 1.0;
    return std::vector<Tensor>{y, softmax(y.sum({-1}), -1), layer_norm(x, {16})};
  };
  CompiledFunction f = compile(fn);
  int call = 0;
  for (auto [b, s] : {std::pair{2, 5}, {3, 7}, {4, 9}, {5, 3}, {2, 12}, {6, 4}, {3, 3}, {7, 8}}) {
    for (bool transposed : {false, true}) {
      std::vector<Tensor> in = {transposed ? randn({s, b, 16}).transpose(0, 1) : randn({b, s, 16})};
      expect_as_eager(f, fn, in, detail::concat("call ", call++, ", [", b, ", ", s, "]", transposed ? " transposed" : ""));
    }
  }
  // Static specializations for the first call and the first transposed one
  // (same sizes); then the batch and length turn symbolic, contiguous and
  // transposed: no later call compiles.
  EXPECT_EQ(f.stats().compiles, 4);
  EXPECT_EQ(f.stats().dynamic_specializations, 2);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// Inputs that are slices of longer buffers (a batch and a sequence cut from a
// padded one, row-major or sequence-major): their dims nest without overlap
// but with gaps. Under Auto, one specialization serves every size of them
// (each call copies the slice contiguous), and the outputs take eager's
// layouts. Before, each new size compiled again (30 compiles for 30 calls).
TEST(CompileDynamic, SlicedInputsOfEverySizeShareOneSpecialization) {
  Tensor w = randn({8});
  ModelFn fn = [&](const std::vector<Tensor> &in) {
    Tensor y = (in[0] * w + 1.0).relu();
    return std::vector<Tensor>{y, layer_norm(in[0], {8}), softmax(y.sum({-1}), -1)};
  };
  Tensor padded = randn({16, 40, 8}), seq_major = randn({40, 16, 8});
  CompiledFunction f = compile(fn);
  int call = 0;
  for (auto [b, s] : {std::pair{2, 5}, {3, 7}, {9, 30}, {5, 3}, {16, 40}, {6, 4}, {3, 3}, {7, 8}, {11, 2}}) {
    for (bool transposed : {false, true}) {
      Tensor x = transposed ? seq_major.slice(0, 0, s).slice(1, 0, b).transpose(0, 1)
                            : padded.slice(0, 0, b).slice(1, 0, s);
      expect_as_eager(f, fn, {x}, detail::concat("call ", call++, ", [", b, ", ", s, "]", transposed ? " transposed" : ""));
    }
  }
  // Static specializations for the first slice of each order; then the batch
  // and length turn symbolic for each: no later call compiles.
  EXPECT_EQ(f.stats().compiles, 4);
  EXPECT_EQ(f.stats().dynamic_specializations, 2);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// What the slice guard lets through and what it does not: a contiguous input
// runs on the specialization traced from a slice; an expanded input (its
// elements overlap) does not, nor a slice the function updates in place,
// which keeps its strides and specializes per size, as eager writes it.
TEST(CompileDynamic, OverlappingOrUpdatedSlicesKeepTheirStrides) {
  CompileOptions o;
  o.dynamic = Dynamic::On;
  ModelFn read = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].exp() * 2.0}; };
  CompiledFunction fr = compile(read, o);
  Tensor padded = randn({12, 20});
  for (int64_t b : {3, 7, 5}) {
    std::vector<Tensor> in = {padded.slice(0, 0, b).slice(1, 0, b + 2)};
    expect_equal(fr(in), read(in), "slice, batch " + std::to_string(b));
  }
  EXPECT_EQ(fr.stats().compiles, 1);
  std::vector<Tensor> dense = {randn({4, 9})};
  expect_equal(fr(dense), read(dense), "contiguous after slices");
  EXPECT_EQ(fr.stats().compiles, 1) << "a contiguous input nests in the slices' order";
  for (int64_t b : {3, 6}) {
    std::vector<Tensor> expanded = {randn({1, 5}).expand({b, 5})};
    std::vector<Tensor> got = fr(expanded), want = read(expanded);
    expect_equal(got, want, "expanded, batch " + std::to_string(b));
    EXPECT_EQ(got[0].strides().vec(), want[0].strides().vec()) << "expanded, batch " << b;
  }
  EXPECT_GE(fr.stats().compiles, 2) << "an expanded input is no slice to copy";

  ModelFn update = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.mul_(2.0);
    return std::vector<Tensor>{x.relu()};
  };
  CompiledFunction fu = compile(update, o);
  for (int64_t b : {3, 6, 4}) {
    Tensor a = randn({10, 10}), c = a.clone();
    std::vector<Tensor> got = fu({a.slice(0, 0, b).slice(1, 0, b + 1)});
    std::vector<Tensor> want = update({c.slice(0, 0, b).slice(1, 0, b + 1)});
    expect_equal(got, want, "update, batch " + std::to_string(b));
    expect_equal({a}, {c}, "the padded buffer updated through the slice, batch " + std::to_string(b));
  }
  EXPECT_EQ(fu.stats().eager_calls, 0);
}

// A transposed input the function updates in place, or returns a view of,
// cannot be copied contiguous unseen: it keeps its strides and specializes
// per size as before, and every call still does what eager does.
TEST(CompileDynamic, TransposedInputsUpdatedOrReturnedKeepTheirStrides) {
  ModelFn update = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.mul_(2.0);
    return std::vector<Tensor>{x.relu()};
  };
  ModelFn view = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].relu(), in[0].t()}; };
  // view() of x.t() holds for a transposed x, and fails for a contiguous one.
  ModelFn flat = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].t().view({-1}) * 2.0}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction fu = compile(update, o), fv = compile(view, o), ff = compile(flat, o);
  for (int64_t b : {3, 6, 4}) {
    Tensor a = randn({5, b}).t(), c = a.clone();
    std::vector<Tensor> got = fu({a}), want = update({c});
    expect_equal(got, want, "update, batch " + std::to_string(b));
    expect_equal({a}, {c}, "the input updated in place, batch " + std::to_string(b));
    Tensor x = randn({5, b}).t();
    std::vector<Tensor> out = fv({x});
    expect_equal(out, view({x}), "view, batch " + std::to_string(b));
    EXPECT_TRUE(out[1].is_alias_of(x)) << "batch " << b << ": eager returns a view of the input";
    expect_equal(ff({x}), flat({x}), "flat, batch " + std::to_string(b));
  }
  EXPECT_EQ(fu.stats().eager_calls, 0);
  EXPECT_EQ(fv.stats().eager_calls, 0);
  EXPECT_EQ(ff.stats().eager_calls, 0);
}

// In-place updates (write-backs) and an output that is an input itself.
TEST(CompileDynamic, InPlaceUpdatesAndInputOutputs) {
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.mul_(2.0).add_(1.0);
    return std::vector<Tensor>{x, x.relu()};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t b : {4, 9, 2}) {
    Tensor a = randn({b, 5}), c = a.clone();
    std::vector<Tensor> got = f({a});
    std::vector<Tensor> want = fn({c});
    expect_equal(got, want, "batch " + std::to_string(b));
    expect_equal({a}, {c}, "the input updated in place, batch " + std::to_string(b));
  }
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(CompileDynamic, ConcurrentCallersWithChangingBatches) {
  CompiledFunction f = compile(model);
  std::vector<std::vector<Tensor>> inputs, want;
  manual_seed(4);
  for (int64_t b = 2; b < 18; ++b) {
    inputs.push_back(batch(b));
    want.push_back(model(inputs.back()));
  }
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        size_t k = size_t(i * (t + 1) + t) % inputs.size();
        std::vector<Tensor> got = f(inputs[k]);
        for (size_t o = 0; o < got.size(); ++o)
          if (amax(abs(got[o] - want[k][o])).item<double>() > 1e-5) bad.fetch_add(1);
      }
    });
  for (auto &th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LE(f.stats().compiles, 2);
  EXPECT_EQ(f.stats().calls, 800);
}

} // namespace

// A language model's batch and sequence length both change (Auto: the second
// call makes both symbolic). The layer norm with its residual and gelu runs as
// one kernel over rows s0 * s1 that reads that product per call, and the two
// products read their M per call: nothing runs eagerly at any size.
TEST(CompileDynamic, BatchAndSequenceBothChange) {
  manual_seed(12);
  Tensor g = randn({16}), b = randn({16}), w1 = randn({16, 32}) * 0.3, w2 = randn({32, 16}) * 0.3;
  auto block = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor h = gelu(layer_norm(in[0] + in[1], {16}, g, b, 1e-5), "tanh");
    return {in[0] + matmul(relu(matmul(h, w1)), w2), h};
  };
  CompiledFunction f = compile(block);
  const int64_t sizes[][2] = {{2, 5}, {3, 7}, {4, 9}, {5, 3}, {2, 11}, {6, 2}, {3, 7}, {7, 40}};
  for (const auto &bs : sizes) {
    std::vector<Tensor> in = {randn({bs[0], bs[1], 16}), randn({bs[0], bs[1], 16})};
    expect_equal(f(in), block(in), "batch " + std::to_string(bs[0]) + ", sequence " + std::to_string(bs[1]));
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 2);
  EXPECT_EQ(s.dynamic_specializations, 1);
  EXPECT_EQ(s.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 4, 16}), randn({3, 4, 16})});
  ASSERT_TRUE(graph);
  EXPECT_EQ(graph->symbol_hints().size(), 2u) << ir::print(*graph);
  int runtime_kernels = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(graph)) {
    EXPECT_EQ(line.find("eager"), std::string::npos) << line;
    EXPECT_EQ(line.find("no kernel"), std::string::npos) << line;
    runtime_kernels += line.find("reads its dim 0 per call") != std::string::npos;
  }
  EXPECT_GE(runtime_kernels, 1);
}

// The steps of graph's symbolic program that run one kernel reading its row
// length per call; every group must have a kernel.
int runtime_row_steps(std::shared_ptr<const ir::Graph> graph, const char *what = "reads its dim 0 and row length per call") {
  int steps = 0;
  for (const std::string &line : codegen::describe_symbolic_executable(std::move(graph))) {
    EXPECT_EQ(line.find("no kernel"), std::string::npos) << line;
    steps += line.find(what) != std::string::npos;
  }
  return steps;
}

// A per-channel affine map, a residual and relu over images whose batch and
// size both change (dynamic = On; W7's batch norms): the channel's operands
// repeat over H and W but not over the batch, so no one dim 0 serves every
// size; one kernel reads its extents and strides per call
// (KernelDesc::runtime_layout). NaN and inf give eager's values.
TEST(CompileDynamic, PerChannelMapsOverImagesOfEverySize) {
  manual_seed(19);
  Tensor scale = randn({6, 1, 1}), shift = randn({6, 1, 1});
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    return {(in[0] * scale + shift + in[1]).relu()};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{2, 5}, {3, 7}, {1, 17}, {4, 3}, {2, 31}, {5, 2}, {3, 56}};
  for (const auto &bs : sizes) {
    Tensor x = randn({bs[0], 6, bs[1], bs[1]}), r = randn({bs[0], 6, bs[1], bs[1]});
    float *p = x.data_ptr<float>();
    p[0] = NAN;
    p[x.numel() - 1] = INFINITY;
    p[x.numel() / 2] = -INFINITY;
    std::vector<Tensor> got = f({x, r}), want = fn({x, r});
    const std::string at = "[" + std::to_string(bs[0]) + ", 6, " + std::to_string(bs[1]) + ", " + std::to_string(bs[1]) + "]";
    ASSERT_EQ(got[0].sizes().vec(), want[0].sizes().vec()) << at;
    EXPECT_TRUE(equal(isnan(got[0]), isnan(want[0]))) << at;
    Tensor finite = logical_not(isnan(want[0]));
    EXPECT_TRUE(equal(kiln::where(finite, got[0], 0.0), kiln::where(finite, want[0], 0.0))) << at;
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 6, 9, 9}), randn({3, 6, 9, 9})});
  ASSERT_TRUE(graph);
  EXPECT_EQ(runtime_row_steps(graph, "reads its extents and strides per call"), 1);
}

// Random element-wise models over inputs that broadcast over some dims and
// not others (dims of size 1 stay static, the others turn symbolic under On),
// with a captured operand of its own broadcast: each compiled once, then
// called at three other sizes of its symbols, against eager. Many of them
// need a kernel with a runtime layout; the rest fold into one runtime dim 0.
TEST(CompileDynamic, RandomBroadcastsOverSymbolicDims) {
  int layout_kernels = 0, models = 0;
  for (uint64_t seed = 0; seed < 24; ++seed) {
    manual_seed(100 + seed);
    std::mt19937_64 rng(seed);
    const size_t rank = 2 + rng() % 3;
    // Distinct sizes, so that duck sizing gives each dim its own symbol.
    std::vector<int64_t> full_shape = {2, 3, 4, 5, 6, 7, 8};
    std::shuffle(full_shape.begin(), full_shape.end(), rng);
    full_shape.resize(rank);
    auto broadcast_of = [&](int keep_percent) { // full_shape with some dims 1
      std::vector<int64_t> s = full_shape;
      for (int64_t &d : s)
        if (int(rng() % 100) >= keep_percent) d = 1;
      return s;
    };
    std::vector<int64_t> a_shape = full_shape, b_shape = broadcast_of(60);
    Tensor c = randn(broadcast_of(40));
    const int variant = int(rng() % 3);
    ModelFn fn = [&, variant](const std::vector<Tensor> &in) -> std::vector<Tensor> {
      Tensor y = in[0] * in[1] + c;
      if (variant == 1) y = tanh(y) - in[1];
      if (variant == 2) y = where(y > 0.5, y, c * 2.0);
      return {y.relu(), y * 0.5};
    };
    CompileOptions o;
    o.dynamic = Dynamic::On;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    const std::string model = detail::concat("seed ", seed, ": a ", shape_str(a_shape), " b ", shape_str(b_shape),
                                             " c ", shape_str(c.sizes().vec()), " variant ", variant);
    std::vector<Tensor> first = {randn(a_shape), randn(b_shape)};
    expect_equal(f(first), fn(first), model + " at the traced sizes");
    if (f.stats().dynamic_specializations == 0) continue;
    ++models;
    const int64_t compiles = f.stats().compiles;
    for (int call = 0; call < 3; ++call) {
      // Each dim sized > 1 in a: a new size where nothing broadcasts it (c's
      // captured size holds it static otherwise: the graph keeps that one).
      std::vector<int64_t> as = a_shape, bs = b_shape;
      for (size_t d = 0; d < rank; ++d) {
        if (c.size(int64_t(d)) != 1) continue;
        as[d] = 9 + int64_t(rng() % 20);
        if (bs[d] != 1) bs[d] = as[d];
      }
      std::vector<Tensor> in = {randn(as), randn(bs)};
      in[0].data_ptr<float>()[0] = call == 1 ? NAN : INFINITY;
      std::vector<Tensor> got = f(in), want = fn(in);
      for (size_t k = 0; k < got.size(); ++k) { // NaN where eager's is, inf as eager's, the rest close
        const std::string at = detail::concat(model, ", call at a ", shape_str(as), ", output ", k);
        ASSERT_EQ(got[k].sizes().vec(), want[k].sizes().vec()) << at;
        EXPECT_TRUE(equal(isnan(got[k]), isnan(want[k]))) << at;
        Tensor same = logical_or(isnan(want[k]), eq(got[k], want[k]));
        Tensor close = le(abs(got[k] - want[k]), abs(want[k]) * 1e-5 + 1e-6);
        EXPECT_TRUE(all(logical_or(same, close)).item<bool>()) << at;
      }
    }
    EXPECT_EQ(f.stats().compiles, compiles) << model << ": a call at new sizes compiled";
    EXPECT_EQ(f.stats().eager_calls, 0) << model;
    for (const std::string &line : codegen::describe_symbolic_executable(f.graph_for(first))) {
      EXPECT_EQ(line.find("no kernel"), std::string::npos) << model << ": " << line;
      layout_kernels += line.find("reads its extents and strides per call") != std::string::npos;
    }
  }
  EXPECT_GE(models, 12) << "models that kept a symbol";
  EXPECT_GE(layout_kernels, 4) << "kernels with a runtime layout among " << models << " models";
  std::cout << models << " models kept a symbol; " << layout_kernels << " kernels read their layout per call\n";
}

// W2 under dynamic = On: the softmax's row length is a symbol, and one kernel
// reads it per call (KernelDesc::runtime_row), at lengths across the vector
// tails and the float sums' blocks of 1024; rows holding NaN or inf give
// eager's values.
TEST(CompileDynamic, SoftmaxRowsOfEveryLength) {
  manual_seed(13);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> { return {softmax(in[0] * 1.5, -1)}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{4, 33}, {3, 7}, {2, 1025}, {5, 16}, {1, 2049}, {6, 1}, {2, 3000}};
  for (const auto &bs : sizes) {
    Tensor x = randn({bs[0], bs[1]});
    float *p = x.data_ptr<float>();
    p[0] = NAN;                                            // row 0 all NaN
    if (bs[0] > 1) p[bs[1] + bs[1] / 2] = INFINITY;        // row 1: one inf (NaN after inf - inf)
    if (bs[0] > 2) p[2 * bs[1]] = -INFINITY;               // row 2: one -inf (its element 0)
    std::vector<Tensor> got = f({x}), want = fn({x});
    const std::string at = "[" + std::to_string(bs[0]) + ", " + std::to_string(bs[1]) + "]";
    ASSERT_EQ(got[0].sizes().vec(), want[0].sizes().vec()) << at;
    EXPECT_TRUE(equal(isnan(got[0]), isnan(want[0]))) << at;
    Tensor finite = logical_not(isnan(want[0]));
    EXPECT_LE(amax(kiln::where(finite, abs(got[0] - want[0]), 0.0)).item<double>(), 1e-6) << at;
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 9})});
  ASSERT_TRUE(graph);
  const int runtime_rows = runtime_row_steps(graph);
  EXPECT_EQ(runtime_rows, 1);
}

// Means over rows of every length (dynamic = On): the row mean and a
// normalization by the rows' standard deviation run as one runtime-row kernel
// that scales by the call's 1 / L. A constant row's mean is that constant
// exactly, as eager's; NaN and inf rows give eager's NaN and inf.
TEST(CompileDynamic, MeansOverRowsOfEveryLength) {
  manual_seed(17);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor m = in[0].mean({-1}, true);
    Tensor d = in[0] - m;
    return {m, d * rsqrt((d * d).mean({-1}, true) + 1e-5)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{4, 33}, {3, 7}, {2, 1025}, {5, 16}, {1, 2049}, {6, 1000}, {4, 3}};
  for (const auto &bs : sizes) {
    Tensor x = randn({bs[0], bs[1]});
    float *p = x.data_ptr<float>();
    for (int64_t j = 0; j < bs[1]; ++j) p[j] = 0.1f; // row 0: constant
    if (bs[0] > 1) p[bs[1] + bs[1] / 2] = INFINITY;  // row 1: one inf
    if (bs[0] > 2) p[2 * bs[1]] = NAN;              // row 2: one NaN
    std::vector<Tensor> got = f({x}), want = fn({x});
    const std::string at = "[" + std::to_string(bs[0]) + ", " + std::to_string(bs[1]) + "]";
    ASSERT_EQ(got.size(), 2u);
    EXPECT_EQ(got[0].data_ptr<float>()[0], 0.1f) << at << ": the mean of a constant row";
    // Its deviations are then 0 exactly; eager's mean is an ulp off at some
    // lengths, which the division by sqrt(eps) magnifies to ~1e-5.
    EXPECT_EQ(amax(abs(got[1].select(0, 0))).item<double>(), 0.0) << at;
    for (Tensor *t : {&got[1], &want[1]}) t->select(0, 0).zero_();
    for (size_t k = 0; k < 2; ++k) {
      ASSERT_EQ(got[k].sizes().vec(), want[k].sizes().vec()) << at;
      EXPECT_TRUE(equal(isnan(got[k]), isnan(want[k]))) << at << ", output " << k;
      EXPECT_TRUE(equal(isinf(got[k]), isinf(want[k]))) << at << ", output " << k;
      Tensor finite = logical_not(logical_or(isnan(want[k]), isinf(want[k])));
      Tensor err = abs(got[k] - want[k]) - abs(want[k]) * 1e-5;
      EXPECT_LE(amax(kiln::where(finite, err, 0.0)).item<double>(), 1e-5) << at << ", output " << k;
    }
  }
  CompileStats s = f.stats();
  EXPECT_EQ(s.compiles, 1);
  EXPECT_EQ(s.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 9})});
  ASSERT_TRUE(graph);
  const int runtime_rows = runtime_row_steps(graph);
  EXPECT_GE(runtime_rows, 1);
}

// A global average pool over images of every size (dynamic = On): the mean
// over [h, w] of an NCHW image is a row of two dims that every buffer walks as
// one, so one kernel reads its rows (b * C) and their length (h * w) per call,
// and the affine map and relu before it join that kernel. A mean over
// (C, h, w) too. Against a naive double loop, at sizes across the vector tails
// and the sums' blocks of 1024; NaN and inf images give eager's NaN and inf.
TEST(CompileDynamic, GlobalAveragePoolsOverImagesOfEverySize) {
  manual_seed(19);
  const int64_t C = 6;
  Tensor scale = randn({C, 1, 1}), shift = randn({C, 1, 1});
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor y = relu(in[0] * scale + shift);
    return {y.mean({2, 3}), in[0].mean({1, 2, 3}, true)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][3] = {{2, 7, 9}, {3, 5, 5}, {2, 33, 40}, {2, 2, 3}, {4, 17, 3}, {2, 64, 65}, {2, 7, 9}};
  for (const auto &sz : sizes) {
    const int64_t b = sz[0], h = sz[1], w = sz[2];
    const std::string at = "[" + std::to_string(b) + ", 6, " + std::to_string(h) + ", " + std::to_string(w) + "]";
    Tensor x = randn({b, C, h, w});
    float *p = x.data_ptr<float>();
    p[h * w + 1] = NAN, p[(b * C - 1) * h * w] = INFINITY; // image 0, channel 1; the last image's last channel
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u) << at;
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{b, C})) << at;
    ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{b, 1, 1, 1})) << at;
    const float *s = scale.data_ptr<float>(), *t = shift.data_ptr<float>();
    for (int64_t n = 0; n < b; ++n) {
      double whole = 0;
      for (int64_t c = 0; c < C; ++c) {
        double pool = 0;
        for (int64_t i = 0; i < h * w; ++i) {
          const double v = p[(n * C + c) * h * w + i];
          const double a = double(float(float(v) * s[c]) + t[c]);
          pool += a < 0 ? 0.0 : a; // relu keeps NaN
          whole += v;
        }
        pool /= double(h * w);
        const float g = got[0].data_ptr<float>()[n * C + c];
        const std::string where = at + " pool " + std::to_string(n) + ", " + std::to_string(c);
        EXPECT_EQ(std::isnan(g), std::isnan(pool)) << where;
        EXPECT_EQ(std::isinf(g), std::isinf(pool)) << where;
        if (std::isinf(pool)) {
          EXPECT_EQ(g, float(pool)) << where;
        } else if (!std::isnan(pool)) {
          EXPECT_NEAR(g, pool, 1e-5 * (1 + std::abs(pool))) << where;
        }
      }
      whole /= double(C * h * w);
      const float g = got[1].data_ptr<float>()[n];
      EXPECT_EQ(std::isnan(g), std::isnan(whole)) << at << " mean " << n;
      EXPECT_EQ(std::isinf(g), std::isinf(whole)) << at << " mean " << n;
      if (std::isfinite(whole)) {
        EXPECT_NEAR(g, whole, 1e-5 * (1 + std::abs(whole))) << at << " mean " << n;
      }
    }
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 1);
  EXPECT_EQ(st.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, C, 9, 14})});
  ASSERT_TRUE(graph);
  EXPECT_EQ(runtime_row_steps(graph), 2) << "the pool and the whole mean, each one kernel";
}

// Mean pooling over the sequence of [b, s, D] (dynamic = On): one compile
// serves every length. Its rows are columns of stride D, which one kernel
// reads in tiles of D neighbouring rows, the row length read per call (a
// runtime row read them element by element, 3-6x slower than eager, and ran
// eagerly). Against a naive double loop, at lengths
// across the vector tails and the sums' blocks of 1024; a NaN or inf token
// gives NaN or inf in its column only.
TEST(CompileDynamic, MeanPoolingOverSequencesOfEveryLength) {
  manual_seed(23);
  const int64_t D = 24;
  Tensor w = randn({D});
  auto fn = [&](const std::vector<Tensor> &in) -> std::vector<Tensor> { return {(in[0] * w).mean(1)}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{2, 7}, {3, 33}, {2, 1030}, {4, 2}, {2, 16}, {5, 9}};
  for (const auto &bs : sizes) {
    const int64_t b = bs[0], s = bs[1];
    const std::string at = "[" + std::to_string(b) + ", " + std::to_string(s) + ", 24]";
    Tensor x = randn({b, s, D});
    float *p = x.data_ptr<float>();
    p[D + 3] = NAN, p[(b * s - 1) * D + 5] = INFINITY; // batch 0, column 3; the last batch's column 5
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 1u) << at;
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{b, D})) << at;
    for (int64_t n = 0; n < b; ++n)
      for (int64_t c = 0; c < D; ++c) {
        double want = 0;
        for (int64_t t = 0; t < s; ++t) want += double(p[(n * s + t) * D + c] * w.data_ptr<float>()[c]);
        want /= double(s);
        const float g = got[0].data_ptr<float>()[n * D + c];
        const std::string where = at + " " + std::to_string(n) + ", " + std::to_string(c);
        EXPECT_EQ(std::isnan(g), std::isnan(want)) << where;
        EXPECT_EQ(std::isinf(g), std::isinf(want)) << where;
        if (std::isfinite(want)) {
          EXPECT_NEAR(g, want, 1e-5 * (1 + std::abs(want))) << where;
        }
      }
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 1);
  EXPECT_EQ(st.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 11, D})});
  ASSERT_TRUE(graph);
  EXPECT_EQ(runtime_row_steps(graph), 1) << "the mean pooling, one kernel";
}

// A training-mode batch norm over images whose batch and size change (dynamic
// = On): the statistics over [0, 2, 3] run as a mean over each image, then
// over the batch (decompose's split_reduction), each one kernel over the
// call's sizes; the running variance takes the call's n / (n - 1) (sym_numel).
// Output and running statistics against a double loop; NaN in one channel
// stays in that channel.
TEST(CompileDynamic, BatchNormTrainingOverImagesOfEverySize) {
  manual_seed(29);
  const int64_t C = 5;
  const double momentum = 0.1, eps = 1e-5;
  Tensor w = randn({C}), b = randn({C}), rm = randn({C}), rv = rand({C}) + 0.5;
  auto fn = [=](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    return {batch_norm(in[0], w, b, rm, rv, /*training=*/true, momentum, eps)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{4, 6}, {2, 9}, {7, 5}, {3, 17}, {1, 4}};
  for (const auto &bs : sizes) {
    const int64_t N = bs[0], H = bs[1], HW = H * H;
    Tensor x = randn({N, C, H, H});
    const std::string at = shape_str(x.sizes());
    float *p = x.data_ptr<float>();
    if (N == 2) p[3 * HW + 1] = NAN; // channel 3
    std::vector<double> rm0(C), rv0(C);
    for (int64_t c = 0; c < C; ++c) rm0[c] = rm.data_ptr<float>()[c], rv0[c] = rv.data_ptr<float>()[c];
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got[0].sizes().vec(), x.sizes().vec()) << at;
    for (int64_t c = 0; c < C; ++c) {
      double s = 0, q = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) s += p[(n * C + c) * HW + i];
      const double cnt = double(N * HW), mean = s / cnt;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) q += (p[(n * C + c) * HW + i] - mean) * (p[(n * C + c) * HW + i] - mean);
      const double var = q / cnt;
      const double want_rm = (1 - momentum) * rm0[c] + momentum * mean;
      const double want_rv = (1 - momentum) * rv0[c] + momentum * var * cnt / (cnt - 1);
      const std::string where = at + " channel " + std::to_string(c);
      const float grm = rm.data_ptr<float>()[c], grv = rv.data_ptr<float>()[c];
      EXPECT_EQ(std::isnan(grm), std::isnan(want_rm)) << where;
      EXPECT_EQ(std::isnan(grv), std::isnan(want_rv)) << where;
      if (!std::isnan(want_rm)) {
        EXPECT_NEAR(grm, want_rm, 1e-5 * (1 + std::abs(want_rm))) << where;
        EXPECT_NEAR(grv, want_rv, 1e-4 * (1 + std::abs(want_rv))) << where;
      }
      for (int64_t n = 0; n < N; ++n)
        for (int64_t i = 0; i < HW; ++i) {
          const int64_t k = (n * C + c) * HW + i;
          const double want = (p[k] - mean) / std::sqrt(var + eps) * w.data_ptr<float>()[c] + b.data_ptr<float>()[c];
          const float g = got[0].data_ptr<float>()[k];
          ASSERT_EQ(std::isnan(g), std::isnan(want)) << where << " element " << k;
          if (!std::isnan(want)) ASSERT_NEAR(g, want, 1e-4 * (1 + std::abs(want))) << where << " element " << k;
        }
    }
  }
  CompileStats st = f.stats();
  EXPECT_EQ(st.compiles, 1);
  EXPECT_EQ(st.eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, C, 7, 7})});
  ASSERT_TRUE(graph);
  EXPECT_GE(runtime_row_steps(graph), 1) << "the statistics over each image, a kernel over the call's sizes";
}

// Per-channel extremes over images whose batch and size change (a
// calibration's amax of |x * w| over [0, 2, 3]): decompose splits each over
// the image, then over the batch, so each half is a kernel over the call's
// sizes (whole, they would run eagerly). Against a double loop, NaN and inf
// included (a NaN anywhere in the channel is its max and min).
TEST(CompileDynamic, ExtremesOverImagesOfEverySize) {
  manual_seed(41);
  const int64_t C = 3;
  Tensor w = rand({C, 1, 1}) + 0.5; // the channels' scales (which keep C a constant)
  auto fn = [w](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor y = in[0] * w;
    return {amax(abs(y), {0, 2, 3}), amin(y, {3, 0, 2}, /*keepdim=*/true)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{4, 6}, {2, 9}, {7, 5}, {3, 17}};
  for (const auto &bs : sizes) {
    const int64_t N = bs[0], H = bs[1], HW = H * H;
    Tensor x = randn({N, C, H, H});
    const std::string at = shape_str(x.sizes());
    float *p = x.data_ptr<float>();
    if (N == 2) p[1 * HW + 5] = NAN;             // channel 1
    if (N == 7) p[(6 * C + 2) * HW] = -INFINITY; // channel 2, the last image
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{C})) << at;
    ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{1, C, 1, 1})) << at;
    for (int64_t c = 0; c < C; ++c) {
      const double scale = w.data_ptr<float>()[c];
      double mx = -INFINITY, mn = INFINITY;
      bool nan = false;
      for (int64_t i = 0; i < N * HW; ++i) {
        const double v = double(p[(i / HW * C + c) * HW + i % HW]) * scale;
        nan |= std::isnan(v);
        mx = std::max(mx, std::abs(v));
        mn = std::min(mn, v);
      }
      const std::string where = at + " channel " + std::to_string(c);
      const float gmax = got[0].data_ptr<float>()[c], gmin = got[1].data_ptr<float>()[c];
      ASSERT_EQ(std::isnan(gmax), nan) << where;
      ASSERT_EQ(std::isnan(gmin), nan) << where;
      if (nan) continue;
      if (std::isinf(mx)) EXPECT_EQ(gmax, mx) << where; // (inf - inf is NaN: no tolerance holds)
      else EXPECT_NEAR(gmax, mx, 1e-6 * (1 + std::abs(mx))) << where;
      if (std::isinf(mn)) EXPECT_EQ(gmin, mn) << where;
      else EXPECT_NEAR(gmin, mn, 1e-6 * (1 + std::abs(mn))) << where;
    }
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, C, 7, 7})});
  ASSERT_TRUE(graph);
  EXPECT_GE(runtime_row_steps(graph), 2) << "the reductions over each image and over the batch, kernels over the call's sizes";
}

// An element-wise kernel over a runtime batch streams its stores on calls
// that touch more than the last-level cache (its twin compiled on the first
// such call) and not on small ones: equal to eager at both, inf and NaN
// included, and nothing written beyond the result.
TEST(CompileDynamic, LargeCallsOfAnElementwiseKernelOverARuntimeBatch) {
  manual_seed(43);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> { return {in[0] * 2.0 - in[1]}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t b : {7, 4101, 33, 4101}) { // 4101 x 1024 floats: 3 x 16.8 MB touched
    Tensor x = randn({b, 1024}), y = randn({b, 1024});
    x.data_ptr<float>()[b * 1024 - 1] = INFINITY;
    y.data_ptr<float>()[5] = NAN;
    std::vector<Tensor> got = f({x, y});
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{b, 1024}));
    const float *px = x.data_ptr<float>(), *py = y.data_ptr<float>(), *pg = got[0].data_ptr<float>();
    int64_t bad = 0;
    for (int64_t i = 0; i < b * 1024; ++i) {
      const float want = px[i] * 2.0f - py[i];
      bad += std::isnan(want) ? !std::isnan(pg[i]) : pg[i] != want;
    }
    EXPECT_EQ(bad, 0) << "batch " << b;
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// Sizes a function reads from its input (a full of the batch's size, a mean
// spelled as the sum over sym_numel) follow each call: one compile serves them.
TEST(CompileDynamic, FullsAndCountsOfTheCallsSize) {
  manual_seed(31);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor x = in[0];
    return {x + full({x.size(0), x.size(1)}, 1.5), x.sum({1}) / sym_numel(x)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t n : {3, 8, 5, 33}) {
    Tensor x = randn({n, 7});
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got.size(), 2u);
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{n, 7}));
    ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{n}));
    const float *p = x.data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      double s = 0;
      for (int64_t j = 0; j < 7; ++j) {
        s += p[i * 7 + j];
        EXPECT_FLOAT_EQ(got[0].data_ptr<float>()[i * 7 + j], p[i * 7 + j] + 1.5f) << n;
      }
      EXPECT_NEAR(got[1].data_ptr<float>()[i], s / double(n * 7), 1e-6) << n << " row " << i;
    }
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// var and std over symbolic dims: decompose divides by the call's count
// (sym_numel of x over the mean's) less the correction, so one compile serves
// every size; against a double loop, and a correction the count does not exceed.
TEST(CompileDynamic, VarAndStdOverSymbolicDims) {
  manual_seed(37);
  auto fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    return {var(in[0], {1}), kiln::std(in[0], {0, 2}, /*correction=*/0.0, /*keepdim=*/true)};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  const int64_t sizes[][2] = {{3, 5}, {6, 2}, {2, 19}, {5, 40}};
  for (const auto &bs : sizes) {
    const int64_t B = bs[0], S = bs[1], D = 24;
    const std::string at = "[" + std::to_string(B) + ", " + std::to_string(S) + ", 24]";
    Tensor x = randn({B, S, D});
    const float *p = x.data_ptr<float>();
    std::vector<Tensor> got = f({x});
    ASSERT_EQ(got[0].sizes().vec(), (std::vector<int64_t>{B, D})) << at;
    ASSERT_EQ(got[1].sizes().vec(), (std::vector<int64_t>{1, S, 1})) << at;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t d = 0; d < D; ++d) {
        double s = 0, q = 0;
        for (int64_t t = 0; t < S; ++t) s += p[(b * S + t) * D + d];
        for (int64_t t = 0; t < S; ++t) q += std::pow(p[(b * S + t) * D + d] - s / double(S), 2);
        const double want = q / double(S - 1);
        EXPECT_NEAR(got[0].data_ptr<float>()[b * D + d], want, 1e-5 * (1 + want)) << at << " " << b << ", " << d;
      }
    for (int64_t t = 0; t < S; ++t) {
      double s = 0, q = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < D; ++d) s += p[(b * S + t) * D + d];
      const double mean = s / double(B * D);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t d = 0; d < D; ++d) q += std::pow(p[(b * S + t) * D + d] - mean, 2);
      const double want = std::sqrt(q / double(B * D));
      EXPECT_NEAR(got[1].data_ptr<float>()[t], want, 1e-5 * (1 + want)) << at << " position " << t;
    }
  }
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  std::shared_ptr<const ir::Graph> graph = f.graph_for({randn({3, 7, 24})});
  ASSERT_TRUE(graph);
  for (const ir::Node *n : graph->nodes())
    EXPECT_TRUE(n->kind() != ir::Node::Kind::Op || (n->op() != OpId::Var && n->op() != OpId::Std))
        << "var and std decompose over symbolic dims";
}

// A training step whose loss is a mean and whose features are scaled by a var
// over the batch, compiled with the default (Auto) and called at five batch
// sizes: the backward's counts (mean's 1 / n, var's 1 / (n - 1)) are read per
// call, so the batch turns symbolic at the second size and no later size
// compiles. Losses and weights against the same steps run eagerly.
TEST(CompileDynamic, TrainingStepsWithMeansAndVarsOverEveryBatch) {
  manual_seed(41);
  Tensor w0 = randn({3, 4}) * 0.5;
  Tensor wc = w0.clone().requires_grad_(true), we = w0.clone().requires_grad_(true);
  auto step_with = [](Tensor &w) {
    return [&w](const std::vector<Tensor> &in) -> std::vector<Tensor> {
      Tensor h = linear(in[0], w);
      Tensor z = h / sqrt(var(h, {0}, 1.0, true) + 1e-3);
      Tensor d = z - in[1];
      Tensor loss = (d * d).mean();
      loss.backward();
      {
        NoGradGuard g;
        w.sub_(w.grad() * 0.1);
        w.mutable_grad().zero_();
      }
      return {loss.detach()};
    };
  };
  CompiledFunction f = compile(step_with(wc));
  auto eager = step_with(we);
  for (int64_t b : {4, 7, 5, 12, 9, 33}) {
    Tensor x = randn({b, 4}), y = randn({b, 3});
    const double lc = f({x, y})[0].item<double>(), le = eager({x, y})[0].item<double>();
    EXPECT_NEAR(lc, le, 1e-5 * (1 + std::abs(le))) << "batch " << b;
    EXPECT_TRUE(allclose(wc.detach(), we.detach(), 1e-5, 1e-6)) << "batch " << b;
  }
  EXPECT_EQ(f.stats().compiles, 2);
  EXPECT_EQ(f.stats().eager_calls, 0);
}

// A result returned twice and an input returned as it came, over a symbolic
// batch: every call hands back each output (the plan moves a result out of a
// call only at its last use), one tensor twice where eager returns one twice,
// and the caller's input where eager returns it.
// Eager's x * 1 is a tensor of its own; the plan computes it as x itself
// (canonicalize folds it), so the call must hand back a copy, as it must not for a
// kernel's result, which is the call's own. Writing into either output leaves
// the input as it was.
TEST(CompileDynamic, AnOutputThePlanFoldsToAnInputIsStillATensorOfItsOwn) {
  ModelFn fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> { return {in[0] * 1.0, in[0] + in[1]}; };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t n : {6, 33, 2}) {
    const std::vector<Tensor> in = {randn({n, 5}), randn({n, 5})};
    const Tensor before = in[0].clone();
    const std::string where = "batch " + std::to_string(n);
    std::vector<Tensor> got = f(in);
    ASSERT_EQ(got.size(), 2u) << where;
    EXPECT_FALSE(got[0].is_alias_of(in[0])) << where;
    EXPECT_FALSE(got[1].is_alias_of(in[0]) || got[1].is_alias_of(in[1])) << where;
    got[0].fill_(7.0);
    got[1].fill_(8.0);
    const float *x = in[0].data_ptr<float>(), *want = before.data_ptr<float>();
    for (int64_t k = 0; k < n * 5; ++k) ASSERT_EQ(x[k], want[k]) << where << ", element " << k;
    expect_as_eager(f, fn, in, where);
  }
  EXPECT_EQ(f.stats().compiles, 1);
}

TEST(CompileDynamic, AResultReturnedTwiceAndAnInputReturnedAsItCame) {
  ModelFn fn = [](const std::vector<Tensor> &in) -> std::vector<Tensor> {
    Tensor y = relu(in[0]) * 2.0;
    return {y, in[1], y};
  };
  CompileOptions o;
  o.dynamic = Dynamic::On;
  CompiledFunction f = compile(fn, o);
  for (int64_t n : {5, 17, 3, 64}) {
    const std::vector<Tensor> in = {randn({n, 7}), randn({n, 7})};
    const std::string where = "batch " + std::to_string(n);
    const std::vector<Tensor> got = f(in);
    ASSERT_EQ(got.size(), 3u) << where;
    ASSERT_TRUE(got[0].defined() && got[2].defined()) << where;
    EXPECT_TRUE(got[0].is_alias_of(got[2])) << where;
    EXPECT_TRUE(got[1].is_alias_of(in[1])) << where;
    ASSERT_EQ(got[2].sizes().vec(), (std::vector<int64_t>{n, 7})) << where;
    const float *x = in[0].contiguous().data_ptr<float>();
    const float *y = got[2].contiguous().data_ptr<float>();
    for (int64_t k = 0; k < n * 7; ++k) EXPECT_EQ(y[k], std::max(x[k], 0.0f) * 2.0f) << where << ", element " << k;
    expect_as_eager(f, fn, in, where);
  }
  EXPECT_EQ(f.stats().compiles, 1);
}
