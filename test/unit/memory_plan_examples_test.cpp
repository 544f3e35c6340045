// The plan-memory pass and the executor's arena: the plan's reuse decisions on
// small graphs (against hand-computed lifetimes), the verifier's overlap check,
// the text round trip, compiled results with reused buffers against eager (one
// thread and four at once), and allocations per steady-state call of the
// workloads (only the outputs allocate).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include <kiln/kiln.h>

#include "codegen/executable.h"
#include "codegen/gemm/path.h"
#include "example.h"
#include "frontend/compile.h"
#include "ir/graph.h"
#include "ir/memory_plan.h"
#include "ir/parser.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/pass_manager.h"
#include "passes/plan_memory.h"
#include "runtime/allocator.h"

#include "concurrency_test_util.h"
#include "test_support.h"

using namespace kiln;
using kiln::test::concurrent_failures;

namespace {

// Every output within f32 tolerance of the eager one (relative to its size).
bool close_to(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  if (got.size() != want.size()) return false;
  for (size_t k = 0; k < got.size(); ++k) {
    double scale = amax(abs(want[k])).item<double>();
    if (!(amax(abs(got[k] - want[k])).item<double>() <= 1e-5 + 1e-4 * scale)) return false;
  }
  return true;
}

std::unique_ptr<ir::Graph> planned(const std::string &text, const char *pass = "plan-memory") {
  auto g = ir::parse(text);
  passes::run_pipeline(*g, pass, {});
  ir::verify(*g);
  return g;
}

const ir::BufferAssignment *slot(const ir::Graph &g, const std::string &name) {
  for (const auto &[v, s] : g.memory_plan()->entries)
    if (v->name() == name) return &s;
  return nullptr;
}

bool overlap(const ir::BufferAssignment &a, const ir::BufferAssignment &b) {
  return a.offset < b.offset + b.size && b.offset < a.offset + a.size;
}

double max_abs_diff(const Tensor &a, const Tensor &b) {
  EXPECT_EQ(a.sizes().vec(), b.sizes().vec());
  return amax(abs(a.to(kFloat64) - b.to(kFloat64))).item<double>();
}

void expect_close(const std::vector<Tensor> &got, const std::vector<Tensor> &want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    double scale = amax(abs(want[i].to(kFloat64))).item<double>();
    EXPECT_LE(max_abs_diff(got[i], want[i]), 1e-5 + 1e-4 * scale) << "output " << i;
  }
}

// f32[16, 32] intermediates (2048 bytes each) and two small ones; %3 is the output.
const char *kChain = R"(graph @chain(%x: f32[16, 32]) {
  %0 = exp(%x) : f32[16, 32]
  %1 = sum(%0) {dims = [1], keepdim = true, dtype = none} : f32[16, 1]
  %2 = div(%0, %1) {rounding_mode = none} : f32[16, 32]
  %4 = neg(%2) : f32[16, 32]
  %5 = sum(%4) {dims = [0], keepdim = true, dtype = none} : f32[1, 32]
  %6 = sub(%2, %5) {alpha = 1} : f32[16, 32]
  %7 = tanh(%x) : f32[16, 32]
  %3 = mul(%6, %7) : f32[16, 32]
  return %3
}
)";

} // namespace

TEST(PlanMemory, DeadBufferIsReusedAndOutputsStayOut) {
  auto g = planned(kChain);
  ASSERT_TRUE(g->memory_plan());
  EXPECT_EQ(slot(*g, "3"), nullptr) << "a graph output is not in the arena";
  for (const char *v : {"0", "1", "2", "4", "5", "6", "7"}) ASSERT_TRUE(slot(*g, v)) << v;
  // %0 dies at %2 (div reads it last), made while %0 is read: bytes of its
  // own (plain nodes never compute in place). %4, made after, reuses %0's.
  EXPECT_FALSE(overlap(*slot(*g, "2"), *slot(*g, "0")));
  EXPECT_EQ(slot(*g, "4")->offset, slot(*g, "0")->offset);
  // %2 is still live when %4 is made: no overlap. %4 dies at %5, so %6 reuses it.
  EXPECT_FALSE(overlap(*slot(*g, "2"), *slot(*g, "4")));
  EXPECT_EQ(slot(*g, "6")->offset, slot(*g, "4")->offset);
  // %2 is dead after %6: %7 reuses its bytes, not %6's, which is live.
  EXPECT_EQ(slot(*g, "7")->offset, slot(*g, "2")->offset);
  EXPECT_FALSE(overlap(*slot(*g, "7"), *slot(*g, "6")));
  // %1 (f32[16, 1], 64 bytes) dies at %2 before %5 (f32[1, 32], 128) is made: they share bytes.
  EXPECT_EQ(slot(*g, "5")->offset, slot(*g, "1")->offset);
  for (const auto &[v, s] : g->memory_plan()->entries) EXPECT_EQ(s.offset % 64, 0) << v->name();
  // Two 2048-byte regions and the 128 bytes the small values take in turn.
  EXPECT_EQ(g->memory_plan()->peak_bytes, 2 * 2048 + 128);
}

