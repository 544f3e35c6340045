// Conv epilogues in the micro-kernels' registers (issue 15, point 3, for
// kiln's implicit-GEMM conv, codegen/gemm/conv.h): a compiled conv2d group's
// fused epilogue (bias, inference batch norm, relu, residual add, scaling,
// several results) runs on the accumulators of each group's last k block
// instead of a second pass of JIT tile kernels over the item's output block.
//
// Each case is compiled twice on kiln's conv: with register epilogues (the
// default) and with the tile pass (set_register_epilogues(false), what
// KILN_GEMM_EPILOGUE=tile selects). Both run the same micro-kernels, blocking
// and summation order, and the epilogue is the same lowered expression, so the
// results must be equal bit for bit (NaN where NaN). Both are also checked
// against eager (im2col + OpenBLAS, another summation order) with a tolerance
// growing with the conv's K = C/groups * kH * kW: |got - want| <=
// 8 (K + 2) eps (1 + max |want|), NaN and inf exactly where eager has them.
// The register path must really be taken: gemm::conv_register_epilogue_calls
// counts the conv calls that ran one, register_epilogues_built the steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <kiln/kiln.h>

#include "test_support.h"
#include "codegen/epilogue.h"
#include "codegen/gemm/conv.h"
#include "codegen/gemm/path.h"
#include "frontend/compile.h"
#include "runtime/log.h"

#include "epilogue_test_support.h"
#include "graph_test_util.h"

using namespace kiln;
using kiln::testing::capture_stderr;
using kiln::testing::PathGuard;
using kiln::testing::ThreadsGuard;
using kiln::testing::rnd;
using kiln::testing::vals;
using kiln::testing::bits_equal;
using kiln::testing::close_to_eager;
using kiln::testing::RegisterGuard;

namespace {

using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor> &)>;

CompiledFunction compile_strict(const Fn &fn) {
  CompileOptions o;
  o.fallback = Fallback::Off;
  return compile(fn, o);
}

struct Taken {
  int64_t steps = 0, calls = 0; // register-epilogue steps built, conv calls that ran one
};

// Compiles `fn` on kiln's conv with the tile pass and with register
// epilogues; checks both against each other and eager; returns what the
// register compilation took.
Taken check_case(const Fn &fn, const std::vector<Tensor> &in, int64_t K) {
  PathGuard pg(gemm::Path::Jit);
  const std::vector<Tensor> want = fn(kiln::testing::copies(in));
  std::vector<Tensor> tile, reg;
  {
    RegisterGuard rg(false);
    const int64_t steps = codegen::register_epilogues_built(), calls = gemm::conv_register_epilogue_calls();
    const int64_t convs = gemm::conv_calls();
    tile = compile_strict(fn)(kiln::testing::copies(in));
    EXPECT_EQ(codegen::register_epilogues_built(), steps) << "the tile path took register epilogues";
    EXPECT_EQ(gemm::conv_register_epilogue_calls(), calls) << "the tile path ran a register epilogue";
    EXPECT_GE(gemm::conv_calls() - convs, 1) << "kiln's conv did not run";
  }
  Taken t;
  const int64_t steps = codegen::register_epilogues_built(), calls = gemm::conv_register_epilogue_calls();
  {
    RegisterGuard rg(true);
    CompiledFunction f = compile_strict(fn);
    reg = f(kiln::testing::copies(in));
    reg = f(kiln::testing::copies(in)); // a second call: steady state
  }
  t.steps = codegen::register_epilogues_built() - steps;
  t.calls = gemm::conv_register_epilogue_calls() - calls;
  EXPECT_EQ(reg.size(), want.size());
  EXPECT_EQ(tile.size(), want.size());
  for (size_t i = 0; i < reg.size() && i < want.size() && i < tile.size(); ++i) {
    EXPECT_TRUE(bits_equal(reg[i], tile[i])) << "output " << i;
    EXPECT_TRUE(close_to_eager(reg[i], want[i], K)) << "output " << i << " (registers)";
    EXPECT_TRUE(close_to_eager(tile[i], want[i], K)) << "output " << i << " (tile)";
  }
  return t;
}

