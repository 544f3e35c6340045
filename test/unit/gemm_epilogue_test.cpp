// Epilogues in the GEMM micro-kernels' registers (issue 15, point 3): a fused
// matmul/linear/bmm epilogue (bias, activations, residual, scaling, inference
// batch norm, several results) runs on the accumulator tile before the store.
//
// Each case is compiled twice on kiln's GEMM: with register epilogues (the
// default) and with the second pass over each C tile (set_register_epilogues
// (false), the path before). Both run the same micro-kernels and blocking, so
// C's values are the same, and the epilogue is the same lowered expression:
// the results must be equal bit for bit (NaN where NaN). Both are also
// checked against eager (OpenBLAS, a different summation order) with a
// tolerance that grows with K: |got - want| <= 8 K eps (1 + max |want|).
// The register path must really be taken (register_epilogues_built), and a
// case it does not take (a transposed residual) must log why and still match.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <tuple>
#include <unistd.h>
#include <vector>

#include <kiln/kiln.h>

#include "test_support.h"
#include "codegen/epilogue.h"
#include "codegen/jit.h"
#include "codegen/gemm/gemm.h"
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

// Compiles `fn` with and without register epilogues; checks both against each
// other and eager; returns how many steps took the register path.
int64_t check_case(const Fn &fn, const std::vector<Tensor> &in, int64_t K) {
  PathGuard pg(gemm::Path::Jit);
  const std::vector<Tensor> want = fn(in);
  std::vector<Tensor> tile, reg;
  {
    RegisterGuard rg(false);
    const int64_t before = codegen::register_epilogues_built();
    tile = compile(fn)(in);
    EXPECT_EQ(codegen::register_epilogues_built(), before) << "the tile path took register epilogues";
  }
  const int64_t before = codegen::register_epilogues_built();
  {
    RegisterGuard rg(true);
    CompiledFunction f = compile(fn);
    reg = f(in);
    reg = f(in); // a second call: steady state
  }
  EXPECT_EQ(reg.size(), want.size());
  for (size_t i = 0; i < reg.size() && i < want.size(); ++i) {
    EXPECT_TRUE(bits_equal(reg[i], tile[i])) << "output " << i;
    EXPECT_TRUE(close_to_eager(reg[i], want[i], K)) << "output " << i;
  }
  return codegen::register_epilogues_built() - before;
}

struct Case {
  const char *name;
  // x [M, K] input, w [N, K] and b [N] captured, r [M, N] input.
  std::function<std::vector<Tensor>(const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &r)> body;
};

// Every epilogue kind of the matmul family.
std::vector<Case> cases(DType dt, int64_t N) {
  Tensor gamma = rnd({N}, 901, dt, 0.5, 1.5), beta = rnd({N}, 902, dt, -1, 1), mean = rnd({N}, 903, dt, -1, 1),
         var = rnd({N}, 904, dt, 0.5, 2);
  return {
      {"bias", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{linear(x, w, b)}; }},
      {"relu", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{relu(linear(x, w, b))}; }},
      {"gelu", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{gelu(linear(x, w, b))}; }},
      {"gelu_tanh", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{gelu(linear(x, w, b), "tanh")}; }},
      {"silu", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{silu(linear(x, w, b))}; }},
      {"tanh", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{tanh(linear(x, w, b))}; }},
      {"sigmoid", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) { return std::vector<Tensor>{sigmoid(linear(x, w, b))}; }},
      {"residual", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &r) { return std::vector<Tensor>{linear(x, w, b) + r}; }},
      {"scale", [](const Tensor &x, const Tensor &w, const Tensor &, const Tensor &) { return std::vector<Tensor>{matmul(x, w.transpose(0, 1)) * 0.125}; }},
      {"batch_norm", [=](const Tensor &x, const Tensor &w, const Tensor &, const Tensor &) {
         return std::vector<Tensor>{relu(batch_norm(linear(x, w), gamma, beta, mean, var, false, 0.1, 1e-5))};
       }},
      {"two_results", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &r) {
         Tensor y = linear(x, w, b);
         return std::vector<Tensor>{y, gelu(y) * 2.0 + r};
       }},
      {"c_is_a_result", [](const Tensor &x, const Tensor &w, const Tensor &b, const Tensor &) {
         Tensor y = matmul(x, w.transpose(0, 1)); // the contraction's own value is a result too
         return std::vector<Tensor>{y, relu(y + b)};
       }},
      {"per_row", [](const Tensor &x, const Tensor &w, const Tensor &, const Tensor &r) {
         return std::vector<Tensor>{linear(x, w) * r.slice(1, 0, 1)}; // r[:, :1]: one value per row
       }},
  };
}