TEST(PlanMemory, EveryPassNameGivesPlainNodesTheSamePlan) {
  // The executor runs plain nodes eagerly, never over their operands: no pass
  // computes them in place, so all three names plan kChain alike.
  for (const char *pass : {"plan-memory-inplace", "plan-memory-no-inplace"}) {
    auto g = planned(kChain, pass);
    for (const char *v : {"0", "1", "2", "4", "5", "6", "7"}) {
      ASSERT_TRUE(slot(*g, v)) << pass << " %" << v;
      EXPECT_EQ(slot(*g, v)->offset, slot(*planned(kChain), v)->offset) << pass << " %" << v;
    }
  }
}

namespace {

// The results of fusion groups in g computed in place: (result, operand) names.
std::vector<std::pair<std::string, std::string>> in_place_pairs(const ir::Graph &g) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const ir::Node *n : g.nodes()) {
    if (n->kind() != ir::Node::Kind::FusionGroup) continue;
    for (const ir::Value *r : n->results()) {
      const ir::BufferAssignment *out = g.memory_plan()->find(r);
      for (const ir::Value *op : n->operands()) {
        const ir::BufferAssignment *in = op ? g.memory_plan()->find(op) : nullptr;
        if (out && in && out->offset == in->offset) pairs.emplace_back(r->name(), op->name());
      }
    }
  }
  return pairs;
}

// exp group -> eager full sum -> softmax row group -> eager full sum -> relu
// group -> eager full sum: the softmax overwrites the exp, the relu the softmax.
// (Full sums of a matrix stay eager; a column sum would join its group.)
std::vector<Tensor> chain_of_groups(const std::vector<Tensor> &in) {
  Tensor y = exp(in[0] * 0.5);
  Tensor z = softmax(y - sum(y, {0, 1}, true), 1);
  Tensor r = relu(z * 2.0 - sum(z, {0, 1}, true));
  return {sum(r, {0, 1})};
}

} // namespace

TEST(PlanMemory, FusionGroupsComputeInPlaceAndMatchEager) {
  manual_seed(8);
  std::vector<Tensor> x{randn({64, 300})};
  std::vector<Tensor> want = chain_of_groups(x);
  int64_t arena[2] = {0, 0};
  for (int in_place = 0; in_place < 2; ++in_place) {
    CompileOptions o;
    o.fallback = Fallback::Off;
    if (!in_place) o.pipeline = "decompose,canonicalize,cse,dce,layout,fuse,fuse-horizontal,materialize-views,plan-memory-no-inplace";
    CompiledFunction f = compile(chain_of_groups, o);
    for (int call = 0; call < 2; ++call) expect_close(f(x), want);
    auto g = f.graph_for(x);
    ASSERT_TRUE(g && g->memory_plan());
    EXPECT_EQ(in_place_pairs(*g).size(), in_place ? 2u : 0u) << ir::print(*g);
    // Every group is a JIT kernel: codegen accepted each alias.
    EXPECT_EQ(f.kernels_per_call(x), passes::graph_stats(*g).fusion_groups);
    arena[in_place] = f.stats().peak_arena_bytes;
  }
  EXPECT_LT(arena[1], arena[0]);
}

TEST(PlanMemory, ViewKeepsItsBaseAlive) {
  // %1 is only read through the transpose %2, which %5 reads after %3 and %4
  // were made: %1 must stay live (no reuse) until %5.
  auto g = planned(R"(graph @v(%x: f32[16, 32]) {
  %1 = exp(%x) : f32[16, 32]
  %2 = transpose(%1) {dim0 = 0, dim1 = 1} : f32[32, 16]
  %3 = neg(%x) : f32[16, 32]
  %4 = sum(%3) {dims = [1], keepdim = false, dtype = none} : f32[16]
  %5 = sum(%2) {dims = [1], keepdim = false, dtype = none} : f32[32]
  %6 = add(%4, %4) {alpha = 1} : f32[16]
  return %5, %6
}
)");
  ASSERT_TRUE(slot(*g, "1") && slot(*g, "3"));
  EXPECT_EQ(slot(*g, "2"), nullptr) << "views are not planned";
  EXPECT_FALSE(overlap(*slot(*g, "1"), *slot(*g, "3")));
}

