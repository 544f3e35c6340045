// Depthwise conv2d (one input channel per group, channel multiplier O / C >= 1;
// runtime/kernels/conv.cpp's direct kernel) against a naive double loop that
// skips out-of-range taps, for NCHW and channels-last inputs and outputs, the
// per-block callback conv2d_into gives the compiled epilogue, NaN / inf inputs
// and weights, 1 and 2 threads; and compiled (fused epilogues, channels-last
// chains) against eager, bit for bit.
#include <cmath>
#include <limits>
#include <mutex>

#include "graph_test_util.h"
#include "unit/nn_test_util.h"

#include "codegen/epilogue.h"
#include "ir/graph.h"
#include "runtime/kernels/linalg_internal.h"

using namespace kiln;
using nntest::Shape;
using nntest::Want;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

struct DwCase {
  Shape x;        // [N, C, H, W]
  int64_t mult;   // output channels per input channel
  Shape k;        // kH, kW
  Shape st, pd, dl;
  bool bias;
};

// Odd sizes, stride 2, dilation 2, padding 0/1/2, channel multiplier 2, N = 1,
// tiny images, rows narrower and wider than a vector, non-square kernels and a
// padding so large that the padded rows would dwarf the output.
const std::vector<DwCase> kCases = {
    {{2, 4, 9, 11}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
    {{1, 3, 7, 5}, 2, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
    {{2, 5, 13, 17}, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2}, false},
    {{3, 2, 6, 6}, 2, {3, 3}, {2, 2}, {0, 0}, {1, 1}, false},
    {{1, 1, 1, 1}, 1, {1, 1}, {1, 1}, {0, 0}, {1, 1}, true},
    {{2, 3, 2, 3}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
    {{1, 6, 20, 37}, 1, {5, 5}, {1, 1}, {2, 2}, {1, 1}, true},
    {{2, 4, 31, 33}, 1, {3, 2}, {2, 1}, {1, 0}, {1, 2}, true},
    {{1, 8, 16, 16}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, false},
    {{1, 20, 12, 12}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true}, // 20 channels: a channel tail
    {{1, 3, 8, 8}, 3, {3, 3}, {1, 1}, {2, 2}, {1, 1}, true},   // multiplier 3, 9 outputs
    {{2, 2, 3, 40}, 1, {3, 3}, {1, 5000}, {1, 40000}, {1, 1}, true},
    {{1, 1, 10, 10}, 4, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true}, // C = groups = 1
    // Column stride 2 (paired loads + permute) at 16-, 8- and 4-wide chunks, stride 3
    // (element loads) at 8 and 16, and a 5x5 (runtime tap loops) at stride 2.
    {{2, 3, 9, 37}, 1, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
    {{1, 2, 6, 20}, 2, {3, 3}, {1, 2}, {1, 1}, {1, 1}, false},
    {{1, 2, 5, 12}, 1, {3, 3}, {1, 2}, {0, 0}, {1, 1}, true},
    {{1, 4, 11, 40}, 1, {3, 3}, {1, 3}, {2, 2}, {2, 2}, true},
    {{1, 4, 11, 70}, 1, {3, 3}, {1, 3}, {2, 2}, {2, 2}, false},
    {{1, 2, 8, 40}, 1, {5, 5}, {2, 2}, {2, 2}, {1, 1}, true},
};

// The plain loop: bias, then the in-range taps in (kh, kw) order, in double.
Want ref_depthwise(const Tensor &x, const Tensor &w, const Tensor &b, const DwCase &c) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), M = O / C;
  const int64_t kH = w.size(2), kW = w.size(3);
  const int64_t Ho = (H + 2 * c.pd[0] - c.dl[0] * (kH - 1) - 1) / c.st[0] + 1;
  const int64_t Wo = (W + 2 * c.pd[1] - c.dl[1] * (kW - 1) - 1) / c.st[1] + 1;
  Want r{{N, O, Ho, Wo}, {}};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double s = b.defined() ? nntest::at(b, {o}) : 0;
          for (int64_t kh = 0; kh < kH; ++kh)
            for (int64_t kw = 0; kw < kW; ++kw) {
              const int64_t ih = oh * c.st[0] - c.pd[0] + kh * c.dl[0], iw = ow * c.st[1] - c.pd[1] + kw * c.dl[1];
              if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
              s += nntest::at(x, {n, o / M, ih, iw}) * nntest::at(w, {o, 0, kh, kw});
            }
          r.v.push_back(s);
        }
  return r;
}

struct Inputs {
  Tensor x, w, b;
};

