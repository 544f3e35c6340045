// Tracing, functionalization and the interpreter, checked against eager.
#include "graph_test_util.h"

#include <sstream>
#include <thread>

#include "runtime/trace_hook.h"

using namespace kiln;
using namespace kiln::testing;
using ir::Value;

namespace {

// Runs fn eagerly on copies of `inputs` and the interpreter on the traced graph
// with other copies; outputs and (possibly mutated) inputs must agree.
void expect_matches_eager(const TracedFunction &fn, const std::vector<Tensor> &inputs, double tol = 1e-5) {
  std::unique_ptr<ir::Graph> g = trace(fn, inputs);
  std::vector<Tensor> eager_in = copies(inputs), graph_in = copies(inputs);
  std::vector<Tensor> want = fn(eager_in);
  std::vector<Tensor> got = ir::interpret(*g, graph_in);
  EXPECT_TRUE(all_close(got, want, tol));
  EXPECT_TRUE(all_close(graph_in, eager_in, tol)) << "mutated inputs differ";
}

} // namespace

TEST(Trace, RecordsOpsAttributesAndTypes) {
  auto g = trace(
      [](const std::vector<Tensor> &in) {
        Tensor y = in[0] * 2.0 + in[1];
        return std::vector<Tensor>{y.sum({1}, true)};
      },
      {rnd({2, 3}, 1), rnd({3}, 2)});
  ASSERT_EQ(g->inputs().size(), 2u);
  EXPECT_EQ(g->inputs()[0]->name(), "x0");
  EXPECT_EQ(g->inputs()[1]->type().str(), "f32[3]");
  ASSERT_EQ(ops_of(*g), (std::vector<OpId>{OpId::Mul, OpId::Add, OpId::Sum}));
  std::vector<ir::Node *> n = g->nodes();
  EXPECT_EQ(n[0]->operand(0), g->inputs()[0]);
  // The scalar is a wrapped-number constant holding 2.
  const Value *c = n[0]->operand(1);
  ASSERT_EQ(c->kind(), Value::Kind::Const);
  EXPECT_TRUE(c->tensor().impl().wrapped_number);
  EXPECT_EQ(vals(c->tensor()), std::vector<double>{2.0});
  EXPECT_EQ(n[0]->result()->type().str(), "f32[2, 3]");
  EXPECT_EQ(n[1]->operand(0), n[0]->result());
  EXPECT_EQ(n[1]->operand(1), g->inputs()[1]);
  EXPECT_EQ(n[1]->attr("alpha")->as_int(), 1);
  EXPECT_EQ(n[2]->attr("dims")->as_ints(), std::vector<int64_t>{1});
  EXPECT_TRUE(n[2]->attr("keepdim")->as_bool());
  EXPECT_TRUE(n[2]->attr("dtype")->is_none());
  EXPECT_EQ(n[2]->result()->type().str(), "f32[2, 1]");
  ASSERT_EQ(g->outputs().size(), 1u);
  EXPECT_EQ(g->outputs()[0], n[2]->result());
  EXPECT_TRUE(g->write_backs().empty());
}

TEST(Trace, SingleInputIsNamedX) {
  auto g = trace([](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0].exp()}; }, {rnd({4}, 1)});
  EXPECT_EQ(g->inputs()[0]->name(), "x");
  EXPECT_EQ(ops_of(*g), std::vector<OpId>{OpId::Exp});
}

TEST(Trace, ViewsAreRecordedAsViewOps) {
  auto g = trace(
      [](const std::vector<Tensor> &in) {
        return std::vector<Tensor>{in[0].t().unsqueeze(0).slice(2, 1, 3), in[0].view({6})};
      },
      {rnd({2, 3}, 1)});
  ASSERT_EQ(ops_of(*g), (std::vector<OpId>{OpId::Transpose, OpId::Unsqueeze, OpId::Slice, OpId::View}));
  std::vector<ir::Node *> n = g->nodes();
  EXPECT_EQ(n[0]->attr("dim0")->as_int(), 0);
  EXPECT_EQ(n[0]->attr("dim1")->as_int(), 1);
  EXPECT_EQ(n[2]->result()->type().str(), "f32[1, 3, 1]");
  EXPECT_EQ(n[3]->attr("shape")->as_ints(), std::vector<int64_t>{6});
}