TEST(PlanMemory, ValueViewedByAnOutputIsNotPlanned) {
  auto g = planned(R"(graph @o(%x: f32[16, 32]) {
  %1 = exp(%x) : f32[16, 32]
  %2 = reshape(%1) {shape = [512]} : f32[512]
  return %2
}
)");
  EXPECT_TRUE(g->memory_plan()->entries.empty());
  EXPECT_EQ(g->memory_plan()->peak_bytes, 0);
}

// Where write-backs run (after which node; 5 = after the last): once the value
// is computed and the target's old value read for the last time, unless an
// output or another write-back's value may share the target's memory, the
// value is a view of a parameter, or the target is written back twice.
TEST(PlanMemory, WriteBackPoints) {
  auto g = ir::parse(R"(graph @w(%x: f32[4, 8]) params(%a: f32[4, 8], %b: f32[4, 8], %c: f32[4, 8]) {
  %0 = mul(%a, %x) : f32[4, 8]
  %1 = exp(%x) : f32[4, 8]
  %2 = add(%b, %x) {alpha = 1} : f32[4, 8]
  %3 = transpose(%c) {dim0 = 0, dim1 = 1} : f32[8, 4]
  %4 = sum(%3) {dims = [0], keepdim = false, dtype = none} : f32[4]
  writeback %a <- %0
  writeback %b <- %1
  writeback %c <- %1
  return %4
}
)");
  // %a: made and last read at node 0. %b: %1 at node 1, old %b read at node 2.
  // %c: read through its transpose at node 4.
  EXPECT_EQ(ir::write_back_points(*g), (std::vector<int64_t>{0, 2, 4}));
  auto late = ir::parse(R"(graph @o(%x: f32[4, 8]) params(%a: f32[4, 8], %b: f32[4, 8], %c: f32[4, 8], %d: f32[8, 4]) {
  %0 = exp(%x) : f32[4, 8]
  %1 = neg(%x) : f32[4, 8]
  %2 = reshape(%a) {shape = [32]} : f32[32]
  %3 = transpose(%c) {dim0 = 0, dim1 = 1} : f32[8, 4]
  writeback %a <- %0
  writeback %b <- %1
  writeback %b <- %0
  writeback %d <- %3
  return %2
}
)");
  // %a is viewed by an output; %b is written back twice; %d's value views %c.
  EXPECT_EQ(ir::write_back_points(*late), (std::vector<int64_t>{4, 4, 4, 4}));
}

// Early write-backs in a compiled function that updates captured tensors in
// place: the results, and the tensors after each call, equal eager's.
TEST(ArenaExecutor, EarlyWriteBacksGiveEagerResults) {
  manual_seed(4);
  const Tensor w0 = randn({16, 64}), m0 = randn({16, 64});
  auto make = [](Tensor w, Tensor m) -> ModelFn {
    return [w, m](const std::vector<Tensor> &in) mutable {
      m.mul_(0.9).add_(in[0]);
      Tensor y = sum(w * 2.0, {1}, true);
      w.sub_(m * 0.1);
      Tensor z = exp(in[0]) * y + m;
      return std::vector<Tensor>{z, sum(w)};
    };
  };
  Tensor we = w0.clone(), me = m0.clone(), wc = w0.clone(), mc = m0.clone();
  ModelFn eager = make(we, me);
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(make(wc, mc), o);
  for (int call = 0; call < 3; ++call) {
    Tensor x = randn({16, 64});
    expect_close(f({x}), eager({x}));
    expect_close({wc, mc}, {we, me});
  }
  auto g = f.graph_for({randn({16, 64})});
  ASSERT_TRUE(g && g->memory_plan());
  std::vector<int64_t> points = ir::write_back_points(*g);
  ASSERT_EQ(points.size(), 2u);
  EXPECT_LT(std::min(points[0], points[1]), int64_t(g->nodes().size())) << ir::print(*g);
}

TEST(PlanMemory, PrintsAndParsesBack) {
  auto g = planned(kChain);
  std::string text = ir::print(*g);
  EXPECT_NE(text.find("memory_plan {peak_bytes = 4224} {"), std::string::npos) << text;
  auto again = ir::parse(text);
  ir::verify(*again);
  EXPECT_EQ(ir::print(*again), text);
}

TEST(PlanMemory, VerifierRejectsOverlapOfLiveBuffers) {
  auto g = planned(kChain);
  auto &entries = const_cast<ir::MemoryPlan &>(*g->memory_plan()).entries;
  // Put %4 on %2's bytes while %2 is still live.
  for (auto &[v, s] : entries)
    if (v->name() == "4") s.offset = slot(*g, "2")->offset;
  try {
    ir::verify(*g);
    FAIL() << "verify accepted overlapping live buffers";
  } catch (const Error &e) {
    EXPECT_NE(std::string(e.what()).find("overlap while both are live"), std::string::npos) << e.what();
  }
}

