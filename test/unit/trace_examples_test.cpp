// Every example model, traced: the interpreter equals eager on the traced graph,
// and again after the default pipeline (decompose, canonicalize, cse, dce) with
// the verifier run after each pass.
#include "graph_test_util.h"

#include "example.h"
#include "example_params.h"

using namespace kiln;
using namespace kiln::testing;

class TraceExample : public ::testing::TestWithParam<std::string> {};

TEST_P(TraceExample, InterpreterMatchesEagerBeforeAndAfterPasses) {
  const examples::Example *ex = examples::find_example(GetParam());
  ASSERT_TRUE(ex);
  examples::Workload w = ex->make();
  std::vector<Tensor> eager_in = copies(w.inputs);
  std::vector<Tensor> want = w.fn(eager_in);
  auto g = trace(w.fn, w.inputs);
  EXPECT_TRUE(all_close(ir::interpret(*g, copies(w.inputs)), want, 1e-5));
  passes::PipelineOptions o;
  o.verify_each = true;
  passes::run_pipeline(*g, passes::default_pipeline(), o);
  for (const ir::Node *n : g->nodes()) EXPECT_NE(n->info().kind, OpKind::Composite) << n->mnemonic();
  std::vector<Tensor> graph_in = copies(w.inputs);
  EXPECT_TRUE(all_close(ir::interpret(*g, graph_in), want, 1e-4));
  EXPECT_TRUE(all_close(graph_in, eager_in, 1e-5)) << "mutated inputs differ";
}

INSTANTIATE_TEST_SUITE_P(Examples, TraceExample, ::testing::ValuesIn(kiln::testing::example_names()),
                         kiln::testing::example_param_name);