TEST(Trace, OutputsMayBeInputsAndParams) {
  Tensor w = rnd({3}, 5);
  auto g = trace([&](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0], w}; }, {rnd({2}, 1)});
  EXPECT_EQ(g->num_nodes(), 0u);
  EXPECT_EQ(g->outputs()[0], g->inputs()[0]);
  EXPECT_EQ(g->outputs()[1], g->params()[0]);
  std::vector<Tensor> out = ir::interpret(*g, {rnd({2}, 1)});
  EXPECT_TRUE(out[1].is_same(w));
}

TEST(Trace, CapturedWeightIsOneParamBoundByReference) {
  Tensor w = rnd({3}, 7);
  TracedFunction fn = [&](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] * w + w}; };
  Tensor x = rnd({2, 3}, 8);
  auto g = trace(fn, {x});
  ASSERT_EQ(g->params().size(), 1u);
  EXPECT_EQ(g->params()[0]->name(), "w0");
  EXPECT_TRUE(g->params()[0]->tensor().is_same(w));
  EXPECT_TRUE(close(ir::interpret(*g, {x})[0], fn({x})[0]));
  // Changing the weight after tracing changes what the graph computes.
  std::vector<double> before = vals(ir::interpret(*g, {x})[0]);
  static_cast<float *>(w.raw_data())[1] = 100.f;
  Tensor after = ir::interpret(*g, {x})[0];
  EXPECT_NE(vals(after), before);
  EXPECT_TRUE(close(after, fn({x})[0]));
}

TEST(Trace, DataReadsThrowTraceErrorNamingTheOp) {
  auto expect_trace_error = [](const TracedFunction &fn, const std::string &what) {
    try {
      trace(fn, {rnd({2}, 1)});
      ADD_FAILURE() << "no TraceError for " << what;
    } catch (const TraceError &e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("data-dependent control flow"), std::string::npos) << e.what();
    }
  };
  expect_trace_error(
      [](const std::vector<Tensor> &in) {
        (void)in[0].sum().item<float>();
        return in;
      },
      "item");
  expect_trace_error(
      [](const std::vector<Tensor> &in) {
        (void)in[0].data_ptr<float>();
        return in;
      },
      "data_ptr");
  expect_trace_error(
      [](const std::vector<Tensor> &in) {
        std::ostringstream os;
        os << in[0];
        return in;
      },
      "operator<<");
  // The thread is usable again after the error.
  EXPECT_FALSE(detail::tracing());
  EXPECT_EQ(trace([](const std::vector<Tensor> &in) { return in; }, {rnd({2}, 1)})->num_nodes(), 0u);
}

TEST(Trace, BadUsesAreErrors) {
  EXPECT_THROW(trace(TracedFunction(), {rnd({2}, 1)}), Error);
  EXPECT_THROW(trace([](const std::vector<Tensor> &) { return std::vector<Tensor>{Tensor()}; }, {rnd({2}, 1)}), Error);
  // A meta tensor the tracer did not make.
  Tensor stray = detail::make_tensor({2}, kFloat32, true);
  EXPECT_THROW(trace([&](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + stray}; }, {rnd({2}, 1)}),
               TraceError);
}