TEST(PlanMemory, OtherPassesDropAStalePlan) {
  auto g = ir::parse(kChain);
  passes::run_pipeline(*g, "plan-memory,fuse", {});
  EXPECT_FALSE(g->memory_plan()) << "fuse changed the graph; the plan described the old one";
  passes::run_pipeline(*g, "plan-memory", {});
  EXPECT_TRUE(g->memory_plan());
}

TEST(PlanMemory, GraphStats) {
  auto g = planned(kChain);
  passes::GraphStats s = passes::graph_stats(*g);
  EXPECT_EQ(s.peak_arena_bytes, 4224);
  EXPECT_EQ(s.planned_values, 7);
  EXPECT_EQ(s.fusion_groups, 0);
  EXPECT_EQ(s.other_nodes, 8);
  // exp, div, neg, sub, tanh, mul write 2048 bytes each, the two sums 64 and 128.
  EXPECT_EQ(s.bytes_written, 6 * 2048 + 64 + 128);
}

namespace {

// Intermediates that die at different times, a view of one read late, and a
// multi-output tail: exercises reuse in the compiled executor.
ModelFn reuse_model(Tensor w) {
  return [w](const std::vector<Tensor> &in) {
    Tensor x = in[0];
    Tensor a = exp(x * 0.1);
    Tensor at = a.transpose(0, 1);
    Tensor b = softmax(a * 2.0, 1);
    Tensor c = matmul(b, w);          // eager BLAS, result in the arena
    Tensor d = layer_norm(c, {c.size(1)});
    Tensor e = tanh(d) + sum(at, {1}).unsqueeze(0).narrow(1, 0, 1);
    return std::vector<Tensor>{e, relu(d) * 3.0};
  };
}

} // namespace

TEST(ArenaExecutor, ReusedBuffersGiveEagerResults) {
  manual_seed(3);
  Tensor w = randn({48, 40});
  ModelFn fn = reuse_model(w);
  // The default pipeline (in place), and the same without in-place updates.
  std::string separate = passes::default_pipeline();
  separate.replace(separate.find("plan-memory"), std::string("plan-memory").size(), "plan-memory-no-inplace");
  for (const std::string &pipeline : {passes::default_pipeline(), separate}) {
    CompileOptions o;
    o.fallback = Fallback::Off;
    o.pipeline = pipeline;
    CompiledFunction f = compile(fn, o);
    for (int call = 0; call < 3; ++call) {
      Tensor x = randn({24, 48});
      expect_close(f({x}), fn({x}));
    }
    auto g = f.graph_for({randn({24, 48})});
    ASSERT_TRUE(g && g->memory_plan());
    EXPECT_GT(g->memory_plan()->peak_bytes, 0);
    EXPECT_GT(f.stats().peak_arena_bytes, 0);
  }
}

// A group whose operand is a reshape of a parameter (W7's batch-norm scale):
// the parameter is never written, and the plan never puts the group in the
// reshape's slot (only a group's result is computed over in place).
TEST(ArenaExecutor, GroupAfterAReshapedParameterLeavesItAlone) {
  manual_seed(9);
  Tensor w = randn({64}), m = randn({64, 8});
  Tensor w_before = w.clone();
  ModelFn fn = [w, m](const std::vector<Tensor> &in) {
    Tensor t = w.reshape({1, 64}) * 3.0 + 1.0; // its own group: a contraction operand
    return std::vector<Tensor>{matmul(in[0] * t, m)};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  Tensor x = randn({4, 64});
  for (int call = 0; call < 3; ++call) expect_close(f({x}), fn({x}));
  EXPECT_EQ(max_abs_diff(w, w_before), 0.0) << "the parameter was overwritten";
  auto g = f.graph_for({x});
  ASSERT_TRUE(g && g->memory_plan());
  EXPECT_TRUE(in_place_pairs(*g).empty()) << ir::print(*g);
}

// A plan (here written by hand; the verifier accepts it) that computes a group
// in the slot of a reshape, which at run time is a view of the input: the
// executor gives the kernel no alias, so it writes the slot, not the input.
TEST(ArenaExecutor, InPlaceOverAViewReshapeWritesTheSlotNotTheInput) {
  std::shared_ptr<ir::Graph> g = ir::parse(R"(graph @g(%x: f32[4, 16]) {
  %r = reshape(%x) {shape = [64]} : f32[64]
  %0 = fusion_group(%r) : f32[64] {
    graph @g.group(%a: f32[64]) {
      %b = mul(%a, %a) : f32[64]
      return %b
    }
  }
  %1 = sum(%0) {dims = [0], keepdim = false, dtype = none} : f32[]
  return %1
  memory_plan {peak_bytes = 256} {
    %r {buffer = 0, offset = 0, size = 256}
    %0 {buffer = 0, offset = 0, size = 256}
  }
}
)");
  ir::verify(*g);
  manual_seed(10);
  Tensor x = randn({4, 16}), x_before = x.clone();
  auto exe = codegen::make_executable(g, {x});
  EXPECT_EQ(exe->stats().kernels, 1);
  for (int call = 0; call < 2; ++call) {
    std::vector<Tensor> got = exe->run({x});
    expect_close(got, {sum(x * x, {0, 1})});
  }
  EXPECT_EQ(max_abs_diff(x, x_before), 0.0) << "the input was overwritten";
}

