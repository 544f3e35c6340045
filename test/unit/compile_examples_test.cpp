// Every example model through kiln::compile with fallback off: compiled outputs
// equal eager within rtol 1e-4, atol 1e-5, a second call (the cached
// specialization) equals the first, and the elementwise/row workloads W1-W3 are
// one JIT kernel per call.
#include "graph_test_util.h"

#include "example.h"
#include "example_params.h"

using namespace kiln;
using namespace kiln::testing;

namespace {

// max(|got - want| - (rtol |want| + atol)) <= 0 over every output.
void expect_close(const std::vector<Tensor> &got, const std::vector<Tensor> &want, double rtol, double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i].sizes().vec(), want[i].sizes().vec()) << "output " << i;
    ASSERT_EQ(got[i].dtype(), want[i].dtype()) << "output " << i;
    Tensor g = got[i].to(kFloat64), w = want[i].to(kFloat64);
    EXPECT_LE(amax(abs(g - w) - (abs(w) * rtol + atol)).item<double>(), 0) << "output " << i;
  }
}

class CompileExample : public ::testing::TestWithParam<std::string> {};

TEST_P(CompileExample, CompiledEqualsEager) {
  const examples::Example *ex = examples::find_example(GetParam());
  ASSERT_TRUE(ex);
  examples::Workload w = ex->make();
  std::vector<Tensor> want = w.fn(copies(w.inputs));
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(w.fn, o);
  std::vector<Tensor> first = f(copies(w.inputs));
  expect_close(first, want, 1e-4, 1e-5);
  std::vector<Tensor> second = f(copies(w.inputs));
  expect_close(second, first, 0, 0);
  EXPECT_EQ(f.stats().compiles, 1);
  EXPECT_EQ(f.stats().eager_calls, 0);
  const std::string &n = ex->name;
  if (n == "w1-gelu-chain" || n == "w2-softmax" || n == "w3-layernorm") {
    EXPECT_EQ(f.kernels_per_call(w.inputs), 1);
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, CompileExample, ::testing::ValuesIn(kiln::testing::example_names()),
                         kiln::testing::example_param_name);

} // namespace