TEST(Interpreter, ChecksInputs) {
  auto g = trace([](const std::vector<Tensor> &in) { return std::vector<Tensor>{in[0] + in[1]}; },
                 {rnd({2, 3}, 1), rnd({3}, 2)});
  EXPECT_THROW(ir::interpret(*g, {rnd({2, 3}, 1)}), Error);
  try {
    ir::interpret(*g, {rnd({2, 3}, 1), rnd({4}, 2)});
    ADD_FAILURE() << "no error";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("%x1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32[3]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ir::interpret(*g, {rnd({2, 3}, 1), rnd({3}, 2, kFloat64)}), Error);
  EXPECT_THROW(ir::interpret(*g, {rnd({2, 3}, 1), Tensor()}), Error);
}

// ---- interpreter == eager on many traced functions

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

struct Case {
  const char *name;
  Fn fn;
  std::vector<std::vector<int64_t>> shapes;
};

class TraceMatchesEager : public ::testing::TestWithParam<int> {};

const std::vector<Case> &cases() {
  static const std::vector<Case> all = {
      {"broadcast_chain",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{(x[0] * x[1] - 1.5) / (x[1].abs() + 1)}; },
       {{4, 1, 3}, {5, 3}}},
      {"unary_chain",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{x[0].tanh().exp().sqrt() + x[0].sigmoid() * x[0].relu() - x[0].neg().square()};
       },
       {{3, 7}}},
      {"add_alpha_scalars",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].add(x[1], 2.5).sub(3, 2) * 0.5}; },
       {{6}, {6}}},
      {"compare_where",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{where(x[0] > x[1], x[0], x[1] * 2), (x[0] < 0).to(kFloat32)};
       },
       {{3, 4}, {4}}},
      {"reductions",
       [](const std::vector<Tensor> &x) {
         return std::vector<Tensor>{x[0].sum({1}), x[0].mean({0, 2}, true), x[0].amax({2}), x[0].sum()};
       },
       {{2, 3, 4}}},
      {"views",
       [](const std::vector<Tensor> &x) {
         Tensor v = x[0].transpose(0, 1).reshape({4, 6}).slice(1, 1, 5).unsqueeze(0);
         return std::vector<Tensor>{v * 2, x[0].permute({2, 0, 1}).select(0, 1), x[0].expand({3, 2, 3, 4}) + 1};
       },
       {{2, 3, 4}}},
      {"matmul",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].matmul(x[1]), x[0].mm(x[1]).t()}; },
       {{4, 5}, {5, 3}}},
      {"softmax",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0].softmax(-1), x[0].log_softmax(0)}; },
       {{3, 8}}},
      {"layer_norm",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{layer_norm(x[0], {8}, x[1], x[2])}; },
       {{4, 8}, {8}, {8}}},
      {"gelu_linear",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{gelu(linear(x[0], x[1], x[2]), "tanh")}; },
       {{2, 6}, {5, 6}, {5}}},
      {"factory_inside",
       [](const std::vector<Tensor> &x) { return std::vector<Tensor>{x[0] + ones({3}) * 2, zeros({2})}; },
       {{2, 3}}},
  };
  return all;
}

TEST_P(TraceMatchesEager, OnRandomInputs) {
  const Case &c = cases()[size_t(GetParam())];
  SCOPED_TRACE(c.name);
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    std::vector<Tensor> in;
    for (size_t i = 0; i < c.shapes.size(); ++i) in.push_back(rnd(c.shapes[i], seed * 100 + i));
    expect_matches_eager(c.fn, in);
  }
}

INSTANTIATE_TEST_SUITE_P(Functions, TraceMatchesEager, ::testing::Range(0, int(cases().size())),
                         [](const auto &info) { return std::string(cases()[size_t(info.param)].name); });

// ---- functionalization

TEST(Functionalize, AddInPlaceOnInputWritesBack) {
  TracedFunction fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.add_(in[1]);
    return std::vector<Tensor>{x * 2};
  };
  std::vector<Tensor> in{rnd({2, 3}, 1), rnd({3}, 2)};
  auto g = trace(fn, in);
  ASSERT_EQ(g->write_backs().size(), 1u);
  EXPECT_EQ(g->write_backs()[0].target, g->inputs()[0]);
  EXPECT_EQ(g->write_backs()[0].value->producer()->op(), OpId::Add);
  // The later read of x reads the new value.
  EXPECT_EQ(g->outputs()[0]->producer()->operand(0), g->write_backs()[0].value);
  expect_matches_eager(fn, in);
}

