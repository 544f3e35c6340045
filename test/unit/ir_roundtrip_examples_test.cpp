// Every example model, traced, and again after the default pipeline: verifies,
// prints, parses back to the same text and an equal graph, and the parsed graph
// (parameters bound to the live tensors) computes what eager does.
#include <gtest/gtest.h>

#include "example.h"
#include "graph_test_util.h"
#include "ir/hash.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"

using namespace kiln;
using namespace kiln::testing;

TEST(IrRoundTripExamples, TracedGraphsRoundTripAndRun) {
  for (const examples::Example &e : examples::all_examples()) {
    examples::Workload w = e.make();
    // A training step's calls change its parameters: its numerics are checked
    // against a twin in training_examples_test; here the graph round-trips and runs.
    const bool training = !w.params.empty();
    std::vector<Tensor> want = w.fn(copies(w.inputs));
    auto g = trace(w.fn, w.inputs);
    for (int stage = 0; stage < 2; ++stage) {
      if (stage) passes::run_pipeline(*g, passes::default_pipeline());
      ASSERT_NO_THROW(ir::verify(*g)) << e.name;
      std::string text = ir::print(*g);
      std::unique_ptr<ir::Graph> p;
      try {
        p = ir::parse(text, e.name);
      } catch (const Error &err) {
        FAIL() << err.what() << "\n" << text;
      }
      EXPECT_EQ(text, ir::print(*p)) << e.name;
      EXPECT_TRUE(ir::structurally_equal(*g, *p)) << e.name;
      EXPECT_EQ(ir::structural_hash(*g), ir::structural_hash(*p)) << e.name;
      ASSERT_NO_THROW(ir::verify(*p)) << e.name;
      for (size_t i = 0; i < g->params().size(); ++i) p->bind_param(p->params()[i], g->params()[i]->tensor());
      std::vector<Tensor> got = ir::interpret(*p, copies(w.inputs));
      if (!training) EXPECT_TRUE(all_close(got, want, 1e-4)) << e.name << "\n" << text;
    }
  }
}