Inputs make_inputs(const DwCase &c, DType dt, uint32_t seed) {
  Inputs in;
  in.x = nntest::rnd(c.x, dt, seed);
  in.w = nntest::rnd({c.x[1] * c.mult, 1, c.k[0], c.k[1]}, dt, seed + 1);
  if (c.bias) in.b = nntest::rnd({c.x[1] * c.mult}, dt, seed + 2);
  return in;
}

Tensor run(const DwCase &c, const Inputs &in) {
  return conv2d(in.x, in.w, in.b, c.st, c.pd, c.dl, c.x[1]);
}

double tol(DType dt) { return dt == kFloat32 ? 2e-5 : 1e-11; }

// Writes v at the multi-index `idx` of a contiguous tensor.
void put(const Tensor &t, const Shape &idx, double v) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.strides()[d];
  dispatch_dtype(t.dtype(), [&]<class T>() {
    if constexpr (std::is_floating_point_v<T>) static_cast<T *>(t.raw_data())[off] = T(v);
  });
}

class DepthwiseF : public ::testing::TestWithParam<DType> {};
INSTANTIATE_TEST_SUITE_P(Floats, DepthwiseF, ::testing::Values(kFloat32, kFloat64),
                         [](const auto &info) { return std::string(name(info.param)); });

// Restores the thread count a test changed.
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

} // namespace

// ---------------------------------------------------------------- eager

TEST_P(DepthwiseF, MatchesNaiveLoopNchwAndChannelsLast) {
  const DType dt = GetParam();
  ThreadsGuard guard;
  uint32_t seed = 1;
  for (const DwCase &c : kCases) {
    const Inputs in = make_inputs(c, dt, seed += 3);
    const Want want = ref_depthwise(in.x, in.w, in.b, c);
    Inputs cl = in;
    cl.x = in.x.contiguous(MemoryFormat::ChannelsLast);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      SCOPED_TRACE(shape_str(c.x) + " x" + std::to_string(c.mult) + " threads " + std::to_string(threads));
      nntest::expect_close(run(c, in), want, tol(dt), tol(dt));
      Tensor y = run(c, cl);
      if (c.x[1] > 1 && c.x[2] * c.x[3] > 1) {
        EXPECT_TRUE(y.is_contiguous(MemoryFormat::ChannelsLast));
      }
      nntest::expect_close(y, want, tol(dt), tol(dt));
      // A strided (neither contiguous nor channels-last) input is packed first.
      Inputs tr = in;
      tr.x = in.x.transpose(2, 3).contiguous().transpose(2, 3);
      nntest::expect_close(run(c, tr), want, tol(dt), tol(dt));
    }
  }
}

// conv2d_into in every input/output layout pairing and several block heights:
// right values, and the callback sees every output pixel of every image once.
TEST_P(DepthwiseF, IntoEveryLayoutWithBlockCallback) {
  const DType dt = GetParam();
  ThreadsGuard guard;
  struct Seen {
    std::mutex m;
    std::vector<int64_t> count;
    int64_t hw = 0;
  };
  uint32_t seed = 100;
  for (const DwCase &c : kCases) {
    const Inputs in = make_inputs(c, dt, seed += 3);
    const Want want = ref_depthwise(in.x, in.w, in.b, c);
    const int64_t N = want.shape[0], hw = want.shape[2] * want.shape[3];
    for (bool in_cl : {false, true})
      for (bool out_cl : {false, true})
        for (int64_t rows : {int64_t(1), int64_t(2), int64_t(5), int64_t(1000)})
          for (int threads : {1, 2}) {
            set_num_threads(threads);
            SCOPED_TRACE(shape_str(c.x) + " in_cl " + std::to_string(in_cl) + " out_cl " + std::to_string(out_cl) +
                         " rows " + std::to_string(rows) + " threads " + std::to_string(threads));
            Tensor x = in_cl ? in.x.contiguous(MemoryFormat::ChannelsLast) : in.x;
            Tensor out = empty(want.shape, dt);
            if (out_cl && want.shape[1] > 1 && hw > 1) {
              out = out.contiguous(MemoryFormat::ChannelsLast);
            }
            Seen seen;
            seen.count.assign(size_t(N * hw), 0);
            seen.hw = hw;
            auto after = [](void *p, int64_t n, int64_t p0, int64_t np) {
              auto *s = static_cast<Seen *>(p);
              std::lock_guard<std::mutex> lock(s->m);
              for (int64_t i = p0; i < p0 + np; ++i) ++s->count[size_t(n * s->hw + i)];
            };
            detail::nn::conv2d_into(x, in.w, in.b, c.st, c.pd, c.dl, c.x[1], out, rows, after, &seen);
            nntest::expect_close(out, want, tol(dt), tol(dt));
            for (int64_t k : seen.count) ASSERT_EQ(k, 1);
          }
  }
}