TEST(ArenaExecutor, ConcurrentCallsFromFourThreads) {
  manual_seed(4);
  Tensor w = randn({48, 40});
  ModelFn fn = reuse_model(w);
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  f({randn({24, 48})}); // compile once up front
  std::vector<Tensor> xs;
  std::vector<std::vector<Tensor>> want;
  for (int t = 0; t < 4; ++t) {
    xs.push_back(randn({24, 48}));
    want.push_back(fn({xs.back()}));
  }
  EXPECT_EQ(concurrent_failures(4, 200, [&](int t, int) { return close_to(f({xs[size_t(t)]}), want[size_t(t)]); }), 0);
}

namespace {

// Heap blocks of at least kLargeHeapBytes that operator new hands out on any
// thread while counting is on: per-call scratch (an im2col buffer, a GEMM tile)
// that bypasses tensor storage shows up here. Outputs and the arena come from
// the caching allocator, not operator new; small bookkeeping (the result
// vector) stays below the threshold.
constexpr size_t kLargeHeapBytes = 4096;
std::atomic<bool> g_count_heap{false};
std::atomic<uint64_t> g_large_heap_blocks{0};

} // namespace

// Replaced for this test executable only. Out of line, so that GCC does not
// see the malloc/free pair through the new/delete it inlines (and warn).
// Not under a sanitizer: ASan's and TSan's runtimes define operator new/delete
// themselves (ASan would mix its variants with these: alloc-dealloc-mismatch;
// TSan's static runtime gives duplicate definitions); the normal build counts.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define KILN_TEST_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define KILN_TEST_SANITIZED 1
#endif
#ifndef KILN_TEST_SANITIZED
__attribute__((noinline)) void *operator new(size_t n) {
  if (g_count_heap.load(std::memory_order_relaxed) && n >= kLargeHeapBytes)
    g_large_heap_blocks.fetch_add(1, std::memory_order_relaxed);
  if (void *p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void *p) noexcept { std::free(p); }
__attribute__((noinline)) void operator delete(void *p, size_t) noexcept { std::free(p); }
#endif

namespace {

struct SteadyState {
  int64_t storages = 0;    // tensor storages allocated on the calling thread
  uint64_t large_heap = 0; // large operator new blocks on any thread
};

// What kCalls steady-state compiled calls allocate together.
constexpr int kCalls = 5;
SteadyState steady_state_allocations(const CompiledFunction &f, const std::vector<Tensor> &in) {
  for (int i = 0; i < 3; ++i) f(in); // compile, then warm the arena pool and the scratch buffers
  SteadyState r;
  uint64_t before = thread_storage_allocations();
  g_large_heap_blocks.store(0);
  g_count_heap.store(true);
  for (int i = 0; i < kCalls; ++i) std::vector<Tensor> out = f(in);
  g_count_heap.store(false);
  r.storages = int64_t(thread_storage_allocations() - before);
  r.large_heap = g_large_heap_blocks.load();
  return r;
}

} // namespace

// A conv epilogue whose raw conv output is no result (it lives in the call's
// arena scratch) and a GEMM epilogue whose product is no result (its tiles live
// in per-thread scratch), called from four threads at once: no call may see
// another's scratch. Runs under TSan (the `concurrency` label).
TEST(ArenaExecutor, ConcurrentEpilogueScratch) {
  manual_seed(9);
  Tensor cw = randn({16, 8, 3, 3}) * 0.2, scale = randn({16, 1, 1}), shift = randn({16, 1, 1});
  Tensor lw = randn({64, 3200}) * 0.02, lb = randn({64});
  ModelFn fn = [=](const std::vector<Tensor> &in) {
    Tensor y = relu(conv2d(in[0], cw, {}, 1, 1) * scale + shift);
    Tensor z = gelu(linear(in[0].reshape({4, 3200}), lw, lb), "tanh");
    return std::vector<Tensor>{y, z};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  std::vector<Tensor> xs;
  std::vector<std::vector<Tensor>> want;
  for (int t = 0; t < 4; ++t) {
    xs.push_back(randn({4, 8, 20, 20}));
    want.push_back(fn({xs.back()}));
  }
  expect_close(f({xs[0]}), want[0]); // compiles once up front
  // Both contractions carry their epilogue, and neither product is a result.
  auto g = f.graph_for({xs[0]});
  ASSERT_TRUE(g);
  int conv_groups = 0, gemm_groups = 0;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() != ir::Node::Kind::FusionGroup) continue;
    for (const ir::Node *m : n->body()->nodes()) {
      conv_groups += m->op() == OpId::Conv2d;
      gemm_groups += m->op() == OpId::Matmul;
    }
  }
  EXPECT_EQ(conv_groups, 1) << ir::print(*g);
  EXPECT_EQ(gemm_groups, 1) << ir::print(*g);
  EXPECT_EQ(steady_state_allocations(f, {xs[0]}).storages, 2 * kCalls);
  EXPECT_EQ(concurrent_failures(4, 50, [&](int t, int) { return close_to(f({xs[size_t(t)]}), want[size_t(t)]); }), 0);
}