TEST(Functionalize, ReluInPlaceOnIntermediateHasNoWriteBack) {
  TracedFunction fn = [](const std::vector<Tensor> &in) {
    Tensor t = in[0] * 3;
    t.relu_();
    t.mul_(in[0]);
    return std::vector<Tensor>{t, in[0]};
  };
  std::vector<Tensor> in{rnd({5}, 3)};
  auto g = trace(fn, in);
  EXPECT_TRUE(g->write_backs().empty());
  EXPECT_EQ(ops_of(*g), (std::vector<OpId>{OpId::Mul, OpId::Relu, OpId::Mul}));
  expect_matches_eager(fn, in);
}

TEST(Functionalize, MulInPlaceOnParamWritesBackToTheWeight) {
  Tensor w = rnd({4}, 4);
  Tensor w_eager = copy_of(w);
  Tensor *target = &w;
  TracedFunction fn = [&](const std::vector<Tensor> &in) {
    target->mul_(in[0]);
    return std::vector<Tensor>{*target + 1};
  };
  Tensor x = rnd({4}, 5);
  auto g = trace(fn, {x});
  ASSERT_EQ(g->write_backs().size(), 1u);
  EXPECT_EQ(g->write_backs()[0].target, g->params()[0]);
  EXPECT_TRUE(close(w, w_eager)); // tracing does not touch the weight
  std::vector<Tensor> got = ir::interpret(*g, {x});
  target = &w_eager;
  std::vector<Tensor> want = fn({x});
  EXPECT_TRUE(all_close(got, want));
  EXPECT_TRUE(close(w, w_eager)); // both mutated once, the same way
  EXPECT_FALSE(close(w, rnd({4}, 4)));
}

TEST(Functionalize, ViewsSeeLaterMutationsOfTheirBase) {
  TracedFunction fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    Tensor v = x.t();
    Tensor row = x[1];
    x.add_(1);
    x.mul_(x);
    return std::vector<Tensor>{v, row * 1, x};
  };
  expect_matches_eager(fn, {rnd({3, 4}, 6)});
}

TEST(Functionalize, MutationThroughViewsUpdatesTheBase) {
  std::vector<TracedFunction> fns = {
      [](const std::vector<Tensor> &in) {
        in[0].t().mul_(2);
        return std::vector<Tensor>{in[0] + 0};
      },
      [](const std::vector<Tensor> &in) {
        Tensor r = in[0][1];
        r.add_(10);
        return std::vector<Tensor>{in[0] * 1, r};
      },
      [](const std::vector<Tensor> &in) {
        Tensor s = in[0].slice(1, 1, 3);
        s.mul_(-1);
        Tensor v = in[0].view({12});
        return std::vector<Tensor>{v};
      },
      [](const std::vector<Tensor> &in) {
        in[0].unsqueeze(0).permute({2, 0, 1}).relu_();
        return std::vector<Tensor>{in[0].sum({0})};
      },
      [](const std::vector<Tensor> &in) {
        Tensor t = in[0] * 2; // an intermediate, mutated through a view
        t.select(1, 0).fill_(5);
        return std::vector<Tensor>{t};
      },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    SCOPED_TRACE(i);
    expect_matches_eager(fns[i], {rnd({3, 4}, 10 + i)});
  }
}

TEST(Functionalize, MoreInPlaceOpsAndViews) {
  std::vector<TracedFunction> fns = {
      [](const std::vector<Tensor> &in) { // kv-cache style: copy into a slice of an input
        in[0].slice(0, 1, 3).copy_(in[1].view({2, 4}));
        return std::vector<Tensor>{in[0].sum({1})};
      },
      [](const std::vector<Tensor> &in) { // a piece of split, then the base is read
        std::vector<Tensor> parts = in[0].split(1, 0);
        parts[2].mul_(3);
        parts[0].zero_();
        return std::vector<Tensor>{in[0] * 1, parts[1]};
      },
      [](const std::vector<Tensor> &in) { // contiguous() of a contiguous tensor is the tensor itself
        in[0].contiguous().add_(in[1].view({2, 4}).sum({0}));
        return std::vector<Tensor>{in[0] + 0};
      },
      [](const std::vector<Tensor> &in) { // clamp_ on a flattened view, the view read later
        Tensor flat = in[0].view({-1});
        flat.clamp_(-0.5, 0.5);
        Tensor x = in[0];
        x.mul_(2);
        return std::vector<Tensor>{flat * 1, in[0].t() * 1};
      },
      [](const std::vector<Tensor> &in) { // out of place after in place, twice on the same tensor
        Tensor y = in[1] * 1;
        y.add_(1).mul_(y);
        Tensor b = in[1];
        b.sub_(y.view({8}).view({2, 4}), 0.5);
        return std::vector<Tensor>{y};
      },
  };
  for (size_t i = 0; i < fns.size(); ++i) {
    SCOPED_TRACE(i);
    expect_matches_eager(fns[i], {rnd({4, 4}, 20 + i), rnd({8}, 30 + i).view({2, 4})});
  }
}

