// What the nn / linalg ops record while tracing: the op id, the inputs (absent
// optionals as undefined tensors) and the attributes in ops.def order; and that
// the uniform adapter, replayed on exactly that record, gives the eager result.
// A stand-in tracer is installed through the public TraceHooks.
#include "runtime/random_stream.h"
#include "runtime/trace_hook.h"
#include "unit/nn_test_util.h"

using namespace kiln;
using namespace nntest;

namespace {
struct Recorded {
  OpId id;
  std::vector<Tensor> inputs;
  Attrs attrs;
};
std::vector<Recorded> g_rec;

// Records the op and returns its meta results (the op's own shape rule).
std::vector<Tensor> record(OpId id, const std::vector<Tensor> &in, const Attrs &attrs) {
  g_rec.push_back({id, in, attrs});
  detail::TracingOff off;
  std::vector<Tensor> metas;
  for (const Tensor &t : in) metas.push_back(t.defined() ? meta(t.sizes().vec(), t.dtype()) : Tensor());
  return run_op(id, metas, attrs);
}

// Tracing on for the scope of one call; the record is cleared first.
class Tracing {
public:
  Tracing() {
    g_rec.clear();
    detail::TraceHooks h;
    h.record = record;
    detail::set_trace_hooks(h);
    detail::t_tracing = true;
  }
  ~Tracing() {
    detail::t_tracing = false;
    detail::set_trace_hooks({});
  }
};

// Traces `f`, checks the single record against (id, attrs) and the meta result's
// shape against the eager one, then replays the record through the adapter.
template <class F> void check_trace(F f, OpId id, const Attrs &attrs) {
  Tensor eager = f();
  Tensor traced;
  {
    Tracing on;
    traced = f();
  }
  ASSERT_EQ(g_rec.size(), 1u);
  const Recorded r = g_rec[0];
  EXPECT_EQ(r.id, id) << op_info(r.id).mnemonic;
  EXPECT_EQ(r.attrs, attrs) << op_info(id).mnemonic;
  EXPECT_TRUE(traced.is_meta());
  EXPECT_EQ(traced.sizes().vec(), eager.sizes().vec());
  EXPECT_EQ(traced.dtype(), eager.dtype());
  expect_same(run_op(r.id, r.inputs, r.attrs).at(0), eager);
}
} // namespace

TEST(NnTrace, Contractions) {
  Tensor a = rnd({3, 4}, kFloat32, 1), b = rnd({4, 5}, kFloat32, 2), in = rnd({5}, kFloat32, 3);
  Tensor ba = rnd({2, 3, 4}, kFloat32, 4), bb = rnd({2, 4, 5}, kFloat32, 5);
  check_trace([&] { return mm(a, b); }, OpId::Mm, {});
  check_trace([&] { return bmm(ba, bb); }, OpId::Bmm, {});
  check_trace([&] { return matmul(ba, b); }, OpId::Matmul, {});
  check_trace([&] { return addmm(in, a, b, 0.5, 2); }, OpId::Addmm, {Scalar(0.5), Scalar(2)});
  Tensor w = rnd({6, 4}, kFloat32, 6), bias = rnd({6}, kFloat32, 7);
  check_trace([&] { return linear(ba, w, bias); }, OpId::Linear, {});
  check_trace([&] { return linear(ba, w); }, OpId::Linear, {});
  EXPECT_FALSE(g_rec[0].inputs[2].defined()); // absent bias recorded as an undefined tensor
  Tensor cx = rnd({2, 4, 6, 6}, kFloat32, 8), cw = rnd({6, 2, 3, 3}, kFloat32, 9);
  check_trace([&] { return conv2d(cx, cw, {}, 2, 1, 1, 2); }, OpId::Conv2d,
              {Shape{2, 2}, Shape{1, 1}, Shape{1, 1}, 2});
}