// (M, N, K): M tail rows (mr = 8 or 6), N masked columns (nr = 48 / 24 / 16 / 8),
// K over several k blocks (kc = 256 f32, 128 f64); every M N K above the
// tiny-contraction limit (passes/decompose.cpp), which runs no GEMM.
const std::vector<std::array<int64_t, 3>> kShapes = {{1, 200, 400}, {7, 17, 600}, {17, 47, 300}, {65, 49, 129}, {130, 100, 520}};

void sweep(DType dt, int threads) {
  ThreadsGuard tg(threads);
  uint64_t seed = 1;
  for (auto [M, N, K] : kShapes) {
    Tensor x = rnd({M, K}, seed++, dt, -1, 1), w = rnd({N, K}, seed++, dt, -1, 1), b = rnd({N}, seed++, dt, -1, 1);
    Tensor r = rnd({M, N}, seed++, dt, -1, 1);
    for (const Case &c : cases(dt, N)) {
      SCOPED_TRACE(std::string(c.name) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                   std::to_string(K) + " " + std::string(kiln::name(dt)) + " threads=" + std::to_string(threads));
      auto body = c.body;
      Fn fn = [body, w, b](const std::vector<Tensor> &in) { return body(in[0], w, b, in[1]); };
      EXPECT_GE(check_case(fn, {x, r}, K), 1) << "the epilogue did not run in registers";
    }
  }
}

} // namespace

TEST(GemmEpilogue, EveryKindF32OneThread) { sweep(kFloat32, 1); }
TEST(GemmEpilogue, EveryKindF64OneThread) { sweep(kFloat64, 1); }
TEST(GemmEpilogue, EveryKindF32TwoThreads) { sweep(kFloat32, 2); }
TEST(GemmEpilogue, EveryKindF64TwoThreads) { sweep(kFloat64, 2); }

// Batched operands (bmm, broadcast batches) and a 0-d tensor operand (a scalar buffer).
// W5's linears (M = 128) at 2 threads: several column tiles per thread, claimed
// one at a time (4 per thread when op(A) fits half of L2, as qkv's [128, 768];
// 2 for fc2's [128, 3072]), equal to the tile path and to eager. The tiles
// read a row-major x in place (gemm::Config::a_in_place); a transposed x
// (column stride 128) is packed once per call for all tiles instead.
TEST(GemmEpilogue, W5ShapesTwoThreads) {
  ThreadsGuard tg(2);
  uint64_t seed = 50;
  for (auto [N, K, gelu_tanh, transposed] :
       {std::tuple{2304, 768, true, false}, {768, 3072, false, false}, {720, 768, false, false},
        {768, 3072, false, true}, {720, 768, true, true}}) {
    SCOPED_TRACE("N=" + std::to_string(N) + " K=" + std::to_string(K) + " transposed x " + std::to_string(transposed));
    Tensor x = rnd({128, K}, seed++, kFloat32, -1, 1), w = rnd({N, K}, seed++, kFloat32, -0.05, 0.05),
           b = rnd({N}, seed++, kFloat32, -1, 1), r = rnd({128, N}, seed++, kFloat32, -1, 1);
    if (transposed) x = x.transpose(0, 1).contiguous();
    const bool g = gelu_tanh, t = transposed;
    Fn fn = [w, b, g, t](const std::vector<Tensor> &in) {
      Tensor y = linear(t ? in[0].transpose(0, 1) : in[0], w, b);
      return std::vector<Tensor>{g ? gelu(y, "tanh") : y + in[1]};
    };
    const int64_t in_place = codegen::a_in_place_steps_built();
    EXPECT_GE(check_case(fn, {x, r}, K), 1) << "the epilogue did not run in registers";
    if (gemm::a_in_place_allowed()) {
      EXPECT_EQ(codegen::a_in_place_steps_built() - in_place, transposed ? 0 : 2) << "steps that read A in place";
    }
  }
}

TEST(GemmEpilogue, BatchedAndScalarOperands) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(kiln::name(dt)));
    Tensor a = rnd({3, 33, 70}, 50, dt), bm = rnd({3, 70, 50}, 51, dt), bias = rnd({50}, 52, dt);
    Tensor s = rnd({}, 53, dt, 0.5, 2);
    Fn fn = [](const std::vector<Tensor> &in) {
      return std::vector<Tensor>{silu(bmm(in[0], in[1]) + in[2]) * in[3]};
    };
    EXPECT_GE(check_case(fn, {a, bm, bias, s}, 70), 1);
  }
}