TEST(Functionalize, InPlaceThroughParamViewWritesBack) {
  Tensor w = rnd({2, 3}, 9), w_eager = copy_of(w);
  Tensor *target = &w;
  TracedFunction fn = [&](const std::vector<Tensor> &in) {
    target->t()[1].add_(in[0]);
    return std::vector<Tensor>{*target * 1};
  };
  Tensor x = rnd({2}, 8);
  auto g = trace(fn, {x});
  ASSERT_EQ(g->write_backs().size(), 1u);
  std::vector<Tensor> got = ir::interpret(*g, {x});
  target = &w_eager;
  EXPECT_TRUE(all_close(got, fn({x})));
  EXPECT_TRUE(close(w, w_eager));
}

TEST(Functionalize, DtypeOfSelfIsKept) {
  TracedFunction fn = [](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    x.add_(in[1]); // f32 += f64: computed in f64, stored as f32
    return std::vector<Tensor>{x};
  };
  std::vector<Tensor> in{rnd({3}, 1), rnd({3}, 2, kFloat64)};
  auto g = trace(fn, in);
  EXPECT_EQ(count_op(*g, OpId::Cast), 1);
  EXPECT_EQ(g->outputs()[0]->type().dtype, kFloat32);
  expect_matches_eager(fn, in);
}

TEST(Functionalize, UnhandledAliasingThrows) {
  // An in-place update through as_strided or expand has no expressible update of the base.
  EXPECT_THROW(trace(
                   [](const std::vector<Tensor> &in) {
                     in[0].expand({3, 4}).add_(1);
                     return in;
                   },
                   {rnd({1, 4}, 1)}),
               Error);
  EXPECT_THROW(trace(
                   [](const std::vector<Tensor> &in) {
                     in[0].as_strided({2}, {2}).add_(1);
                     return in;
                   },
                   {rnd({4}, 1)}),
               TraceError);
  // Two inputs sharing memory, one mutated.
  Tensor x = rnd({4}, 2);
  EXPECT_THROW(trace(
                   [](const std::vector<Tensor> &in) {
                     Tensor a = in[0];
                     a.mul_(2);
                     return std::vector<Tensor>{a + in[1]};
                   },
                   {x, x}),
               TraceError);
}

TEST(Interpreter, RunsFusionGroupBodies) {
  // y = exp(x * w) + x with the mul and exp in a group.
  ir::Graph g;
  Value *x = g.add_input(ir::TensorType::of(rnd({2, 3}, 1)), "x");
  Tensor w = rnd({3}, 2);
  Value *wp = g.add_param(w, "w");
  ir::Node *grp = g.create_group({x, wp}, {x->type()});
  ir::Graph &body = *grp->body();
  ir::Node *m = body.create(OpId::Mul, {body.inputs()[0], body.inputs()[1]}, {}, {x->type()});
  ir::Node *e = body.create(OpId::Exp, {m->result()}, {}, {x->type()});
  body.set_outputs({e->result()});
  ir::Node *add = g.create(OpId::Add, {grp->result(), x}, {int64_t(1)}, {x->type()});
  g.set_outputs({add->result()});
  Tensor xi = rnd({2, 3}, 3);
  std::vector<double> xv = vals(xi), wv = vals(w), got = vals(ir::interpret(g, {xi})[0]);
  for (size_t i = 0; i < 6; ++i) EXPECT_NEAR(got[i], std::exp(xv[i] * wv[i % 3]) + xv[i], 1e-5 * (1 + std::abs(got[i])));
}