// max(x, dim) has two results (f32 values, int64 indices), both intermediates:
// the eager step places both in their arena slots, so a call allocates only its
// output.
TEST(ArenaExecutor, MultiResultEagerOpWritesIntoTheArena) {
  manual_seed(8);
  ModelFn fn = [](const std::vector<Tensor> &in) {
    auto [values, indices] = max(exp(in[0] * 0.5), 1);
    return std::vector<Tensor>{values * 2.0 + indices.to(kFloat32)};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  Tensor x = randn({64, 96});
  expect_close(f({x}), fn({x}));
  auto g = f.graph_for({x});
  ASSERT_TRUE(g && g->memory_plan());
  const ir::Node *max_node = nullptr;
  for (const ir::Node *n : g->nodes())
    if (n->kind() == ir::Node::Kind::Op && n->op() == OpId::MaxDim) max_node = n;
  ASSERT_TRUE(max_node) << ir::print(*g);
  ASSERT_EQ(max_node->results().size(), 2u);
  for (const ir::Value *r : max_node->results())
    EXPECT_TRUE(slot(*g, r->name())) << "result %" << r->name() << " has no arena slot";
  for (int i = 0; i < 3; ++i) f({x});
  uint64_t before = thread_storage_allocations();
  std::vector<Tensor> out = f({x});
  EXPECT_EQ(thread_storage_allocations() - before, 1u);
  expect_close(out, fn({x}));
}

class SteadyStateAllocations : public ::testing::TestWithParam<std::string> {};

// Every workload and example: after warm-up, kCalls calls allocate exactly
// their outputs (one storage each per call) and no large heap scratch.
TEST_P(SteadyStateAllocations, OnlyTheOutputsAllocate) {
  const examples::Example *ex = examples::find_example(GetParam());
  ASSERT_TRUE(ex);
  examples::Workload w = ex->make();
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(w.fn, o);
  std::vector<Tensor> out = f(w.inputs);
  expect_close(out, w.fn(w.inputs));
  SteadyState s = steady_state_allocations(f, w.inputs);
  EXPECT_EQ(s.storages, int64_t(out.size()) * kCalls);
  EXPECT_EQ(s.large_heap, 0u);
}

INSTANTIATE_TEST_SUITE_P(Workloads, SteadyStateAllocations,
                         ::testing::Values("w1-gelu-chain", "w2-softmax", "w3-layernorm", "w4-mlp-block",
                                           "w5-gpt2-block", "w6-tiny-mlp", "w7-resnet-block", "w8-dispatch",
                                           "w9-big-add", "mlp-classifier", "small-cnn", "bn-train"),
                         [](const auto &info) {
                           std::string n = info.param;
                           for (char &c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// A compiled training step returns its loss and writes everything else back:
// the loss is its only allocation. train-cnn's backward runs cat, stack and
// full eagerly (conv's im2col and padding); their results go to arena slots.
TEST(SteadyStateAllocationsTraining, OnlyTheLossAllocates) {
  for (const char *name : {"train-mlp", "train-cnn"}) {
    const examples::Example *ex = examples::find_example(name);
    ASSERT_TRUE(ex) << name;
    examples::Workload w = ex->make();
    CompiledFunction f = compile(w.fn, CompileOptions{.fallback = Fallback::Off});
    std::vector<Tensor> out = f(w.inputs);
    ASSERT_EQ(out.size(), 1u) << name;
    SteadyState s = steady_state_allocations(f, w.inputs);
    EXPECT_EQ(s.storages, kCalls) << name;
    EXPECT_EQ(s.large_heap, 0u) << name;
  }
}

// train-mlp's Adam step writes each weight's new value, moments and gradient
// straight into their tensors, as eager's in-place optimizer does: those
// values take no arena bytes, and the parameters keep their storage.
TEST(ArenaExecutor, TrainingUpdatesAreComputedIntoTheirTensors) {
  const examples::Example *ex = examples::find_example("train-mlp");
  ASSERT_TRUE(ex);
  examples::Workload w = ex->make();
  CompiledFunction f = compile(w.fn, CompileOptions{.fallback = Fallback::Off});
  f(w.inputs);
  auto g = f.graph_for(w.inputs);
  ASSERT_TRUE(g && g->memory_plan());
  const std::vector<bool> in_place = ir::write_backs_in_place(*g);
  ASSERT_EQ(in_place.size(), g->write_backs().size());
  int weights_in_place = 0;
  for (size_t k = 0; k < in_place.size(); ++k) {
    const ir::WriteBack &wb = g->write_backs()[k];
    if (!in_place[k]) continue;
    EXPECT_FALSE(slot(*g, wb.value->name())) << "%" << wb.value->name() << " is computed into %"
                                             << wb.target->name() << " but has an arena slot";
    weights_in_place += wb.target->type().shape.size() == 2;
  }
  // Three weight matrices, each with its value, grad and two moments.
  EXPECT_EQ(weights_in_place, 12) << ir::print(*g);
  std::vector<const void *> before;
  for (const Tensor &p : w.params) before.push_back(p.raw_data());
  f(w.inputs);
  for (size_t i = 0; i < w.params.size(); ++i) EXPECT_EQ(w.params[i].raw_data(), before[i]) << "parameter " << i;
}

// Ops over tensor lists (cat, stack) and the dropout mask make their results
// with make_result, so each eager step writes into its arena slot: a call
// allocates its output only, and gives eager's values.
TEST(ArenaExecutor, ListOpsAndMasksWriteIntoTheArena) {
  manual_seed(5);
  ModelFn fn = [](const std::vector<Tensor> &in) {
    Tensor a = exp(in[0]), b = sin(in[0]);
    Tensor c = cat({a, b}, 1), s = stack({a, b}, 0);
    Tensor m = dropout(a, 0.5, true);
    return std::vector<Tensor>{c.sum(1) + s.sum(0).sum(1) + m.sum(1)};
  };
  CompiledFunction f = compile(fn, CompileOptions{.fallback = Fallback::Off});
  Tensor x = randn({32, 48});
  manual_seed(6);
  std::vector<Tensor> want = fn({x});
  manual_seed(6);
  expect_close(f({x}), want);
  auto g = f.graph_for({x});
  ASSERT_TRUE(g && g->memory_plan());
  int placed = 0;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() != ir::Node::Kind::Op) continue;
    if (n->op() != OpId::Cat && n->op() != OpId::Stack && n->op() != OpId::DropoutMask) continue;
    EXPECT_TRUE(slot(*g, n->result()->name())) << "%" << n->result()->name() << " has no arena slot";
    ++placed;
  }
  EXPECT_EQ(placed, 3) << ir::print(*g);
  EXPECT_EQ(steady_state_allocations(f, {x}).storages, kCalls);
}

// On one thread the epilogue and conv blocks run on the calling thread (no
// pool): the same steady state.
TEST(SteadyStateAllocationsOneThread, ContractionWorkloads) {
  const int saved = get_num_threads();
  set_num_threads(1);
  struct Restore {
    int n;
    ~Restore() { set_num_threads(n); }
  } restore{saved};
  for (const char *name : {"w4-mlp-block", "w7-resnet-block", "small-cnn"}) {
    const examples::Example *ex = examples::find_example(name);
    ASSERT_TRUE(ex) << name;
    examples::Workload w = ex->make();
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(w.fn, o);
    std::vector<Tensor> out = f(w.inputs);
    expect_close(out, w.fn(w.inputs));
    SteadyState s = steady_state_allocations(f, w.inputs);
    EXPECT_EQ(s.storages, int64_t(out.size()) * kCalls) << name;
    EXPECT_EQ(s.large_heap, 0u) << name;
  }
}

// A chain of three 64-channel convs goes channels-last on the BLAS path (the
// layout pass's cost model; on kiln's conv, NCHW-only, the chain stays NCHW:
// ConvJitCompiled.ConvChainStaysOnKilnsConv): the chain input's conversion and
// the repacked weights live in per-thread scratch, so a steady-state call
// still allocates only its output.
TEST(SteadyStateAllocationsChannelsLast, ThreeConvChain) {
  kiln::testing::PathGuard path(gemm::Path::Blas);
  manual_seed(12);
  Tensor w0 = randn({64, 64, 3, 3}) * 0.05, w1 = randn({64, 64, 3, 3}) * 0.05, w2 = randn({64, 64, 3, 3}) * 0.05;
  ModelFn fn = [=](const std::vector<Tensor> &in) {
    Tensor y = relu(conv2d(in[0], w0, {}, 1, 1));
    y = relu(conv2d(y, w1, {}, 1, 1));
    return std::vector<Tensor>{relu(conv2d(y, w2, {}, 1, 1) + in[0])};
  };
  CompileOptions o;
  o.fallback = Fallback::Off;
  CompiledFunction f = compile(fn, o);
  Tensor x = randn({2, 64, 12, 12});
  std::vector<Tensor> out = f({x});
  expect_close(out, fn({x}));
  EXPECT_TRUE(out[0].is_contiguous());
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  const Dims cl = kiln::detail::channels_last_strides({2, 64, 12, 12});
  int channels_last_convs = 0;
  for (const ir::Node *n : g->nodes()) {
    if (n->kind() != ir::Node::Kind::FusionGroup) continue;
    for (const ir::Node *m : n->body()->nodes()) {
      const auto &st = m->result()->type().strides;
      channels_last_convs += m->op() == OpId::Conv2d && st && std::equal(st->begin(), st->end(), cl.begin(), cl.end());
    }
  }
  EXPECT_EQ(channels_last_convs, 2) << ir::print(*g);
  SteadyState s = steady_state_allocations(f, {x});
  EXPECT_EQ(s.storages, kCalls);
  EXPECT_EQ(s.large_heap, 0u);
  expect_close(f({x}), fn({x}));
}

// A tiny linear (M*N*K <= 64K) becomes mul + sum and fuses with its bias and
// activation into one JIT kernel; the bias is read per row of that kernel.
TEST(TinyLinear, FusesWithBiasAndReluIntoOneKernel) {
  manual_seed(5);
  for (std::vector<int64_t> shape : {std::vector<int64_t>{1, 64}, {3, 16}, {2, 3, 16}, {16}}) {
    Tensor w = randn({24, 16}), b = randn({24});
    if (shape.back() == 64) w = randn({24, 64});
    ModelFn fn = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w, b))}; };
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    Tensor x = randn(IntArrayRef(shape));
    expect_close(f({x}), fn({x}));
    EXPECT_EQ(f.kernels_per_call({x}), 1) << shape_str(IntArrayRef(shape));
  }
}