// Operands of other dtypes: a bool mask (attention's causal mask: a
// masked_fill after q k^T), per row and as a full tile, read as bytes.
TEST(GemmEpilogue, BoolMaskOperands) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(kiln::name(dt)));
    const int64_t M = 70, N = 53, K = 64;
    Tensor q = rnd({M, K}, 80, dt), k = rnd({N, K}, 81, dt);
    Tensor causal = rnd({M, N}, 82, kFloat32) > 0.0, rows = rnd({M, 1}, 83, kFloat32) > 0.5;
    Fn fn = [](const std::vector<Tensor> &in) {
      Tensor s = matmul(in[0], in[1].transpose(0, 1)) * 0.125;
      return std::vector<Tensor>{masked_fill(s, in[2], -std::numeric_limits<double>::infinity()),
                                 where(in[3], relu(matmul(in[0], in[1].transpose(0, 1))), 2.0)};
    };
    EXPECT_GE(check_case(fn, {q, k, causal, rows}, K), 1);
  }
}

// NaN and inf in A, in the (packed) weight and in the residual reach the
// results as eagerly, through every activation.
TEST(GemmEpilogue, NanAndInf) {
  for (DType dt : {kFloat32, kFloat64}) {
    SCOPED_TRACE(std::string(kiln::name(dt)));
    const int64_t M = 40, N = 50, K = 40; // above the tiny-contraction limit
    Tensor x = rnd({M, K}, 60, dt), w = rnd({N, K}, 61, dt), b = rnd({N}, 62, dt), r = rnd({M, N}, 63, dt);
    auto put = [](Tensor &t, int64_t i, int64_t j, double v) { t.select(0, i).select(0, j).fill_(v); };
    const double inf = std::numeric_limits<double>::infinity();
    put(x, 3, 5, std::nan(""));
    put(x, 7, 0, inf);
    put(w, 11, 9, -inf);
    put(w, 49, 39, std::nan(""));
    put(r, 0, 0, inf);
    put(r, 39, 48, -inf);
    put(r, 10, 10, std::nan(""));
    for (const Case &c : cases(dt, N)) {
      SCOPED_TRACE(c.name);
      auto body = c.body;
      Fn fn = [body, w, b](const std::vector<Tensor> &in) { return body(in[0], w, b, in[1]); };
      EXPECT_GE(check_case(fn, {x, r}, K), 1);
    }
  }
}

// A residual read through its transpose has strided columns: the epilogue
// stays a second pass over each tile, says why at debug level, and matches.
TEST(GemmEpilogue, FallbackIsLoggedAndCorrect) {
  Tensor x = rnd({40, 30}, 70), w = rnd({60, 30}, 71), rt = rnd({60, 40}, 72);
  Fn fn = [w](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w) + in[1].transpose(0, 1))}; };
  const char *saved = std::getenv("KILN_LOG");
  const std::string saved_level = saved ? saved : "";
  setenv("KILN_LOG", "debug", 1);
  reload_log_level();
  int64_t taken = -1;
  const std::string log = capture_stderr([&] { taken = check_case(fn, {x, rt}, 30); });
  if (saved) setenv("KILN_LOG", saved_level.c_str(), 1);
  else unsetenv("KILN_LOG");
  reload_log_level();
  EXPECT_EQ(taken, 0);
  EXPECT_NE(log.find("not in the micro-kernel's registers: an operand's columns are neither contiguous nor broadcast"),
            std::string::npos)
      << log;
}

// The variant's key is the tile configuration + expression + operand kinds,
// not the shapes: a second model with other linear shapes and the same
// epilogue compiles nothing new (the tile path compiled a kernel per tile shape).
TEST(GemmEpilogue, SameExpressionSharesTheKernel) {
  PathGuard pg(gemm::Path::Jit);
  RegisterGuard rg(true);
  codegen::Jit jit; // fresh, no disk cache
  codegen::ScopedJit scope(jit);
  auto model = [](int64_t N, int64_t K, uint64_t seed) {
    Tensor w = rnd({N, K}, seed, kFloat32), b = rnd({N}, seed + 1, kFloat32);
    return compile([w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{gelu(linear(in[0], w, b))}; });
  };
  Tensor x1 = rnd({64, 80}, 90), x2 = rnd({64, 200}, 91);
  const int64_t before = codegen::register_epilogues_built();
  CompiledFunction f1 = model(96, 80, 92);
  f1({x1});
  const int64_t after_first = jit.stats().compiles;
  CompiledFunction f2 = model(144, 200, 94);
  Tensor got = f2({x2})[0];
  EXPECT_EQ(jit.stats().compiles, after_first);
  EXPECT_EQ(codegen::register_epilogues_built() - before, 2);
  EXPECT_GT(after_first, 0);
}