// ---- random programs: seeded chains of broadcasting elementwise ops, keepdim
// reductions, softmax, views and in-place updates; interpreter == eager, before
// and after the default pipeline.

namespace {

struct Live {
  Tensor t;
  bool in_place_ok; // not a view: an in-place op on it is well defined in eager
};

TracedFunction random_program(uint64_t seed, std::vector<int64_t> base) {
  return [seed, base](const std::vector<Tensor> &in) {
    std::mt19937_64 gen(seed);
    auto pick = [&](size_t n) { return size_t(gen() % n); };
    std::vector<Live> live;
    for (const Tensor &t : in) live.push_back({t, true});
    for (int step = 0; step < 12; ++step) {
      const Tensor &a = live[pick(live.size())].t;
      const Tensor &b = live[pick(live.size())].t;
      int64_t dim = int64_t(pick(base.size()));
      Tensor r;
      bool view = false;
      switch (pick(10)) {
      case 0: r = a.tanh() + b.sigmoid(); break;
      case 1: r = a * b - a.abs(); break;
      case 2: r = maximum(a, b).relu() * 0.5 + 1; break;
      case 3: r = a.sum({dim}, true) / 3.0; break;
      case 4: r = a.amax({dim}, true) - a.mean({dim}, true); break;
      case 5: r = (a - b).softmax(dim); break;
      case 6: r = a.expand(base); view = true; break;
      case 7: r = a.transpose(0, int64_t(base.size()) - 1).transpose(0, int64_t(base.size()) - 1); view = true; break;
      case 8: {
        Live &target = live[pick(live.size())];
        if (!target.in_place_ok) continue;
        target.t.mul_(0.75).add_(0.25);
        continue;
      }
      default: r = a.sin() * b.cos() + a.square(); break;
      }
      live.push_back({r, !view});
    }
    return std::vector<Tensor>{live.back().t, live[live.size() - 2].t};
  };
}

} // namespace

TEST(RandomPrograms, InterpreterAndPipelineMatchEager) {
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937_64 gen(seed * 7919);
    std::vector<int64_t> base;
    for (size_t d = 0, n = 1 + gen() % 3; d < n; ++d) base.push_back(int64_t(1 + gen() % 5));
    std::vector<Tensor> in;
    for (int i = 0; i < 3; ++i) {
      std::vector<int64_t> s = base;
      for (int64_t &x : s)
        if (gen() % 3 == 0) x = 1; // broadcast along this dim
      in.push_back(rnd(s, seed * 10 + i));
    }
    TracedFunction fn = random_program(seed, base);
    auto g = trace(fn, in);
    std::vector<Tensor> eager_in = copies(in), graph_in = copies(in), opt_in = copies(in);
    std::vector<Tensor> want = fn(eager_in);
    EXPECT_TRUE(all_close(ir::interpret(*g, graph_in), want, 1e-5));
    EXPECT_TRUE(all_close(graph_in, eager_in, 1e-5));
    passes::run_pipeline(*g, passes::default_pipeline());
    EXPECT_TRUE(all_close(ir::interpret(*g, opt_in), want, 1e-4));
    EXPECT_TRUE(all_close(opt_in, eager_in, 1e-5));
  }
}

TEST(Trace, ThreadsTraceIndependently) {
  std::vector<std::unique_ptr<ir::Graph>> graphs(4);
  std::vector<std::thread> threads;
  TracedFunction fn = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{(in[0] * 2).softmax(0)}; };
  for (size_t i = 0; i < graphs.size(); ++i)
    threads.emplace_back([&, i] { graphs[i] = trace(fn, {rnd({int64_t(i) + 2}, i)}); });
  for (std::thread &t : threads) t.join();
  for (size_t i = 0; i < graphs.size(); ++i) {
    ASSERT_TRUE(graphs[i]);
    EXPECT_EQ(graphs[i]->num_nodes(), 2u);
    Tensor x = rnd({int64_t(i) + 2}, 99);
    EXPECT_TRUE(all_close(ir::interpret(*graphs[i], {x}), fn({x})));
  }
}