// NaN and inf in the input and in the weights propagate as in the plain loop:
// padding is skipped, never multiplied, so an inf corner tap gives inf (not
// NaN) at the border; inf - inf gives NaN; a NaN input poisons exactly the
// outputs whose window holds it.
TEST_P(DepthwiseF, NanAndInfAsThePlainLoop) {
  const DType dt = GetParam();
  ThreadsGuard guard;
  const std::vector<DwCase> cases = {
      {{2, 6, 9, 21}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
      {{1, 4, 11, 19}, 2, {3, 3}, {2, 2}, {2, 2}, {2, 2}, false},
      {{1, 3, 5, 5}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
  };
  uint32_t seed = 200;
  for (const DwCase &c : cases) {
    Inputs in = make_inputs(c, dt, seed += 3);
    put(in.x, {0, 0, 0, 0}, kInf);
    put(in.x, {0, 0, 0, 1}, -kInf); // next to +inf: NaN where a window holds both
    put(in.x, {0, 1, 4, 3}, kNaN);
    put(in.x, {c.x[0] - 1, 2, c.x[2] - 1, c.x[3] - 1}, -kInf);
    put(in.w, {0, 0, 0, 0}, kInf); // channel 0's corner tap: meets the padding at the top left
    put(in.w, {2, 0, 2, 2}, kNaN); // the opposite corner of another channel
    put(in.w, {3, 0, 1, 1}, -kInf);
    const Want want = ref_depthwise(in.x, in.w, in.b, c);
    int nonfinite = 0;
    for (double v : want.v) nonfinite += !std::isfinite(v);
    ASSERT_GT(nonfinite, 0);
    Inputs cl = in;
    cl.x = in.x.contiguous(MemoryFormat::ChannelsLast);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      SCOPED_TRACE(shape_str(c.x) + " threads " + std::to_string(threads));
      nntest::expect_close(run(c, in), want, tol(dt), tol(dt));
      nntest::expect_close(run(c, cl), want, tol(dt), tol(dt));
    }
  }
}

// ---------------------------------------------------------------- compiled

namespace {
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

// Bitwise equal, NaN equal to NaN.
::testing::AssertionResult same(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " results";
  for (size_t r = 0; r < got.size(); ++r) {
    if (got[r].sizes() != want[r].sizes()) return ::testing::AssertionFailure() << "result " << r << " shape";
    const std::vector<double> a = kiln::testing::vals(got[r]), b = kiln::testing::vals(want[r]);
    for (size_t i = 0; i < a.size(); ++i)
      if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))))
        return ::testing::AssertionFailure() << "result " << r << " element " << i << ": " << a[i] << " vs " << b[i];
  }
  return ::testing::AssertionSuccess();
}

// Whether the graph has an epilogue group holding a conv and `op`.
bool conv_epilogue_has(const ir::Graph &g, OpId op) {
  for (const ir::Node *n : g.nodes()) {
    if (n->kind() != ir::Node::Kind::FusionGroup || !codegen::is_epilogue_group(*n)) continue;
    bool conv = false, other = false;
    for (const ir::Node *b : n->body()->nodes()) {
      conv |= b->op() == OpId::Conv2d;
      other |= b->op() == op;
    }
    if (conv && other) return true;
  }
  return false;
}

void expect_compiled_same_as_eager(const Fn &fn, const std::vector<Tensor> &in, const std::string &pipeline = "") {
  CompileOptions o;
  o.fallback = Fallback::Off;
  o.pipeline = pipeline;
  CompiledFunction f = compile(fn, o);
  const std::vector<Tensor> want = fn(kiln::testing::copies(in));
  std::shared_ptr<const ir::Graph> g = f.graph_for(in);
  ASSERT_TRUE(g);
  EXPECT_TRUE(conv_epilogue_has(*g, OpId::Relu)) << ir::print(*g);
  for (int call = 0; call < 2; ++call) EXPECT_TRUE(same(f(kiln::testing::copies(in)), want)) << "call " << call;
}
} // namespace