TEST(NnTrace, NormalizationAndAttention) {
  Tensor x = rnd({3, 4, 5}, kFloat32, 1);
  check_trace([&] { return softmax(x, -1); }, OpId::Softmax, {2}); // dim recorded wrapped
  check_trace([&] { return log_softmax(x, 0); }, OpId::LogSoftmax, {0});
  Tensor w = rnd({5}, kFloat32, 2);
  check_trace([&] { return layer_norm(x, {5}, w, {}, 1e-3); }, OpId::LayerNorm, {Shape{5}, 1e-3});
  Tensor p = rnd({4}, kFloat32, 3), rv = from_values({4}, {1, 2, 3, 4}, kFloat32);
  check_trace([&] { return batch_norm(x, p, p, p, rv, false, 0.2, 1e-4); }, OpId::BatchNorm, {false, 0.2, 1e-4});
  check_trace([&] { return dropout(x, 0.25, false); }, OpId::Dropout, {0.25, false});
  Tensor q = rnd({2, 4, 6}, kFloat32, 4), k = rnd({2, 5, 6}, kFloat32, 5), v = rnd({2, 5, 3}, kFloat32, 6);
  check_trace([&] { return scaled_dot_product_attention(q, k, v, {}, 0.0, true); }, OpId::Sdpa,
              {0.0, true, AttrValue()});
  check_trace([&] { return scaled_dot_product_attention(q, k, v, rnd({4, 5}), 0.0, false, 0.5); }, OpId::Sdpa,
              {0.0, false, 0.5});
}

// Training-mode dropout records its mask (offset: the draws traced before it)
// and the scaled product; the trace's draws are counted, none reserved.
TEST(NnTrace, TrainingDropoutRecordsItsMask) {
  Tensor x = rnd({3, 4}, kFloat32, 1), y = rnd({5}, kFloat32, 2);
  detail::take_traced_random_draws();
  {
    Tracing on;
    dropout(x, 0.25, true);
    dropout(y, 0.5, true);
  }
  std::vector<Recorded> masks;
  for (const Recorded &r : g_rec)
    if (r.id == OpId::DropoutMask) masks.push_back(r);
  ASSERT_EQ(masks.size(), 2u);
  EXPECT_EQ(masks[0].attrs, (Attrs{0.25, int64_t(0)}));
  EXPECT_EQ(masks[1].attrs, (Attrs{0.5, int64_t(12)}));
  EXPECT_EQ(detail::take_traced_random_draws(), 17);
  EXPECT_GT(g_rec.size(), 2u); // the product and its scale too
}

// Validation happens before recording: tracing reports the same errors as eager.
TEST(NnTrace, ErrorsBeforeRecording) {
  const Tensor ints = full({2}, 1, kInt64);
  Tracing on;
  EXPECT_KILN_ERROR(mm(rnd({2, 3}), rnd({4, 5})), "mm: mat1 and mat2 shapes cannot be multiplied (2x3 and 4x5)");
  EXPECT_KILN_ERROR(dropout(ints, 0.5, true), "dropout: expected a floating input in training mode");
  EXPECT_TRUE(g_rec.empty());
}

// softmax(x, dim, dtype) records the conversion as its own Cast node, then Softmax on it.
TEST(NnTrace, SoftmaxWithDtypeRecordsCastFirst) {
  Tensor x = rnd({2, 3}, kFloat32, 1);
  {
    Tracing on;
    Tensor y = softmax(x, -1, kFloat64);
    EXPECT_TRUE(y.is_meta());
    EXPECT_EQ(y.dtype(), kFloat64);
  }
  ASSERT_EQ(g_rec.size(), 2u);
  EXPECT_EQ(g_rec[0].id, OpId::Cast);
  EXPECT_EQ(g_rec[0].attrs, (Attrs{kFloat64}));
  EXPECT_EQ(g_rec[1].id, OpId::Softmax);
  EXPECT_EQ(g_rec[1].attrs, (Attrs{1}));
  EXPECT_EQ(g_rec[1].inputs.at(0).dtype(), kFloat64);
}
