// What elementwise ops hand the tracer: with a fake tracer installed, each op
// records (id, inputs, attributes in ops.def order) instead of computing, and the
// uniform adapter run on exactly that record gives the eager result.
#include <gtest/gtest.h>

#include "elementwise_test_util.h"
#include "runtime/kernels/elementwise.h"
#include "runtime/trace_hook.h"

using namespace kiln;
using namespace ewt;

namespace {

struct Record {
  OpId id;
  std::vector<Tensor> inputs;
  Attrs attrs;
  bool inplace;
};
std::vector<Record> g_log;

std::vector<Tensor> fake_record(OpId id, const std::vector<Tensor> &in, const Attrs &a) {
  g_log.push_back({id, in, a, false});
  return {detail::make_tensor({}, kFloat32, /*meta=*/true)}; // a stand-in result
}
void fake_record_inplace(Tensor &, OpId id, const std::vector<Tensor> &in, const Attrs &a) {
  g_log.push_back({id, in, a, true});
}

// Runs f with the fake tracer on and returns the one record it made.
template <class F> Record trace_one(F &&f) {
  g_log.clear();
  detail::TraceHooks hooks;
  hooks.record = fake_record;
  hooks.record_inplace = fake_record_inplace;
  detail::set_trace_hooks(hooks);
  detail::t_tracing = true;
  try {
    f();
  } catch (...) {
    detail::t_tracing = false;
    throw;
  }
  detail::t_tracing = false;
  detail::set_trace_hooks({});
  EXPECT_EQ(g_log.size(), 1u);
  return g_log.empty() ? Record{OpId::Neg, {}, {}, false} : g_log.back();
}

double spread_gen(int64_t i) { return (i % 7) * 0.55 - 1.7; }
double pos(int64_t i) { return 0.2 + (i % 5) * 0.4; }

void expect_same(const Tensor &x, const Tensor &y, const std::string &what) {
  EXPECT_EQ(x.dtype(), y.dtype()) << what;
  EXPECT_EQ(x.sizes().vec(), y.sizes().vec()) << what;
  expect_values(x, values(y), 0, 0, what);
}

} // namespace

TEST(ElementwiseTrace, RecordsReplayThroughAdapters) {
  Tensor x = make({2, 3}, kFloat32, spread_gen), y = make({3}, kFloat32, pos);
  Tensor i = make({2, 3}, kInt64, [](int64_t k) { return double(k % 4) + 1; });
  Tensor m = make({2, 1}, kBool, [](int64_t k) { return double(k % 2); });
  Tensor xt = x.t(); // made before tracing starts: views record too
  const std::vector<std::pair<const char *, std::function<Tensor()>>> ops = {
      {"neg", [&] { return neg(x); }},
      {"exp", [&] { return exp(i); }},
      {"gelu", [&] { return gelu(x, "tanh"); }},
      {"silu", [&] { return silu(x); }},
      {"to", [&] { return to(x, kFloat64); }},
      {"add", [&] { return add(x, y, 2); }},
      {"add scalar", [&] { return add(x, 1.5); }},
      {"sub", [&] { return sub(i, 3, 2); }},
      {"mul", [&] { return mul(x, y); }},
      {"div", [&] { return div(x, y); }},
      {"div floor", [&] { return div(i, 2, "floor"); }},
      {"pow", [&] { return pow(x, 2); }},
      {"pow scalar base", [&] { return pow(2.0, x); }},
      {"remainder", [&] { return remainder(i, 3); }},
      {"maximum", [&] { return maximum(x, y); }},
      {"lt", [&] { return lt(x, 0.5); }},
      {"logical_or", [&] { return logical_or(m, x); }},
      {"where", [&] { return where(m, x, 0.0); }},
      {"clamp", [&] { return clamp(x, -1, std::nullopt); }},
      {"clamp both", [&] { return clamp(i, 2, 3); }},
      {"masked_fill", [&] { return masked_fill(x, m, -9); }},
      {"lerp", [&] { return lerp(x, y, 0.25); }},
      {"clone", [&] { return clone(x); }},
      {"contiguous", [&] { return contiguous(xt); }},
      {"copy", [&] { return copy(x, y); }},
  };
  for (const auto &[what, fn] : ops) {
    Record r = trace_one([&] { fn(); });
    EXPECT_FALSE(r.inplace) << what;
    expect_same(run_op(r.id, r.inputs, r.attrs).at(0), fn(), what);
  }
}

TEST(ElementwiseTrace, InPlaceOpsRecordFunctionalFormWithoutWriting) {
  Tensor y = make({3}, kFloat32, pos);
  Tensor x = make({2, 3}, kFloat32, spread_gen);
  const std::vector<double> before = values(x);
  struct Case {
    const char *what;
    std::function<void()> op;
    OpId id;
    std::function<Tensor()> expected;
  };
  const std::vector<Case> cases = {
      {"add_", [&] { x.add_(y, 3); }, OpId::Add, [&] { return add(x, y, 3); }},
      {"sub_", [&] { x.sub_(2); }, OpId::Sub, [&] { return sub(x, 2); }},
      {"mul_", [&] { x.mul_(y); }, OpId::Mul, [&] { return mul(x, y); }},
      {"div_", [&] { x.div_(4); }, OpId::Div, [&] { return div(x, 4); }},
      {"clamp_", [&] { x.clamp_(0, 1); }, OpId::Clamp, [&] { return clamp(x, 0, 1); }},
      {"relu_", [&] { x.relu_(); }, OpId::Relu, [&] { return relu(x); }},
      {"copy_", [&] { x.copy_(y); }, OpId::Copy, [&] { return copy(x, y); }},
  };
  for (const Case &c : cases) {
    Record r = trace_one(c.op);
    EXPECT_TRUE(r.inplace) << c.what;
    EXPECT_EQ(r.id, c.id) << c.what;
    ASSERT_FALSE(r.inputs.empty()) << c.what;
    EXPECT_TRUE(r.inputs[0].is_same(x)) << c.what; // self first
    expect_values(x, before, 0, 0, c.what);          // nothing written while tracing
    expect_same(run_op(r.id, r.inputs, r.attrs).at(0), c.expected(), c.what);
  }
  for (bool zero : {false, true}) {
    Record r = trace_one([&] { zero ? (void)x.zero_() : (void)x.fill_(2.5); });
    EXPECT_EQ(r.id, OpId::Full);
    EXPECT_TRUE(r.inputs.empty());
    ASSERT_EQ(r.attrs.size(), 3u);
    EXPECT_EQ(r.attrs[0].as_ints(), (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(r.attrs[1].as_float(), zero ? 0.0 : 2.5);
    EXPECT_EQ(r.attrs[2].as_dtype(), kFloat32);
    expect_values(x, before);
  }
}

TEST(ElementwiseTrace, ValidationRunsBeforeRecording) {
  Tensor x = make({2, 3}, kFloat32, spread_gen);
  detail::TraceHooks hooks;
  hooks.record = fake_record;
  hooks.record_inplace = fake_record_inplace;
  detail::set_trace_hooks(hooks);
  g_log.clear();
  detail::t_tracing = true;
  EXPECT_THROW(add(x, make({4}, kFloat32, pos)), Error);
  EXPECT_THROW(x.add_(make({4, 2, 3}, kFloat32, pos)), Error);
  EXPECT_THROW(where(x, x, x), Error);
  detail::t_tracing = false;
  detail::set_trace_hooks({});
  EXPECT_TRUE(g_log.empty());
}
