// Compiled functions on permuted, expanded, sliced and aliased inputs, against
// eager: every view, copy and in-place op sees the input's real strides when
// traced (issue 13, point 0), and elementwise results take their inputs'
// layout in eager and in the compiled plan alike (point 0c, torch's
// TensorIterator rule, written out by hand in the Layout tests below).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "frontend/compile.h"

using namespace kiln;

namespace {

using Inputs = std::function<std::vector<Tensor>()>;

// Same shape and the same values, element by element (eager ops in double).
bool same_values(const Tensor &a, const Tensor &b) {
  if (a.sizes().vec() != b.sizes().vec()) return false;
  if (a.numel() == 0) return true;
  return amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>() == 0.0;
}

// Float values that are small integers: every executor computes them exactly.
Tensor iota(int64_t n) { return arange(0, n, 1, kFloat32); }

// The kinds of input a caller may pass (each call makes fresh tensors: the
// programs below write to them).
struct InputKind {
  const char *name;
  Inputs make;
};

std::vector<InputKind> input_kinds() {
  return {
      {"contiguous", [] { return std::vector<Tensor>{iota(6).view({3, 2}), iota(6).view({3, 2}) + 10.0}; }},
      {"transposed", [] { return std::vector<Tensor>{iota(6).view({2, 3}).t(), iota(6).view({2, 3}).t() + 10.0}; }},
      {"expanded", [] { return std::vector<Tensor>{iota(2).view({1, 2}).expand({3, 2}), iota(6).view({3, 2})}; }},
      {"expanded-rows", [] { return std::vector<Tensor>{iota(3).view({3, 1}).expand({3, 2}), iota(6).view({3, 2})}; }},
      {"sliced-columns", [] { return std::vector<Tensor>{iota(15).view({3, 5}).slice(1, 1, 3), iota(6).view({3, 2})}; }},
      {"strided-slice", [] { return std::vector<Tensor>{iota(12).view({3, 4}).slice(1, 0, 4, 2), iota(6).view({3, 2})}; }},
      {"permuted-slice",
       [] { return std::vector<Tensor>{iota(24).view({4, 6}).slice(1, 0, 6, 2).slice(0, 1, 3).t(), iota(6).view({3, 2})}; }},
      {"aliased", [] {
         Tensor base = iota(6).view({3, 2});
         return std::vector<Tensor>{base, base};
       }},
      {"aliased-transposed", [] {
         Tensor base = iota(6).view({2, 3});
         return std::vector<Tensor>{base.t(), base.t()};
       }},
  };
}

struct Program {
  const char *name;
  ModelFn fn;
};

using V = std::vector<Tensor>;

// Views, copies and in-place ops on in[0] (a [3, 2] tensor of any layout) and in[1].
std::vector<Program> programs() {
  return {
      {"contiguous-fill_", [](const V &in) { Tensor y = in[0].contiguous(); y.fill_(-2); return V{y}; }},
      {"reshape-mul_", [](const V &in) { Tensor r = in[0].reshape({-1}); r.mul_(0); return V{r}; }},
      {"contiguous-then-input-mul_",
       [](const V &in) { Tensor c = in[0].contiguous(), x = in[0]; x.mul_(10); return V{c}; }},
      {"contiguous-add_", [](const V &in) { Tensor c = in[0].contiguous(); c.add_(1); return V{c}; }},
      {"t-view", [](const V &in) { return V{in[0].t().view({6})}; }},
      {"view-flat", [](const V &in) { return V{in[0].view({-1}) * 1.0}; }},
      {"inplace-through-t-then-view",
       [](const V &in) { Tensor x = in[0] * 2.0; x.t().add_(1); return V{x.view({6})}; }},
      {"input-add_", [](const V &in) { Tensor x = in[0]; x.add_(1); return V{x * 1.0}; }},
      {"input-t-mul_", [](const V &in) { in[0].t().mul_(2); return V{in[0] + 0.0}; }},
      {"input-select-fill_", [](const V &in) { in[0].select(0, 1).fill_(7); return V{in[0] * 1.0, in[1] * 1.0}; }},
      {"input-slice-copy_", [](const V &in) { in[0].slice(1, 0, 1).copy_(in[1].slice(1, 1, 2)); return V{in[0] - 0.0}; }},
      {"input-contiguous-view-add_",
       [](const V &in) { in[0].contiguous().view({-1}).add_(5); return V{in[0] * 1.0}; }},
      {"elementwise-t-view", [](const V &in) { return V{(in[0] + 3.0).t().view({6})}; }},
      {"elementwise-t-contiguous-add_",
       [](const V &in) { Tensor y = in[0] + 3.0; y.t().contiguous().add_(100); return V{y}; }},
      {"elementwise-result-layout", [](const V &in) { return V{in[0] * in[1], exp(in[0] * 0.0), in[1] - in[0]}; }},
      {"clone-view", [](const V &in) { return V{in[0].clone().view({-1})}; }},
      {"to-view", [](const V &in) { return V{in[0].to(kFloat64).view({-1})}; }},
      {"reduce", [](const V &in) { return V{sum(in[0], {1}), amax(in[0] + in[1], {0})}; }},
      {"second-input-add_",
       [](const V &in) { Tensor a = in[0] * 1.0, y = in[1]; y.add_(in[0]); return V{a, y + 0.0}; }},
  };
}

// eager's result or its error.
struct Outcome {
  std::vector<Tensor> out, in;
  std::string error;
};

Outcome run(const std::function<std::vector<Tensor>(const std::vector<Tensor> &)> &f, const Inputs &make) {
  Outcome o;
  o.in = make();
  try {
    o.out = f(o.in);
  } catch (const Error &e) {
    o.error = e.what();
  }
  return o;
}

// Exact equality of values, shapes, dtypes and (for a caller's later view or
// contiguous()) strides along dims of size > 1.
void expect_same(const Tensor &got, const Tensor &want, const std::string &what) {
  ASSERT_EQ(got.sizes().vec(), want.sizes().vec()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  for (int64_t d = 0; d < want.dim(); ++d)
    if (want.size(d) > 1) {
      EXPECT_EQ(got.stride(d), want.stride(d)) << what << ": stride of dim " << d;
    }
  EXPECT_TRUE(same_values(got, want)) << what << ": got " << got << " want " << want;
}

void expect_same_outcome(const Outcome &got, const Outcome &want, const std::string &what) {
  if (!want.error.empty()) {
    EXPECT_FALSE(got.error.empty()) << what << ": eager threw '" << want.error << "', compiled did not";
    return;
  }
  ASSERT_TRUE(got.error.empty()) << what << ": compiled threw '" << got.error << "'";
  ASSERT_EQ(got.out.size(), want.out.size()) << what;
  for (size_t i = 0; i < want.out.size(); ++i) expect_same(got.out[i], want.out[i], what + " output " + std::to_string(i));
  for (size_t i = 0; i < want.in.size(); ++i) {
    EXPECT_TRUE(same_values(got.in[i], want.in[i])) << what << ": input " << i << " after the call is " << got.in[i]
                                              << ", eager left " << want.in[i];
    // A result eager gives memory of its own must not be the caller's input
    // (writing to it would change the input).
    for (size_t j = 0; j < want.out.size(); ++j)
      if (!want.out[j].is_alias_of(want.in[i])) {
        EXPECT_FALSE(got.out[j].is_alias_of(got.in[i])) << what << ": output " << j << " shares input " << i
                                                       << "'s memory, eager's does not";
      }
  }
}

// What must compile (no eager fallback): everything but the cases kiln
// documents as untraceable (an in-place update of aliased inputs, or through a
// view of an input whose elements share memory) and programs eager refuses.
bool must_compile(const std::string &kind, const std::string &program, const Outcome &eager) {
  if (!eager.error.empty()) return false;
  // Every in-place program may write an input (contiguous() of a contiguous input is the input).
  if (kind.rfind("aliased", 0) == 0 && program.find('_') != std::string::npos) return false;
  bool through_view = program == "input-t-mul_" || program == "input-select-fill_" ||
                      program == "input-slice-copy_" || program == "input-contiguous-view-add_";
  if (kind.rfind("expanded", 0) == 0 && through_view) return false;
  return true;
}

} // namespace

TEST(StridedInputs, CompiledEqualsEagerForEveryViewCopyAndInPlaceOp) {
  for (const InputKind &kind : input_kinds()) {
    for (const Program &p : programs()) {
      std::string what = std::string(p.name) + " on " + kind.name + " inputs";
      SCOPED_TRACE(what);
      Outcome want = run(p.fn, kind.make);
      CompiledFunction f = compile(p.fn);
      Outcome first = run(f, kind.make);
      expect_same_outcome(first, want, what);
      Outcome again = run(f, kind.make); // the cached specialization
      expect_same_outcome(again, want, what + " (second call)");
      if (must_compile(kind.name, p.name, want)) {
        EXPECT_EQ(f.stats().eager_calls, 0) << what << " ran eagerly: " << f.stats().last_fallback_reason;
      }
    }
  }
}

// The examples of issue 13, with fallback off: each compiles and equals eager.
TEST(StridedInputs, IssueExamplesCompileWithFallbackOff) {
  CompileOptions off;
  off.fallback = Fallback::Off;
  auto x = [] { return std::vector<Tensor>{arange(0, 6, 1, kFloat32).view({2, 3}).t()}; };
  {
    CompiledFunction f = compile([](const V &in) { Tensor y = in[0].contiguous(); y.fill_(-2); return V{y}; }, off);
    std::vector<Tensor> in = x();
    Tensor before = in[0].clone();
    std::vector<Tensor> out = f(in);
    EXPECT_TRUE(same_values(in[0], before)) << "the caller's input was overwritten: " << in[0];
    EXPECT_TRUE(same_values(out[0], full({3, 2}, -2.0)));
  }
  {
    CompiledFunction f = compile([](const V &in) { Tensor r = in[0].reshape({-1}); r.mul_(0); return V{r}; }, off);
    std::vector<Tensor> in = x();
    Tensor before = in[0].clone();
    f(in);
    EXPECT_TRUE(same_values(in[0], before)) << "the caller's input was zeroed: " << in[0];
  }
  {
    CompiledFunction f =
        compile([](const V &in) { Tensor c = in[0].contiguous(), x = in[0]; x.mul_(10); return V{c}; }, off);
    std::vector<Tensor> in = x();
    Tensor before = in[0].clone();
    std::vector<Tensor> out = f(in);
    EXPECT_TRUE(same_values(out[0], before)) << "contiguous() copied before the update: " << out[0];
    EXPECT_TRUE(same_values(in[0], before * 10.0));
  }
  {
    CompiledFunction f = compile([](const V &in) { Tensor c = in[0].contiguous(); c.add_(1); return V{c}; }, off);
    std::vector<Tensor> out = f({tensor({1.f}).expand({4})});
    EXPECT_TRUE(same_values(out[0], full({4}, 2.0)));
  }
  {
    CompiledFunction f = compile([](const V &in) { return V{in[0].t().view({6})}; }, off);
    std::vector<Tensor> in = x();
    EXPECT_TRUE(same_values(f(in)[0], arange(0, 6, 1, kFloat32)));
  }
  {
    ModelFn fn = [](const V &in) { Tensor y = in[0] * 2.0; y.t().add_(1); return V{y.view({6})}; };
    CompiledFunction f = compile(fn, off);
    Tensor c = iota(6).view({2, 3});
    EXPECT_TRUE(same_values(f({c})[0], fn({c})[0]));
    EXPECT_EQ(f.stats().eager_calls, 0);
  }
}

// A reduction group's per-row result laid out as a transposed input (eager's rule
// for x + sum(...)) is stored in that layout, with the reduced dim dropped or kept
// as 1. The kernel used to store per-row results row-major whatever their type's
// layout (found by fuzz_random_graph: linear with K = 1 on a transposed input;
// test/fuzz-regressions/random_graph/crash-row-result-in-transposed-layout).
TEST(StridedInputs, ReductionGroupRowResultsKeepEagersLayout) {
  CompileOptions off;
  off.fallback = Fallback::Off;
  const Tensor w = tensor({3.f, -2.f});
  const std::vector<std::pair<const char *, ModelFn>> fns = {
      {"dropped", [w](const V &in) { return V{in[0] + sum(in[0].unsqueeze(3) * w, {3}), -sum(in[0].unsqueeze(3) * w, {3})}; }},
      {"kept as 1", [](const V &in) { return V{in[0] + sum(in[1], {2}, true)}; }},
      {"linear, K = 1", [](const V &in) { return V{in[0] + linear(in[0], ones({1, 1}), tensor({0.5f}))}; }},
  };
  // Integer values: the sums are exact in any order.
  auto make = [] {
    return std::vector<Tensor>{iota(42).view({6, 7}).t().unsqueeze(2), iota(7 * 6 * 3).view({7, 6, 3}) - 20.0};
  };
  for (const auto &[name, fn] : fns) {
    CompiledFunction f = compile(fn, off);
    for (int call = 0; call < 2; ++call) expect_same_outcome(run(f, make), run(fn, make), name);
    EXPECT_EQ(f.stats().eager_calls, 0) << name;
  }
}

// ---- eager layouts: torch's rule, by hand.

TEST(Layout, ElementwiseResultOfTransposedInputIsTransposed) {
  Tensor x = iota(6).view({2, 3}).t(); // [3, 2], strides [1, 3]
  EXPECT_EQ((x + 3.0).strides().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(exp(x).strides().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(x.to(kFloat64).strides().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(x.clone().strides().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(where(x > 2.0, x, 0.0).strides().vec(), (std::vector<int64_t>{1, 3}));
  // So the transpose of the result is contiguous: view accepts it, contiguous() is itself.
  Tensor y = x + 3.0;
  EXPECT_TRUE(same_values(y.t().view({6}), arange(3, 9, 1, kFloat32)));
  y.t().contiguous().add_(100);
  EXPECT_TRUE(same_values(y, x + 103.0)) << "contiguous() of the transposed result is the result itself";
}

TEST(Layout, FirstInputThatOrdersTwoDimsDecides) {
  Tensor t = iota(6).view({2, 3}).t(); // strides [1, 3]
  Tensor c = iota(6).view({3, 2});     // strides [2, 1]
  EXPECT_EQ((t + c).strides().vec(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ((c + t).strides().vec(), (std::vector<int64_t>{2, 1}));
  // A broadcast input (stride 0 along a dim) does not order that dim: t decides.
  Tensor row = iota(2).expand({3, 2});
  EXPECT_EQ((row + t).strides().vec(), (std::vector<int64_t>{1, 3}));
  Tensor v = iota(2); // [2] broadcast over rows
  EXPECT_EQ((v * t).strides().vec(), (std::vector<int64_t>{1, 3}));
}

TEST(Layout, PermutedThreeDimInputKeepsItsDimOrder) {
  Tensor x = iota(24).view({2, 3, 4}).permute({2, 0, 1}); // [4, 2, 3], strides [1, 12, 4]
  EXPECT_EQ((x * 2.0).strides().vec(), (std::vector<int64_t>{1, 12, 4}));
  // Not dense (a step-2 slice): a dense layout of the same dim order, dim 0 innermost.
  Tensor s = x.slice(2, 0, 3, 2); // [4, 2, 2], strides [1, 12, 8]
  EXPECT_EQ((s + 1.0).strides().vec(), (std::vector<int64_t>{1, 8, 4}));
}

TEST(Layout, ContiguousOrGappedRowMajorInputsGiveContiguousResults) {
  Tensor gapped = iota(20).view({4, 5}).slice(1, 0, 5, 2); // [4, 3], strides [5, 2]
  EXPECT_EQ((gapped + 1.0).strides().vec(), (std::vector<int64_t>{3, 1}));
  Tensor cols = iota(20).view({4, 5}).slice(1, 1, 4); // [4, 3], strides [5, 1]
  EXPECT_EQ((cols * cols).strides().vec(), (std::vector<int64_t>{3, 1}));
  Tensor c = iota(6).view({2, 3});
  EXPECT_EQ((c + c).strides().vec(), (std::vector<int64_t>{3, 1}));
  // copy_ and in-place ops keep self's strides.
  Tensor t = iota(6).view({2, 3}).t();
  t.add_(1);
  EXPECT_EQ(t.strides().vec(), (std::vector<int64_t>{1, 3}));
}

TEST(Layout, LargeTransposedElementwiseMatchesANaiveLoop) {
  // The strided result goes through the kernels' general (permuted) loop.
  Tensor x = randn({300, 257}).t();
  Tensor y = x * 2.0 + 1.0;
  EXPECT_EQ(y.strides().vec(), x.strides().vec());
  const float *px = x.data_ptr<float>();
  const float *py = y.data_ptr<float>();
  for (int64_t i = 0; i < 257; ++i)
    for (int64_t j = 0; j < 300; ++j) {
      float want = px[i * x.stride(0) + j * x.stride(1)] * 2.0f + 1.0f;
      ASSERT_EQ(py[i * y.stride(0) + j * y.stride(1)], want) << i << ", " << j;
    }
}