TEST(TinyLinear, LargeLinearKeepsBlas) {
  manual_seed(6);
  Tensor w = randn({256, 128}), b = randn({256});
  ModelFn fn = [w, b](const std::vector<Tensor> &in) { return std::vector<Tensor>{relu(linear(in[0], w, b))}; };
  CompiledFunction f = compile(fn);
  Tensor x = randn({64, 128});
  expect_close(f({x}), fn({x}));
  auto g = f.graph_for({x});
  ASSERT_TRUE(g);
  bool has_matmul = false;
  for (const ir::Node *n : g->nodes()) {
    has_matmul |= n->kind() == ir::Node::Kind::Op && n->op() == OpId::Matmul;
    if (n->kind() == ir::Node::Kind::FusionGroup) // a GEMM epilogue group (bias + relu)
      for (const ir::Node *m : n->body()->nodes()) has_matmul |= m->op() == OpId::Matmul;
  }
  EXPECT_TRUE(has_matmul);
}

// Rank D-1 values in a rank-D group: a plain elementwise one aligns with the
// domain's trailing dims (numpy); one computed from a last-dim reduction is
// per row. Square shapes make the two readings differ only in the numbers.
TEST(TinyLinear, RankDropsInAGroupFollowNumpy) {
  manual_seed(7);
  Tensor a = randn({8, 8}), b = randn({8, 8}), c = randn({8, 8, 8});
  ModelFn plain = [](const std::vector<Tensor> &in) { return std::vector<Tensor>{(in[0] + in[1]) * in[2]}; };
  ModelFn row = [](const std::vector<Tensor> &in) {
    return std::vector<Tensor>{relu(sum(exp(in[2]), {2}) + in[0]) * in[1]};
  };
  for (const ModelFn &fn : {plain, row}) {
    CompileOptions o;
    o.fallback = Fallback::Off;
    CompiledFunction f = compile(fn, o);
    expect_close(f({a, b, c}), fn({a, b, c}));
    // Every fusion group compiled (none fell back to the interpreter).
    auto g = f.graph_for({a, b, c});
    ASSERT_TRUE(g);
    int64_t groups = passes::graph_stats(*g).fusion_groups;
    EXPECT_GE(groups, 1);
    EXPECT_EQ(f.kernels_per_call({a, b, c}), groups);
  }
}