// conv2d geometry: x [N, C, H, W], weight [O, C / groups, k, k].
struct Geo {
  const char *name;
  int64_t N, C, H, W, O, k, stride, pad, dil, groups;
  int64_t out(int64_t in) const { return (in + 2 * pad - dil * (k - 1) - 1) / stride + 1; }
  int64_t K() const { return C / groups * k * k; }
};

// O/groups with an mr tail (mr = 8 on AVX-512, 6 on AVX2), pixel counts that
// are no multiple of nr, K over several k blocks (kc <= 256 f32, 128 f64).
const std::vector<Geo> kGeos = {
    {"3x3 pad 1", 2, 16, 11, 13, 12, 3, 1, 1, 1, 1},
    {"stride 2", 2, 16, 15, 14, 16, 3, 2, 1, 1, 1},
    {"pad 2 dilation 2", 1, 8, 12, 12, 10, 3, 1, 2, 2, 1},
    {"groups 2", 2, 16, 9, 10, 24, 3, 1, 1, 1, 2},
    {"groups 4", 2, 32, 8, 9, 36, 3, 1, 1, 1, 4},
    {"1x1", 2, 64, 7, 7, 40, 1, 1, 0, 1, 1},
    {"k blocks", 1, 64, 10, 10, 20, 3, 1, 1, 1, 1},
    // Winograd F(2x2, 3x3) (codegen/gemm/winograd.h): odd output sizes, an mr
    // tail; the register epilogue then runs on each item's output block.
    {"winograd", 2, 32, 13, 11, 28, 3, 1, 1, 1, 1},
};

struct Case {
  const char *name;
  // x the input, r a residual of the output's shape (an input); w, b, the batch norm's tensors captured.
  std::function<std::vector<Tensor>(const Geo &, const Tensor &x, const Tensor &r)> body;
};

std::vector<Case> cases(const Geo &g, DType dt, uint64_t seed) {
  Tensor w = rnd({g.O, g.C / g.groups, g.k, g.k}, seed, dt, -0.3, 0.3), b = rnd({g.O}, seed + 1, dt, -1, 1);
  Tensor gamma = rnd({g.O}, seed + 2, dt, 0.5, 1.5), beta = rnd({g.O}, seed + 3, dt, -1, 1);
  Tensor mean = rnd({g.O}, seed + 4, dt, -1, 1), var = rnd({g.O}, seed + 5, dt, 0.5, 2);
  auto conv = [w](const Geo &g, const Tensor &x, const Tensor &bias) {
    return conv2d(x, w, bias, g.stride, g.pad, g.dil, g.groups);
  };
  auto bn = [=](const Tensor &y) { return batch_norm(y, gamma, beta, mean, var, false, 0.1, 1e-5); };
  return {
      {"conv bias + relu", [=](const Geo &g, const Tensor &x, const Tensor &) {
         return std::vector<Tensor>{relu(conv(g, x, b))};
       }},
      {"bias add", [=](const Geo &g, const Tensor &x, const Tensor &) {
         return std::vector<Tensor>{conv(g, x, {}) + b.reshape({1, g.O, 1, 1})};
       }},
      {"bn + relu", [=](const Geo &g, const Tensor &x, const Tensor &) {
         return std::vector<Tensor>{relu(bn(conv(g, x, {})))};
       }},
      {"bn + residual + relu", [=](const Geo &g, const Tensor &x, const Tensor &r) {
         return std::vector<Tensor>{relu(bn(conv(g, x, {})) + r)};
       }},
      {"scale", [=](const Geo &g, const Tensor &x, const Tensor &) {
         return std::vector<Tensor>{conv(g, x, b) * 0.125};
       }},
      {"conv is a result too", [=](const Geo &g, const Tensor &x, const Tensor &r) {
         Tensor y = conv(g, x, {});
         return std::vector<Tensor>{y, relu(bn(y) + r)};
       }},
  };
}