TEST(DepthwiseCompiled, FusedBiasReluEqualsEager) {
  ThreadsGuard guard;
  const std::vector<DwCase> cases = {
      {{8, 128, 28, 28}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true}, // the bench shape
      {{1, 6, 13, 9}, 2, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {{2, 5, 17, 23}, 1, {3, 3}, {1, 1}, {2, 2}, {2, 2}, false},
      {{3, 4, 3, 2}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true},
  };
  uint32_t seed = 300;
  for (const DwCase &c : cases) {
    const Inputs in = make_inputs(c, kFloat32, seed += 3);
    const int64_t C = c.x[1], O = C * c.mult;
    Tensor w = in.w, b = nntest::rnd({O}, kFloat32, seed + 7);
    // Bias inside the conv, and a per-channel bias added after it: both fuse with the relu.
    Fn inner = [=](const std::vector<Tensor> &x) {
      return std::vector<Tensor>{relu(conv2d(x[0], w, b, c.st, c.pd, c.dl, C))};
    };
    Fn outer = [=](const std::vector<Tensor> &x) {
      return std::vector<Tensor>{relu(conv2d(x[0], w, {}, c.st, c.pd, c.dl, C) + b.view({1, O, 1, 1}))};
    };
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      SCOPED_TRACE(shape_str(c.x) + " threads " + std::to_string(threads));
      expect_compiled_same_as_eager(inner, {in.x});
      expect_compiled_same_as_eager(outer, {in.x});
      // A channels-last input: compiled against eager's channels-last conv.
      expect_compiled_same_as_eager(inner, {in.x.contiguous(MemoryFormat::ChannelsLast)});
    }
  }
}

TEST(DepthwiseCompiled, NanAndInfEqualEager) {
  ThreadsGuard guard;
  const DwCase c{{2, 4, 10, 18}, 1, {3, 3}, {1, 1}, {1, 1}, {1, 1}, true};
  Inputs in = make_inputs(c, kFloat32, 400);
  put(in.x, {0, 0, 0, 0}, kInf);
  put(in.x, {0, 0, 0, 1}, -kInf);
  put(in.x, {1, 3, 5, 5}, kNaN);
  put(in.w, {1, 0, 0, 0}, kInf);
  Tensor w = in.w, b = in.b;
  Fn fn = [=](const std::vector<Tensor> &x) {
    return std::vector<Tensor>{relu(conv2d(x[0], w, b, 1, 1, 1, 4)) * 2.0};
  };
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_compiled_same_as_eager(fn, {in.x});
  }
}

// A chain of depthwise convs forced channels-last (the layout-channels-last
// pass): the first converts its NCHW input and writes NHWC, the middle one reads
// and writes NHWC, the last reads NHWC and writes the NCHW result, each with its
// epilogue; bit for bit equal to eager (NCHW throughout).
TEST(DepthwiseCompiled, ChannelsLastChainEqualsEager) {
  ThreadsGuard guard;
  const char *pipeline =
      "decompose,canonicalize,cse,dce,layout-channels-last,fuse,fuse-horizontal,materialize-views,plan-memory";
  Tensor w1 = kiln::testing::rnd({16, 1, 3, 3}, 500, kFloat32, -0.5, 0.5), b1 = kiln::testing::rnd({16}, 501);
  Tensor w2 = kiln::testing::rnd({16, 1, 3, 3}, 502, kFloat32, -0.5, 0.5), b2 = kiln::testing::rnd({16}, 503);
  Tensor w3 = kiln::testing::rnd({32, 1, 3, 3}, 504, kFloat32, -0.5, 0.5);
  Fn fn = [=](const std::vector<Tensor> &x) {
    Tensor h = relu(conv2d(x[0], w1, b1, 1, 1, 1, 16));
    h = relu(conv2d(h, w2, b2, 2, 1, 1, 16)) + 0.5;
    return std::vector<Tensor>{relu(conv2d(h, w3, {}, 1, 2, 2, 16))}; // multiplier 2
  };
  const std::vector<Tensor> in = {kiln::testing::rnd({2, 16, 15, 19}, 506)};
  CompileOptions o;
  o.fallback = Fallback::Off;
  o.pipeline = pipeline;
  CompiledFunction f = compile(fn, o);
  std::shared_ptr<const ir::Graph> g = f.graph_for(in);
  ASSERT_TRUE(g);
  int convs = 0, channels_last = 0;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() != ir::Node::Kind::FusionGroup) continue;
    for (const ir::Node *b : n->body()->nodes()) {
      if (b->op() != OpId::Conv2d) continue;
      ++convs;
      channels_last += b->result()->type().strides.has_value();
    }
  }
  EXPECT_EQ(convs, 3) << ir::print(*g);
  EXPECT_EQ(channels_last, 2) << ir::print(*g); // all but the chain's last
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    expect_compiled_same_as_eager(fn, in, pipeline);
  }
}