void sweep(DType dt, int threads) {
  ThreadsGuard tg(threads);
  uint64_t seed = 1;
  for (const Geo &g : kGeos) {
    Tensor x = rnd({g.N, g.C, g.H, g.W}, seed++, dt, -1, 1);
    Tensor r = rnd({g.N, g.O, g.out(g.H), g.out(g.W)}, seed++, dt, -1, 1);
    for (const Case &c : cases(g, dt, seed += 10)) {
      SCOPED_TRACE(std::string(g.name) + ": " + c.name + " " + std::string(kiln::name(dt)) + " threads=" +
                   std::to_string(threads));
      auto body = c.body;
      const Geo geo = g;
      Fn fn = [body, geo](const std::vector<Tensor> &in) { return body(geo, in[0], in[1]); };
      const int64_t wino = gemm::conv_winograd_items();
      const Taken t = check_case(fn, {x, r}, g.K());
      EXPECT_GE(t.steps, 1) << "no conv epilogue was set up in registers";
      EXPECT_GE(t.calls, 2) << "the conv calls did not run the epilogue in registers";
      if (std::string(g.name) == "winograd") EXPECT_GE(gemm::conv_winograd_items() - wino, 3 * g.N);
    }
  }
}

} // namespace

TEST(ConvEpilogue, EveryCaseF32OneThread) { sweep(kFloat32, 1); }
TEST(ConvEpilogue, EveryCaseF64OneThread) { sweep(kFloat64, 1); }
TEST(ConvEpilogue, EveryCaseF32TwoThreads) { sweep(kFloat32, 2); }
TEST(ConvEpilogue, EveryCaseF64TwoThreads) { sweep(kFloat64, 2); }

// NaN and inf in the input, a weight and the batch norm's statistics reach
// the epilogue's registers as they reach eager's and the tile pass's results.
TEST(ConvEpilogue, NanAndInf) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(kiln::name(dt)));
    const Geo g{"3x3", 2, 16, 9, 10, 12, 3, 1, 1, 1, 1};
    Tensor w = rnd({12, 16, 3, 3}, 501, dt, -0.3, 0.3);
    Tensor gamma = rnd({12}, 502, dt, 0.5, 1.5), beta = rnd({12}, 503, dt, -1, 1);
    Tensor mean = rnd({12}, 504, dt, -1, 1), var = rnd({12}, 505, dt, 0.5, 2);
    Tensor x = rnd({2, 16, 9, 10}, 506, dt, -1, 1), r = rnd({2, 12, 9, 10}, 507, dt, -1, 1);
    const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
    auto set = [](Tensor &t, int64_t i, double v) {
      if (t.dtype() == kFloat32) static_cast<float *>(t.raw_data())[i] = float(v);
      else static_cast<double *>(t.raw_data())[i] = v;
    };
    set(x, 5, nan), set(x, 16 * 90 + 40, inf), set(x, 16 * 90 + 77, -inf);
    set(mean, 3, inf), set(var, 7, nan), set(r, 12 * 90 + 11, -inf);
    Fn fn = [=](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{relu(batch_norm(conv2d(in[0], w, {}, 1, 1), gamma, beta, mean, var, false, 0.1, 1e-5) +
                                      in[1])};
    };
    const Taken t = check_case(fn, {x, r}, g.K());
    EXPECT_GE(t.steps, 1);
    EXPECT_GE(t.calls, 2);
  }
}

// A residual the register path cannot address (channels-last: its pixels are
// not contiguous) keeps the tile pass, says why in the debug log, and is
// still right.
TEST(ConvEpilogue, ChannelsLastResidualFallsBackToTiles) {
  Tensor w = rnd({12, 16, 3, 3}, 601, kFloat32, -0.3, 0.3);
  Tensor x = rnd({2, 16, 9, 10}, 602, kFloat32, -1, 1);
  Tensor r = rnd({2, 9, 10, 12}, 603, kFloat32, -1, 1); // NHWC, read as NCHW through a permute
  Fn fn = [=](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(conv2d(in[0], w, {}, 1, 1) + in[1].permute({0, 3, 1, 2}))};
  };
  const char *saved = std::getenv("KILN_LOG");
  const std::string saved_level = saved ? saved : "";
  setenv("KILN_LOG", "debug", 1);
  reload_log_level();
  Taken t;
  const std::string log = capture_stderr([&] { t = check_case(fn, {x, r}, 16 * 9); });
  if (saved) setenv("KILN_LOG", saved_level.c_str(), 1);
  else unsetenv("KILN_LOG");
  reload_log_level();
  EXPECT_EQ(t.calls, 0) << "a channels-last residual ran in registers";
  EXPECT_NE(log.find("not in the micro-kernel's registers: an operand's columns are neither contiguous nor broadcast"),
            std::string::npos)
      << log;
}
